"""Detection: multiple-testing decisions, the detection threshold, and intervals valid given detection.

A candidate is detected when its estimate is positive and its one-sided p-value passes Bonferroni
(family-wise error <= alpha) or Benjamini-Hochberg (false discovery rate <= alpha) over all M candidates
(:func:`detect`). :func:`detection_threshold` is the smallest proportion an isolated candidate needs to be
detected, and :func:`selective_interval` the interval of a reported candidate that stays valid although
only estimates above the threshold are reported (the package docstring has the formulas).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ldp_aggregator.estimators import NoReportsError
from ldp_aggregator.rappor_decode.results import Correction, check_alpha, check_correction
from ldp_client.params import BasicRapporParams, BooleanRapporParams, RapporParams

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["detect", "detection_threshold", "selective_interval", "upper_p"]


def upper_p(z: NDArray[np.float64]) -> NDArray[np.float64]:
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
    a = check_alpha(alpha)
    corr = check_correction(correction)
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

    a = check_alpha(alpha)
    if n <= 0:
        raise NoReportsError(n)
    cut = a / n_candidates if p_cut is None else p_cut
    z = float(-special.ndtri(cut))
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
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
