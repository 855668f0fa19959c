"""ldp-sim with Haar wavelets (``haar``, issue 18): every mode answers the run's ranges, with metrics."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulations.cli import app
from simulations.runners import SimulationConfig, simulate


@pytest.mark.parametrize("mode", ["sum", "report", "grpc"])
def test_every_mode_reports_range_metrics(mode: str) -> None:
    config = SimulationConfig(
        mechanism="haar",
        population="zipf:1.1",
        domain=64,
        epsilon=2.0,
        n_users=20_000,
        seed=3,
        repeats=2,
        mode=mode,
        workers=1,
    )
    rm = simulate(config).range_metrics
    assert rm is not None and len(rm["ranges"]) == 24
    # Seeded: the ranges' MSE is of the order of their reported variance.
    assert 0.3 < rm["mse_over_variance"] < 3.0 and rm["coverage"] >= 0.8


def test_ldp_sim_json_carries_the_range_metrics() -> None:
    result = CliRunner().invoke(
        app,
        ["run", "-m", "haar", "--domain", "40", "--epsilon", "2", "--users", "5000", "--mode", "report",
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert {"mse_over_variance", "coverage", "rmse_frequency", "by_length"} <= set(summary["range_metrics"])
