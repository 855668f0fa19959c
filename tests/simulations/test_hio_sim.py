"""ldp-sim with hierarchical intervals (issue 18): every mode answers the run's ranges, with metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from simulations.cli import app
from simulations.ranges import range_metrics, range_queries
from simulations.runners import SimulationConfig, simulate


def test_the_run_s_ranges_span_short_to_whole() -> None:
    ranges = range_queries(300, seed=4)
    assert range_queries(300, seed=4) == ranges and len(ranges) == 24
    lengths = sorted(hi - lo + 1 for lo, hi in ranges)
    assert lengths[0] == 1 and lengths[-1] == 300
    assert all(0 <= lo <= hi < 300 for lo, hi in ranges)


def test_range_metrics_compare_with_the_truth() -> None:
    truth = np.array([[1, 2, 3, 4], [2, 2, 2, 2]])
    ranges = [(0, 1), (1, 3)]
    # Repeat 0: exact; repeat 1: both off by 2 with standard error 2, the second outside its interval.
    rows = np.array([[[3, 1, 1, 5], [9, 1, 7, 11]], [[6, 2, 2, 10], [8, 2, 8.5, 12]]], dtype=np.float64)
    m = range_metrics(ranges, truth, rows, n=10)
    assert m["mse"] == pytest.approx(8 / 4)
    assert m["mse_over_variance"] == pytest.approx(2.0 / 2.5)
    assert m["coverage"] == pytest.approx(3 / 4)


@pytest.mark.parametrize("mode", ["sum", "report", "grpc"])
def test_every_mode_reports_range_metrics(mode: str) -> None:
    config = SimulationConfig(
        mechanism="hio",
        population="zipf:1.1",
        domain=64,
        epsilon=2.0,
        n_users=20_000,
        seed=3,
        repeats=2,
        mode=mode,
        workers=1,
    )
    res = simulate(config)
    rm = res.range_metrics
    assert rm is not None and len(rm["ranges"]) == 24
    # Seeded: the ranges' MSE is of the order of their reported variance.
    assert 0.3 < rm["mse_over_variance"] < 3.0 and rm["coverage"] >= 0.8


def test_ldp_sim_json_carries_the_range_metrics() -> None:
    result = CliRunner().invoke(
        app,
        ["run", "-m", "hio", "--domain", "40", "--epsilon", "2", "--users", "5000", "--mode", "report",
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert {"mse_over_variance", "coverage", "rmse_frequency", "by_length"} <= set(summary["range_metrics"])
