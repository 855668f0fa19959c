"""ldp-sim with the Gaussian mechanism (issue 17): every mode with delta in the summary, and the
``privacy gaussian`` command."""

from __future__ import annotations

import json
import math

import pytest
import typer
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


def _privacy_app() -> typer.Typer:
    """ldp-sim itself: ``privacy gaussian`` as registered by simulations.cli."""
    from simulations.cli import app

    return app


def test_privacy_gaussian_command_reports_both_calibrations() -> None:
    result = runner.invoke(
        _privacy_app(), ["privacy", "gaussian", "--epsilon", "0.5", "--delta", "1e-6", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["format"] == "ldp-sim.privacy-gaussian.v1"
    assert doc["analytic_sigma"] == pytest.approx(8.057618480725, rel=1e-9)
    assert doc["classical_sigma"] == pytest.approx((2 * math.log(1.25e6)) ** 0.5 / 0.5, rel=1e-12)
    assert doc["discrete"]["epsilon"] <= 0.5 and doc["discrete"]["delta"] == 1e-6
    table = runner.invoke(_privacy_app(), ["privacy", "gaussian", "--epsilon", "2", "--delta", "1e-9"])
    assert table.exit_code == 0 and "epsilon < 1" in table.output


def test_privacy_gaussian_command_names_a_bad_option() -> None:
    result = runner.invoke(_privacy_app(), ["privacy", "gaussian", "--epsilon", "1", "--delta", "2"])
    assert result.exit_code == 2
    assert "invalid --delta" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("mode", ["report", "grpc"])
def test_ldp_sim_run_gaussian_vector(mode: str) -> None:
    # Coordinates from uniform(0, 0.5) in 3 dimensions: norms below 1, so no scaling onto the ball, and
    # every coordinate's estimate within 6 standard errors of the population mean 0.25.
    args = ["run", "--mechanism", "gaussian_vector", "--epsilon", "2", "--param", "dim=3"]
    args += ["--param", "bound=1", "--param", "delta=1e-6", "-p", "uniform-num:0,0.5", "-n", "5000"]
    result = runner.invoke(app, [*args, "--seed", "4", "--mode", mode, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["summary"]["delta"] == 1e-6 and doc["summary"]["epsilon"] <= 2.0
    assert [it["label"] for it in doc["items"]] == ["0", "1", "2"]
    for it in doc["items"]:
        assert it["truth"] == pytest.approx(0.25) and abs(it["mean"] - 0.25) <= 6 * it["std_error"]
