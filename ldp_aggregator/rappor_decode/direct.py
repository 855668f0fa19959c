"""Basic and boolean RAPPOR: every declared value's bit debiased directly, no regression."""

from __future__ import annotations

import math

import numpy as np

from ldp_aggregator.accumulators import BitCountAccumulator, check_matches
from ldp_aggregator.estimators import NoReportsError, normal_quantile, pure_oracle_arrays
from ldp_aggregator.rappor_decode.detection import detect, detection_threshold, selective_interval, upper_p
from ldp_aggregator.rappor_decode.results import Correction, DecodeResult, check_alpha, check_correction
from ldp_client.errors import InvalidParameterError
from ldp_client.params import BasicRapporParams, BooleanRapporParams

__all__ = ["decode_direct"]


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
    support rates p* = ``prob_one_if_set`` and q* = ``prob_one_if_clear``
    (:func:`ldp_aggregator.estimators.pure_oracle_arrays`: unbiased counts, exact variance, score
    intervals). Detection tests count > 0 with the null standard error sqrt(n c (1 - c)) / (s - c), s and c
    the set and clear rates (the value's bit is then pure noise), one-sided, corrected over the d values.

    Raises:
        InvalidParameterError: params of another mechanism, bad options.
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: no reports.
    """
    if not isinstance(params, BasicRapporParams | BooleanRapporParams):
        raise InvalidParameterError(
            "params", getattr(params, "name", params), "BasicRapporParams or BooleanRapporParams"
        )
    a = check_alpha(alpha)
    corr = check_correction(correction)
    normal_quantile(confidence)  # issue 13: options before data (the same answer with or without reports)
    check_matches(acc, params)  # a BitCountAccumulator of the parameters' shape
    n = acc.n
    if n == 0:
        raise NoReportsError(0)
    ones = acc.ones[0].astype(np.float64)
    qs, ps = params.prob_one_if_set, params.prob_one_if_clear
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
    p_vals = upper_p(zs)
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
