"""`ldp-sim run --mode report --cluster`: partitions of users encoded and accumulated on Dask."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster
from typer.testing import CliRunner

from ldp_aggregator.accumulators import accumulator_from_bytes
from ldp_client import registry
from ldp_client.spec import Kind
from simulations.cli import app
from simulations.cluster import partition_task, simulate_on_cluster
from simulations.runners import SimulationConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def dask() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        yield client


def _mechanisms() -> list[str]:
    """One mechanism of each kind the report runner simulates (by registry kind, not by name)."""
    chosen: dict[Kind, str] = {}
    for spec in registry.SPECS:
        if spec.kind in (Kind.SUPPORT, Kind.RAPPOR):
            chosen.setdefault(spec.kind, spec.name)
    return list(chosen.values())


@pytest.mark.parametrize("mechanism", _mechanisms())
def test_cluster_run_is_the_merge_of_its_seeded_partitions(mechanism: str, dask: Client) -> None:
    """Every partition's accumulator comes from its own spawned seed; the result is their exact merge."""
    spec = registry.spec_named(mechanism)
    config = SimulationConfig(
        mechanism=mechanism,
        population="zipf:1.1",
        n_users=25_000,
        domain=spec.fixed_domain_size or 8,
        epsilon=None if spec.kind is Kind.RAPPOR else 1.0,  # string RAPPOR is set by f, p, q
        mode="report",
        seed=5,
    )
    result = simulate_on_cluster(config, dask, partition_users=10_000)
    seeds = np.random.SeedSequence(5).spawn(1)[0].spawn(3)
    parts = [partition_task(config, n, s) for n, s in zip((10_000, 10_000, 5_000), seeds, strict=True)]
    acc = accumulator_from_bytes(parts[0][0])
    for acc_bytes, _ in parts[1:]:
        acc += accumulator_from_bytes(acc_bytes)
    counts = sum(np.frombuffer(c, dtype="<i8") for _, c in parts)
    assert result.n_reports.tolist() == [25_000] == [acc.n]
    assert np.array_equal(result.truth[0], np.asarray(counts))  # the users each partition's seed drew
    again = simulate_on_cluster(config, dask, partition_users=10_000)
    assert np.array_equal(again.estimates, result.estimates)  # reproducible for a seed
    # z = 6 from the estimator's own standard errors (one seeded run).
    assert np.all(np.abs(result.estimates - result.truth) < 6 * result.std_errors + 1e-9)


def test_ldp_sim_run_cluster_on_a_scheduler_address(dask: Client) -> None:
    args = ["run", "--mechanism", "grr", "--population", "zipf:1.1", "--domain", "10", "--users", "20000"]
    args += ["--epsilon", "1", "--mode", "report", "--seed", "3", "--json"]
    result = runner.invoke(app, [*args, "--cluster", "--scheduler", dask.scheduler.address])
    assert result.exit_code == 0, result.output
    doc: Any = json.loads(result.stdout)
    assert doc["summary"]["n_users"] == 20_000 and doc["summary"]["metrics"]["n_items"] == 10


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mode", "sum", "--cluster"], "invalid --cluster: for frequency mechanisms with --mode report"),
        (
            ["--mode", "report", "--scheduler", "tcp://127.0.0.1:1"],
            "invalid --scheduler: only with --cluster",
        ),
    ],
)
def test_cluster_options_are_refused_where_they_do_not_apply(extra: list[str], message: str) -> None:
    args = ["run", "--mechanism", "grr", "--domain", "10", "--users", "1000", "--epsilon", "1", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}")
