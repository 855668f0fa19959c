"""The estimation: EM accelerated by SQUAREM, the observed information and its covariance, the
independence test, as :func:`estimate_association` over two sides' likelihoods (the method:
:mod:`ldp_aggregator.association`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np

from ldp_aggregator.association.results import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_TOLERANCE,
    AssociationResult,
    SideLikelihood,
)
from ldp_aggregator.estimators import NoReportsError, normal_quantile
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.paired import PairedParams

if TYPE_CHECKING:
    from numpy.typing import NDArray


# Elements (rows x columns) of one chunk of a likelihood or information computation.
_CHUNK_ELEMENTS: Final = 1 << 21

# ------------------------------------------------------------------------------------------------- EM


def _scaled(side: SideLikelihood) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """exp(log_lik - row max) and the per-report log scale removed (offset + row max)."""
    top = side.log_lik.max(axis=1)
    return np.exp(side.log_lik - top[:, None]), side.offset + top


def _chunks(n: int, width: int) -> Iterable[slice]:
    size = max(1, _CHUNK_ELEMENTS // max(width, 1))
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def _em_step(
    A: NDArray[np.float64], B: NDArray[np.float64], w: NDArray[np.float64], theta: NDArray[np.float64]
) -> tuple[NDArray[np.float64], float]:
    """One EM update and the (scaled) log-likelihood at ``theta``."""
    num = np.zeros_like(theta)
    ll = 0.0
    for sl in _chunks(A.shape[0], A.shape[1] * B.shape[1]):
        a, b, ws = A[sl], B[sl], w[sl]
        den = np.einsum("ij,ij->i", a @ theta, b)
        den = np.maximum(den, 1e-300)
        ll += float(ws @ np.log(den))
        num += a.T @ (b * (ws / den)[:, None])
    out = theta * num / float(w.sum())
    return out / out.sum(), ll


def _em(
    A: NDArray[np.float64],
    B: NDArray[np.float64],
    w: NDArray[np.float64],
    theta0: NDArray[np.float64],
    max_iterations: int,
    tolerance: float,
) -> tuple[NDArray[np.float64], float, int, bool]:
    """EM with SQUAREM (scheme S3) acceleration; returns (theta, scaled log-likelihood, steps, converged)."""
    W = float(w.sum())
    theta = theta0 / theta0.sum()
    steps = 0
    ll_prev = -math.inf
    while steps < max_iterations:
        t1, ll0 = _em_step(A, B, w, theta)
        steps += 1
        if ll0 - ll_prev <= tolerance * W and math.isfinite(ll_prev):
            return theta, ll0, steps, True
        ll_prev = ll0
        t2, ll1 = _em_step(A, B, w, t1)
        steps += 1
        r = t1 - theta
        v = t2 - t1 - r
        nv = float(np.linalg.norm(v))
        if nv <= 1e-300:
            theta = t2
            continue
        alpha = min(-float(np.linalg.norm(r)) / nv, -1.0)
        prop = np.maximum(theta - 2.0 * alpha * r + alpha * alpha * v, 0.0)
        if prop.sum() <= 0:
            theta = t2
            continue
        prop /= prop.sum()
        t_new, ll_prop = _em_step(A, B, w, prop)
        steps += 1
        # Safeguard: keep the extrapolation only if it did not lose likelihood against the plain EM path.
        theta = t_new if ll_prop >= ll1 else t2
    _, ll = _em_step(A, B, w, theta)
    return theta, ll, steps, False


def _information(
    A: NDArray[np.float64], B: NDArray[np.float64], w: NDArray[np.float64], theta: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Observed information sum_r w_r h_r h_r', h_r = vec(a_r b_r') / (a_r' theta b_r)."""
    U, V = theta.shape
    K = U * V
    info = np.zeros((K, K))
    for sl in _chunks(A.shape[0], K):
        a, b, ws = A[sl], B[sl], w[sl]
        den = np.maximum(np.einsum("ij,ij->i", a @ theta, b), 1e-300)
        H = (a[:, :, None] * b[:, None, :]).reshape(a.shape[0], K) / den[:, None]
        info += H.T @ (H * ws[:, None])
    return info


def _covariance(info: NDArray[np.float64], theta: NDArray[np.float64]) -> NDArray[np.float64]:
    """Cov(vec theta) = J (J' I J)^+ J' with J the map from K-1 free cells to the simplex."""
    K = theta.size
    ref = int(np.argmax(theta.ravel()))  # eliminate the largest cell: best conditioned
    free = np.delete(np.arange(K), ref)
    J = np.zeros((K, K - 1))
    J[free, np.arange(K - 1)] = 1.0
    J[ref, :] = -1.0
    red = J.T @ info @ J
    return np.asarray(J @ np.linalg.pinv(red, hermitian=True) @ J.T)


def check_em_options(confidence: float, max_iterations: int, tolerance: float) -> float:
    """The request's EM options (raises InvalidParameterError naming the bad one); returns z of confidence."""
    z = normal_quantile(confidence)
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 10:
        raise InvalidParameterError("max_iterations", max_iterations, "an integer >= 10")
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance > 0):
        raise InvalidParameterError("tolerance", tolerance, "a number > 0")
    return z


def estimate_association(
    params: PairedParams,
    first: SideLikelihood,
    second: SideLikelihood,
    *,
    weights: NDArray[np.float64] | None = None,
    confidence: float = 0.95,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tolerance: float = DEFAULT_TOLERANCE,
    warnings: Sequence[str] = (),
) -> AssociationResult:
    """Joint distribution, standard errors and independence test from two sides' likelihoods.

    Args:
        params: the paired parameters (for names and epsilon).
        first, second: :func:`side_likelihood` of each side, over the same reports (same row order).
        weights: multiplicity of each row (merged identical reports, or expected counts in exact tests);
            default 1 each.
        confidence: interval level.
        max_iterations, tolerance: EM stopping rule (the package docstring).

    Raises:
        InvalidParameterError: mismatched rows, bad options.
        NoReportsError: no reports.
    """
    z = check_em_options(confidence, max_iterations, tolerance)
    n_rows = first.log_lik.shape[0]
    if second.log_lik.shape[0] != n_rows:
        raise InvalidParameterError(
            "second", second.log_lik.shape[0], f"{n_rows} rows, one per report like the first side"
        )
    w = np.ones(n_rows) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n_rows,) or (w.size and (not np.isfinite(w).all() or float(w.min()) < 0)):
        raise InvalidParameterError("weights", w.shape, f"({n_rows},) non-negative weights")
    keep = w > 0
    W = float(w.sum())
    if W <= 0:
        raise NoReportsError(0)
    A, oa = _scaled(first)
    B, ob = _scaled(second)
    A, B, w, oa, ob = A[keep], B[keep], w[keep], oa[keep], ob[keep]
    const = float(w @ (oa + ob))
    U, V = A.shape[1], B.shape[1]
    warns = list(warnings)

    alpha, lla, _, conv_a = _em(
        A, np.ones((A.shape[0], 1)), w, np.full((U, 1), 1.0 / U), max_iterations, tolerance
    )
    beta, llb, _, conv_b = _em(
        B, np.ones((B.shape[0], 1)), w, np.full((V, 1), 1.0 / V), max_iterations, tolerance
    )
    alpha, beta = alpha[:, 0], beta[:, 0]
    ll_indep = lla + llb
    start = 0.999 * np.outer(alpha, beta) + 0.001 / (U * V)
    theta, ll_joint, iterations, converged = _em(A, B, w, start, max_iterations, tolerance)
    if ll_joint < ll_indep:
        # A local optimum below the product model: EM from the product itself can only climb from it.
        theta2, ll2, it2, conv2 = _em(A, B, w, np.outer(alpha, beta), max_iterations, tolerance)
        iterations += it2
        if ll2 >= ll_joint:
            theta, ll_joint, converged = theta2, ll2, conv2
    if not (converged and conv_a and conv_b):
        warns.append(
            f"EM stopped after {max_iterations} steps before the log-likelihood changed by less than "
            f"{tolerance:g} per report; estimates are approximate (raise max_iterations)"
        )
    lr = max(0.0, 2.0 * (ll_joint - ll_indep))
    u_eff = int(np.count_nonzero(alpha > 1e-9))
    v_eff = int(np.count_nonzero(beta > 1e-9))
    df = max(u_eff - 1, 0) * max(v_eff - 1, 0)
    if (u_eff, v_eff) != (U, V):
        warns.append(
            f"{U - u_eff + V - v_eff} values have no estimated mass; the independence test uses "
            f"df = ({u_eff} - 1)({v_eff} - 1) = {df}"
        )
    from scipy import stats

    p_value = float(stats.chi2.sf(lr, df)) if df > 0 else 1.0

    cov = _covariance(_information(A, B, w, theta), theta)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(U, V)
    rows_map = np.kron(np.eye(U), np.ones((1, V)))  # (U, K): row sums
    cols_map = np.kron(np.ones((1, U)), np.eye(V))  # (V, K): column sums
    first_se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", rows_map, cov, rows_map), 0.0))
    second_se = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", cols_map, cov, cols_map), 0.0))
    return AssociationResult(
        n=round(W),
        confidence=float(confidence),
        first_mechanism=params.first.name,
        second_mechanism=params.second.name,
        epsilon=params.epsilon,
        row_labels=first.labels,
        col_labels=second.labels,
        joint=theta,
        joint_se=se,
        joint_low=np.clip(theta - z * se, 0.0, 1.0),
        joint_high=np.clip(theta + z * se, 0.0, 1.0),
        first=theta.sum(axis=1),
        first_se=first_se,
        second=theta.sum(axis=0),
        second_se=second_se,
        log_likelihood=ll_joint + const,
        log_likelihood_independent=ll_indep + const,
        lr_statistic=lr,
        df=df,
        p_value=p_value,
        iterations=iterations,
        converged=converged,
        warnings=tuple(warns),
    )
