"""The two in-process runners: ``sum`` (exact sampling of the sufficient statistics) and ``report`` (every
report encoded by the batch encoder and added as the server ingests a batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import (
    accumulator_for,
    accumulator_from_sums,
    add_columns,
)
from ldp_client import registry
from ldp_client.params import MechanismParams
from simulations.runners.config import ProgressFn
from simulations.runners.prepare import PreparedSimulation
from simulations.runners.results import _estimate, _Outcome

if TYPE_CHECKING:
    from ldp_aggregator.accumulators import Accumulator
    from ldp_client.spec import SumSampler

# ------------------------------------------------------------------------------------------- sum runner


def _sum_repeat(prep: PreparedSimulation, rng: np.random.Generator, sampler: SumSampler) -> _Outcome:
    """One repeat from the spec's exact sampler of the layout's sums."""
    counts = prep.population.sample_counts(prep.config.n_users, prep.domain_size, rng)
    sums = sampler(counts, rng, campaign_id=prep.config.campaign_id, labels=prep.value_labels)
    return _estimate(prep, accumulator_from_sums(prep.params, sums), prep.item_truth(counts))


def _run_sum(
    prep: PreparedSimulation, seeds: list[np.random.SeedSequence], progress: ProgressFn | None
) -> list[_Outcome]:
    params = prep.params
    sampler = registry.spec_for(params).sum_sampler(params)
    if sampler is None:  # no exact sampler: every report is encoded
        return _run_report(prep, seeds, progress)
    out = []
    for seed in seeds:
        out.append(_sum_repeat(prep, np.random.default_rng(seed), sampler))
        if progress is not None:
            progress(prep.config.n_users)
    return out


# ---------------------------------------------------------------------------------------- report runner


def _encode_columns(
    params: MechanismParams,
    values: NDArray[np.int64],
    rng: np.random.Generator,
    *,
    campaign_id: str,
    labels: Sequence[str],
) -> Any:
    """One report per user with the client's batch encoder: the contract's columns for ``params``."""
    spec = registry.spec_for(params)
    return spec.encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)


def _accumulate(
    prep: PreparedSimulation, n_users: int, rng: np.random.Generator, progress: ProgressFn | None = None
) -> tuple[Accumulator, NDArray[np.int64]]:
    """``n_users`` users drawn, encoded and added as the server adds a batch: (accumulator, value counts).

    The report runner's one repeat, and one partition of a run on a cluster (:mod:`simulations.cluster`).
    """
    cfg = prep.config
    d = prep.domain_size
    acc = accumulator_for(prep.params)
    counts = np.zeros(d, dtype=np.int64)
    for values in prep.population.iter_values(n_users, d, rng, chunk_size=cfg.chunk_size):
        counts += np.bincount(values, minlength=d)
        columns = _encode_columns(
            prep.params, values, rng, campaign_id=cfg.campaign_id, labels=prep.value_labels
        )
        add_columns(acc, prep.params, columns)
        if progress is not None:
            progress(int(values.size))
    return acc, counts


def _report_repeat(
    prep: PreparedSimulation, rng: np.random.Generator, progress: ProgressFn | None
) -> _Outcome:
    acc, counts = _accumulate(prep, prep.config.n_users, rng, progress)
    return _estimate(prep, acc, prep.item_truth(counts))


def _run_report(
    prep: PreparedSimulation, seeds: list[np.random.SeedSequence], progress: ProgressFn | None
) -> list[_Outcome]:
    return [_report_repeat(prep, np.random.default_rng(seed), progress) for seed in seeds]
