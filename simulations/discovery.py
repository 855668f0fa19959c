"""Simulations of discovery mechanisms (issue 16): users of a categorical population report once each, the
server finds the frequent values, and the result is scored against the population's truth.

Modes: ``report`` (and ``sum``, which has no exact sampler here, so it also encodes every report) run the
spec's seeded batch encoder and :func:`ldp_aggregator.discovery.discover_columns` in process; ``grpc``
creates the campaign on an aggregator (an in-process one that retains raw reports, or ``--server``),
submits every report through ``Collector.Submit`` and reads the discovered values from
``Analyst.GetEstimate``.

Metrics against the truth (the users' sampled values; Wang, Li, Jha 2018 for NCR):

- precision and recall of the top-K for K = 16 and 32: the K highest-ranked discovered values whose true
  count is at least the K-th largest (tie-aware), over K (precision at K; over the number of values users
  hold when that is below K), and the share of the K most common true values discovered at all (recall).
  A list shorter than K scores its empty places as misses, as in the top-K precision of Wang, Li and Jha
  (2018) and of :mod:`simulations.itemsets`: otherwise a mechanism that lists fewer values (a duplicate, or
  nothing above a threshold) would look more precise than one listing the same hits and further guesses.
  ``listed_topK`` says how many distinct values a result listed among its first K;
- NCR (normalised cumulative rank) of the top-K: the true top-K value of rank i (1-based) scores K + 1 - i
  when discovered; NCR is the sum of the scores over K (K + 1) / 2;
- the error of the estimated counts of the discovered values that users hold: mean absolute error, RMSE,
  RMSE over the mean standard error, and the share of intervals that cover the true count.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_aggregator.discovery import DiscoveredItem, DiscoveryLevel, DiscoveryResult, discover_columns
from ldp_aggregator.discovery_rounds import is_adaptive
from ldp_client import registry
from ldp_client.errors import DomainError, InvalidParameterError
from simulations.discovery_rounds import simulate_rounds
from simulations.populations import parse_categorical_population
from simulations.runners.config import SimulationConfig, SimulationError
from simulations.runners.prepare import _build_params, _default_domain

__all__ = [
    "DiscoverySimResult",
    "discovery_metrics",
    "discovery_sim_to_dict",
    "discovery_table",
    "simulate_discovery",
]

_TOPS = (16, 32)


@dataclass(frozen=True, kw_only=True, eq=False)
class DiscoverySimResult:
    """One discovery simulation: its configuration, the result and the truth it is scored against."""

    config: SimulationConfig
    params: Any
    result: DiscoveryResult
    truth: dict[str, int]
    metrics: dict[str, float]
    seconds: float


def discovery_metrics(items: Sequence[DiscoveredItem], truth: dict[str, int]) -> dict[str, float]:
    """Precision, recall and NCR of the top 16 and 32, and the count errors (module docstring).

    A label listed twice counts once (its first place). Precision is tie-aware: a discovered value among
    the first K counts as a hit when its true count is at least the K-th largest true count (so that which
    of equally common values make the "true top K" does not matter); the hits are over K (over the number
    of values users hold when fewer), so places a result leaves empty count as misses."""
    ranked = sorted(truth, key=lambda v: (-truth[v], v))
    found = list(dict.fromkeys(it.label for it in items))
    found_set = set(found)
    out: dict[str, float] = {}
    for k in _TOPS:
        top = ranked[:k]
        kth = truth[top[-1]] if top else 0
        head = found[:k]
        hits = sum(1 for v in head if truth.get(v, 0) >= kth > 0)
        out[f"precision_top{k}"] = hits / len(top) if top else 0.0
        out[f"listed_top{k}"] = float(len(head))
        out[f"recall_top{k}"] = sum(1 for v in top if v in found_set) / len(top) if top else 0.0
        score = {v: len(top) - i for i, v in enumerate(top)}
        out[f"ncr_top{k}"] = (
            sum(score.get(v, 0) for v in head) / (len(top) * (len(top) + 1) / 2) if top else 0.0
        )
    held = [it for it in items if it.label in truth]
    if held:
        err = np.array([it.count - truth[it.label] for it in held])
        se = np.array([it.std_error for it in held])
        covered = [it.ci_low <= truth[it.label] <= it.ci_high for it in held]
        out["count_mae"] = float(np.mean(np.abs(err)))
        out["count_rmse"] = float(np.sqrt(np.mean(err**2)))
        out["rmse_over_se"] = float(np.sqrt(np.mean(err**2)) / np.mean(se)) if np.mean(se) > 0 else math.nan
        out["coverage"] = float(np.mean(covered))
    return out


def _prepare(config: SimulationConfig) -> tuple[Any, Any, tuple[str, ...], int]:
    population = parse_categorical_population(config.population)
    d = _default_domain(config, population)
    try:
        labels = population.labels(d)
    except InvalidParameterError as exc:
        raise InvalidParameterError("domain", d, exc.allowed) from exc
    params = _build_params(config, d)
    return population, params, labels, d


def simulate_discovery(config: SimulationConfig) -> DiscoverySimResult:
    """Run one discovery simulation (the first repeat's seed; module docstring).

    Raises:
        InvalidParameterError: a bad population, parameter or population value (too long, empty).
        SimulationError: the aggregator failed (grpc mode).
    """
    population, params, labels, d = _prepare(config)
    spec = registry.spec_for(params)
    for label in labels:  # one line for a value the mechanism cannot take (too long, empty)
        try:
            spec.discovery_prefix(params, 0, label)
        except DomainError as exc:
            raise InvalidParameterError("population", f"value {label[:24]!r}", exc.allowed) from exc
    rng = np.random.default_rng(np.random.SeedSequence(config.seed))
    start = time.perf_counter()
    if is_adaptive(params):  # issue 16: the rounds, one after the other
        result, counts = simulate_rounds(config, params, population, labels, d, rng)
    elif config.mode == "grpc":
        result, counts = _run_grpc(config, params, population, labels, d, rng)
    else:
        counts = np.zeros(d, dtype=np.int64)
        parts: list[tuple[Any, ...]] = []
        for values in population.iter_values(config.n_users, d, rng, chunk_size=config.chunk_size):
            counts += np.bincount(values, minlength=d)
            parts.append(
                spec.encode_batch(params, values, rng, campaign_id=config.campaign_id, labels=labels)
            )
        columns = tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))
        result = discover_columns(params, columns, config.n_users, confidence=config.confidence)
    seconds = time.perf_counter() - start
    truth = {labels[i]: int(c) for i, c in enumerate(counts) if c > 0}
    return DiscoverySimResult(
        config=config,
        params=params,
        result=result,
        truth=truth,
        metrics=discovery_metrics(result.items, truth),
        seconds=seconds,
    )


def _run_grpc(
    config: SimulationConfig, params: Any, population: Any, labels: tuple[str, ...], d: int, rng: Any
) -> tuple[DiscoveryResult, Any]:
    """Create the campaign, submit every report, read the discovered values from GetEstimate."""
    import uuid

    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_client import wire
    from simulations.runners.grpc_runner import (
        _RPC_TIMEOUT_S,
        _rpc_error,
        _submit,
        aggregator_session,
        get_estimate_checked,
    )

    spec = registry.spec_for(params)
    suffix = "-r0" if config.server is None else f"-{uuid.uuid4().hex[:16]}-r0"
    campaign_id = config.campaign_id + suffix
    counts = np.zeros(d, dtype=np.int64)
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(
            aggregator_session(config.server, config.access, config.reporter_access, retain_raw=True)
        )
        campaign = wire.campaign_to_proto(
            campaign_id=campaign_id,
            params=params,
            description=f"ldp-sim: {config.mechanism} on {config.population}, {config.n_users} users",
        )
        try:
            session.analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=_RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise _rpc_error("CreateCampaign", session.target, exc) from None
        accepted = 0
        batch = max(1, min(config.batch_size, 100_000))
        for j, values in enumerate(population.iter_values(config.n_users, d, rng, chunk_size=batch)):
            counts += np.bincount(values, minlength=d)
            columns = spec.encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)
            msg = wire.batch_to_proto(
                campaign_id=campaign_id, batch_id=f"b{j}", params=params, columns=columns
            )
            accepted += _submit(session.collector, msg)
        if accepted != config.n_users:
            raise SimulationError(
                f"campaign {campaign_id!r}: the aggregator accepted {accepted} reports, "
                f"expected {config.n_users}"
            )
        request = estimates_pb2.EstimateRequest(campaign_id=campaign_id, confidence=config.confidence)
        resp = get_estimate_checked(session.analyst, session.target, request, config.n_users)
    result = DiscoveryResult(
        mechanism=params.name,
        n=int(resp.n_reports),
        epsilon=params.epsilon,
        confidence=config.confidence,
        top_k=spec.discovery_top_k(params),
        items=tuple(
            DiscoveredItem(
                label=it.label, count=it.count, std_error=it.std_error, ci_low=it.ci_low, ci_high=it.ci_high
            )
            for it in resp.items
        ),
        levels=tuple(
            DiscoveryLevel(
                level=lv.level, reports=lv.reports, tested=lv.tested, kept=lv.kept, threshold=lv.threshold
            )
            for lv in resp.discovery_levels
        ),
    )
    return result, counts


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def discovery_sim_to_dict(sim: DiscoverySimResult) -> dict[str, Any]:
    """The simulation as JSON values: ``summary``, ``metrics``, ``items`` (label, estimate, std_error,
    ci_low, ci_high, true_count) and ``levels``."""
    cfg, res = sim.config, sim.result
    spec = registry.spec_for(sim.params)
    fields = spec.make_args(sim.params).fields
    return {
        "summary": {
            "mechanism": cfg.mechanism,
            "population": cfg.population,
            "n_users": cfg.n_users,
            "epsilon": sim.params.epsilon,
            "mode": cfg.mode,
            "seed": cfg.seed,
            "confidence": res.confidence,
            "params": dict(fields),
            "seconds": sim.seconds,
            "distinct_values": len(sim.truth),
        },
        "metrics": {k: _number(v) for k, v in sim.metrics.items()},
        "items": [
            {
                "label": it.label,
                "estimate": it.count,
                "std_error": it.std_error,
                "ci_low": it.ci_low,
                "ci_high": it.ci_high,
                "true_count": sim.truth.get(it.label, 0),
            }
            for it in res.items
        ],
        "levels": [
            {
                "level": lv.level,
                "reports": lv.reports,
                "tested": lv.tested,
                "kept": lv.kept,
                "threshold": _number(lv.threshold),
            }
            for lv in res.levels
        ],
    }


def discovery_table(sim: DiscoverySimResult, max_rows: int = 20) -> Any:
    """The discovered values beside their true counts, as a rich table."""
    from rich.table import Table

    table = Table(title=f"{sim.config.mechanism}: {len(sim.result.items)} values discovered")
    for name in ("rank", "value", "true count", "estimate", "std error", "95% interval"):
        table.add_column(name, justify="left" if name == "value" else "right")
    for i, it in enumerate(sim.result.items[:max_rows]):
        table.add_row(
            str(i + 1),
            it.label,
            f"{sim.truth.get(it.label, 0):,}",
            f"{it.count:,.0f}",
            f"{it.std_error:,.1f}",
            f"[{it.ci_low:,.0f}, {it.ci_high:,.0f}]",
        )
    return table
