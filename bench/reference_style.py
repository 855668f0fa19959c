"""The reference decoder's algorithm, re-implemented as a baseline for ``bench_rappor_decode.py``.

Google's ``analysis/R/decode.R`` (``Decode``) as documented there, written anew in numpy for comparison in
the same harness, with the same bit counts:

1. Per-bit estimates of the true Bloom-bit fraction of cohort j, y_ij = (c_ij - p* N_j) / ((q* - p*) N_j),
   and their standard deviations sd_ij = sqrt(r (1 - r) / N_j) / (q* - p*), r = p* + (q* - p*) clamp(y, 0, 1).
2. Five fits: the first on y, four on y + N(0, sd^2) (``Resample``). Each fit is *unweighted* least squares
   of y on the 0/1 design, with x >= 0, sum(x) <= 1 and the per-bit caps X x <= clamp(y + 3 sd', 0.01, 1)
   (``ConstrainedLinModel`` in ``alternative.R``; sd' = sd, and sqrt(2) sd for the resampled fits), solved
   exactly by :func:`_capped_fit`.
3. Estimate = mean of the five fits, standard error = their sample standard deviation; a string is reported
   when mean > 1e-6 / N + 2 sd; its interval is estimate +/- 1.96 sd clipped to [0, 1].

Not reproduced: the LASSO branch ``decode.R`` takes when the dictionary exceeds 0.8 of the rows
(glmnet path), so this baseline refuses such cases (``None``). ``cap_violations`` counts the fits in which
the caps were binding (the unconstrained-by-caps optimum violated one). Proportions are floor(N x) / N as
in ``Decode``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldp_aggregator.rappor_decode.solvers import nnls_gram, nnls_gram_sum
from ldp_aggregator.rappor_estimates import _design_matrix, rappor_design
from ldp_client.params import RapporParams

RESAMPLES = 5


def _capped_fit(G: np.ndarray, X: np.ndarray, y: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, bool]:
    """argmin ||X x - y||^2 subject to x >= 0, sum(x) <= 1, X x <= cap; and whether a cap was binding.

    The relaxed problem (no caps) first; if its solution breaks caps, the caps are added by a working set:
    the QP min 1/2 x'Gx - c'x s.t. B x <= h (B: x >= 0, the sum and the caps in W) is solved through its
    dual, min over lambda >= 0 of 1/2 lambda' B G^-1 B' lambda - (B G^-1 c - h)' lambda (an NNLS in Gram
    form), x = G^-1 (c - B' lambda); caps outside W that the solution breaks join W until none does, at
    which point the KKT conditions of the full problem hold.
    """
    c = X.T @ y
    x, _ = nnls_gram_sum(G, c, 1.0)
    viol = X @ x > cap + 1e-12
    if not viol.any():
        return x, False
    M = G.shape[0]
    G_inv = np.linalg.pinv(G)
    work = np.flatnonzero(viol)
    for _ in range(50):
        B = np.vstack([-np.eye(M), np.ones((1, M)), X[work]])
        h = np.concatenate([np.zeros(M), [1.0], cap[work]])
        BG = B @ G_inv
        lam = nnls_gram(BG @ B.T, BG @ c - h)
        x = G_inv @ (c - B.T @ lam)
        x = np.maximum(x, 0.0)
        viol = X @ x > cap + 1e-9
        viol[work] = False
        if not viol.any():
            break
        work = np.union1d(work, np.flatnonzero(viol))
    return x, True


@dataclass(frozen=True)
class ReferenceResult:
    proportion: np.ndarray  # reported strings' proportions, 0 elsewhere
    detected: np.ndarray
    ci_low: np.ndarray  # counts, like DecodeResult
    ci_high: np.ndarray
    cap_violations: int


def decode_reference_style(
    params: RapporParams,
    *,
    campaign_id: str,
    candidates: tuple[str, ...],
    cohort_reports: np.ndarray,
    ones: np.ndarray,
    rng: np.random.Generator,
) -> ReferenceResult | None:
    k = params.k
    n_j = np.asarray(cohort_reports, dtype=float)
    used = n_j > 0
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    delta = qs - ps
    X = _design_matrix(rappor_design(params, campaign_id, candidates), k, used).tocsr()
    rows = np.flatnonzero(np.repeat(used, k))
    X = X[rows]
    if len(candidates) > 0.8 * rows.size:
        return None
    n_row = np.repeat(n_j, k)[rows]
    y = (np.asarray(ones, dtype=float).ravel()[rows] - ps * n_row) / (delta * n_row)
    r = ps + delta * np.clip(y, 0.0, 1.0)
    sd = np.sqrt(r * (1 - r) / n_row) / delta
    Xd = np.asarray(X.toarray())
    G = Xd.T @ Xd
    fits = []
    violations = 0
    for rep in range(RESAMPLES):
        y_rep = y if rep == 0 else y + sd * rng.standard_normal(y.size)
        sd_rep = sd if rep == 0 else sd * np.sqrt(2.0)
        cap = np.clip(y_rep + 3 * sd_rep, 0.01, 1.0)
        x, bound = _capped_fit(G, Xd, y_rep, cap)
        violations += int(bound)
        fits.append(x)
    F = np.array(fits)
    n = float(n_j.sum())
    ave = F.mean(axis=0)
    ssd = F.std(axis=0, ddof=1)
    reported = n * ave > 1e-6 + 2 * n * ssd
    est = np.floor(n * ave) / n
    se = np.floor(n * ssd) / n
    prop = np.where(reported, est, 0.0)
    lo = np.clip(est - 1.96 * se, 0.0, 1.0) * n
    hi = np.clip(est + 1.96 * se, 0.0, 1.0) * n
    return ReferenceResult(
        proportion=prop, detected=reported, ci_low=lo, ci_high=hi, cap_violations=violations
    )
