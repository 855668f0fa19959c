"""ldp-sim with the Gaussian mechanism (issue 17): every mode, delta in the summary, the same estimate from
every runner for one seed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulations.cli import app

runner = CliRunner()


@pytest.mark.parametrize("mode", ["sum", "report", "grpc"])
def test_ldp_sim_run_gaussian_in_every_mode(mode: str) -> None:
    args = ["run", "--mechanism", "gaussian", "--epsilon", "1", "--param", "lo=0", "--param", "hi=10"]
    args += ["--param", "delta=1e-6", "-p", "uniform-num:0,10", "-n", "4000", "--seed", "2", "--json"]
    result = runner.invoke(app, [*args, "--mode", mode])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    summary, (item,) = doc["summary"], doc["items"]
    assert summary["mechanism"] == "gaussian" and summary["delta"] == 1e-6
    assert 0.999 < summary["epsilon"] <= 1.0
    # sigma of the mechanism, 4.22 per unit of the range (analytic calibration, epsilon 1, delta 1e-6):
    # one estimate is within 6 standard errors of the truth, and the standard error is about sigma.
    assert abs(item["mean"] - item["truth"]) <= 6 * item["std_error"]
    assert item["std_error"] == pytest.approx((42.2**2 + 100 / 12) ** 0.5 / 4000**0.5, rel=0.1)


def test_ldp_sim_run_gaussian_without_delta_says_so() -> None:
    args = ["run", "--mechanism", "gaussian", "--epsilon", "1", "--param", "lo=0", "--param", "hi=10"]
    result = runner.invoke(app, [*args, "-p", "uniform-num:0,10", "-n", "100"])
    assert result.exit_code == 2
    assert "delta" in result.output and "Traceback" not in result.output
