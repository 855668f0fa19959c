"""One simulation: :func:`simulate` prepares the configuration, runs the chosen runner for every repeat and
gathers the results."""

from __future__ import annotations

import time
from statistics import NormalDist
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from simulations.marginals import marginal_metrics
from simulations.metrics import compute_metrics
from simulations.ranges import range_metrics, range_queries
from simulations.runners.config import ProgressFn, SimulationConfig, _decodes_candidates
from simulations.runners.grpc_runner import _run_grpc
from simulations.runners.local import _run_report, _run_sum
from simulations.runners.prepare import PreparedSimulation, prepare
from simulations.runners.results import SimulationResult, _Outcome

# ------------------------------------------------------------------------------------------- simulate


def _detection_z(alpha: float, m: int) -> float:
    """One-sided Bonferroni threshold: P(Z > z) = alpha / M."""
    return NormalDist().inv_cdf(1.0 - alpha / m)


def simulate(config: SimulationConfig, *, progress: ProgressFn | None = None) -> SimulationResult:
    """Run ``config.repeats`` independent simulations and compare the estimates with the truth.

    Args:
        config: what to simulate (validated); see :class:`SimulationConfig`.
        progress: called with the number of users just completed (for progress bars).

    Raises:
        InvalidParameterError: a bad specification (see :func:`prepare`).
        SimulationError: the gRPC runner could not complete (aggregator unreachable, batch refused, ...).
    """
    t0 = time.perf_counter()
    prep = prepare(config)
    seeds = np.random.SeedSequence(config.seed).spawn(config.repeats)
    runner = {"sum": _run_sum, "report": _run_report, "grpc": _run_grpc}[config.mode]
    outcomes = runner(prep, seeds, progress)
    return _gather(prep, outcomes, time.perf_counter() - t0)


def _gather(prep: PreparedSimulation, outcomes: list[_Outcome], elapsed_s: float) -> SimulationResult:
    """The repeats' outcomes stacked, compared with the truth (metrics) and returned as the result."""
    config = prep.config
    truth = np.stack([o.truth for o in outcomes])
    est = np.stack([o.count for o in outcomes])
    se = np.stack([o.std_error for o in outcomes])
    lo = np.stack([o.ci_low for o in outcomes])
    hi = np.stack([o.ci_high for o in outcomes])
    n_reports = np.array([o.n_reports for o in outcomes], dtype=np.int64)
    detected = None
    z = None
    if _decodes_candidates(prep.params):
        z = _detection_z(config.detection_alpha, len(prep.items))
        detected = (se > 0) & (est > z * se)
        if all(o.detected is not None for o in outcomes):  # the full decoder's own test (issue 5)
            detected = np.stack([cast(NDArray[np.bool_], o.detected) for o in outcomes])
    metrics = compute_metrics(
        truth,
        est,
        variance=se**2,
        ci_low=lo,
        ci_high=hi,
        detected=detected,
        n_users=n_reports,
    )
    return SimulationResult(
        config=config,
        params=prep.params,
        labels=prep.items,
        domain_size=prep.domain_size,
        truth=truth,
        estimates=est,
        std_errors=se,
        ci_low=lo,
        ci_high=hi,
        n_reports=n_reports,
        detected=detected,
        detection_z=z,
        metrics=metrics,
        elapsed_s=elapsed_s,
        range_metrics=_range_metrics(prep, outcomes, truth),
        marginal_metrics=(
            marginal_metrics(prep.params, truth, est, se, lo, hi, config.n_users)
            if prep.value_items
            else None
        ),
    )


def _range_metrics(prep: PreparedSimulation, outcomes: list[_Outcome], truth: Any) -> dict[str, Any] | None:
    """Issue 18: the range answers of every repeat against the truth, or None (no ranges)."""
    rows = [o.ranges for o in outcomes]
    if any(r is None for r in rows):
        return None
    queries = range_queries(len(prep.items), prep.config.seed)
    return range_metrics(queries, truth, np.stack(cast(list[Any], rows)), prep.config.n_users)
