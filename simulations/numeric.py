"""Simulations of the numeric (mean) mechanisms: populations of real values through the real encoders,
accumulator and estimator, with error, MSE/variance and interval coverage against the truth.

For simulation only: every draw comes from ``numpy.random.Generator`` objects seeded from
``SimulationConfig.seed`` (one child :class:`numpy.random.SeedSequence` per repeat).

What runs (``ldp-sim run --mechanism piecewise --population normal:0,0.5 --epsilon 1 --users 100000``):
each repeat draws the users' values chunk by chunk from a numeric population
(:func:`simulations.populations.parse_numeric_population`: ``normal:MU,SIGMA[,LO,HI]`` truncated, or
``uniform-num:LO,HI``), encodes them with the mechanism's batch encoder (``spec.encode_values`` of its
spec in :mod:`ldp_client.registry`, kind MEAN), adds each chunk of codes to a
:class:`~ldp_aggregator.means.MeanAccumulator` with ``add_columns`` exactly as the server ingests a batch,
and reads :func:`~ldp_aggregator.means.estimate_means`. For a mechanism that takes a domain (``multidim``)
every one of the D = ``--domain`` attributes (default 2) is drawn independently from the same population.
Ranges, labels, the D/k scale and the mechanism's variance come from the spec's ``mean_design``.

Modes: ``report`` is the above. ``sum`` runs the same per-report path: no exact sampler of the numeric
sufficient statistics (sums of codes and of squared codes over a population) is simple for piecewise,
hybrid and laplace, so rather than an approximation the sum mode encodes every user (its cost grows
with N, about 0.1 s per million users). ``grpc`` sends the same columns as batches to an aggregator (an
in-process one on a temporary SQLite file, or ``--server``) over ``Collector.Submit`` and reads the
means from ``Analyst.GetEstimate``: for a seed it gives the estimates of ``report`` (same draws, same
sufficient statistics) when ``--batch-size`` equals ``--chunk-size``, the users per draw of each mode.

Parameters: ``--epsilon``, or the mechanism's own fields as :func:`ldp_client.params.make_params` takes
them without it (``low_probability``, ``decay``, ...; a range alone is not enough); the range is the
population's [LO, HI] unless ``--param lo=`` and ``--param hi=`` (or, for multidim, ``--param
ranges=lo:hi,...``) say otherwise; other fields as make_params takes them (``grid``, ``cells``,
``out_of_range``, ``base``, ``k``).

Truth and metrics. The target of the estimator is the mean of the population the users are drawn from,
known exactly (:attr:`~simulations.populations.NumericPopulation.mean`); the interval's coverage is
measured against it. (If the declared range is narrower than the population's, values are clamped and
the clamping bias shows up as error.) ``theory_variance`` is the variance the estimator has in theory,
Var(z)/n with Var(z) = (D/k)(E[Var(x_hat | x)] + E[x^2]) - mu^2 (D/k = 1 in one dimension), where
E[Var(x_hat | x)] averages the mechanism's exact per-value variance (``params.variance_s``) over the
simulated users; ``mse_over_theory`` and ``mse_over_variance`` (the estimator's own SE^2) are about 1
when the estimator is unbiased and its variance right.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.means import MeanAccumulator, estimate_means
from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.params import MechanismParams, make_params
from ldp_client.spec import Kind
from simulations.populations import NumericPopulation, parse_numeric_population

if TYPE_CHECKING:
    from simulations.runners import AggregatorSession

__all__ = [
    "NUMERIC_FORMAT",
    "NumericMetrics",
    "NumericSimulationResult",
    "is_numeric_mechanism",
    "numeric_tables",
    "numeric_to_dict",
    "plot_numeric",
    "prepare_numeric",
    "simulate_numeric",
]

NUMERIC_FORMAT = "ldp-sim.numeric-run.v1"
ProgressFn = Callable[[int], None]


def is_numeric_mechanism(name: str) -> bool:
    """True for the mechanisms of kind MEAN (:mod:`ldp_client.registry`): laplace, duchi, piecewise,
    hybrid, sr and multidim."""
    spec = registry.find_named(name)
    return spec is not None and spec.kind is Kind.MEAN


def _mean_names() -> str:
    return ", ".join(s.name for s in registry.SPECS if s.kind is Kind.MEAN)


@dataclass(frozen=True, kw_only=True)
class NumericMetrics:
    """Summary over R repeats and A attributes (means over every (repeat, attribute) pair).

    Attributes:
        n_repeats, n_attributes: R and A.
        mean_error: mean of (estimate - truth): the empirical bias.
        mse: mean of (estimate - truth)^2.
        mean_variance: mean of the estimator's own variance SE^2.
        theory_variance: mean of the theoretical variance (module docstring).
        mse_over_variance: mse / mean_variance.
        mse_over_theory: mse / theory_variance.
        coverage: fraction of intervals containing the truth.
        max_abs_error: mean over repeats of the largest |estimate - truth| over attributes.
    """

    n_repeats: int
    n_attributes: int
    mean_error: float
    mse: float
    mean_variance: float
    theory_variance: float
    mse_over_variance: float
    mse_over_theory: float
    coverage: float
    max_abs_error: float

    def to_dict(self) -> dict[str, float | int]:
        return dict(asdict(self))


@dataclass(frozen=True, kw_only=True, eq=False)
class NumericSimulationResult:
    """R repeats of A attribute means. Arrays have shape (R, A); ``truth`` (A,).

    Attributes:
        config: what was simulated (a :class:`simulations.runners.SimulationConfig`).
        params: the mechanism's parameters.
        population: the parsed population.
        labels: attribute labels ("value", or "0".."D-1").
        truth: the population mean of each attribute.
        sample_means: (R, A) the mean of the values the users actually held.
        estimates, std_errors, ci_low, ci_high: the estimator's output.
        sums, sum_std_errors: N * mean and its standard error (N = users).
        theory_variance: (R, A) the theoretical variance of the estimate (module docstring).
        n_reports: (R, A) reports that carried each attribute.
        metrics: :class:`NumericMetrics`.
        elapsed_s: wall-clock seconds.
    """

    config: Any
    params: MechanismParams
    population: NumericPopulation
    labels: tuple[str, ...]
    truth: NDArray[np.float64]
    sample_means: NDArray[np.float64]
    estimates: NDArray[np.float64]
    std_errors: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    sums: NDArray[np.float64]
    sum_std_errors: NDArray[np.float64]
    theory_variance: NDArray[np.float64]
    n_reports: NDArray[np.int64]
    metrics: NumericMetrics
    elapsed_s: float

    @property
    def epsilon(self) -> float:
        return float(self.params.epsilon)

    @property
    def delta(self) -> float:
        """The delta of the (epsilon, delta) guarantee: 0 for a pure epsilon-LDP mechanism."""
        return float(registry.spec_for(self.params).delta(self.params))


# ------------------------------------------------------------------------------------------ prepare


# Fields that only place the values (ranges and the out-of-range policy): without epsilon, a run needs more.
_RANGE_FIELDS = frozenset({"lo", "hi", "ranges", "out_of_range"})


def _build_params(config: Any, population: NumericPopulation) -> MechanismParams:
    fields = dict(config.param_fields)
    if config.epsilon is None and not set(fields) - _RANGE_FIELDS:
        raise InvalidParameterError("epsilon", None, f"an epsilon > 0 for {config.mechanism}")
    spec = registry.spec_named(config.mechanism)
    domain: int | None = None
    if spec.takes_domain:  # multidim: the number of attributes D, with lo/hi (or ranges instead)
        if "ranges" not in fields:
            fields.setdefault("lo", population.lo)
            fields.setdefault("hi", population.hi)
            domain = 2 if config.domain is None else int(config.domain)
    else:
        if config.domain is not None:
            raise InvalidParameterError(
                "domain",
                config.domain,
                f"nothing for {config.mechanism} (--domain is multidim's attributes D)",
            )
        if spec.takes_range:
            fields.setdefault("lo", population.lo)
            fields.setdefault("hi", population.hi)
    try:
        params = make_params(config.mechanism, epsilon=config.epsilon, domain=domain, fields=fields)
    except InvalidParameterError as exc:
        if exc.field in ("epsilon", "mechanism", "domain"):
            raise
        name = exc.field.removeprefix("param ")
        raise InvalidParameterError("params", f"{name}={exc.value}", exc.allowed) from exc
    return params


def prepare_numeric(config: Any) -> tuple[NumericPopulation, MechanismParams]:
    """The population and the parameters of a numeric simulation.

    Raises:
        InvalidParameterError: ``population`` (not numeric), ``epsilon`` (missing), ``domain`` (given for a
            one-dimensional mechanism), ``mode`` (unknown), ``params`` (a bad field).
    """
    if not is_numeric_mechanism(config.mechanism):
        raise InvalidParameterError("mechanism", config.mechanism, _mean_names())
    if config.mode not in ("sum", "report", "grpc"):
        raise InvalidParameterError("mode", config.mode, "sum, report or grpc")
    population = parse_numeric_population(config.population)
    return population, _build_params(config, population)


# ------------------------------------------------------------------------------------------ simulate


def _repeat(
    config: Any,
    population: NumericPopulation,
    params: MechanismParams,
    rng: np.random.Generator,
    progress: ProgressFn | None,
    sink: Callable[[Any], None],
    chunk_users: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One repeat: draw and encode the users chunk by chunk, hand each chunk's report columns to ``sink``.

    Returns (per-attribute sample mean, per-attribute mean of Var(x_hat | x)).
    """
    spec = registry.spec_for(params)
    design = spec.mean_design(params)
    ranges = design.ranges
    a = len(ranges)
    lo = np.array([r[0] for r in ranges])
    hi = np.array([r[1] for r in ranges])
    total = np.zeros(a)
    var_total = np.zeros(a)
    n = config.n_users
    chunk = max(1, chunk_users // a)
    done = 0
    while done < n:
        size = min(chunk, n - done)
        x = population.sample_reals(size * a, rng).reshape(size, a)
        total += x.sum(axis=0)
        s = (np.clip(x, lo, hi) - lo) / (hi - lo)
        var_total += (design.variance_s(s) * (hi - lo) ** 2).sum(axis=0)
        sink(spec.encode_values(params, x, rng))
        done += size
        if progress is not None:
            progress(size)
    return total / n, var_total / n


def _estimate_locally(
    config: Any,
    population: NumericPopulation,
    params: MechanismParams,
    rng: np.random.Generator,
    progress: ProgressFn | None,
) -> tuple[Sequence[Any], NDArray[np.float64], NDArray[np.float64]]:
    """sum / report modes: the columns go into a MeanAccumulator as the server adds a batch."""
    acc = accumulator_for(params)
    if not isinstance(acc, MeanAccumulator):  # pragma: no cover - accumulator_for(numeric params)
        raise InvalidParameterError("accumulator", type(acc).__name__, "a MeanAccumulator")
    sample_mean, mech_var = _repeat(
        config,
        population,
        params,
        rng,
        progress,
        lambda cols: add_columns(acc, params, cols),
        config.chunk_size,
    )
    return estimate_means(params, acc, confidence=config.confidence).means, sample_mean, mech_var


def _estimate_over_grpc(
    config: Any,
    population: NumericPopulation,
    params: MechanismParams,
    rng: np.random.Generator,
    progress: ProgressFn | None,
    session: AggregatorSession,
    repeat: int,
) -> tuple[Sequence[Any], NDArray[np.float64], NDArray[np.float64]]:
    """grpc mode: a campaign on the aggregator, the columns submitted as batches, Analyst.GetEstimate read.

    The batches are encoded in this process (one client; ``--workers`` is for the frequency mechanisms) and
    submitted with the retrying ``Submit`` of the frequency runner (same batch id on a retry).
    """
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_client import wire
    from simulations.runners import (
        _RPC_TIMEOUT_S,
        SimulationError,
        _rpc_error,
        _submit,
        get_estimate_checked,
    )

    target, analyst = session.target, session.analyst
    # A fresh in-process aggregator has no campaigns; a shared one needs unique ids.
    suffix = f"-r{repeat}" if config.server is None else f"-{uuid.uuid4().hex[:16]}-r{repeat}"
    campaign_id = config.campaign_id + suffix
    campaign = wire.campaign_to_proto(
        campaign_id=campaign_id,
        params=params,
        description=(
            f"ldp-sim: {config.mechanism} on {config.population}, {config.n_users} users, repeat {repeat}"
        ),
    )
    try:
        analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=_RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        raise _rpc_error("CreateCampaign", target, exc) from None
    stub = session.collector
    accepted = 0
    batch_index = 0

    def submit(cols: Any) -> None:
        nonlocal accepted, batch_index
        msg = wire.batch_to_proto(
            campaign_id=campaign_id, batch_id=f"b{batch_index}", params=params, columns=cols
        )
        batch_index += 1
        accepted += _submit(stub, msg)

    sample_mean, mech_var = _repeat(config, population, params, rng, progress, submit, config.batch_size)
    if accepted != config.n_users:
        raise SimulationError(
            f"campaign {campaign_id!r}: the aggregator accepted {accepted} reports, expected {config.n_users}"
        )
    request = estimates_pb2.EstimateRequest(campaign_id=campaign_id, confidence=config.confidence)
    resp = get_estimate_checked(analyst, target, request, config.n_users)
    return list(resp.means), sample_mean, mech_var


def _metrics(
    truth: NDArray[np.float64],
    est: NDArray[np.float64],
    se: NDArray[np.float64],
    lo: NDArray[np.float64],
    hi: NDArray[np.float64],
    theory: NDArray[np.float64],
) -> NumericMetrics:
    err = est - truth
    mse = float(np.mean(err * err))
    mean_var = float(np.mean(se * se))
    theory_var = float(np.mean(theory))
    return NumericMetrics(
        n_repeats=int(est.shape[0]),
        n_attributes=int(est.shape[1]),
        mean_error=float(np.mean(err)),
        mse=mse,
        mean_variance=mean_var,
        theory_variance=theory_var,
        mse_over_variance=mse / mean_var if mean_var > 0 else math.inf,
        mse_over_theory=mse / theory_var if theory_var > 0 else math.inf,
        coverage=float(np.mean((lo <= truth) & (truth <= hi))),
        max_abs_error=float(np.mean(np.max(np.abs(err), axis=1))),
    )


def simulate_numeric(config: Any, *, progress: ProgressFn | None = None) -> NumericSimulationResult:
    """Run ``config.repeats`` independent simulations of a numeric mechanism (module docstring).

    Args:
        config: a :class:`simulations.runners.SimulationConfig` with a numeric mechanism.
        progress: called with the number of users just encoded.

    Raises:
        InvalidParameterError: see :func:`prepare_numeric`.
    """
    t0 = time.perf_counter()
    population, params = prepare_numeric(config)
    seeds = np.random.SeedSequence(config.seed).spawn(config.repeats)
    design = registry.spec_for(params).mean_design(params)
    a = len(design.ranges)
    scale = float(design.scale)
    mu = population.mean
    second = population.variance + mu * mu
    truth = np.full(a, mu)
    rows: dict[str, list[list[float]]] = {
        k: [] for k in ("sample", "est", "se", "lo", "hi", "sum", "sum_se", "theory", "reports")
    }
    with contextlib.ExitStack() as stack:
        session = None
        if config.mode == "grpc":
            from simulations.runners import aggregator_session

            session = stack.enter_context(
                aggregator_session(config.server, config.access, config.reporter_access)
            )
        for r, seed in enumerate(seeds):
            rng = np.random.default_rng(seed)
            if session is None:
                means, sample_mean, mech_var = _estimate_locally(config, population, params, rng, progress)
            else:
                means, sample_mean, mech_var = _estimate_over_grpc(
                    config, population, params, rng, progress, session, r
                )
            rows["sample"].append(list(sample_mean))
            rows["est"].append([m.mean for m in means])
            rows["se"].append([m.std_error for m in means])
            rows["lo"].append([m.ci_low for m in means])
            rows["hi"].append([m.ci_high for m in means])
            rows["sum"].append([m.sum for m in means])
            rows["sum_se"].append([m.sum_std_error for m in means])
            rows["reports"].append([float(m.n) for m in means])
            var_z = scale * (mech_var + second) - mu * mu
            rows["theory"].append(list(var_z / config.n_users))
    arr = {k: np.array(v, dtype=np.float64) for k, v in rows.items()}
    labels = design.labels
    return NumericSimulationResult(
        config=config,
        params=params,
        population=population,
        labels=labels,
        truth=truth,
        sample_means=arr["sample"],
        estimates=arr["est"],
        std_errors=arr["se"],
        ci_low=arr["lo"],
        ci_high=arr["hi"],
        sums=arr["sum"],
        sum_std_errors=arr["sum_se"],
        theory_variance=arr["theory"],
        n_reports=arr["reports"].astype(np.int64),
        metrics=_metrics(truth, arr["est"], arr["se"], arr["lo"], arr["hi"], arr["theory"]),
        elapsed_s=time.perf_counter() - t0,
    )


# ------------------------------------------------------------------------------------------- output


def _json_safe(x: Any) -> Any:
    if isinstance(x, float | np.floating):
        v = float(x)
        return v if math.isfinite(v) else str(v)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def _params_dict(params: Any) -> dict[str, Any]:
    """The init fields of a parameter dataclass (not the thresholds derived from them); a nested one
    (multidim's base) as its name and, under ``NAME_params``, its own fields; pairs as lists."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(params):
        if not f.init:
            continue
        value = getattr(params, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = value.name  # type: ignore[union-attr]
            out[f"{f.name}_params"] = _params_dict(value)
        elif isinstance(value, tuple):
            out[f.name] = [list(v) if isinstance(v, tuple) else v for v in value]
        else:
            out[f.name] = value
    return out


def numeric_to_dict(result: NumericSimulationResult) -> dict[str, Any]:
    """JSON document (format ``ldp-sim.numeric-run.v1``)::

        {"summary": {"format", "mechanism", "params", "epsilon", "delta", "mode", "population", "n_users",
                     "repeats", "seed", "confidence", "population_mean", "population_variance",
                     "elapsed_s", "metrics": {...}},
         "items": [{"label", "repeat", "truth", "sample_mean", "mean", "std_error", "ci_low", "ci_high",
                    "covered", "sum", "sum_std_error", "theory_std_error", "n_reports"}, ...]}

    ``items`` has one object per (repeat, attribute), repeat-major: the estimated mean and its interval.
    """
    cfg = result.config
    summary = {
        "format": NUMERIC_FORMAT,
        "mechanism": cfg.mechanism,
        "params": _params_dict(result.params),
        "epsilon": result.epsilon,
        "delta": result.delta,
        "mode": cfg.mode,
        "population": result.population.spec,
        "n_users": cfg.n_users,
        "repeats": cfg.repeats,
        "seed": cfg.seed,
        "confidence": cfg.confidence,
        "population_mean": result.population.mean,
        "population_variance": result.population.variance,
        "elapsed_s": result.elapsed_s,
        "metrics": result.metrics.to_dict(),
    }
    items = []
    for r in range(result.estimates.shape[0]):
        for a, label in enumerate(result.labels):
            t = float(result.truth[a])
            lo, hi = float(result.ci_low[r, a]), float(result.ci_high[r, a])
            items.append(
                {
                    "label": label,
                    "repeat": r,
                    "truth": t,
                    "sample_mean": float(result.sample_means[r, a]),
                    "mean": float(result.estimates[r, a]),
                    "std_error": float(result.std_errors[r, a]),
                    "ci_low": lo,
                    "ci_high": hi,
                    "covered": bool(lo <= t <= hi),
                    "sum": float(result.sums[r, a]),
                    "sum_std_error": float(result.sum_std_errors[r, a]),
                    "theory_std_error": math.sqrt(float(result.theory_variance[r, a])),
                    "n_reports": int(result.n_reports[r, a]),
                }
            )
    out: dict[str, Any] = _json_safe({"summary": summary, "items": items})
    return out


def write_numeric_json(path: str | Path, result: NumericSimulationResult) -> None:
    """Write :func:`numeric_to_dict` as strict JSON."""
    Path(path).write_text(json.dumps(numeric_to_dict(result), indent=2, allow_nan=False) + "\n", "utf-8")


def _mode_text(cfg: Any) -> str:
    if cfg.mode != "grpc":
        return f"{cfg.mode} (every user encoded)"
    where = "an in-process aggregator on SQLite" if cfg.server is None else cfg.server
    return f"grpc (every user encoded; batches of {cfg.batch_size} submitted to {where})"


def numeric_tables(result: NumericSimulationResult, *, max_rows: int = 20) -> list[Any]:
    """Rich tables: the run header and metrics, and the per-attribute estimates of the first repeat(s)."""
    from rich.table import Table

    cfg = result.config
    head = Table(title=f"ldp-sim: {cfg.mechanism} (mean estimation)", show_header=False)
    head.add_column("field")
    head.add_column("value")
    rows = [
        ("population", f"{result.population.spec} (mean {result.population.mean:.6g})"),
        ("users x repeats", f"{cfg.n_users:,} x {cfg.repeats}"),
        ("epsilon (per report)", f"{result.epsilon:.6g}"),
        *((("delta (per report)", f"{result.delta:.3g}"),) if result.delta > 0 else ()),
        ("params", repr(result.params)),
        ("mode", _mode_text(cfg)),
        ("elapsed", f"{result.elapsed_s:.2f} s"),
    ]
    for k, v in rows:
        head.add_row(k, v)
    m = result.metrics
    met = Table(title="metrics (vs the population mean)")
    met.add_column("metric")
    met.add_column("value", justify="right")
    for name, value in m.to_dict().items():
        met.add_row(name, f"{value:.6g}" if isinstance(value, float) else str(value))
    items = Table(title=f"estimates ({cfg.confidence:.0%} intervals)")
    for col in ("repeat", "attribute", "truth", "mean", "std error", "interval", "covered", "reports"):
        items.add_column(col, justify="left" if col == "attribute" else "right")
    shown = 0
    for r in range(result.estimates.shape[0]):
        for a, label in enumerate(result.labels):
            if shown >= max_rows:
                break
            t = float(result.truth[a])
            lo, hi = float(result.ci_low[r, a]), float(result.ci_high[r, a])
            items.add_row(
                str(r),
                label,
                f"{t:.6g}",
                f"{result.estimates[r, a]:.6g}",
                f"{result.std_errors[r, a]:.3g}",
                f"[{lo:.6g}, {hi:.6g}]",
                "yes" if lo <= t <= hi else "no",
                f"{int(result.n_reports[r, a]):,}",
            )
            shown += 1
    return [head, met, items]


def plot_numeric(result: NumericSimulationResult, path: str | Path) -> None:
    """PNG: every repeat's estimate with its interval per attribute, and the population mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r, a = result.estimates.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * a + 3), 4.0))
    for j in range(a):
        xs = j + np.linspace(-0.3, 0.3, r) if r > 1 else np.array([float(j)])
        est = result.estimates[:, j]
        ax.errorbar(
            xs,
            est,
            yerr=[est - result.ci_low[:, j], result.ci_high[:, j] - est],
            fmt="o",
            ms=3,
            lw=0.8,
            color="tab:blue",
        )
        ax.hlines(result.truth[j], j - 0.4, j + 0.4, colors="tab:red", label="truth" if j == 0 else "_")
    ax.set_xticks(range(a), labels=list(result.labels))
    ax.set_ylabel("mean")
    ax.set_title(
        f"{result.config.mechanism}, eps={result.epsilon:.3g}, n={result.config.n_users:,}: "
        f"coverage {result.metrics.coverage:.0%}"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
