"""Simulations of an adaptive discovery campaign (issue 16; ``--param rounds=adaptive``): the users are
split into the campaign's rounds uniformly (as their secrets split them), and round r's users answer only
after round r - 1 published its prefixes, against those candidates
(:mod:`ldp_client.mechanisms.pem.rounds`).

``report`` mode runs the rounds in process: each round's reports come from the seeded batch encoder
(:func:`~ldp_client.mechanisms.pem.rounds.encode_round_batch`), and the round step is the aggregator's
(:func:`ldp_aggregator.discovery_rounds.discover_published`). ``grpc`` mode runs a real campaign: per round,
fetch the campaign (``Collector.GetCampaign``: the round and its published prefixes, as a device does),
submit the round's reports, close the round (``Analyst.NextRound``); then ``Analyst.GetEstimate``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ldp_aggregator.discovery import DiscoveredItem, DiscoveryLevel, DiscoveryResult
from ldp_aggregator.discovery_rounds import discover_published
from ldp_client.mechanisms.pem import PEMParams
from ldp_client.mechanisms.pem.rounds import encode_round_batch, round_plan
from simulations.runners.config import SimulationConfig, SimulationError

__all__ = ["simulate_rounds"]


def _population_values(config: SimulationConfig, population: Any, d: int, rng: Any) -> Any:
    chunks = list(population.iter_values(config.n_users, d, rng, chunk_size=config.chunk_size))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def simulate_rounds(
    config: SimulationConfig, params: PEMParams, population: Any, labels: tuple[str, ...], d: int, rng: Any
) -> tuple[DiscoveryResult, Any]:
    """Run the rounds (module docstring); returns the result and the true count of each label index."""
    values = _population_values(config, population, d, rng)
    counts = np.bincount(values, minlength=d)
    rounds = rng.integers(0, params.levels, size=values.shape[0])
    if config.mode == "grpc":
        return _grpc(config, params, values, rounds, labels, rng), counts
    published: list[tuple[Any, ...]] = []
    parts: list[tuple[Any, ...]] = []
    cache: dict[Any, Any] = {}
    result: DiscoveryResult | None = None
    for r in range(params.levels):
        plan = round_plan(params, r, published[-1] if r else ())
        parts.append(encode_round_batch(plan, values[rounds == r], labels, rng))
        columns = tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
        result = discover_published(
            params,
            published,
            columns,
            int(columns[0].shape[0]),
            r + 1,
            confidence=config.confidence,
            cache=cache,
        )
        published.append(result.kept)
    assert result is not None  # params.levels >= 1
    return result, counts


def _grpc(
    config: SimulationConfig,
    params: Any,
    values: Any,
    rounds: Any,
    labels: tuple[str, ...],
    rng: Any,
) -> DiscoveryResult:
    import uuid

    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_client import wire
    from ldp_client._proto.ldp.v1 import collector_pb2
    from simulations.runners.grpc_runner import (
        _RPC_TIMEOUT_S,
        _rpc_error,
        _submit,
        aggregator_session,
        get_estimate_checked,
    )

    suffix = "-r0" if config.server is None else f"-{uuid.uuid4().hex[:16]}-r0"
    campaign_id = config.campaign_id + suffix
    batch = max(1, min(config.batch_size, 100_000))
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(
            aggregator_session(config.server, config.access, config.reporter_access, retain_raw=True)
        )
        campaign = wire.campaign_to_proto(
            campaign_id=campaign_id,
            params=params,
            description=f"ldp-sim: {config.mechanism} in rounds on {config.population},"
            f" {config.n_users} users",
        )
        try:
            session.analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=_RPC_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise _rpc_error("CreateCampaign", session.target, exc) from None
        accepted = 0
        for r in range(params.levels):
            try:  # the round and its candidates, as a device fetches them
                msg = session.collector.GetCampaign(
                    collector_pb2.GetCampaignRequest(campaign_id=campaign_id), timeout=_RPC_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                raise _rpc_error("GetCampaign", session.target, exc) from None
            info = wire.campaign_from_proto(msg)
            if info.discovery_round != r:
                raise SimulationError(
                    f"campaign {campaign_id!r} collects round {info.discovery_round}, not {r}"
                )
            published = [k.kept for k in info.discovery_rounds]
            plan = round_plan(params, r, published[r - 1] if r else ())
            mine = values[rounds == r]
            for j in range(0, mine.shape[0], batch):
                columns: Any = encode_round_batch(plan, mine[j : j + batch], labels, rng)
                accepted += _submit(
                    session.collector,
                    wire.batch_to_proto(
                        campaign_id=campaign_id, batch_id=f"r{r}-b{j}", params=params, columns=columns
                    ),
                )
            try:
                session.analyst.NextRound(
                    analyst_pb2.NextRoundRequest(campaign_id=campaign_id, round=r), timeout=_RPC_TIMEOUT_S * 5
                )
            except grpc.RpcError as exc:
                raise _rpc_error("NextRound", session.target, exc) from None
        if accepted != config.n_users:
            raise SimulationError(
                f"campaign {campaign_id!r}: the aggregator accepted {accepted} reports,"
                f" expected {config.n_users}"
            )
        request = estimates_pb2.EstimateRequest(campaign_id=campaign_id, confidence=config.confidence)
        resp = get_estimate_checked(session.analyst, session.target, request, config.n_users)
    return DiscoveryResult(
        mechanism=params.name,
        n=int(resp.n_reports),
        epsilon=params.epsilon,
        confidence=config.confidence,
        top_k=params.top_k,
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
