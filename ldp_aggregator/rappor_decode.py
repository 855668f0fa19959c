"""RAPPOR decoding at full strength: sparse selection, constrained refit, calibrated errors, detection.

String RAPPOR with a candidate dictionary (Erlingsson, Pihur, Korolova, CCS 2014, §4; Google's
``analysis/R/decode.R``) is decoded by :func:`decode_rappor` in four steps, all on the per-cohort bit
counts of a :class:`~ldp_aggregator.accumulators.BitCountAccumulator`:

1. **Design.** X[(j, i), v] = 1 iff candidate v's Bloom filter in cohort j sets bit i, built as a sparse
   (m*k) x M matrix from :func:`ldp_aggregator.estimators.rappor_design`, i.e. from the client's own hashing
   code, so client and server can never disagree. Cohorts without reports are dropped (R rows remain).
2. **Weighted model.** With N_j reports in cohort j and c_ij ones, the debiased count
   y_ij = (c_ij - p* N_j)/(q* - p*) has E[y_ij] = N_j (X pi + b pi_0)_ij and
   Var[y_ij] = N_j r_ij (1 - r_ij)/(q*-p*)^2 with r_ij = p* + (q*-p*)(X pi + b pi_0)_ij (§2 of the formulas;
   the mixture variance includes the users' random split over cohorts). The extra column b = 1 - (1-1/k)^h
   is the *background*: reporters holding strings outside the dictionary, whose Bloom bits are, as far as
   the dictionary can tell, uniformly random; its unpenalised coefficient pi_0 is the mass the candidates
   do not explain (without it that mass is pushed onto candidates sharing its bits). Rows are whitened:
   y~ = y / s, A = diag(N / s) X, so the noise is N(0, 1) per row. The weights are fixed before the fit
   that uses them (first the null rate p*, then the rates fitted in that first pass), never the observed
   rates, whose noise would bias the fit.
3. **Selection: non-negative LASSO** (Tibshirani 1996; non-negative form as in decode.R's glmnet call)::

       minimise 1/2 ||y~ - A pi||^2 + lambda * sum_v ||A_v|| pi_v   subject to pi >= 0.

   With columns scaled by their norms the penalty is in z units: candidate v stays at 0 exactly when the
   standardised correlation A_v'(y~ - A pi)/||A_v|| of its column with the residual is at most lambda
   (KKT). For a candidate nobody holds that correlation is N(0, sigma^2), so lambda = sigma z_{1 - c/M}
   lets on average c absent candidates into the selection, whatever M is, without cross-validation
   (c = 1 is the one-sided *universal threshold*; Donoho and Johnstone 1994 use sigma sqrt(2 log M)). The
   default is c = 5 (``_SELECTION_EXPECTED_FALSE``): selection only decides which coefficients the refit
   estimates, detection (below) decides what is reported, and a penalty that lets a few absent candidates
   in keeps the small true ones that the universal threshold zeroes (exp / 20% extra / eps_1 = 1 in
   ``bench/bench_rappor_decode.py``: total variation 0.182 -> 0.174 at k = 8, false positives 0.2 -> 0.4).
   sigma is 1 for
   a dictionary that explains the data and is estimated as max(1, sqrt(chi2/df)) from the first pass's
   residuals (strings outside the dictionary raise it; at the nominal level false candidates would absorb
   their signal). Detection (below) then decides what is reported. The problem is solved exactly by an
   active-set NNLS in Gram form (Lawson and Hanson 1974; Bro and De Jong 1997) over a working set of
   candidates that grows until the KKT conditions hold for all M candidates (a sparse product A'r per
   check), so the (m*k) x M design is never densified and M may exceed R: a dictionary larger than what the
   bits can identify is decoded by selection (said in ``warnings``), not refused.
4. **Refit** on the selected set S: weighted least squares with pi >= 0 and sum(pi) + pi_0 <= 1 (the same
   active-set solver; the sum constraint by its Lagrange multiplier, found by Newton steps).

**Standard errors.** On the free coordinates F (pi_v > 0) of the refit, the estimator is the WLS solution
G_F^-1 A_F' y~ (G_F = A_F' A_F), projected on the sum constraint when it is active. Per candidate, the
variance is the larger of

* the model covariance G_F^-1 + G_F^-1 M G_F^-1, where M adds the within-cohort correlation of the rows
  that the users' multinomial split over values creates (:func:`_split_meat`; the row weights hold only
  its diagonal); and
* the cohort-clustered sandwich G_F^-1 (sum_j u_j u_j') G_F^-1, u_j = A_Fj' e_j the score of cohort j
  (Liang and Zeger 1986, CR1 scaling): cohorts are independent and hash independently, so strings outside
  the dictionary and other misfit show up as between-cohort variability of the scores.

For a candidate at 0, the standard error and the one-step estimate are those of adding it to the model
(the score test of its coefficient): SE = I_v^-1/2 with I_v = A_v'(I - H_F) A_v, pi~_v = A_v' e / I_v;
its interval is [0, max(pi~_v, 0) + z SE]. Other intervals are pi_hat +/- z SE (lower end clipped at 0),
and for *detected* candidates the hull of that and the interval valid conditional on detection
(:func:`selective_interval`), since reporting only estimates above a threshold selects those that noise
pushed up. ``bench/bench_rappor_decode.py`` measures the coverage (target: >= 90% for the 95% intervals of
reported strings).

**Detection.** One-sided p-values p_v = 1 - Phi(pi_v / SE_v) over all M candidates (score p-values for
candidates at 0). A candidate is detected when its estimate is positive and it passes Bonferroni
(p_v <= alpha/M, family-wise error <= alpha) or Benjamini-Hochberg (step-up, false discovery rate <=
alpha), as the caller chooses. The result carries the detection threshold for the campaign's N and
parameters: the smallest proportion detectable for an isolated candidate,
z_crit * sqrt(p*(1-p*)) / ((q*-p*) sqrt(h_eff N)), with h_eff = k (1 - (1 - 1/k)^h) the expected number of
distinct bits of a string and z_crit = z_{1-alpha/M} (Bonferroni) or the realised BH cut-off. This is
decode.R's threshold z_{1-alpha/M} sqrt(p*(1-p*) N)/(q*-p*)/N with the sqrt(h_eff) gain of reading all h
bits of a string.

Basic RAPPOR and boolean RAPPOR need no regression: :func:`decode_direct` debiases each bit
(:func:`ldp_aggregator.estimators.pure_oracle_arrays`) and applies the same detection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ldp_aggregator.accumulators import Accumulator, BitCountAccumulator, check_matches
from ldp_aggregator.estimators import (
    NoReportsError,
    _check_candidates,
    _design_matrix,
    normal_quantile,
    pure_oracle_arrays,
    rappor_design,
)
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import BasicRapporParams, BooleanRapporParams, RapporParams

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import decode_pb2
    from ldp_client.params import MechanismParams

__all__ = [
    "CORRECTIONS",
    "Correction",
    "DecodeResult",
    "ResidualDiagnostics",
    "correction_from_proto",
    "decode",
    "decode_campaign",
    "decode_direct",
    "decode_rappor",
    "decode_rappor_counts",
    "decode_response_to_dict",
    "decode_to_proto",
    "detect",
    "detection_threshold",
    "selective_interval",
]

Correction = Literal["bonferroni", "bh"]
CORRECTIONS: tuple[str, ...] = ("bonferroni", "bh")

# Candidates whose Gram matrix the working set may hold (dense, |W|^2 doubles: 4000 -> 128 MB).
_MAX_WORKING_SET = 4000
# Violators added to the working set per KKT round.
_ADD_PER_ROUND = 500
# Candidates per chunk when scoring candidates against the fitted model (dense |F| x chunk products).
_SCORE_CHUNK = 8192
# Relative tolerance of the KKT checks (z units) and of the active-set solver.
_KKT_TOL = 1e-7
_MAX_KKT_ROUNDS = 100
# Exchanges of block principal pivoting before it hands over to Lawson-Hanson.
_BPP_MAX_ITERATIONS = 60
# Bisection steps for the multiplier of sum(pi) <= 1 (relative precision 2^-60).
_SUM_BISECTION_STEPS = 60
# Expected number of absent candidates the default LASSO penalty lets into the selection (module docstring).
_SELECTION_EXPECTED_FALSE = 5.0


# --------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class ResidualDiagnostics:
    """Goodness of fit of the refit model on the R whitened bit rows.

    Attributes:
        chi2: sum of squared whitened residuals; ~ chi-square(df) when the dictionary explains the data.
        df: R - (number of free coefficients).
        p_value: P(chi-square(df) >= chi2); small values say strings outside the dictionary (or a wrong
            model) leave signal in the bits.
        max_abs_residual: the largest |whitened residual| over the rows.
        rows: R, the cohort-bit rows used (cohorts with reports times k).
    """

    chi2: float
    df: int
    p_value: float
    max_abs_residual: float
    rows: int


@dataclass(frozen=True, kw_only=True, eq=False)
class DecodeResult:
    """A decoded RAPPOR campaign: one entry per candidate (arrays of length M), and overall figures.

    Counts are on the count scale (estimated reporters holding the value), proportions = count / n.

    Attributes:
        mechanism: ``rappor``, ``basic-rappor`` or ``boolean-rappor``.
        method: ``lasso+nnls`` (string RAPPOR) or ``direct`` (basic and boolean RAPPOR).
        n: number of reports decoded.
        epsilon, epsilon_inf: privacy of the reports (per report, longitudinal).
        confidence: two-sided level of the intervals.
        alpha: level of the detection test; ``correction``: ``bonferroni`` or ``bh``.
        labels: the M candidates (or domain labels).
        count, proportion, std_error, ci_low, ci_high: per candidate (count scale except proportion).
        z: estimate / std_error (the one-step score z for candidates at 0); p_value: one-sided p-value.
        selected: kept by the LASSO and positive in the refit (always True for ``direct``).
        detected: passes the multiple-testing rule at ``alpha``.
        allocated_mass: sum of the proportions of detected candidates.
        explained_mass: sum of all estimated proportions; ``unexplained_mass`` = 1 - explained_mass is the
            mass the candidates do not explain, with standard error ``unexplained_mass_se``.
        threshold_z, threshold_proportion, threshold_count: the detection threshold for this N and these
            parameters (module docstring).
        selection_lambda: the LASSO penalty in z units (None for ``direct``).
        residuals: fit diagnostics (None for ``direct``).
        warnings: what the caller should know (dictionary larger than identifiable, aliased candidates,
            a singular refit, empty cohorts, ...).
    """

    mechanism: str
    method: str
    n: int
    epsilon: float
    epsilon_inf: float
    confidence: float
    alpha: float
    correction: str
    labels: tuple[str, ...]
    count: NDArray[np.float64]
    proportion: NDArray[np.float64]
    std_error: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    z: NDArray[np.float64]
    p_value: NDArray[np.float64]
    selected: NDArray[np.bool_]
    detected: NDArray[np.bool_]
    allocated_mass: float
    explained_mass: float
    unexplained_mass: float
    unexplained_mass_se: float
    threshold_z: float
    threshold_proportion: float
    threshold_count: float
    selection_lambda: float | None
    residuals: ResidualDiagnostics | None
    warnings: tuple[str, ...]

    @property
    def n_detected(self) -> int:
        return int(self.detected.sum())

    @property
    def n_selected(self) -> int:
        return int(self.selected.sum())

    def index(self, label: str) -> int:
        """Position of ``label`` among the candidates; raises KeyError if absent."""
        try:
            return self.labels.index(label)
        except ValueError:
            raise KeyError(label) from None

    def row(self, label: str) -> dict[str, Any]:
        """Everything about one candidate, as plain Python values."""
        i = self.index(label)
        return {
            "label": label,
            "count": float(self.count[i]),
            "proportion": float(self.proportion[i]),
            "std_error": float(self.std_error[i]),
            "ci_low": float(self.ci_low[i]),
            "ci_high": float(self.ci_high[i]),
            "z": float(self.z[i]),
            "p_value": float(self.p_value[i]),
            "selected": bool(self.selected[i]),
            "detected": bool(self.detected[i]),
        }


# -------------------------------------------------------------------------------------------- checks


def _check_alpha(alpha: object) -> float:
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, int | float)
        or not math.isfinite(alpha)
        or not 0.0 < alpha < 1.0
    ):
        raise InvalidParameterError("alpha", alpha, "a detection level in (0, 1), e.g. 0.05")
    return float(alpha)


def _check_correction(correction: object) -> Correction:
    if correction == "bonferroni":
        return "bonferroni"
    if correction == "bh":
        return "bh"
    raise InvalidParameterError("correction", correction, f"one of {', '.join(CORRECTIONS)}")


def _check_selection_z(selection_z: object) -> float | None:
    if selection_z is None:
        return None
    if (
        isinstance(selection_z, bool)
        or not isinstance(selection_z, int | float)
        or not math.isfinite(selection_z)
        or selection_z <= 0
    ):
        raise InvalidParameterError("selection_z", selection_z, "None (default: z_{1-5/M}) or a number > 0")
    return float(selection_z)


# ------------------------------------------------------------------------------------------ detection


def _upper_p(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """One-sided p-value P(Z >= z)."""
    from scipy import special

    return np.asarray(special.ndtr(-z), dtype=np.float64)


def detect(
    p_values: ArrayLike, alpha: float, correction: Correction, *, eligible: ArrayLike | None = None
) -> tuple[NDArray[np.bool_], float]:
    """Multiple-testing decisions over M one-sided p-values.

    Args:
        p_values: one p-value per candidate (M of them; M is the size of the family).
        alpha: family-wise error (Bonferroni) or false discovery rate (Benjamini-Hochberg) level.
        correction: ``bonferroni``: reject p_v <= alpha/M. ``bh``: the Benjamini-Hochberg (1995) step-up,
            reject the R smallest p-values where R = max{r : p_(r) <= r alpha / M}.
        eligible: optional mask of candidates that may be detected (e.g. positive estimates); the others
            still count in M.

    Returns:
        (detected mask, the p-value cut-off used: alpha/M, or R alpha/M for BH with R >= 1 rejections).
    """
    p = np.asarray(p_values, dtype=np.float64)
    a = _check_alpha(alpha)
    corr = _check_correction(correction)
    M = p.size
    ok = np.ones(M, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if M == 0:
        return np.zeros(0, dtype=bool), a
    if corr == "bonferroni":
        cut = a / M
    else:
        order = np.sort(p)
        below = np.flatnonzero(order <= a * np.arange(1, M + 1) / M)
        cut = a * (int(below[-1]) + 1) / M if below.size else a / M
    return (p <= cut) & ok, cut


def detection_threshold(
    params: RapporParams | BasicRapporParams | BooleanRapporParams,
    n: int,
    *,
    alpha: float = 0.05,
    n_candidates: int,
    p_cut: float | None = None,
) -> tuple[float, float, float]:
    """(z, proportion, count): the smallest estimate an isolated candidate needs to be detected.

    For string RAPPOR the standard error of an isolated string is sqrt(p*(1-p*)) / ((q*-p*) sqrt(h_eff n))
    (h_eff = k (1 - (1 - 1/k)^h) distinct bits read per report); for basic and boolean RAPPOR it is the
    null standard error sqrt(n p*(1-p*))/(q*-p*) of a debiased bit count. z = z_{1 - p_cut} with
    p_cut = alpha / n_candidates (Bonferroni) unless a realised cut-off is given (BH).
    """
    from scipy import special

    a = _check_alpha(alpha)
    if n <= 0:
        raise NoReportsError(n)
    cut = a / n_candidates if p_cut is None else p_cut
    z = float(-special.ndtri(cut))
    ps, qs = params.p_star, params.q_star
    delta = qs - ps
    if isinstance(params, RapporParams):
        k, h = params.k, params.h
        h_eff = k * (1.0 - (1.0 - 1.0 / k) ** h)
        se_prop = math.sqrt(ps * (1.0 - ps)) / (delta * math.sqrt(h_eff * n))
    else:
        se_prop = math.sqrt(ps * (1.0 - ps)) / (delta * math.sqrt(n))
    return z, z * se_prop, z * se_prop * n


def selective_interval(
    estimate: ArrayLike, std_error: ArrayLike, threshold: ArrayLike, confidence: float = 0.95
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Confidence interval for mu from X ~ N(mu, s^2) observed only because X > a (a detection).

    Reporting a candidate only when its estimate clears the detection threshold a selects estimates that
    noise pushed up (the winner's curse): near the threshold the ordinary interval x +/- z s covers the
    truth far less often than its level among *reported* candidates. The interval here is valid
    conditional on the detection (selective inference for a truncated normal: Lee, Sun, Sun and Taylor,
    Ann. Statist. 2016; Fithian, Sun and Taylor 2014): with G_mu(x) = P(X > x | X > a) =
    Phi-bar((x - mu)/s) / Phi-bar((a - mu)/s), increasing in mu, it is
    {mu >= 0 : alpha/2 <= G_mu(x) <= 1 - alpha/2}. Far above the threshold it is x +/- z s; near it, it
    widens downward (to 0 when the observation is also typical of a null candidate).

    Returns:
        (low, high) on the scale of ``estimate``; low >= 0.
    """
    from scipy import special

    x = np.asarray(estimate, dtype=np.float64)
    s = np.asarray(std_error, dtype=np.float64)
    a = np.asarray(threshold, dtype=np.float64)
    tail = (1.0 - float(confidence)) / 2.0
    ok = s > 0
    s_safe = np.where(ok, s, 1.0)

    def log_g(mu: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(
            special.log_ndtr((mu - x) / s_safe) - special.log_ndtr((mu - np.minimum(a, x)) / s_safe)
        )

    def solve(target: float) -> NDArray[np.float64]:
        # log G is increasing in mu; bracket in units of s around x (G -> 0 as mu -> -inf when x > a).
        lo = x - (np.maximum((x - a) / s_safe, 0.0) + 60.0) * s_safe
        lo = np.minimum(lo, x - 60.0 * s_safe)
        hi = x + 60.0 * s_safe
        log_t = math.log(target)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            below = log_g(mid) < log_t
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    low = np.maximum(solve(tail), 0.0)
    high = np.maximum(solve(1.0 - tail), 0.0)
    low = np.where(ok, low, np.maximum(x, 0.0))
    high = np.where(ok, high, np.maximum(x, 0.0))
    return low, high


# -------------------------------------------------------------------------------------------- solvers


def _solve_spd(G: NDArray[np.float64], c: NDArray[np.float64]) -> NDArray[np.float64]:
    """G z = c for a symmetric positive semidefinite G, by Cholesky with a ridge of 1e-12 of the mean
    diagonal (a singular G, e.g. dependent candidate columns, then gets the ridge solution); least squares
    if even that fails."""
    from scipy import linalg

    n = c.size
    if n == 0:
        return np.zeros(0)
    ridge = 1e-12 * max(float(np.trace(G)) / n, 1e-300)
    try:
        factor = linalg.cho_factor(G + ridge * np.eye(n), check_finite=False)
        return np.asarray(linalg.cho_solve(factor, c, check_finite=False))
    except linalg.LinAlgError:
        return np.asarray(linalg.lstsq(G, c, check_finite=False)[0])


def _nnls_gram(
    G: NDArray[np.float64],
    c: NDArray[np.float64],
    x0: NDArray[np.float64] | None = None,
    max_free: int | None = None,
) -> NDArray[np.float64]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0 (G symmetric positive semidefinite).

    Block principal pivoting (Portugal, Judice, Vicente 1994; Kim and Park, SIAM J. Sci. Comput. 2011):
    solve on a guessed free set F, then move every coordinate violating the KKT conditions (x_F < 0, or a
    negative gradient Gx - c outside F) across at once, with Murty's single-pivot rule as a backup after
    three exchanges that do not reduce the number of violations, which guarantees termination. A handful of
    linear solves instead of one per active coordinate; a warm start ``x0`` seeds F. Should it not finish
    in its iteration budget, or F grow beyond ``max_free`` (the rank bound: G = A'A with that many rows),
    the Lawson-Hanson method (:func:`_nnls_lawson_hanson`) completes the solve.
    """
    n = c.size
    if n == 0:
        return np.zeros(0)
    scale = float(np.max(np.abs(c))) + float(np.max(np.abs(np.diag(G)))) + 1e-300
    tol = 1e-11 * scale
    free = np.zeros(n, dtype=bool) if x0 is None else np.asarray(x0) > 0
    best, backup = n + 1, 3
    x = np.zeros(n)
    # Well-posed problems finish in a few dozen exchanges; a degenerate one (more candidate columns than
    # independent rows) can make the exchanges wander, and Lawson-Hanson handles that case exactly.
    for _ in range(min(10 * n + 50, _BPP_MAX_ITERATIONS)):
        x = np.zeros(n)
        idx = np.flatnonzero(free)
        if max_free is not None and idx.size > max_free:
            break
        if idx.size:
            x[idx] = _solve_spd(G[np.ix_(idx, idx)], c[idx])
        grad = G @ x - c
        bad_x = free & (x < 0)
        bad_y = ~free & (grad < -tol)
        bad = bad_x | bad_y
        nbad = int(np.count_nonzero(bad))
        if nbad == 0:
            return np.maximum(x, 0.0)
        if nbad < best:
            best, backup = nbad, 3
            free ^= bad
        elif backup > 0:
            backup -= 1
            free ^= bad
        else:
            j = int(np.flatnonzero(bad)[-1])
            free[j] = not free[j]
    return _nnls_lawson_hanson(G, c, np.maximum(x, 0.0))


def _nnls_lawson_hanson(
    G: NDArray[np.float64], c: NDArray[np.float64], x0: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0: the Lawson-Hanson active-set method on the normal
    equations (Bro and De Jong, J. Chemometrics 1997, "FNNLS"), one coordinate at a time. Finite, exact,
    slower; the fallback of :func:`_nnls_gram`."""
    n = c.size
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    if n == 0:
        return x
    scale = float(np.max(np.abs(c))) + float(np.max(np.abs(np.diag(G)))) + 1e-300
    tol = 1e-11 * scale
    if x0 is not None and np.any(x0 > 0):
        x = np.maximum(x0, 0.0)
        passive = x > 0
        x = _inner(G, c, x, passive)
        passive = x > 0
    blocked = np.zeros(n, dtype=bool)
    for _ in range(3 * n + 50):
        w = c - G @ x
        w[passive | blocked] = -np.inf
        j = int(np.argmax(w))
        if not w[j] > tol:
            break
        trial = passive.copy()
        trial[j] = True
        x_new = _inner(G, c, x, trial)
        if x_new[j] <= 0:
            # In exact arithmetic the freed coordinate moves up; when it cannot (a numerically singular
            # G), set it aside until the solution changes, so the method never cycles.
            blocked[j] = True
            continue
        x = x_new
        passive = x > 0
        blocked[:] = False
    return x


def _inner(
    G: NDArray[np.float64], c: NDArray[np.float64], x: NDArray[np.float64], passive: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """Lawson-Hanson inner loop: from feasible x, solve on the passive set, stepping back on violations."""
    x = x.copy()
    passive = passive.copy()
    for _ in range(passive.size + 1):
        idx = np.flatnonzero(passive)
        if idx.size == 0:
            return np.zeros_like(x)
        z = _solve_spd(G[np.ix_(idx, idx)], c[idx])
        if np.all(z > 0):
            out = np.zeros_like(x)
            out[idx] = z
            return out
        xi = x[idx]
        neg = z <= 0
        # Largest step from x toward z that keeps every passive coordinate >= 0.
        denom = xi - z
        t = np.full(z.size, np.inf)
        t[neg] = np.where(denom[neg] > 0, xi[neg] / np.where(denom[neg] > 0, denom[neg], 1.0), 0.0)
        step = float(np.min(t))
        x[idx] = xi + step * (z - xi)
        # The coordinates that reached the boundary leave the passive set.
        leave = (neg & (t <= step)) | (x[idx] <= 0)
        passive[idx[leave]] = False
        x[~passive] = 0.0
    return np.maximum(x, 0.0)


def _nnls_gram_sum(
    G: NDArray[np.float64],
    c: NDArray[np.float64],
    total: float,
    *,
    equality: bool = False,
    max_free: int | None = None,
) -> tuple[NDArray[np.float64], float]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0 and sum(x) <= total (or == total); returns (x, mu).

    With the multiplier mu of the sum constraint the solution is x(mu) = NNLS with linear term c - mu 1;
    sum(x(mu)) is continuous, non-increasing and piecewise linear in mu (linear while the active set is
    fixed: x_P = G_PP^-1 (c_P - mu 1)). Newton steps on it (exact within a piece) find sum = total in a
    few NNLS solves; bisection takes over if a step fails to make progress. For the inequality mu >= 0,
    and mu = 0 when the unconstrained sum is already within the total.
    """
    x = _nnls_gram(G, c, max_free=max_free)
    if not equality and x.sum() <= total * (1.0 + 1e-12):
        return x, 0.0
    mu = 0.0
    lo, hi = -math.inf, math.inf  # bracket: sum(x(lo)) > total >= sum(x(hi))
    scale = max(float(np.max(np.abs(c))), 1e-300)
    for _ in range(_SUM_BISECTION_STEPS):
        excess = float(x.sum()) - total
        if abs(excess) <= 1e-12 * total:
            break
        if excess > 0:
            lo = max(lo, mu)
        else:
            hi = min(hi, mu)
        idx = np.flatnonzero(x > 0)
        slope = float(_solve_spd(G[np.ix_(idx, idx)], np.ones(idx.size)).sum()) if idx.size else 0.0
        step = mu + excess / slope if slope > 0 else math.nan
        if not (math.isfinite(step) and lo < step < hi):
            if math.isfinite(lo) and math.isfinite(hi):
                step = 0.5 * (lo + hi)
            elif math.isfinite(lo):
                step = lo + max(abs(lo), scale)
            else:
                step = hi - max(abs(hi), scale)
        mu = step
        x = _nnls_gram(G, c - mu, x, max_free)
    if x.sum() > total or (equality and x.sum() > 0):  # numerical residue: scale onto the constraint
        x = x * (total / float(x.sum()))
    return x, mu


def _gram(A: Any, cols: NDArray[np.intp]) -> NDArray[np.float64]:
    sub = A[:, cols]
    return np.asarray((sub.T @ sub).toarray())


def _nn_lasso(
    A: Any, y: NDArray[np.float64], penalty: NDArray[np.float64], norms: NDArray[np.float64]
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """argmin 1/2 ||y - A x||^2 + penalty'x over x >= 0, for a sparse ``A`` with many columns.

    Columns with penalty 0 are always in the working set. The others enter when they violate the KKT
    condition A_v'(y - A x) <= penalty_v, the worst (in z units, divided by ``norms``) first, with at most
    _MAX_WORKING_SET candidates in the dense Gram matrix at a time; the subproblem on the working set is
    solved exactly (:func:`_nnls_gram`). Ends when no column of A violates its condition.

    Returns:
        (indices of the working set, sorted; coefficients on it).
    """
    M = A.shape[1]
    tol = _KKT_TOL * norms * (1.0 + penalty / np.maximum(norms, 1e-300))
    always = np.flatnonzero(penalty <= 0)
    score = np.asarray(A.T @ y)
    viol = np.flatnonzero(score - penalty > tol)
    viol = viol[penalty[viol] > 0]
    order = viol[np.argsort(-(score[viol] - penalty[viol]) / norms[viol], kind="stable")]
    work = np.union1d(always, order[: _MAX_WORKING_SET // 2]).astype(np.intp)
    x = np.zeros(work.size)
    if work.size == 0:
        return work, x
    for _ in range(_MAX_KKT_ROUNDS):
        G = _gram(A, work)
        c = np.asarray(A[:, work].T @ y) - penalty[work]
        x = _nnls_gram(G, c, x, A.shape[0])
        resid = y - A[:, work] @ x
        score = np.asarray(A.T @ resid)
        in_work = np.zeros(M, dtype=bool)
        in_work[work] = True
        viol = np.flatnonzero((score - penalty > tol) & ~in_work)
        if viol.size == 0:
            break
        # Keep the working set bounded: drop penalised coordinates at 0, add the worst violators.
        keep = (x > 0) | (penalty[work] <= 0)
        room = max(_ADD_PER_ROUND, _MAX_WORKING_SET - int(keep.sum()))
        rank = np.argsort(-(score[viol] - penalty[viol]) / norms[viol], kind="stable")
        add = viol[rank[: min(room, _ADD_PER_ROUND)]]
        new_work = np.concatenate([work[keep], add])
        order_idx = np.argsort(new_work, kind="stable")
        x = np.concatenate([x[keep], np.zeros(add.size)])[order_idx]
        work = new_work[order_idx]
    return work, x


# --------------------------------------------------------------------------------------------- decode


@dataclass(frozen=True, kw_only=True, eq=False)
class _Fit:
    beta: NDArray[np.float64]  # (1 + M_eff,) refit: background mass, then candidate proportions
    mu: float  # multiplier of sum(beta) <= 1 (0 when inactive)
    resid: NDArray[np.float64]  # whitened residuals (R,)


def _fit(A: Any, y: NDArray[np.float64], norms: NDArray[np.float64], lam: float) -> _Fit:
    """Selection then constrained refit; column 0 of ``A`` is the unpenalised background."""
    penalty = lam * norms
    penalty[0] = 0.0
    work, x = _nn_lasso(A, y, penalty, norms)
    sel = work[(x > 0) | (work == 0)]
    beta = np.zeros(A.shape[1])
    G = _gram(A, sel)
    c = np.asarray(A[:, sel].T @ y)
    # The background holds every string outside the dictionary, so the masses sum to exactly 1: the
    # equality removes the direction in which the background and the candidates' common mean trade off.
    b, mu = _nnls_gram_sum(G, c, 1.0, equality=True, max_free=A.shape[0])
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
    """Decode string RAPPOR from per-cohort counts (module docstring for the method).

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
            (module docstring).

    Raises:
        InvalidParameterError: empty, non-string or duplicate candidates; bad confidence, alpha, correction.
        InvalidReportError: counts of the wrong shape or outside [0, N_j].
        NoReportsError: no reports at all.
    """
    from scipy import sparse, special, stats

    if not isinstance(params, RapporParams):
        raise InvalidParameterError("params", getattr(params, "name", params), "RapporParams")
    z_conf = normal_quantile(confidence)
    a = _check_alpha(alpha)
    corr = _check_correction(correction)
    sel_z = _check_selection_z(selection_z)
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

    ps, qs = params.p_star, params.q_star
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
    p_vals = _upper_p(zs)
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

    Module docstring: on the free coefficients, the model covariance G^-1 (I + M G^-1) with M the
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
    _check_alpha(alpha)
    _check_correction(correction)
    _check_selection_z(selection_z)
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


def decode_direct(
    params: BasicRapporParams | BooleanRapporParams,
    acc: BitCountAccumulator,
    *,
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
) -> DecodeResult:
    """Basic and boolean RAPPOR: debiased counts per bit, no regression (CCS 2014, §4).

    Each domain value (basic) or each of ``false``/``true`` (boolean) is a pure frequency oracle with
    p* = q_star, q* = p_star (:func:`ldp_aggregator.estimators.pure_oracle_arrays`: unbiased counts, exact
    variance, score intervals). Detection tests count > 0 with the null standard error
    sqrt(n p*(1-p*))/(q*-p*) (the value's bit is then pure noise), one-sided, corrected over the d values.

    Raises:
        InvalidParameterError: params of another mechanism, bad options.
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: no reports.
    """
    if not isinstance(params, BasicRapporParams | BooleanRapporParams):
        raise InvalidParameterError(
            "params", getattr(params, "name", params), "BasicRapporParams or BooleanRapporParams"
        )
    a = _check_alpha(alpha)
    corr = _check_correction(correction)
    normal_quantile(confidence)  # issue 13: options before data (the same answer with or without reports)
    check_matches(acc, params)
    if not isinstance(acc, BitCountAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
    n = acc.n
    if n == 0:
        raise NoReportsError(0)
    ones = acc.ones[0].astype(np.float64)
    qs, ps = params.q_star, params.p_star
    if isinstance(params, BasicRapporParams):
        labels = tuple(params.domain.label(i) for i in range(params.domain.size))
        res = pure_oracle_arrays(ones, n, qs, ps, confidence)
        null_se = np.full(ones.size, math.sqrt(n * ps * (1.0 - ps)) / (qs - ps))
        count, se, lo, hi = res.count, res.std_error, res.ci_low, res.ci_high
    else:
        labels = ("false", "true")
        t = pure_oracle_arrays(ones, n, qs, ps, confidence)
        f = pure_oracle_arrays(n - ones, n, 1.0 - ps, 1.0 - qs, confidence)
        count = np.concatenate([f.count, t.count])
        se = np.concatenate([f.std_error, t.std_error])
        lo = np.concatenate([f.ci_low, t.ci_low])
        hi = np.concatenate([f.ci_high, t.ci_high])
        null_se = np.array([math.sqrt(n * qs * (1.0 - qs)), math.sqrt(n * ps * (1.0 - ps))]) / (qs - ps)
    zs = count / null_se
    p_vals = _upper_p(zs)
    detected, cut = detect(p_vals, a, corr, eligible=count > 0)
    thr_z, thr_prop, thr_count = detection_threshold(
        params, n, alpha=a, n_candidates=len(labels), p_cut=cut if corr == "bh" else None
    )
    if detected.any():
        # Conditional on detection (count > thr_z * null SE), as for string RAPPOR; the score interval's
        # standard error at the estimate is the scale.
        lo_sel, hi_sel = selective_interval(
            count[detected], se[detected], thr_z * null_se[detected], float(confidence)
        )
        lo = lo.copy()
        hi = hi.copy()
        lo[detected] = np.maximum(np.minimum(lo_sel, lo[detected]), 0.0)
        hi[detected] = np.maximum(hi_sel, hi[detected])
    prop = count / n
    explained = float(prop.sum())
    return DecodeResult(
        mechanism=params.name,
        method="direct",
        n=n,
        epsilon=params.epsilon,
        epsilon_inf=params.epsilon_inf,
        confidence=float(confidence),
        alpha=a,
        correction=corr,
        labels=labels,
        count=count,
        proportion=prop,
        std_error=se,
        ci_low=lo,
        ci_high=hi,
        z=zs,
        p_value=p_vals,
        selected=np.ones(len(labels), dtype=bool),
        detected=detected,
        allocated_mass=float(prop[detected].sum()),
        explained_mass=explained,
        unexplained_mass=1.0 - explained,
        unexplained_mass_se=0.0,
        threshold_z=thr_z,
        threshold_proportion=thr_prop,
        threshold_count=thr_count,
        selection_lambda=None,
        residuals=None,
        warnings=(),
    )


def decode(
    params: MechanismParams,
    acc: Accumulator,
    *,
    campaign_id: str,
    candidates: Sequence[str] = (),
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode any RAPPOR variant: string RAPPOR with ``candidates`` (:func:`decode_rappor`), basic and
    boolean RAPPOR directly (:func:`decode_direct`; candidates must then be empty).

    Raises:
        InvalidParameterError: not a RAPPOR campaign, string RAPPOR without candidates, candidates for
            basic/boolean RAPPOR, or bad options.
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: the campaign has no reports.
    """
    if isinstance(params, RapporParams):
        if not isinstance(acc, BitCountAccumulator):
            raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
        return decode_rappor(
            params,
            acc,
            campaign_id=campaign_id,
            candidates=candidates,
            confidence=confidence,
            alpha=alpha,
            correction=correction,
            selection_z=selection_z,
        )
    if isinstance(params, BasicRapporParams | BooleanRapporParams):
        if candidates:
            raise InvalidParameterError(
                "candidates",
                f"{len(candidates)} candidates",
                f"none for {params.name} (its domain is declared: every value is decoded)",
            )
        if not isinstance(acc, BitCountAccumulator):
            raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
        return decode_direct(params, acc, confidence=confidence, alpha=alpha, correction=correction)
    raise InvalidParameterError(
        "mechanism", getattr(params, "name", params), "rappor, basic-rappor or boolean-rappor"
    )


# ------------------------------------------------------------------------------------------------- wire

_CORRECTION_TO_PROTO: dict[str, int] = {"bonferroni": 1, "bh": 2}
_CORRECTION_FROM_PROTO: dict[int, Correction] = {0: "bonferroni", 1: "bonferroni", 2: "bh"}


def correction_from_proto(value: int) -> Correction:
    """The correction named by a ``MultipleTesting`` enum value (unset = Bonferroni)."""
    try:
        return _CORRECTION_FROM_PROTO[int(value)]
    except KeyError:
        raise InvalidParameterError(
            "correction", value, "MULTIPLE_TESTING_BONFERRONI (1) or MULTIPLE_TESTING_BENJAMINI_HOCHBERG (2)"
        ) from None


def decode_to_proto(result: DecodeResult, campaign_id: str) -> decode_pb2.DecodeRapporResponse:
    """The ``DecodeRapporResponse`` message of a decode."""
    from ldp_client._proto.ldp.v1 import decode_pb2

    msg = decode_pb2.DecodeRapporResponse(
        campaign_id=campaign_id,
        mechanism=result.mechanism,
        method=result.method,
        n_reports=result.n,
        epsilon=result.epsilon,
        epsilon_inf=result.epsilon_inf,
        confidence=result.confidence,
        alpha=result.alpha,
        correction=_CORRECTION_TO_PROTO[result.correction],  # type: ignore[arg-type]
        allocated_mass=result.allocated_mass,
        explained_mass=result.explained_mass,
        unexplained_mass=result.unexplained_mass,
        unexplained_mass_se=result.unexplained_mass_se,
        threshold_z=result.threshold_z,
        threshold_proportion=result.threshold_proportion,
        threshold_count=result.threshold_count,
        selection_lambda=result.selection_lambda or 0.0,
        warnings=list(result.warnings),
        n_detected=result.n_detected,
        n_selected=result.n_selected,
    )
    if result.residuals is not None:
        r = result.residuals
        msg.residuals.CopyFrom(
            decode_pb2.DecodeResiduals(
                chi2=r.chi2, df=r.df, p_value=r.p_value, max_abs_residual=r.max_abs_residual, rows=r.rows
            )
        )
    # tolist() once per column: a Python loop over candidates (not reports) builds the messages.
    msg.candidates.extend(
        decode_pb2.CandidateDecode(
            label=lab,
            count=c,
            proportion=p,
            std_error=se,
            ci_low=lo,
            ci_high=hi,
            z=z,
            p_value=pv,
            selected=sel,
            detected=det,
        )
        for lab, c, p, se, lo, hi, z, pv, sel, det in zip(
            result.labels,
            result.count.tolist(),
            result.proportion.tolist(),
            result.std_error.tolist(),
            result.ci_low.tolist(),
            result.ci_high.tolist(),
            result.z.tolist(),
            result.p_value.tolist(),
            result.selected.tolist(),
            result.detected.tolist(),
            strict=True,
        )
    )
    return msg


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def decode_response_to_dict(msg: decode_pb2.DecodeRapporResponse) -> dict[str, Any]:
    """A JSON-ready dict of a ``DecodeRapporResponse`` (same shape over gRPC or from a database file)."""
    out: dict[str, Any] = {
        "campaign_id": msg.campaign_id,
        "mechanism": msg.mechanism,
        "method": msg.method,
        "n_reports": msg.n_reports,
        "epsilon": _num(msg.epsilon),
        "epsilon_inf": _num(msg.epsilon_inf),
        "confidence": msg.confidence,
        "alpha": msg.alpha,
        "correction": _CORRECTION_FROM_PROTO.get(msg.correction, "bonferroni"),
        "n_detected": msg.n_detected,
        "n_selected": msg.n_selected,
        "allocated_mass": msg.allocated_mass,
        "explained_mass": msg.explained_mass,
        "unexplained_mass": msg.unexplained_mass,
        "unexplained_mass_se": msg.unexplained_mass_se,
        "threshold": {
            "z": _num(msg.threshold_z),
            "proportion": _num(msg.threshold_proportion),
            "count": _num(msg.threshold_count),
        },
        "selection_lambda": msg.selection_lambda,
        "warnings": list(msg.warnings),
        "candidates": [
            {
                "label": c.label,
                "count": c.count,
                "proportion": c.proportion,
                "std_error": c.std_error,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "z": _num(c.z),
                "p_value": c.p_value,
                "selected": c.selected,
                "detected": c.detected,
            }
            for c in msg.candidates
        ],
    }
    if msg.HasField("residuals"):
        r = msg.residuals
        out["residuals"] = {
            "chi2": r.chi2,
            "df": r.df,
            "p_value": r.p_value,
            "max_abs_residual": r.max_abs_residual,
            "rows": r.rows,
        }
    return out


def decode_campaign(
    info: Any,
    acc: Accumulator,
    *,
    candidates: Sequence[str] = (),
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode a stored campaign (a :class:`ldp_client.wire.CampaignInfo`) from its committed accumulator.

    String RAPPOR uses ``candidates`` or, when empty, the campaign's own; basic and boolean RAPPOR decode
    their declared values.

    Raises:
        InvalidParameterError: not a RAPPOR campaign; string RAPPOR with no candidates anywhere, or
            candidates for basic/boolean RAPPOR; bad options.
        NoReportsError: the campaign has no reports yet.
    """
    params = info.params
    if isinstance(params, RapporParams):
        chosen = tuple(candidates) or tuple(info.candidates)
        if not chosen:
            raise InvalidParameterError(
                "candidates",
                (),
                "at least one candidate string, in the request or the campaign (string RAPPOR is decoded "
                "against a dictionary)",
            )
        candidates = chosen
    elif not isinstance(params, BasicRapporParams | BooleanRapporParams):
        raise InvalidParameterError(
            "mechanism",
            params.name,
            "a rappor, basic-rappor or boolean-rappor campaign (use GetEstimate for the others)",
        )
    return decode(
        params,
        acc,
        campaign_id=info.campaign_id,
        candidates=candidates,
        confidence=confidence,
        alpha=alpha,
        correction=correction,
        selection_z=selection_z,
    )
