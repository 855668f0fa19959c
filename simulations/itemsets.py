"""``ldp-sim run --mechanism svim`` (issue 18): SVIM's two stages on a set-valued population.

Every simulated user draws a uniform slot in [0, 1000) (what its client secret gives). The users of the
items stage's slots report their sets to the items campaign (the run's parameters; its size group its set
size, the others one item by padding and sampling); the server estimates the items, builds the candidate
itemsets (:func:`ldp_aggregator.itemsets.follow_up_params`, as ``ldp-aggregator campaign follow-up``), and
the users of the remaining slots report to the itemsets campaign. With ``--param stage=itemsets`` and
``candidates`` the run is that one stage over fixed candidates (the calibration setting).

Modes: ``sum`` (SVIM has no exact sampler of the sums: every report is encoded, as ``report``) and
``report`` run the vectorised set encoder and the spec's accumulator in process; ``grpc`` creates both
campaigns on an aggregator (in-process, or ``--server``), submits every report through
``Collector.Submit`` and reads both estimates from ``Analyst.GetEstimate``.

Population: ``sets`` / ``sets:EXTRA`` (:class:`simulations.set_population.SetPopulation`, planted frequent
itemsets), or any categorical population, whose users hold the one-item set of their value.

Metrics (each stage against the true counts among its own users, which its estimates target): MSE of the
counts, MSE over the mean estimated variance, coverage of the intervals; precision and recall of the top-k
(items k = ``top_items``; itemsets k = 10 by default) against the whole population's true ranking
(tie-aware, as :mod:`simulations.discovery`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.estimators import FrequencyEstimate, estimate_support
from ldp_aggregator.itemsets import follow_up_params, mine
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.svim.core import ITEMS, SLOTS, SVIMParams, element_matrix, encode_sets
from ldp_client.mechanisms.svim.spec import SPEC
from simulations.populations import parse_categorical_population
from simulations.runners.config import SimulationConfig, SimulationError
from simulations.runners.prepare import _build_params
from simulations.set_population import parse_set_population

__all__ = ["SvimSimResult", "is_svim_run", "simulate_svim", "stage_metrics", "svim_sim_to_dict"]

TOP_ITEMSETS = 10


def is_svim_run(mechanism: str) -> bool:
    """Whether ``ldp-sim run --mechanism`` names SVIM (run by :func:`simulate_svim`)."""
    return mechanism == SPEC.name


@dataclass(frozen=True, kw_only=True)
class StageRun:
    """One stage: its parameters, estimate, the truth among its users and in the whole population."""

    params: SVIMParams
    estimate: FrequencyEstimate
    truth: NDArray[np.int64]
    population_truth: NDArray[np.int64]
    metrics: dict[str, float]
    correction: float


@dataclass(frozen=True, kw_only=True)
class SvimSimResult:
    config: SimulationConfig
    stages: tuple[StageRun, ...]
    seconds: float


def _population_sets(config: SimulationConfig, rng: np.random.Generator) -> tuple[NDArray[np.int64], int]:
    sets_pop = parse_set_population(config.population)
    d = int(config.domain) if config.domain is not None else 64
    if sets_pop is not None:
        return sets_pop.sets(config.n_users, d, rng), d
    categorical = parse_categorical_population(config.population)
    values = np.concatenate(
        list(categorical.iter_values(config.n_users, d, rng, chunk_size=config.chunk_size))
    )
    return values.astype(np.int64)[:, None], d


def stage_metrics(
    est: FrequencyEstimate, truth: NDArray[np.int64], population_truth: NDArray[np.int64], k: int
) -> dict[str, float]:
    """MSE, MSE / mean variance, coverage, and the top-k precision / recall (module docstring)."""
    count = np.array([it.count for it in est.items])
    se = np.array([it.std_error for it in est.items])
    lo = np.array([it.ci_low for it in est.items])
    hi = np.array([it.ci_high for it in est.items])
    err = count - truth
    mse = float(np.mean(err**2))
    var = float(np.mean(se**2))
    k = min(k, len(count))
    est_top = np.argsort(-count, kind="stable")[:k]
    true_sorted = np.sort(population_truth)[::-1]
    kth = true_sorted[k - 1] if k else 0
    hits = sum(1 for i in est_top if population_truth[i] >= kth > 0)
    true_top = set(np.argsort(-population_truth, kind="stable")[:k].tolist())
    return {
        "mse": mse,
        "mse_over_variance": mse / var if var > 0 else float("nan"),
        "coverage": float(np.mean((lo <= truth) & (truth <= hi))),
        f"precision_top{k}": hits / k if k else 0.0,
        f"recall_top{k}": len(true_top & set(est_top.tolist())) / k if k else 0.0,
    }


def _encode_stage(
    params: SVIMParams, sets: NDArray[np.int64], slots: NDArray[np.int64], rng: np.random.Generator
) -> tuple[Any, NDArray[np.int64], NDArray[np.bool_]]:
    """The columns of the stage's users (their slots give their groups), and their rows."""
    rows = np.flatnonzero((slots >= params.stage_lo) & (slots < params.stage_hi))
    groups = (slots[rows] >= params.stage_lo + params.size_share).astype(np.int64)
    columns = encode_sets(params, sets[rows], rng, groups)
    return columns, rows, element_matrix(params, sets)


def _estimate_in_process(
    params: SVIMParams, columns: Any, confidence: float
) -> tuple[FrequencyEstimate, float]:
    acc = accumulator_for(cast(Any, params))
    add_columns(acc, cast(Any, params), columns)
    est = estimate_support(
        SPEC.support(params, acc), mechanism=SPEC.name, epsilon=params.epsilon, confidence=confidence
    )
    return est, mine(params, acc, est).correction


def simulate_svim(config: SimulationConfig) -> SvimSimResult:
    """Run SVIM's stages (module docstring) once, with the run's seed.

    Raises:
        InvalidParameterError: a bad population, parameter or domain.
        SimulationError: the aggregator failed (grpc mode).
    """
    rng = np.random.default_rng(np.random.SeedSequence(config.seed))
    sets, d = _population_sets(config, rng)
    params = _build_params(config, d)
    if not isinstance(params, SVIMParams):
        raise InvalidParameterError("mechanism", config.mechanism, "svim")
    slots: NDArray[np.int64] = np.asarray(rng.integers(0, SLOTS, size=sets.shape[0]), dtype=np.int64)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        session = _grpc_session(config, stack) if config.mode == "grpc" else None
        stages = [
            _run_stage(
                config, params, sets, slots, rng, session, "items" if params.stage == ITEMS else "itemsets"
            )
        ]
        if params.stage == ITEMS and params.stage_hi < SLOTS:
            counts = [it.count for it in stages[0].estimate.items]
            follow = follow_up_params(
                params,
                counts,
                source_id=_campaign_id(config, params.stage),
                epsilon=params.epsilon,
            )
            stages.append(_run_stage(config, follow, sets, slots, rng, session, "itemsets"))
    return SvimSimResult(config=config, stages=tuple(stages), seconds=time.perf_counter() - start)


def _campaign_id(config: SimulationConfig, stage: str) -> str:
    return f"{config.campaign_id}-{stage}"


def _run_stage(
    config: SimulationConfig,
    params: SVIMParams,
    sets: NDArray[np.int64],
    slots: NDArray[np.int64],
    rng: np.random.Generator,
    session: Any,
    stage: str,
) -> StageRun:
    columns, rows, held = _encode_stage(params, sets, slots, rng)
    truth = held[rows].sum(axis=0).astype(np.int64)
    population_truth = held.sum(axis=0).astype(np.int64)
    if session is None:
        est, correction = _estimate_in_process(params, columns, config.confidence)
    else:
        est, correction = _estimate_grpc(
            config, session, params, columns, _campaign_id(config, stage) + session.suffix
        )
    k = 10 if stage == "items" else TOP_ITEMSETS
    return StageRun(
        params=params,
        estimate=est,
        truth=truth,
        population_truth=population_truth,
        metrics=stage_metrics(est, truth, population_truth, k),
        correction=correction,
    )


@dataclass
class _Session:
    analyst: Any
    collector: Any
    target: str
    suffix: str


def _grpc_session(config: SimulationConfig, stack: contextlib.ExitStack[Any]) -> _Session:
    import uuid

    from simulations.runners.grpc_runner import aggregator_session

    session = stack.enter_context(
        aggregator_session(config.server, config.access, config.reporter_access, retain_raw=False)
    )
    suffix = "" if config.server is None else f"-{uuid.uuid4().hex[:16]}"
    return _Session(session.analyst, session.collector, session.target, suffix)


def _estimate_grpc(
    config: SimulationConfig, session: _Session, params: SVIMParams, columns: Any, campaign_id: str
) -> tuple[FrequencyEstimate, float]:
    """Create the stage's campaign, submit its reports in batches, read its estimate (GetEstimate)."""
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_aggregator.estimators import ItemEstimate
    from ldp_client import wire
    from simulations.runners.grpc_runner import _RPC_TIMEOUT_S, _rpc_error, _submit, get_estimate_checked

    campaign = wire.campaign_to_proto(
        campaign_id=campaign_id, params=cast(Any, params), description=f"ldp-sim: svim {params.stage}"
    )
    try:
        session.analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=_RPC_TIMEOUT_S
        )
    except grpc.RpcError as exc:
        raise _rpc_error("CreateCampaign", session.target, exc) from None
    n = int(columns[0].shape[0])
    batch = max(1, min(config.batch_size, 100_000))
    accepted = 0
    for j, start in enumerate(range(0, n, batch)):
        part = tuple(c[start : start + batch] for c in columns)
        msg = wire.batch_to_proto(
            campaign_id=campaign_id, batch_id=f"b{j}", params=cast(Any, params), columns=part
        )
        accepted += _submit(session.collector, msg)
    if accepted != n:
        raise SimulationError(
            f"campaign {campaign_id!r}: the aggregator accepted {accepted} reports, expected {n}"
        )
    request = estimates_pb2.EstimateRequest(campaign_id=campaign_id, confidence=config.confidence)
    resp = get_estimate_checked(session.analyst, session.target, request, n)
    est = FrequencyEstimate(
        mechanism=SPEC.name,
        n=int(resp.n_reports),
        epsilon=params.epsilon,
        epsilon_inf=None,
        confidence=config.confidence,
        items=tuple(
            ItemEstimate(
                label=it.label,
                count=it.count,
                frequency=it.frequency,
                std_error=it.std_error,
                ci_low=it.ci_low,
                ci_high=it.ci_high,
            )
            for it in resp.items
        ),
    )
    return est, float(resp.itemsets.correction)


def svim_sim_to_dict(sim: SvimSimResult) -> dict[str, Any]:
    """The run as JSON: ``summary``, ``metrics`` (per stage), and per stage its ranked values with their
    estimates, standard errors, intervals and true counts."""
    cfg = sim.config
    first = sim.stages[0].params
    stages = {}
    for run in sim.stages:
        order = np.argsort([-it.count for it in run.estimate.items], kind="stable")
        stages[run.params.stage] = {
            "n_reports": run.estimate.n,
            "correction": run.correction,
            "candidates": len(run.params.candidates),
            "ranked": [
                {
                    "label": run.estimate.items[i].label,
                    "estimate": run.estimate.items[i].count,
                    "std_error": run.estimate.items[i].std_error,
                    "ci_low": run.estimate.items[i].ci_low,
                    "ci_high": run.estimate.items[i].ci_high,
                    "true_count": int(run.truth[i]),
                }
                for i in order
            ],
        }
    return {
        "summary": {
            "mechanism": cfg.mechanism,
            "population": cfg.population,
            "n_users": cfg.n_users,
            "epsilon": first.epsilon,
            "mode": cfg.mode,
            "seed": cfg.seed,
            "confidence": cfg.confidence,
            "params": dict(SPEC.make_args(first).fields),
            "seconds": sim.seconds,
        },
        "metrics": {run.params.stage: run.metrics for run in sim.stages},
        "stages": stages,
    }


def svim_table(sim: SvimSimResult, max_rows: int = 20) -> list[Any]:
    """Each stage's ranked values beside their true counts, as rich tables."""
    from rich.table import Table

    tables = []
    for run in sim.stages:
        m = run.metrics
        title = f"svim {run.params.stage}: {run.estimate.n:,} reports, " + ", ".join(
            f"{k} {v:.3g}" for k, v in m.items()
        )
        table = Table(title=title)
        for name in ("rank", run.params.stage, "true count", "estimate", "std error", "95% interval"):
            table.add_column(name, justify="left" if name == run.params.stage else "right")
        order = np.argsort([-it.count for it in run.estimate.items], kind="stable")[:max_rows]
        for r, i in enumerate(order):
            it = run.estimate.items[i]
            table.add_row(
                str(r + 1),
                it.label,
                f"{int(run.truth[i]):,}",
                f"{it.count:,.0f}",
                f"{it.std_error:,.1f}",
                f"[{it.ci_low:,.0f}, {it.ci_high:,.0f}]",
            )
        tables.append(table)
    return tables
