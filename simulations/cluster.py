"""Per-report simulations on a Dask cluster: ``ldp-sim run --mode report --cluster``.

The ``report`` runner encodes every simulated user's report; on one machine its cost grows with the
population. Here the population is cut into partitions of users, and each partition is a task on the
cluster doing what the report runner does for all users: draw the users' values from the population
(``population.iter_values``), encode them with the mechanism's batch encoder (``spec.encode_batch``) and
add them to the campaign's accumulator (:func:`ldp_aggregator.accumulators.add_columns`), with a generator
of its own seeded from a :class:`numpy.random.SeedSequence` spawned per partition (so a run is reproducible
for a given seed and partition size, whatever the number of workers). The partitions' accumulators are
merged pairwise on the workers with the archive reduce's merge (:func:`ldp_aggregator.reduce.tree_merge`),
and the merged accumulator goes to the report runner's own estimate and result assembly
(:mod:`simulations.runners`), so a cluster run and a local run can never disagree on what they estimate.

The users are split differently from the single-machine report runner (one generator per partition instead
of one for the whole run), so the same seed gives other draws than ``--mode report`` without ``--cluster``;
both are exact simulations of the same distribution.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, cast

import numpy as np

from ldp_aggregator.accumulators import accumulator_from_bytes
from ldp_aggregator.reduce import tree_merge
from ldp_client.errors import InvalidParameterError
from simulations.runners import SimulationConfig, SimulationResult, prepare
from simulations.runners.local import _accumulate
from simulations.runners.results import _estimate, _Outcome
from simulations.runners.run import _gather

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
    acc, counts = _accumulate(prepare(config), n_users, np.random.default_rng(seed))
    return acc.to_bytes(), counts.astype("<i8").tobytes()


def _sizes(n: int, per: int) -> list[int]:
    return [min(per, n - start) for start in range(0, n, per)]


def simulate_on_cluster(
    config: SimulationConfig, client: Client, *, partition_users: int = DEFAULT_PARTITION_USERS
) -> SimulationResult:
    """:func:`simulations.runners.simulate` for ``mode="report"``, with the users' partitions on ``client``.

    Raises:
        InvalidParameterError: not the report mode, a bad partition size, or a bad specification.
        LdpError: a partition failed on the cluster (its error, raised here).
    """
    if config.mode != "report":
        raise InvalidParameterError("mode", config.mode, "report (every report encoded) with a cluster")
    if isinstance(partition_users, bool) or not isinstance(partition_users, int) or partition_users < 1:
        raise InvalidParameterError("partition_users", partition_users, "an integer >= 1")
    t0 = time.perf_counter()
    prep = prepare(config)
    sizes = _sizes(config.n_users, partition_users)
    outcomes: list[_Outcome] = []
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
        outcomes.append(_estimate(prep, acc, prep.item_truth(counts)))
    return _gather(prep, outcomes, time.perf_counter() - t0)
