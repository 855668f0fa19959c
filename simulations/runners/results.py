"""What a simulation returns (:class:`SimulationResult`: estimates, metrics, frequency-scale errors) and how
a runner's accumulator becomes one repeat's outcome (:func:`_estimate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import (
    Accumulator,
    BitCountAccumulator,
)
from ldp_aggregator.estimators import estimate_frequencies
from ldp_aggregator.rappor_estimates import estimate_rappor_candidates
from ldp_client.errors import InvalidParameterError
from ldp_client.params import MechanismParams
from simulations.marginals import marginal_rows, takes_marginals
from simulations.metrics import Metrics
from simulations.ranges import range_queries, range_rows, takes_ranges
from simulations.runners.config import (
    ERROR_METRICS,
    ErrorMetric,
    SimulationConfig,
    SimulationError,
    _decodes_candidates,
    _estimates_candidates,
)
from simulations.runners.prepare import PreparedSimulation

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True, eq=False)
class SimulationResult:
    """R repeats of M items, on the count scale, with the metrics against the truth.

    Attributes:
        config: what was simulated.
        params: the mechanism's parameters (``params.epsilon`` is the per-report epsilon).
        labels: the M item labels (population values, or RAPPOR candidates).
        domain_size: D, the number of population values.
        truth: (R, M) true counts.
        estimates, std_errors, ci_low, ci_high: (R, M) the estimator's output.
        n_reports: (R,) reports counted per repeat (= n_users).
        detected: (R, M) RAPPOR detections (module docstring), None for the other mechanisms.
        detection_z: the one-sided z threshold of the detection test, None without detection.
        metrics: :func:`simulations.metrics.compute_metrics`; ``mse_over_variance`` divides by the mean
            of the estimator's own variance (std_error^2), so it is about 1 when the reported standard
            errors are right.
        elapsed_s: wall-clock seconds of the whole run.
    """

    config: SimulationConfig
    params: MechanismParams
    labels: tuple[str, ...]
    domain_size: int
    truth: NDArray[np.int64]
    estimates: NDArray[np.float64]
    std_errors: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    n_reports: NDArray[np.int64]
    detected: NDArray[np.bool_] | None
    detection_z: float | None
    metrics: Metrics
    elapsed_s: float
    marginal_metrics: dict[str, Any] | None = None
    """Marginal mechanisms (issue 18): :func:`simulations.marginals.marginal_metrics` per chosen marginal."""
    range_metrics: dict[str, Any] | None = None
    """Range mechanisms (issue 18): :func:`simulations.ranges.range_metrics` of the run's ranges."""

    @property
    def epsilon(self) -> float:
        """Per-report epsilon of the parameters actually used."""
        return float(self.params.epsilon)

    @property
    def epsilon_inf(self) -> float:
        """Longitudinal bound (RAPPOR variants), +inf for rr and grr."""
        from ldp_client.wire import epsilon_inf

        return float(epsilon_inf(self.params))

    @property
    def interval_warning(self) -> str | None:
        """One line when the intervals' normal approximation is poor at this n (issue 13), else None."""
        from simulations.metrics import interval_warning

        return interval_warning(self.params, self.config.n_users)

    @property
    def rmse_frequency(self) -> float:
        """Observed root mean squared error of the frequencies: sqrt(MSE) / N."""
        return math.sqrt(self.metrics.mse) / self.config.n_users

    @property
    def predicted_rmse_frequency(self) -> float:
        """RMSE of the frequencies of an unbiased estimator with the reported variances: sqrt(mean SE^2)/N."""
        return math.sqrt(float(np.mean(self.std_errors**2))) / self.config.n_users

    @property
    def max_std_error_frequency(self) -> float:
        """Largest standard error of an item's frequency: max over items of sqrt(mean_r SE^2) / N."""
        per_item = np.sqrt(np.mean(self.std_errors**2, axis=0))
        return float(np.max(per_item)) / self.config.n_users

    def error(self, metric: ErrorMetric) -> float:
        """The frequency-scale error ``metric``: ``max-se`` (estimator's) or ``rmse`` (observed)."""
        if metric == "max-se":
            return self.max_std_error_frequency
        if metric == "rmse":
            return self.rmse_frequency
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")

    def predicted_error(self, metric: ErrorMetric) -> float:
        """The estimator's own prediction of ``metric`` (from its reported variances, no truth used)."""
        if metric == "max-se":
            return self.max_std_error_frequency
        if metric == "rmse":
            return self.predicted_rmse_frequency
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")


@dataclass(frozen=True, kw_only=True, eq=False)
class _Outcome:
    """One repeat: true item counts, the estimate's arrays, and the number of reports."""

    truth: NDArray[np.int64]
    count: NDArray[np.float64]
    std_error: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    n_reports: int
    # String RAPPOR with a --candidates dictionary (issue 5): the full decoder's detections.
    detected: NDArray[np.bool_] | None = None
    # Range mechanisms (issue 18): (k, 4) count, std_error, ci_low, ci_high of the run's ranges.
    ranges: NDArray[np.float64] | None = None


def _estimate(prep: PreparedSimulation, acc: Accumulator, truth: NDArray[np.int64]) -> _Outcome:
    """The aggregator's estimator on ``acc`` (the same functions the Analyst service calls)."""
    params = prep.params
    conf = prep.config.confidence
    if _decodes_candidates(params):
        if not isinstance(acc, BitCountAccumulator):  # accumulator_for(params) made it; narrows the type
            raise SimulationError(f"internal: {type(acc).__name__} for {params.name}")
        if prep.config.candidates is not None:
            # A candidate dictionary (issue 5): the full decoder (LASSO selection, constrained refit,
            # calibrated intervals, detection), as Analyst.DecodeRappor answers. Without one the items are
            # the population's own values and the unbiased WLS below is the estimator being simulated.
            from ldp_aggregator.rappor_decode import decode_rappor

            dec = decode_rappor(
                params,  # type: ignore[arg-type]
                acc,
                campaign_id=prep.config.campaign_id,
                candidates=prep.items,
                confidence=conf,
                alpha=prep.config.detection_alpha,
            )
            return _Outcome(
                truth=truth,
                count=dec.count,
                std_error=dec.std_error,
                ci_low=dec.ci_low,
                ci_high=dec.ci_high,
                n_reports=dec.n,
                detected=dec.detected,
            )
        est = estimate_rappor_candidates(
            params,  # type: ignore[arg-type]
            acc,
            campaign_id=prep.config.campaign_id,
            candidates=prep.items,
            confidence=conf,
        )
    elif takes_marginals(params):  # issue 18: the items are the chosen marginals' cells (consistent)
        rows = marginal_rows(params, acc, conf)
        return _Outcome(
            truth=truth,
            count=rows[:, 0],
            std_error=rows[:, 1],
            ci_low=rows[:, 2],
            ci_high=rows[:, 3],
            n_reports=int(acc.n),
        )
    else:
        # A mechanism that estimates candidate strings estimates the items: the population's labels, or
        # the --candidates dictionary.
        cands = prep.items if _estimates_candidates(params) else ()
        est = estimate_frequencies(
            params, acc, confidence=conf, candidates=cands, campaign_id=prep.config.campaign_id
        )
    items = est.items
    ranges = None
    if takes_ranges(params):  # issue 18: the run's ranges, by the Analyst's range estimator
        ranges = range_rows(params, acc, range_queries(len(prep.items), prep.config.seed), conf)
    return _Outcome(
        truth=truth,
        count=np.fromiter((it.count for it in items), dtype=np.float64, count=len(items)),
        std_error=np.fromiter((it.std_error for it in items), dtype=np.float64, count=len(items)),
        ci_low=np.fromiter((it.ci_low for it in items), dtype=np.float64, count=len(items)),
        ci_high=np.fromiter((it.ci_high for it in items), dtype=np.float64, count=len(items)),
        n_reports=est.n,
        ranges=ranges,
    )
