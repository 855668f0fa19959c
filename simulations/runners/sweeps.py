"""Sweeps over one parameter, and the number of users a target error needs (:func:`required_users`,
:func:`sweep`)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from simulations.oracle_sampling import has_sum_sampler
from simulations.runners.config import (
    _MAX_USERS,
    _PER_REPORT_PILOT_USERS,
    ERROR_METRICS,
    PILOT_USERS,
    ErrorMetric,
    ProgressFn,
    SimulationConfig,
    SimulationError,
    _check_int,
)
from simulations.runners.prepare import prepare
from simulations.runners.results import SimulationResult
from simulations.runners.run import simulate

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------------------------------------- sweeps


@dataclass(frozen=True, kw_only=True, eq=False)
class SweepPoint:
    """One point of a sweep.

    Attributes:
        value: the swept value (converted: float epsilon, int users/domain, or the parameter's text).
        result: the simulation at this point (with a target error: the verification run at
            ``required_users``).
        pilot: with a target error, the pilot run the required N was solved from (sum runner).
        required_users: with a target error, the N solved for.
        predicted_error: with a target error, the error the pilot predicts at ``required_users``.
    """

    value: float | int | str
    result: SimulationResult
    pilot: SimulationResult | None = None
    required_users: int | None = None
    predicted_error: float | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class SweepResult:
    """A sweep over one axis; with ``target_error``, the users needed at each point."""

    base: SimulationConfig
    over: str
    points: tuple[SweepPoint, ...]
    target_error: float | None = None
    error_metric: ErrorMetric = "max-se"
    elapsed_s: float = 0.0
    values: tuple[float | int | str, ...] = field(default=())


def required_users(pilot: SimulationResult, target_error: float, metric: ErrorMetric) -> tuple[int, float]:
    """Users needed for a frequency-scale error of ``target_error``, from a pilot run; and the prediction.

    Every estimator here has variance exactly proportional to 1/N on the frequency scale at a fixed
    population distribution: Var[f_hat] = (q*(1-q*)/(p*-q*)^2 + f (1-p*-q*)/(p*-q*)) / N for the pure
    oracles (Wang et al., USENIX Security 2017, §4), and the WLS covariance of string RAPPOR scales with
    the bit variances, each N_j r(1-r) with N_j proportional to N. So an error e0 = ``metric`` predicted
    by the estimator's own variances at N0 (the pilot) becomes e0 sqrt(N0/N) at N, and

        N = ceil(N0 (e0 / target)^2).

    Returns:
        (N, predicted error at N).
    """
    if (
        isinstance(target_error, bool)
        or not isinstance(target_error, int | float)
        or not (math.isfinite(target_error) and target_error > 0)
    ):
        raise InvalidParameterError("target_error", target_error, "a finite number > 0 (frequency scale)")
    if metric not in ERROR_METRICS:
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")
    n0 = pilot.config.n_users
    e0 = pilot.predicted_error(metric)
    if not (math.isfinite(e0) and e0 > 0):
        raise SimulationError(f"the pilot run predicts an error of {e0!r}; cannot scale it")
    n = max(1, math.ceil(n0 * (e0 / float(target_error)) ** 2))
    if n > _MAX_USERS:
        raise InvalidParameterError(
            "target_error", target_error, f"an error reachable with at most 2^53 users (needs about {n:.3g})"
        )
    return n, e0 * math.sqrt(n0 / n)


def _sweep_axes(mechanism: str) -> tuple[str, ...]:
    spec = registry.find_named(mechanism)  # None for auto (issue 6): no mechanism fields to sweep
    names = (
        [f.name for f in fields(spec.params_type) if f.init and f.name not in ("domain", "inner")]
        if spec is not None
        else []
    )
    return ("epsilon", "users", "domain", *names)


def _convert_value(over: str, raw: float | int | str) -> float | int | str:
    if over == "epsilon":
        try:
            v = float(raw)
        except ValueError:
            raise InvalidParameterError("values", raw, "numbers for --over epsilon") from None
        return v
    if over in ("users", "domain"):
        try:
            f = float(raw)
        except ValueError:
            raise InvalidParameterError("values", raw, f"integers for --over {over}") from None
        if not (math.isfinite(f) and f == int(f)):
            raise InvalidParameterError("values", raw, f"integers for --over {over} (e.g. 1000 or 1e6)")
        return int(f)
    return raw


def _config_at(base: SimulationConfig, over: str, value: float | int | str) -> SimulationConfig:
    if over == "epsilon":
        return base.with_changes(epsilon=value)
    if over == "users":
        return base.with_changes(n_users=value)
    if over == "domain":
        return base.with_changes(domain=value)
    merged = base.param_fields
    merged[over] = value
    return base.with_changes(params=merged)


def sweep(
    config: SimulationConfig,
    *,
    over: str | None = None,
    values: Sequence[float | int | str] = (),
    target_error: float | None = None,
    error_metric: ErrorMetric = "max-se",
    pilot_users: int = PILOT_USERS,
    progress: ProgressFn | None = None,
) -> SweepResult:
    """Simulate at several values of one axis, and/or solve for the users a target error needs.

    Args:
        config: the base configuration (with a target error its ``n_users`` is ignored: N is solved for).
        over: ``epsilon``, ``users``, ``domain``, or a field of the mechanism's parameters (``k``, ``f``,
            ``truth_probability``, ...); None for a single point.
        values: the values of ``over`` (strings are converted: numbers for epsilon, integers such as
            ``1e6`` for users and domain, parameter fields by :func:`~ldp_client.params.make_params`).
        target_error: if set, at every point: a pilot run with the *sum* runner at ``pilot_users`` gives
            the estimator's predicted error, :func:`required_users` solves for N, and a verification run
            at that N (in ``config.mode``) measures the error reached.
        error_metric: ``max-se`` (largest standard error of an item's frequency, from the estimator) or
            ``rmse`` (root mean squared error of the frequencies; predicted from the estimator's variances,
            measured against the truth in the verification).
        pilot_users: users of the pilot run (the sum runner costs the same at any N, and a large pilot
            makes the estimator's plug-in variance that of the true frequencies).
        progress: called with users completed.

    Raises:
        InvalidParameterError: field ``over``, ``values``, ``target_error`` or ``error_metric``, or any
            field of :func:`prepare` at some point of the sweep.
    """
    t0 = time.perf_counter()
    _check_int("pilot_users", pilot_users, 1, _MAX_USERS)
    if error_metric not in ERROR_METRICS:
        raise InvalidParameterError("error_metric", error_metric, f"one of {', '.join(ERROR_METRICS)}")
    if target_error is not None and (
        isinstance(target_error, bool)
        or not isinstance(target_error, int | float)
        or not (math.isfinite(target_error) and target_error > 0)
    ):
        raise InvalidParameterError("target_error", target_error, "a finite number > 0 (frequency scale)")
    if over is None:
        if values:
            raise InvalidParameterError("over", None, "the axis the values are for (--over)")
        converted: list[float | int | str] = []
    else:
        axes = _sweep_axes(config.mechanism)
        if over not in axes:
            raise InvalidParameterError("over", over, f"one of {', '.join(axes)}")
        if over == "users" and target_error is not None:
            raise InvalidParameterError(
                "over", over, "another axis with --target-error (the target solves for the users)"
            )
        if not values:
            raise InvalidParameterError("values", list(values), f"at least one value of {over}")
        converted = [_convert_value(over, v) for v in values]
    if over is None and target_error is None:
        raise InvalidParameterError(
            "over", None, "an axis (--over with --values), or --target-error, or both"
        )
    points: list[SweepPoint] = []
    configs = [(v, _config_at(config, over, v)) for v in converted] if over else [("", config)]
    for value, cfg in configs:
        if target_error is None:
            points.append(SweepPoint(value=value, result=simulate(cfg, progress=progress)))
            continue
        pilot_n = pilot_users
        if not has_sum_sampler(prepare(cfg).params):
            # Without an exact sum sampler the pilot encodes every report: keep it affordable.
            pilot_n = min(pilot_users, _PER_REPORT_PILOT_USERS)
        pilot = simulate(cfg.with_changes(mode="sum", n_users=pilot_n), progress=None)
        n_req, predicted = required_users(pilot, target_error, error_metric)
        verified = simulate(cfg.with_changes(n_users=n_req), progress=progress)
        points.append(
            SweepPoint(
                value=value, result=verified, pilot=pilot, required_users=n_req, predicted_error=predicted
            )
        )
    return SweepResult(
        base=config,
        over=over or "",
        points=tuple(points),
        target_error=None if target_error is None else float(target_error),
        error_metric=error_metric,
        elapsed_s=time.perf_counter() - t0,
        values=tuple(converted),
    )
