"""Means of numeric values (mechanisms of kind MEAN): the mean and sum estimator, with intervals.

The accumulator is the ``moments`` layout (:class:`~ldp_aggregator.moments.MeanAccumulator`: exact integer
sums of codes, re-exported here). A mechanism's spec turns those sums into exact sums of the unbiased
per-report estimates x_hat of each attribute (``spec.moments(params, acc)``, a
:class:`ldp_client.spec.Moments`), and :func:`estimate_moments` is the one estimator of every mechanism of
the kind; :func:`estimate_means` is the same for a campaign's parameters and accumulator.

Estimator. Each user u contributes z_u = (D/k) x_hat_u for an attribute it reported and 0 otherwise (D/k = 1
in one dimension: the design's ``scale``); z_u is unbiased for x_u (Wang et al., ICDE 2019). The mean is
the average of z over the n users; its standard error is

    SE = s_z / sqrt(n),   s_z^2 = (sum z^2 - n mean^2) / (n - 1),

computed from the exact sums with rational arithmetic (then rounded once to float64), and the interval
is mean +/- z_{1 - (1 - confidence)/2} SE. The sum over a population of N is N * mean with standard error
N * SE (N = the number of users unless the request gives the population size).

Why the empirical s_z and not the analytic Var(t) of the mechanism with the estimate plugged in (the two
options of the formulas reference, §8): users are modelled as a sample from a population, and the target
is that population's mean. Then Var(z) = E[Var(z | x)] + Var_x(x) (plus, for multidim, the sampling
of attributes), which s_z^2 estimates without bias for every mechanism and every data distribution. The
plug-in Var(t_hat) misses the spread of the data entirely (for piecewise at eps = 4 and uniform data it is
about a fifth of the true variance, so 95% intervals would cover about 50%), and for duchi and sr it
over-states the per-user variance C^2 - t^2 by using the mean's t^2 instead of the mean of t^2.
``bench/accuracy_numeric.py`` measures both; the empirical one is calibrated (coverage in [93%, 97%]) and
is what is reported. For the finite set of users who reported, s_z/sqrt(n) is conservative (it adds the
data's own spread). :func:`plugin_std_error` gives the analytic alternative for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ldp_aggregator.accumulators import accumulator_for, add_columns, check_matches
from ldp_aggregator.estimation import NoReportsError, normal_quantile
from ldp_aggregator.moments import MEAN_MAGIC, CorruptMeanAccumulatorError, MeanAccumulator
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.spec import Kind, MeanDesign, MechanismSpec, Moments

__all__ = [
    "MEAN_MAGIC",
    "CorruptMeanAccumulatorError",
    "MeanAccumulator",
    "MeanEstimate",
    "MeansEstimate",
    "add_numeric_columns",
    "estimate_means",
    "estimate_moments",
    "mean_accumulator_for",
    "plugin_std_error",
]


def _mean_spec(params: object) -> MechanismSpec[Any]:
    """The spec of a numeric (kind MEAN) mechanism's parameters, or InvalidParameterError."""
    spec = registry.spec_for(params)
    if spec.kind is not Kind.MEAN:
        raise InvalidParameterError("params", spec.name, "the parameters of a numeric (mean) mechanism")
    return spec


def mean_accumulator_for(params: Any) -> MeanAccumulator:
    """The empty accumulator of a numeric campaign (its ``moments`` layout)."""
    _mean_spec(params)
    acc = accumulator_for(params)
    if not isinstance(acc, MeanAccumulator):  # pragma: no cover - the moments layout's class
        raise InvalidReportError("accumulator", type(acc).__name__, "a MeanAccumulator")
    return acc


def add_numeric_columns(acc: MeanAccumulator, params: Any, columns: Any) -> None:
    """Add one batch of numeric columns (``ldp_client.wire``) to ``acc`` in place
    (:func:`ldp_aggregator.accumulators.add_columns`).

    Columns: uint32 codes (n,) for one-dimensional mechanisms; ``(attributes, codes)`` (n, k) for multidim.

    Raises:
        InvalidReportError: the accumulator does not belong to ``params``, or the batch is malformed.
    """
    _mean_spec(params)
    add_columns(acc, params, columns)


# -------------------------------------------------------------------------------------------- estimate


@dataclass(frozen=True, kw_only=True)
class MeanEstimate:
    """The estimated mean (and sum) of one attribute, with standard errors and intervals.

    ``n`` is the number of reports that carried the attribute (all users in one dimension).
    """

    label: str
    mean: float
    std_error: float
    ci_low: float
    ci_high: float
    sum: float
    sum_std_error: float
    sum_ci_low: float
    sum_ci_high: float
    n: int


@dataclass(frozen=True, kw_only=True)
class MeansEstimate:
    """Means of every attribute of a numeric campaign.

    Attributes:
        mechanism: the mechanism name.
        n: users who reported.
        epsilon: per-report epsilon.
        confidence: level of every interval.
        population_size: N used for the sums.
        means: one :class:`MeanEstimate` per attribute ("value" in one dimension, "0".."D-1" for multidim).
    """

    mechanism: str
    n: int
    epsilon: float
    confidence: float
    population_size: int
    means: tuple[MeanEstimate, ...]

    def mean(self, label: str = "value") -> MeanEstimate:
        """The estimate of attribute ``label``; KeyError if there is none."""
        for m in self.means:
            if m.label == label:
                return m
        raise KeyError(label)


def _check_population(population_size: int | None, n: int) -> int:
    if population_size is None or population_size == 0:
        return n
    if isinstance(population_size, bool) or not isinstance(population_size, int | np.integer):
        raise InvalidParameterError("population_size", population_size, f"an integer >= n_reports = {n}")
    if population_size < n:
        raise InvalidParameterError("population_size", population_size, f"an integer >= n_reports = {n}")
    return int(population_size)


def _bound_variance(design: MeanDesign, scale: float, lo: float, hi: float) -> float:
    """An upper bound on Var(z) for one user (used only when n < 2: no sample variance exists)."""
    span = hi - lo
    if scale == 1.0:
        return span * span * (design.max_variance_s() + 0.25)
    return scale * (span * span * design.max_variance_s() + max(lo * lo, hi * hi))


def _as_float(q: Fraction) -> float:
    """The nearest float, or +/-inf when ``q`` lies beyond the float range.

    Only at the extremes of the legal parameters (a range near +/-1.8e308, where the unbiased estimate or
    its variance exceeds what a float can hold): the exact rational is right, and no float is; an infinite
    value says so (JSON writes it "inf") instead of failing the whole estimate.
    """
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def estimate_moments(
    moments: Moments,
    *,
    mechanism: str,
    epsilon: float,
    confidence: float = 0.95,
    population_size: int | None = None,
) -> MeansEstimate:
    """Mean (and sum) of every attribute from a mechanism's exact :class:`~ldp_client.spec.Moments`, with
    standard errors and intervals (module docstring): the estimator of every mechanism of kind MEAN.

    Raises:
        InvalidParameterError: bad confidence or population size (N < n).
        NoReportsError: no users reported.
    """
    return _estimate(
        moments,
        normal_quantile(confidence),
        mechanism=mechanism,
        epsilon=epsilon,
        confidence=confidence,
        population_size=population_size,
    )


def _estimate(
    moments: Moments,
    z: float,
    *,
    mechanism: str,
    epsilon: float,
    confidence: float,
    population_size: int | None,
) -> MeansEstimate:
    """:func:`estimate_moments` with the interval's quantile ``z`` already computed."""
    n = moments.n
    if n == 0:
        raise NoReportsError(0)
    big_n = _check_population(population_size, n)
    design = moments.design
    scale = design.scale
    out = []
    for a, (lo_f, hi_f) in enumerate(design.ranges):
        # z = scale * x_hat for a reported attribute, 0 otherwise.
        sum_z = scale * moments.sum_x[a]
        sum_z2 = scale * scale * moments.sum_x2[a]
        mean_q = sum_z / n
        if n >= 2:
            var_z = max(Fraction(0), (sum_z2 - n * mean_q * mean_q) / (n - 1))
            se = math.sqrt(_as_float(var_z / n))
        else:
            se = math.sqrt(_bound_variance(design, float(scale), lo_f, hi_f))
        mean = _as_float(mean_q)
        half = z * se
        out.append(
            MeanEstimate(
                label=design.labels[a],
                mean=mean,
                std_error=se,
                ci_low=mean - half,
                ci_high=mean + half,
                sum=_as_float(mean_q * big_n),
                sum_std_error=se * big_n,
                sum_ci_low=(mean - half) * big_n,
                sum_ci_high=(mean + half) * big_n,
                n=moments.reports[a],
            )
        )
    return MeansEstimate(
        mechanism=mechanism,
        n=n,
        epsilon=epsilon,
        confidence=float(confidence),
        population_size=big_n,
        means=tuple(out),
    )


def estimate_means(
    params: Any,
    acc: MeanAccumulator,
    *,
    confidence: float = 0.95,
    population_size: int | None = None,
) -> MeansEstimate:
    """Mean (and sum) of every attribute of a numeric campaign: :func:`estimate_moments` of its spec's
    ``moments`` of the accumulator.

    Args:
        params: the campaign's numeric parameters.
        acc: its accumulator.
        confidence: two-sided level of the intervals.
        population_size: N for the sums (default: the number of users n).

    Raises:
        InvalidParameterError: not a numeric mechanism, bad confidence or population size (N < n).
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: the accumulator is empty.
    """
    z = normal_quantile(confidence)  # the request is checked before the data
    spec = _mean_spec(params)
    check_matches(acc, params)
    return _estimate(
        spec.moments(params, acc),
        z,
        mechanism=params.name,
        epsilon=params.epsilon,
        confidence=confidence,
        population_size=population_size,
    )


def plugin_std_error(params: Any, estimate: MeansEstimate) -> tuple[float, ...]:
    """The analytic alternative, per attribute: sqrt(Var_mech(t_hat) / n) with the estimated mean plugged
    into the mechanism's Var(t) (for multidim, (D/k)(Var_1D + t^2) - t^2). Shown for comparison only: it
    ignores the spread of the data (module docstring), so it is not what :func:`estimate_means` reports."""
    design = _mean_spec(params).mean_design(params)
    scale = float(design.scale)
    out = []
    for m, (lo, hi) in zip(estimate.means, design.ranges, strict=True):
        span = hi - lo
        s = min(1.0, max(0.0, (m.mean - lo) / span))
        var_x = span * span * float(design.variance_s(s))
        var_z = scale * (var_x + m.mean * m.mean) - m.mean * m.mean
        out.append(math.sqrt(max(var_z, 0.0) / estimate.n))
    return tuple(out)
