"""Association: the joint distribution of the two variables of a paired campaign, by EM.

A paired campaign (:class:`~ldp_client.params.PairedParams`) receives from every device one report
holding both of its randomized values (:mod:`ldp_client.mechanisms.paired`), so no client identifier is
ever stored. Let theta[u, v] be the proportion of devices whose first variable is u and second is v. The
two sides are randomized independently given the values, so report r (first part y_r, second part z_r)
has likelihood

    P(y_r, z_r) = sum_{u, v} theta[u, v] P(y_r | u) P(z_r | v) = a_r' theta b_r,

with a_r[u] = P(y_r | u) and b_r[v] = P(z_r | v) the per-report likelihoods of each side's channel:

* rr: P(yes | yes) and P(yes | no) of the two-coin survey; grr: p if the report is the value, else q;
* boolean and basic RAPPOR: prod_i P(S_i | B_i) with P(1 | 1) = q*, P(1 | 0) = p* per bit;
* string RAPPOR, against candidates: prod_i P(S_i | B_i(u, cohort)) with the candidate's Bloom filter
  in the report's cohort (:func:`ldp_aggregator.estimators.rappor_design`, the client's hashing), plus an
  ``<other>`` value for strings outside the candidates, whose Bloom bits are taken as independent
  Bernoulli(b), b = 1 - (1 - 1/k)^h, i.e. each bit is 1 with probability b q* + (1 - b) p*.

**Estimation.** The maximum-likelihood theta is found by EM (Dempster, Laird, Rubin 1977; for RAPPOR as
in Fanti, Pihur, Erlingsson, PETS 2016, §4): theta <- theta * (sum_r w_r a_r b_r' / (a_r' theta b_r)) / W,
vectorised over reports (chunks of an (n x U) and (n x V) likelihood matrix; identical reports are merged
with a weight w_r, and for small sides the sufficient statistic is the table of joint report patterns the
accumulator keeps). EM is accelerated by SQUAREM (Varadhan and Roland, Scand. J. Statist. 2008, scheme
S3, with a monotonicity safeguard) and stops when the log-likelihood gains less than ``tolerance`` per
report.

**Standard errors** come from the observed information (Louis 1982; for this mixture the observed
information is exact and simple): I = sum_r w_r h_r h_r' with h_r = vec(a_r b_r') / (a_r' theta b_r),
in the U*V - 1 free coordinates of the simplex; Cov(theta) = J (J' I J)^+ J'. Intervals are
theta +/- z SE clipped to [0, 1]; marginals (row and column sums) get theirs from the same covariance.

**Independence test.** The likelihood-ratio statistic 2 (l_joint - l_indep), where l_indep is the
maximum over product distributions alpha beta' (two separate EMs, one per side), is compared with
chi-square((U' - 1)(V' - 1)), U', V' the values with positive estimated marginal mass (Wilks 1938; values
on the boundary make the test conservative).

Reports: for small sides (rr, grr, boolean, basic RAPPOR up to 12 values) the joint pattern table of
:class:`~ldp_aggregator.paired_accumulator.PairedAccumulator`; with a string-RAPPOR side, the retained raw
reports (``Store.raw_payloads``), since no small sufficient statistic exists for the per-report likelihood.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ldp_aggregator.estimators import NoReportsError, _check_candidates, normal_quantile, rappor_design
from ldp_aggregator.paired_accumulator import PairedAccumulator
from ldp_client.errors import InvalidParameterError, InvalidReportError, LdpError
from ldp_client.mechanisms.paired import PairedParams, PairedSide, paired_side_id, side_spec
from ldp_client.mechanisms.rappor.params import RapporParams
from ldp_client.spec import Kind

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ldp_aggregator._proto.ldp.v1 import decode_pb2

__all__ = [
    "DEFAULT_MAX_VALUES",
    "OTHER_LABEL",
    "AssociationResult",
    "ReportsUnavailableError",
    "SideLikelihood",
    "associate_campaign",
    "association_response_to_dict",
    "association_to_proto",
    "columns_from_payloads",
    "estimate_association",
    "side_likelihood",
]

OTHER_LABEL: Final = "<other>"
DEFAULT_MAX_VALUES: Final = 10
DEFAULT_MAX_ITERATIONS: Final = 2000
DEFAULT_TOLERANCE: Final = 1e-9
# Values of a grr or basic-RAPPOR side: its likelihood matrix has one column per value.
_MAX_SIDE_VALUES: Final = 64
# Elements (rows x columns) of one chunk of a likelihood or information computation.
_CHUNK_ELEMENTS: Final = 1 << 21
_SIDES: Final = ("first", "second")


class ReportsUnavailableError(LdpError):
    """The association needs the campaign's raw reports, which were not retained or were purged.

    Mapped to gRPC FAILED_PRECONDITION: retry after collecting with raw retention on.
    """

    def __init__(self, campaign_id: str, why: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={campaign_id!r}: {why}")


@dataclass(frozen=True, kw_only=True, eq=False)
class SideLikelihood:
    """One side's per-report log-likelihoods: log P(report r | value v) = log_lik[r, v] + offset[r]."""

    labels: tuple[str, ...]
    log_lik: NDArray[np.float64]
    offset: NDArray[np.float64]


@dataclass(frozen=True, kw_only=True, eq=False)
class AssociationResult:
    """The joint distribution of a paired campaign (module docstring for the method).

    Attributes:
        n: reports used (the sum of weights).
        row_labels, col_labels: values of the first and second variable.
        joint, joint_se, joint_low, joint_high: (U, V) proportions, standard errors, interval.
        first, first_se, second, second_se: marginal proportions and standard errors.
        log_likelihood, log_likelihood_independent: maximised log-likelihoods (joint, product model).
        lr_statistic, df, p_value: likelihood-ratio test of independence.
        iterations: EM steps of the joint fit; converged: whether it met the tolerance.
    """

    n: int
    confidence: float
    first_mechanism: str
    second_mechanism: str
    epsilon: float
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    joint: NDArray[np.float64]
    joint_se: NDArray[np.float64]
    joint_low: NDArray[np.float64]
    joint_high: NDArray[np.float64]
    first: NDArray[np.float64]
    first_se: NDArray[np.float64]
    second: NDArray[np.float64]
    second_se: NDArray[np.float64]
    log_likelihood: float
    log_likelihood_independent: float
    lr_statistic: float
    df: int
    p_value: float
    iterations: int
    converged: bool
    warnings: tuple[str, ...]

    def cell(self, row: str, col: str) -> tuple[float, float]:
        """(proportion, standard error) of one cell, by labels; KeyError if absent."""
        try:
            i, j = self.row_labels.index(row), self.col_labels.index(col)
        except ValueError:
            raise KeyError((row, col)) from None
        return float(self.joint[i, j]), float(self.joint_se[i, j])


# ------------------------------------------------------------------------------------ side likelihoods


def _side_values(params: PairedSide) -> tuple[str, ...]:
    """The values of a side with fixed items (rr, grr, basic and boolean RAPPOR), at most 64 of them."""
    values = side_spec(params).items(params)
    if len(values) > _MAX_SIDE_VALUES:
        raise InvalidParameterError(
            "params",
            f"{params.name} over {len(values)} values",
            f"at most {_MAX_SIDE_VALUES} values for association",
        )
    return values


def side_likelihood(
    params: PairedSide, columns: Any, *, campaign_id: str, candidates: Sequence[str] = ()
) -> SideLikelihood:
    """Per-report log-likelihood of every value of one side, from its report columns (vectorised).

    A side of kind SUPPORT gives its items' likelihoods (``spec.report_likelihood``); string RAPPOR (kind
    RAPPOR) those of the candidates and ``<other>`` (:func:`_candidate_likelihood`).

    Args:
        params: the side's mechanism parameters.
        columns: the side's report columns (the format of its mechanism).
        campaign_id: the id the side is encoded under (``paired_side_id``): it keys RAPPOR's hashing.
        candidates: string RAPPOR only: the candidate strings (``<other>`` is appended).
    """
    spec = side_spec(params)
    if spec.kind is Kind.RAPPOR:
        return _candidate_likelihood(params, columns, campaign_id=campaign_id, candidates=candidates)  # type: ignore[arg-type]
    labels = _side_values(params)
    log_lik, offset = spec.report_likelihood(params, columns)
    return SideLikelihood(labels=labels, log_lik=log_lik, offset=offset)


def _candidate_likelihood(
    params: RapporParams, columns: Any, *, campaign_id: str, candidates: Sequence[str]
) -> SideLikelihood:
    """String RAPPOR: one column per candidate (its Bloom filter in the report's cohort), then <other>."""
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    a1, a0 = math.log(qs / ps), math.log((1.0 - qs) / (1.0 - ps))
    rows = np.asarray(columns[1], dtype=np.uint8)
    k = params.k
    bits = np.unpackbits(rows, axis=1, count=k, bitorder="little")
    ones = bits.sum(axis=1, dtype=np.int64).astype(np.float64)
    # log P(S | all Bloom bits 0) = ones log p* + (k - ones) log(1 - p*): common to every value.
    offset = ones * math.log(ps) + (k - ones) * math.log(1.0 - ps)
    cands = tuple(candidates)
    if not cands:
        raise InvalidParameterError("candidates", (), "at least one candidate string for a rappor side")
    if OTHER_LABEL in cands:
        raise InvalidParameterError("candidates", OTHER_LABEL, "strings other than the reserved '<other>'")
    cohorts = np.asarray(columns[0], dtype=np.int64)
    pos = rappor_design(params, campaign_id, cands)  # (U, m, h)
    U = len(cands)
    log_lik = np.empty((cohorts.size, U + 1))
    order = np.argsort(cohorts, kind="stable")
    sorted_c = cohorts[order]
    starts = np.flatnonzero(np.r_[True, sorted_c[1:] != sorted_c[:-1]]) if sorted_c.size else np.zeros(0, int)
    ends = np.r_[starts[1:], sorted_c.size]
    cand_idx = np.repeat(np.arange(U), params.h)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        c = int(sorted_c[s])
        B = np.zeros((k, U))
        B[pos[:, c, :].ravel(), cand_idx] = 1.0  # a bit hit by two hashes is set once
        rows_c = order[s:e]
        log_lik[rows_c, :U] = bits[rows_c].astype(np.float64) @ (B * (a1 - a0)) + a0 * B.sum(axis=0)
    b = 1.0 - (1.0 - 1.0 / k) ** params.h
    r_o = b * qs + (1.0 - b) * ps
    o1, o0 = math.log(r_o / ps), math.log((1.0 - r_o) / (1.0 - ps))
    log_lik[:, U] = ones * (o1 - o0) + k * o0
    return SideLikelihood(labels=(*cands, OTHER_LABEL), log_lik=log_lik, offset=offset)


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


def _check_em_options(confidence: float, max_iterations: int, tolerance: float) -> float:
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
        max_iterations, tolerance: EM stopping rule (module docstring).

    Raises:
        InvalidParameterError: mismatched rows, bad options.
        NoReportsError: no reports.
    """
    z = _check_em_options(confidence, max_iterations, tolerance)
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


# ------------------------------------------------------------------------------------- report sources


def _concat(parts: list[Any]) -> Any:
    """Batch columns (an array, or a tuple of arrays) of several batches, one after the other."""
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))
    return np.concatenate(parts)


def columns_from_payloads(
    params: PairedParams, campaign_id: str, payloads: Iterable[bytes]
) -> tuple[Any, Any, int]:
    """Both sides' report columns from a paired campaign's raw payloads (ReportBatch or Report bytes).

    Each payload is validated again by :mod:`ldp_client.wire` (the store kept what was accepted).

    Returns:
        (first columns, second columns, number of reports).
    """
    from ldp_client import wire
    from ldp_client._proto.ldp.v1 import reports_pb2

    firsts: list[Any] = []
    seconds: list[Any] = []
    n = 0
    for raw in payloads:
        batch = reports_pb2.ReportBatch.FromString(raw)
        if batch.count:
            cols = wire.batch_from_proto(batch, params, campaign_id=campaign_id)
            rows = batch.count
        else:  # a single report (Collector.SubmitReport) is stored as its Report message
            cols = wire.report_from_proto(reports_pb2.Report.FromString(raw), params, campaign_id=campaign_id)
            rows = 1
        if not isinstance(cols, tuple) or len(cols) != 2:  # unreachable for a paired campaign
            raise InvalidReportError("payload", type(cols).__name__, "paired columns")
        firsts.append(cols[0])
        seconds.append(cols[1])
        n += rows
    if n == 0:
        return None, None, 0
    return _concat(firsts), _concat(seconds), n


def _key_bytes(cols: Any) -> NDArray[np.uint8]:
    """Each report's bytes in its batch columns (every column's row, little-endian, side by side)."""
    arrays = cols if isinstance(cols, tuple) else (cols,)
    parts = []
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        parts.append(a.view(np.uint8).reshape(a.shape[0], -1))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _take(cols: Any, idx: NDArray[np.intp]) -> Any:
    """The rows ``idx`` of batch columns (an array, or a tuple of arrays)."""
    if isinstance(cols, tuple):
        return tuple(np.asarray(c)[idx] for c in cols)
    return np.asarray(cols)[idx]


def _merge_identical(first: Any, second: Any) -> tuple[Any, Any, NDArray[np.float64]]:
    """Identical paired reports merged into one row with a weight (exact for the likelihood)."""
    keys = np.ascontiguousarray(np.concatenate([_key_bytes(first), _key_bytes(second)], axis=1))
    void = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
    _, index, counts = np.unique(void, return_index=True, return_counts=True)
    return _take(first, index), _take(second, index), counts.astype(np.float64)


def _rappor_values(
    side_params: RapporParams,
    acc: Any,
    side_id: str,
    candidates: Sequence[str],
    max_values: int,
    side: str,
    warns: list[str],
) -> tuple[str, ...]:
    """The candidates a string-RAPPOR side keeps: the largest marginal estimates (full decoder)."""
    from ldp_aggregator.rappor_decode import decode_rappor

    dec = decode_rappor(side_params, acc, campaign_id=side_id, candidates=candidates)
    order = np.argsort(-dec.proportion, kind="stable")
    chosen = [int(i) for i in order if dec.proportion[i] > 0][:max_values]
    if not chosen:
        chosen = [int(i) for i in np.argsort(-dec.z, kind="stable")[:1]]
        warns.append(f"{side}: no candidate has a positive marginal estimate; kept {dec.labels[chosen[0]]!r}")
    dropped = int(np.count_nonzero(dec.proportion > 0)) - len(chosen)
    if dropped > 0:
        warns.append(
            f"{side}: kept the {len(chosen)} largest of {len(chosen) + dropped} candidates with a positive "
            f"marginal estimate (max_values); the others count as {OTHER_LABEL!r}"
        )
    return tuple(dec.labels[i] for i in chosen)


def associate_campaign(
    info: Any,
    acc: Any,
    payloads: Callable[[], Iterable[bytes]] | None,
    *,
    first_candidates: Sequence[str] = (),
    second_candidates: Sequence[str] = (),
    confidence: float = 0.95,
    max_values: int = DEFAULT_MAX_VALUES,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tolerance: float = DEFAULT_TOLERANCE,
) -> AssociationResult:
    """The association of a stored paired campaign (a :class:`ldp_client.wire.CampaignInfo`).

    Reports come from the accumulator's joint pattern table when both sides are small, otherwise from
    ``payloads()`` (the store's retained raw reports). A string-RAPPOR side is decoded against its
    candidates (the request's, else the campaign's), keeping the ``max_values`` largest marginal estimates
    plus ``<other>``.

    Raises:
        InvalidParameterError: not a paired campaign, candidates for a side that is not string RAPPOR, no
            candidates for one that is, bad options.
        NoReportsError: no reports.
        ReportsUnavailableError: raw reports are needed but none were retained.
    """
    params = info.params
    if not isinstance(params, PairedParams):
        raise InvalidParameterError(
            "mechanism", getattr(params, "name", params), "a paired campaign (two variables per report)"
        )
    if not isinstance(acc, PairedAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, "a PairedAccumulator")
    if isinstance(max_values, bool) or not isinstance(max_values, int) or not 1 <= max_values <= 1000:
        raise InvalidParameterError("max_values", max_values, "an integer in [1, 1000]")
    # Issue 13: every option of the request is checked before the data, so an empty campaign gives the same
    # answer to a bad request as one with reports.
    _check_em_options(confidence, max_iterations, tolerance)
    requested = (tuple(first_candidates), tuple(second_candidates))
    for side, side_params, req in zip(_SIDES, params.sides, requested, strict=True):
        if req and side_spec(side_params).kind is not Kind.RAPPOR:
            raise InvalidParameterError(
                f"{side}_candidates", f"{len(req)} candidates", f"none for a {side_params.name} side"
            )
        if req:
            _check_candidates(req)
    if acc.n == 0:
        raise NoReportsError(0)
    cid = info.campaign_id
    warns: list[str] = []
    side_cands: list[tuple[str, ...]] = []
    for side, side_params, req, side_acc in zip(
        _SIDES, params.sides, requested, (acc.first, acc.second), strict=True
    ):
        if side_spec(side_params).kind is Kind.RAPPOR:
            cands = req or tuple(info.candidates)
            if not cands:
                raise InvalidParameterError(
                    f"{side}_candidates",
                    (),
                    "candidate strings for the string-RAPPOR side (request or campaign)",
                )
            side_cands.append(
                _rappor_values(
                    side_params,  # type: ignore[arg-type]
                    side_acc,
                    paired_side_id(cid, side),
                    cands,
                    max_values,
                    side,
                    warns,
                )
            )
        else:
            if req:
                raise InvalidParameterError(
                    f"{side}_candidates", f"{len(req)} candidates", f"none for a {side_params.name} side"
                )
            side_cands.append(())
    weights: NDArray[np.float64] | None
    if acc.joint is not None:
        rows, cols = np.nonzero(acc.joint)
        first_cols = side_spec(params.first).pattern_columns(params.first, rows.astype(np.int64))
        second_cols = side_spec(params.second).pattern_columns(params.second, cols.astype(np.int64))
        weights = acc.joint[rows, cols].astype(np.float64)
    else:
        if payloads is None:
            raise ReportsUnavailableError(
                cid, "a string-RAPPOR side needs the raw reports, which are not available"
            )
        first_cols, second_cols, n_raw = columns_from_payloads(params, cid, payloads())
        if n_raw == 0:
            raise ReportsUnavailableError(
                cid,
                f"{acc.n} reports were counted but none was retained (run the server with raw retention on, "
                "and do not purge them, to estimate an association with a string-RAPPOR side)",
            )
        if n_raw < acc.n:
            warns.append(
                f"only {n_raw} of the {acc.n} reports were retained (purged?); the estimate uses them"
            )
        first_cols, second_cols, weights = _merge_identical(first_cols, second_cols)
    sides = [
        side_likelihood(p, c, campaign_id=paired_side_id(cid, side), candidates=cands)
        for side, p, c, cands in zip(_SIDES, params.sides, (first_cols, second_cols), side_cands, strict=True)
    ]
    return estimate_association(
        params,
        sides[0],
        sides[1],
        weights=weights,
        confidence=confidence,
        max_iterations=max_iterations,
        tolerance=tolerance,
        warnings=warns,
    )


# ------------------------------------------------------------------------------------------------- wire


def association_to_proto(result: AssociationResult, campaign_id: str) -> decode_pb2.AssociationResponse:
    """The ``AssociationResponse`` message of a result."""
    from ldp_aggregator._proto.ldp.v1 import decode_pb2

    msg = decode_pb2.AssociationResponse(
        campaign_id=campaign_id,
        n_reports=result.n,
        confidence=result.confidence,
        first_mechanism=result.first_mechanism,
        second_mechanism=result.second_mechanism,
        row_labels=list(result.row_labels),
        col_labels=list(result.col_labels),
        log_likelihood=result.log_likelihood,
        log_likelihood_independent=result.log_likelihood_independent,
        lr_statistic=result.lr_statistic,
        df=result.df,
        p_value=result.p_value,
        iterations=result.iterations,
        converged=result.converged,
        warnings=list(result.warnings),
        epsilon=result.epsilon,
    )
    U, V = result.joint.shape
    msg.cells.extend(
        decode_pb2.AssociationCell(
            row=i,
            col=j,
            proportion=float(result.joint[i, j]),
            std_error=float(result.joint_se[i, j]),
            ci_low=float(result.joint_low[i, j]),
            ci_high=float(result.joint_high[i, j]),
            count=float(result.joint[i, j] * result.n),
        )
        for i in range(U)
        for j in range(V)
    )
    z = normal_quantile(result.confidence)
    for labels, est, se, field in (
        (result.row_labels, result.first, result.first_se, msg.first),
        (result.col_labels, result.second, result.second_se, msg.second),
    ):
        field.extend(
            decode_pb2.MarginalEstimate(
                label=lab,
                proportion=float(p),
                std_error=float(s),
                ci_low=max(0.0, float(p - z * s)),
                ci_high=min(1.0, float(p + z * s)),
                count=float(p * result.n),
            )
            for lab, p, s in zip(labels, est, se, strict=True)
        )
    return msg


def association_response_to_dict(msg: decode_pb2.AssociationResponse) -> dict[str, Any]:
    """A JSON-ready dict of an ``AssociationResponse``."""

    def marg(items: Any) -> list[dict[str, Any]]:
        return [
            {
                "label": m.label,
                "proportion": m.proportion,
                "std_error": m.std_error,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "count": m.count,
            }
            for m in items
        ]

    ncol = len(msg.col_labels)
    return {
        "campaign_id": msg.campaign_id,
        "n_reports": msg.n_reports,
        "confidence": msg.confidence,
        "epsilon": msg.epsilon,
        "first_mechanism": msg.first_mechanism,
        "second_mechanism": msg.second_mechanism,
        "row_labels": list(msg.row_labels),
        "col_labels": list(msg.col_labels),
        "joint": [
            [c.proportion for c in msg.cells[i * ncol : (i + 1) * ncol]] for i in range(len(msg.row_labels))
        ],
        "joint_std_error": [
            [c.std_error for c in msg.cells[i * ncol : (i + 1) * ncol]] for i in range(len(msg.row_labels))
        ],
        "cells": [
            {
                "row": c.row,
                "col": c.col,
                "proportion": c.proportion,
                "std_error": c.std_error,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "count": c.count,
            }
            for c in msg.cells
        ],
        "first": marg(msg.first),
        "second": marg(msg.second),
        "independence": {
            "lr_statistic": msg.lr_statistic,
            "df": msg.df,
            "p_value": msg.p_value,
            "log_likelihood": msg.log_likelihood,
            "log_likelihood_independent": msg.log_likelihood_independent,
        },
        "iterations": msg.iterations,
        "converged": msg.converged,
        "warnings": list(msg.warnings),
    }
