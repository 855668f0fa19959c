"""Per-report simulations on a Dask cluster: ``ldp-sim run --mode report --cluster``.

The ``report`` runner encodes every simulated user's report; on one machine its cost grows with the
population. Here the population is cut into partitions of users, and each partition is a task on the
cluster doing what the report runner does for all users: draw the users' values from the population
(``population.iter_values``), encode them with the mechanism's batch encoder (``spec.encode_batch``) and
add them to the campaign's accumulator (:func:`ldp_aggregator.accumulators.add_columns`), with a generator
of its own seeded from a :class:`numpy.random.SeedSequence` spawned per partition (so a run is reproducible
for a given seed and partition size, whatever the number of workers). The partitions' accumulators are
merged pairwise on the workers with the archive reduce's merge (:func:`ldp_aggregator.reduce.tree_merge`),
and the merged accumulator goes to the estimators the report runner uses.

The users are split differently from the single-machine report runner (one generator per partition instead
of one for the whole run), so the same seed gives other draws than ``--mode report`` without ``--cluster``;
both are exact simulations of the same distribution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import (
    Accumulator,
    BitCountAccumulator,
    accumulator_for,
    accumulator_from_bytes,
    add_columns,
)
from ldp_aggregator.estimators import estimate_frequencies, estimate_rappor_candidates
from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.spec import Kind
from simulations.metrics import compute_metrics
from simulations.runners import (
    PreparedSimulation,
    SimulationConfig,
    SimulationError,
    SimulationResult,
    prepare,
)

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DEFAULT_PARTITION_USERS", "partition_task", "simulate_on_cluster"]

#: Users per partition (task): large enough that a task's overhead is negligible, small enough to spread a
#: 10^7-user run over the workers. Results for a seed depend on it (each partition has its own generator).
DEFAULT_PARTITION_USERS: Final = 1 << 22


def partition_task(
    config: SimulationConfig, n_users: int, seed: np.random.SeedSequence
) -> tuple[bytes, bytes]:
    """One partition on a worker: ``n_users`` users drawn, encoded and accumulated with their own generator.

    Returns:
        (the accumulator's ``to_bytes``, the users' value counts as little-endian int64 bytes).
    """
    prep = prepare(config)
    rng = np.random.default_rng(seed)
    d = prep.domain_size
    spec = registry.spec_for(prep.params)
    acc = accumulator_for(prep.params)
    counts = np.zeros(d, dtype="<i8")
    for values in prep.population.iter_values(n_users, d, rng, chunk_size=config.chunk_size):
        counts += np.bincount(values, minlength=d)
        columns = spec.encode_batch(
            prep.params, values, rng, campaign_id=config.campaign_id, labels=prep.value_labels
        )
        add_columns(acc, prep.params, columns)
    return acc.to_bytes(), counts.tobytes()


def _sizes(n: int, per: int) -> list[int]:
    return [min(per, n - start) for start in range(0, n, per)]


@dataclass(frozen=True, kw_only=True)
class _Repeat:
    truth: NDArray[np.int64]
    count: NDArray[np.float64]
    std_error: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    n_reports: int
    detected: NDArray[np.bool_] | None


def _estimate(prep: PreparedSimulation, acc: Accumulator, truth: NDArray[np.int64]) -> _Repeat:
    """The estimators the report runner applies to its accumulator (``simulations.runners``)."""
    params, cfg = prep.params, prep.config
    detected = None
    if registry.spec_for(params).kind is Kind.RAPPOR:
        if not isinstance(acc, BitCountAccumulator):  # accumulator_for made it; narrows the type
            raise SimulationError(f"internal: {type(acc).__name__} for {params.name}")
        if cfg.candidates is not None:  # a candidate dictionary: the full decoder, as the report runner
            from ldp_aggregator.rappor_decode import decode_rappor

            dec = decode_rappor(
                params,  # type: ignore[arg-type]
                acc,
                campaign_id=cfg.campaign_id,
                candidates=prep.items,
                confidence=cfg.confidence,
                alpha=cfg.detection_alpha,
            )
            return _Repeat(
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
            campaign_id=cfg.campaign_id,
            candidates=prep.items,
            confidence=cfg.confidence,
        )
    else:
        # A mechanism that estimates candidate strings (spec.estimates_candidates) estimates the items.
        cands = prep.items if registry.spec_for(params).estimates_candidates else ()
        est = estimate_frequencies(
            params, acc, confidence=cfg.confidence, candidates=cands, campaign_id=cfg.campaign_id
        )
    items = est.items
    return _Repeat(
        truth=truth,
        count=np.array([it.count for it in items], dtype=np.float64),
        std_error=np.array([it.std_error for it in items], dtype=np.float64),
        ci_low=np.array([it.ci_low for it in items], dtype=np.float64),
        ci_high=np.array([it.ci_high for it in items], dtype=np.float64),
        n_reports=est.n,
        detected=detected,
    )


def simulate_on_cluster(
    config: SimulationConfig, client: Client, *, partition_users: int = DEFAULT_PARTITION_USERS
) -> SimulationResult:
    """:func:`simulations.runners.simulate` for ``mode="report"``, with the users' partitions on ``client``.

    Raises:
        InvalidParameterError: not the report mode, a bad partition size, or a bad specification.
        LdpError: a partition failed on the cluster (its error, raised here).
    """
    from ldp_aggregator.reduce import tree_merge

    if config.mode != "report":
        raise InvalidParameterError("mode", config.mode, "report (every report encoded) with a cluster")
    if isinstance(partition_users, bool) or not isinstance(partition_users, int) or partition_users < 1:
        raise InvalidParameterError("partition_users", partition_users, "an integer >= 1")
    t0 = time.perf_counter()
    prep = prepare(config)
    sizes = _sizes(config.n_users, partition_users)
    repeats: list[_Repeat] = []
    for repeat_seed in np.random.SeedSequence(config.seed).spawn(config.repeats):
        seeds = repeat_seed.spawn(len(sizes))
        futures = client.map(partition_task, [config] * len(sizes), sizes, seeds, pure=False)
        # Value counts (the truth) are gathered as they finish; the accumulators merge on the workers.
        counts_futures = client.map(lambda pair: pair[1], futures, pure=False)
        acc_futures = client.map(lambda pair: pair[0], futures, pure=False)
        acc = accumulator_from_bytes(tree_merge(client, acc_futures))
        counts = np.zeros(prep.domain_size, dtype=np.int64)
        for part in (f.result() for f in counts_futures):
            counts += np.frombuffer(cast(bytes, part), dtype="<i8")
        repeats.append(_estimate(prep, acc, prep.item_truth(counts)))
    return _result(prep, repeats, time.perf_counter() - t0)


def _result(prep: PreparedSimulation, repeats: list[_Repeat], elapsed: float) -> SimulationResult:
    config = prep.config
    est = np.stack([r.count for r in repeats])
    se = np.stack([r.std_error for r in repeats])
    lo = np.stack([r.ci_low for r in repeats])
    hi = np.stack([r.ci_high for r in repeats])
    truth = np.stack([r.truth for r in repeats])
    n_reports = np.array([r.n_reports for r in repeats], dtype=np.int64)
    detected: Any = None
    z = None
    if registry.spec_for(prep.params).kind is Kind.RAPPOR:
        from statistics import NormalDist

        # The report runner's detection rule: one-sided Bonferroni z over the candidates.
        z = NormalDist().inv_cdf(1.0 - config.detection_alpha / len(prep.items))
        detected = (se > 0) & (est > z * se)
        if all(r.detected is not None for r in repeats):
            detected = np.stack([cast(NDArray[np.bool_], r.detected) for r in repeats])
    metrics = compute_metrics(
        truth, est, variance=se**2, ci_low=lo, ci_high=hi, detected=detected, n_users=n_reports
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
        elapsed_s=elapsed,
    )
