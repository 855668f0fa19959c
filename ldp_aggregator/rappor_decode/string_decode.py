"""String RAPPOR decoded against a candidate dictionary: design, weighted model, LASSO selection, refit.

The method, its standard errors and its detection rule are described step by step in the docstring of
the :mod:`ldp_aggregator.rappor_decode` package; :func:`decode_rappor_counts` is its implementation on
per-cohort bit counts and :func:`decode_rappor` its entry point for a campaign's accumulator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ldp_aggregator.accumulators import BitCountAccumulator, check_matches
from ldp_aggregator.estimators import NoReportsError, _check_candidates, normal_quantile
from ldp_aggregator.rappor_decode.detection import detect, detection_threshold, selective_interval, upper_p
from ldp_aggregator.rappor_decode.results import (
    Correction,
    DecodeResult,
    ResidualDiagnostics,
    check_alpha,
    check_correction,
    check_selection_z,
)
from ldp_aggregator.rappor_decode.solvers import gram, nn_lasso, nnls_gram_sum
from ldp_aggregator.rappor_estimates import _design_matrix, rappor_design
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import RapporParams

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["decode_rappor", "decode_rappor_counts"]

# Candidates per chunk when scoring candidates against the fitted model (dense |F| x chunk products).
_SCORE_CHUNK = 8192
# Expected number of absent candidates the default LASSO penalty lets into the selection (package docstring).
_SELECTION_EXPECTED_FALSE = 5.0


@dataclass(frozen=True, kw_only=True, eq=False)
class _Fit:
    beta: NDArray[np.float64]  # (1 + M_eff,) refit: background mass, then candidate proportions
    mu: float  # multiplier of sum(beta) <= 1 (0 when inactive)
    resid: NDArray[np.float64]  # whitened residuals (R,)


def _fit(A: Any, y: NDArray[np.float64], norms: NDArray[np.float64], lam: float) -> _Fit:
    """Selection then constrained refit; column 0 of ``A`` is the unpenalised background."""
    penalty = lam * norms
    penalty[0] = 0.0
    work, x = nn_lasso(A, y, penalty, norms)
    sel = work[(x > 0) | (work == 0)]
    beta = np.zeros(A.shape[1])
    G = gram(A, sel)
    c = np.asarray(A[:, sel].T @ y)
    # The background holds every string outside the dictionary, so the masses sum to exactly 1: the
    # equality removes the direction in which the background and the candidates' common mean trade off.
    b, mu = nnls_gram_sum(G, c, 1.0, equality=True, max_free=A.shape[0])
    beta[sel] = b
    resid = y - A @ beta
    return _Fit(beta=beta, mu=mu, resid=np.asarray(resid))


def _whiten(
    X: Any, y: NDArray[np.float64], N_row: NDArray[np.float64], rate: NDArray[np.float64], delta: float
) -> tuple[Any, NDArray[np.float64], NDArray[np.float64]]:
    from scipy import sparse

    sd = np.sqrt(N_row * rate * (1.0 - rate)) / abs(delta)
    A = sparse.diags(N_row / sd) @ X
    A = sparse.csc_matrix(A)
    norms = np.sqrt(np.asarray(A.multiply(A).sum(axis=0)).ravel())
    return A, y / sd, norms


def _aliases(X: Any, labels: tuple[str, ...]) -> tuple[NDArray[np.intp], list[list[int]]]:
    """Representative column of each group of identical columns, and the groups with more than one."""
    groups: dict[bytes, list[int]] = {}
    indptr, indices = X.indptr, X.indices
    for v in range(X.shape[1]):
        groups.setdefault(indices[indptr[v] : indptr[v + 1]].tobytes(), []).append(v)
    reps = np.array(sorted(g[0] for g in groups.values()), dtype=np.intp)
    multi = [g for g in groups.values() if len(g) > 1]
    del labels
    return reps, multi


def _name_list(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(s) for s in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def decode_rappor_counts(
    params: RapporParams,
    *,
    campaign_id: str,
    candidates: Sequence[str],
    cohort_reports: ArrayLike,
    ones: ArrayLike,
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode string RAPPOR from per-cohort counts (the package docstring describes the method).

    Args:
        params: the campaign's RAPPOR parameters.
        campaign_id: the campaign id (it keys the Bloom hashing).
        candidates: M distinct candidate strings.
        cohort_reports: N_j, reports per cohort, shape (m,).
        ones: c_ij, reports of cohort j with bit i set, shape (m, k). Floats are accepted (for exact tests
            with expected counts); each must lie in [0, N_j].
        confidence: two-sided level of the intervals.
        alpha: detection level; correction: ``bonferroni`` or ``bh``.
        selection_z: LASSO penalty in z units; None = z_{1 - 5/M} (five absent candidates selected on
            average), scaled by the residual standard deviation of the first pass when it exceeds 1
            (package docstring).

    Raises:
        InvalidParameterError: empty, non-string or duplicate candidates; bad confidence, alpha, correction.
        InvalidReportError: counts of the wrong shape or outside [0, N_j].
        NoReportsError: no reports at all.
    """
    from scipy import sparse, special, stats

    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", getattr(params, "name", params), "RapporParams")
    z_conf = normal_quantile(confidence)
    a = check_alpha(alpha)
    corr = check_correction(correction)
    sel_z = check_selection_z(selection_z)
    cands = _check_candidates(candidates)
    m, k = params.m, params.k
    N = np.asarray(cohort_reports, dtype=np.float64)
    c = np.asarray(ones, dtype=np.float64)
    if N.shape != (m,) or c.shape != (m, k):
        raise InvalidReportError(
            "counts", f"cohort_reports {N.shape}, ones {c.shape}", f"shapes ({m},) and ({m}, {k})"
        )
    if not (np.isfinite(N).all() and np.isfinite(c).all()) or (N < 0).any() or (c < 0).any():
        raise InvalidReportError("counts", "negative or non-finite counts", "finite counts >= 0")
    if (c > N[:, None] * (1 + 1e-12)).any():
        raise InvalidReportError("ones", "a bit count above its cohort's reports", "ones <= cohort_reports")
    n_float = float(N.sum())
    if n_float <= 0:
        raise NoReportsError(0)
    n = round(n_float)
    M = len(cands)
    warns: list[str] = []

    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    delta = qs - ps
    used = N > 0
    if not used.all():
        warns.append(f"{int((~used).sum())} of {m} cohorts have no reports; their bits carry no information")
    pos = rappor_design(params, campaign_id, cands)
    X_full = _design_matrix(pos, k, used)
    rows = np.flatnonzero(np.repeat(used, k))
    X = X_full.tocsr()[rows].tocsc()
    X.sort_indices()
    R = rows.size
    N_row = np.repeat(N, k)[rows]
    y_raw = ((c.ravel()[rows]) - ps * N_row) / delta

    reps, alias_groups = _aliases(X, cands)
    if alias_groups:
        desc = "; ".join(_name_list([cands[i] for i in g]) for g in alias_groups[:5])
        warns.append(
            f"{sum(len(g) for g in alias_groups)} candidates have identical Bloom filters in every cohort "
            f"with reports, so only their total is identifiable; it is reported under the first of each "
            f"group and the others get 0: {desc}"
        )
    M_eff = reps.size
    if M_eff > R:
        warns.append(
            f"{M} candidates exceed the {R} cohort-bit rows with reports ({int(used.sum())} cohorts x "
            f"k={k}): not all candidates are identifiable from the bits; decoding relies on sparse (LASSO) "
            "selection, so strings that share bits with others may be confused"
        )
    lam = (
        sel_z if sel_z is not None else float(-special.ndtri(min(_SELECTION_EXPECTED_FALSE / max(M, 2), 0.5)))
    )

    # Column 0 is the background: strings outside the dictionary, whose Bloom bits are (as far as the
    # dictionary can tell) uniformly random, so a reporter holding one sets each bit with probability
    # b = 1 - (1 - 1/k)^h. It is not penalised and its coefficient is the mass the candidates do not
    # explain; without it that mass would be pushed onto candidates sharing its bits.
    b_bg = 1.0 - (1.0 - 1.0 / k) ** params.h
    Xa = sparse.hstack([sparse.csc_matrix(np.full((R, 1), b_bg)), X[:, reps]], format="csc")
    # Pass 1 with the null rate p* for every row; pass 2 with the rates of the pass-1 fit, and the
    # penalty scaled by the residual s.d. of the pass-1 fit under those weights (Donoho and
    # Johnstone's sigma sqrt(2 log M) uses the noise level; strings outside the dictionary raise it, and
    # a penalty at the nominal level would then let false candidates absorb their signal).
    A, yw, norms = _whiten(Xa, y_raw, N_row, np.full(R, ps), delta)
    fit = _fit(A, yw, norms, lam)
    rate = np.clip(ps + delta * np.asarray(Xa @ fit.beta), min(ps, qs), max(ps, qs))
    A, yw, norms = _whiten(Xa, y_raw, N_row, rate, delta)
    if sel_z is None:
        e1 = yw - np.asarray(A @ fit.beta)
        df1 = max(R - int(np.count_nonzero(fit.beta)), 1)
        lam *= max(1.0, math.sqrt(float(e1 @ e1) / df1))
    fit = _fit(A, yw, norms, lam)

    beta, e = fit.beta, fit.resid
    names = ["<background>", *(cands[i] for i in reps)]
    se, one_step, cov_free, free = _standard_errors(
        A, e, beta, True, norms, warns, names, N[used].astype(np.float64), k
    )
    est_or_step = np.where(beta > 0, beta, one_step)
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where(se > 0, est_or_step / se, 0.0)
    p_vals = upper_p(zs)
    ci_lo = np.where(beta > 0, np.maximum(beta - z_conf * se, 0.0), 0.0)
    ci_hi = np.where(beta > 0, beta + z_conf * se, np.maximum(one_step, 0.0) + z_conf * se)

    # Back to all M candidates (column v + 1 is candidate reps[v]); an alias of a representative gets 0
    # with the representative's standard error and upper limit.
    full_pi = np.zeros(M)
    full_se = np.zeros(M)
    full_lo = np.zeros(M)
    full_hi = np.zeros(M)
    full_z = np.zeros(M)
    full_p = np.ones(M)
    full_pi[reps] = beta[1:]
    full_se[reps] = se[1:]
    full_lo[reps] = ci_lo[1:]
    full_hi[reps] = ci_hi[1:]
    full_z[reps] = zs[1:]
    full_p[reps] = p_vals[1:]
    for g in alias_groups:
        for other in g[1:]:
            full_se[other] = full_se[g[0]]
            full_hi[other] = full_hi[g[0]]
            full_z[other] = full_z[g[0]]
            full_p[other] = full_p[g[0]]
    full_sel = full_pi > 0

    detected, cut = detect(full_p, a, corr, eligible=full_sel)
    thr_z, thr_prop, thr_count = detection_threshold(
        params, n, alpha=a, n_candidates=M, p_cut=cut if corr == "bh" else None
    )
    if detected.any():
        # Reported candidates: the hull of the interval conditional on detection and the ordinary one
        # (selective_interval): still valid given detection, and never degenerate at the threshold.
        lo_sel, hi_sel = selective_interval(
            full_pi[detected], full_se[detected], thr_z * full_se[detected], float(confidence)
        )
        full_lo[detected] = np.minimum(lo_sel, full_lo[detected])
        full_hi[detected] = np.maximum(hi_sel, full_hi[detected])
    chi2 = float(e @ e)
    df = max(R - free.size, 0)
    resid = ResidualDiagnostics(
        chi2=chi2,
        df=df,
        p_value=float(stats.chi2.sf(chi2, df)) if df > 0 else 1.0,
        max_abs_residual=float(np.max(np.abs(e))) if R else 0.0,
        rows=R,
    )
    del cov_free
    return DecodeResult(
        mechanism=params.name,
        method="lasso+nnls",
        n=n,
        epsilon=params.epsilon,
        epsilon_inf=params.epsilon_inf,
        confidence=float(confidence),
        alpha=a,
        correction=corr,
        labels=cands,
        count=full_pi * n_float,
        proportion=full_pi,
        std_error=full_se * n_float,
        ci_low=full_lo * n_float,
        ci_high=full_hi * n_float,
        z=full_z,
        p_value=full_p,
        selected=full_sel,
        detected=detected,
        allocated_mass=float(full_pi[detected].sum()),
        explained_mass=float(full_pi.sum()),
        unexplained_mass=float(beta[0]),
        unexplained_mass_se=float(se[0]),
        threshold_z=thr_z,
        threshold_proportion=thr_prop,
        threshold_count=thr_count,
        selection_lambda=lam,
        residuals=resid,
        warnings=tuple(warns),
    )


def _split_meat(
    AF: NDArray[np.float64], beta_f: NDArray[np.float64], n_cohort: NDArray[np.float64], k: int
) -> NDArray[np.float64]:
    """Within-cohort covariance of the whitened rows from the users' random split over values.

    In cohort j the Bloom-bit sums are s_j = sum_w n_jw x_jw with (n_jw)_w ~ Multinomial(N_j, beta), so
    Cov(s_j) = N_j (X_j diag(beta) X_j' - phi_j phi_j'), phi_j = X_j beta: bits of one cohort are
    correlated through the counts of the values that set them. The row weights hold its diagonal (the
    mixture variance r(1 - r)); this returns sum_j A_j' Offdiag_j A_j for the free columns, using
    X_j = A_j / N_j in whitened units (A = diag(N / s) X):

        sum_j [C_j diag(beta) C_j - (C_j beta)(C_j beta)' - A_j' diag(d_j) A_j] / N_j,
        C_j = A_j' A_j,  d_j = (A_j^2) beta - (A_j beta)^2.
    """
    F = beta_f.size
    blocks = AF.reshape(-1, k, F)  # rows are cohort-major: k consecutive rows per cohort with reports
    out = np.zeros((F, F))
    step = max(1, (1 << 23) // max(F * F, 1))  # cohorts per chunk: bounded (chunk, F, F) temporaries
    for s in range(0, blocks.shape[0], step):
        Bj = blocks[s : s + step]
        Bt = Bj.transpose(0, 2, 1)
        C = Bt @ Bj  # (chunk, F, F)
        Cb = C @ beta_f  # (chunk, F)
        d = (Bj**2) @ beta_f - (Bj @ beta_f) ** 2  # (chunk, k)
        terms = (C * beta_f[None, None, :]) @ C - Cb[:, :, None] * Cb[:, None, :] - Bt @ (d[:, :, None] * Bj)
        out += np.tensordot(1.0 / n_cohort[s : s + step], terms, axes=1)
    return out


def _standard_errors(
    A: Any,
    e: NDArray[np.float64],
    beta: NDArray[np.float64],
    sum_active: bool,
    norms: NDArray[np.float64],
    warns: list[str],
    names: list[str],
    n_cohort: NDArray[np.float64],
    k: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.intp]]:
    """(SE, one-step estimate for coefficients at 0, covariance on the free set, free indices).

    Package docstring: on the free coefficients, the model covariance G^-1 (I + M G^-1) with M the
    within-cohort split covariance (:func:`_split_meat`), plus the excess of the HC1 sandwich over G^-1
    when the residuals show misfit (projected when sum <= 1 is active); for coefficients at 0, the
    score-test standard error and one-step estimate.
    """
    R, P = A.shape
    free = np.flatnonzero(beta > 0)
    F = free.size
    se = np.zeros(P)
    one_step = np.zeros(P)
    cov = np.zeros((F, F))
    G_inv = np.zeros((F, F))
    if F:
        AF = A[:, free]
        AF_dense = np.asarray(AF.toarray())
        G = AF_dense.T @ AF_dense
        G_inv = _inverse_psd(G, warns, [names[i] for i in free])
        m_used = n_cohort.size
        # Cohort-clustered sandwich (Liang and Zeger 1986; CR1 scaling): one score per cohort.
        scores = np.einsum("jif,ji->jf", AF_dense.reshape(m_used, k, F), e.reshape(m_used, k)) @ G_inv
        scale = m_used / max(m_used - 1, 1) * (R - 1) / max(R - F, 1)
        cluster = scores.T @ scores * scale
        cov_model = G_inv + G_inv @ _split_meat(AF_dense, beta[free], n_cohort, k) @ G_inv
        if sum_active:
            # sum(beta) = 1 holds: beta_F = Q b + const, Q the projection along G^-1 1.
            g1 = G_inv.sum(axis=1)
            Q = np.eye(F) - np.outer(g1, np.ones(F)) / g1.sum()
            cov_model = Q @ cov_model @ Q.T
            cluster = Q @ cluster @ Q.T
        cov = cov_model
        se[free] = np.sqrt(np.maximum(np.maximum(np.diag(cov_model), np.diag(cluster)), 0.0))
    at_zero = np.setdiff1d(np.arange(P), free)
    if at_zero.size:
        score = np.asarray(A[:, at_zero].T @ e)
        info = norms[at_zero] ** 2
        if F:
            AF = A[:, free]
            for s in range(0, at_zero.size, _SCORE_CHUNK):
                chunk = at_zero[s : s + _SCORE_CHUNK]
                C = np.asarray((AF.T @ A[:, chunk]).toarray())  # (F, chunk)
                info[s : s + chunk.size] -= np.einsum("ij,ij->j", C, G_inv @ C)
        # A column (numerically) in the span of the free ones has no information of its own.
        info = np.maximum(info, 1e-12 * norms[at_zero] ** 2 + 1e-300)
        se[at_zero] = 1.0 / np.sqrt(info)
        one_step[at_zero] = score / info
    return se, one_step, cov, free


def _inverse_psd(G: NDArray[np.float64], warns: list[str], names: list[str]) -> NDArray[np.float64]:
    """G^-1 by Cholesky; the pseudo-inverse (with a warning naming the candidates) if G is singular."""
    from scipy import linalg

    d = np.sqrt(np.diag(G))
    Gs = G / d[:, None] / d[None, :]
    try:
        chol = linalg.cholesky(Gs, lower=False, check_finite=False)
        if float(np.min(np.diag(chol))) ** 2 > 1e-10:
            inv = linalg.cho_solve((chol, False), np.eye(G.shape[0]), check_finite=False)
            return np.asarray(inv / d[:, None] / d[None, :])
    except linalg.LinAlgError:
        pass
    warns.append(
        "the refit's selected candidates are (nearly) linearly dependent, so some of their standard errors "
        f"are not identified (pseudo-inverse used): {_name_list(names)}"
    )
    return np.asarray(np.linalg.pinv(Gs) / d[:, None] / d[None, :])


def decode_rappor(
    params: RapporParams,
    acc: BitCountAccumulator,
    *,
    campaign_id: str,
    candidates: Sequence[str],
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode a string-RAPPOR accumulator against a candidate dictionary: :func:`decode_rappor_counts`.

    Raises:
        InvalidParameterError: bad candidates or options (see :func:`decode_rappor_counts`).
        InvalidReportError: ``acc`` is not the (m, k) bit accumulator of ``params``.
        NoReportsError: the campaign has no reports.
    """
    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", getattr(params, "name", params), "RapporParams")
    check_matches(acc, params)
    if not isinstance(acc, BitCountAccumulator):  # narrows the type (check_matches guarantees it)
        raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
    _check_candidates(candidates)
    # Issue 13: every option is checked before the data, so a request gets the same answer on an empty
    # campaign as on one with reports (decode_rappor_counts checks them again, cheaply).
    normal_quantile(confidence)
    check_alpha(alpha)
    check_correction(correction)
    check_selection_z(selection_z)
    if acc.n == 0:
        raise NoReportsError(0)
    return decode_rappor_counts(
        params,
        campaign_id=campaign_id,
        candidates=candidates,
        cohort_reports=acc.cohort_reports,
        ones=acc.ones,
        confidence=confidence,
        alpha=alpha,
        correction=correction,
        selection_z=selection_z,
    )
