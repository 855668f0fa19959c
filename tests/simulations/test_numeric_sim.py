"""Numeric simulations: ``ldp-sim run`` for the mean mechanisms (simulations/numeric.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from ldp_client.numeric_params import MultidimParams, PiecewiseParams
from simulations.cli import app
from simulations.numeric import numeric_to_dict, simulate_numeric
from simulations.runners import SimulationConfig, simulate

runner = CliRunner()


def test_simulate_numeric_is_seeded_and_reports_metrics() -> None:
    cfg = SimulationConfig(
        mechanism="piecewise", population="normal:0.2,0.5", epsilon=1.0, n_users=20_000, repeats=3, seed=11
    )
    a = simulate_numeric(cfg)
    b = simulate_numeric(cfg)
    assert (a.estimates == b.estimates).all()
    assert isinstance(a.params, PiecewiseParams) and (a.params.lo, a.params.hi) == (-1.0, 1.0)
    assert a.truth.shape == (1,) and a.estimates.shape == (3, 1)
    m = a.metrics
    assert m.n_repeats == 3 and 0.0 <= m.coverage <= 1.0
    assert m.theory_variance == pytest.approx(m.mean_variance, rel=0.1)
    doc = numeric_to_dict(a)
    assert doc["summary"]["format"] == "ldp-sim.numeric-run.v1"
    assert len(doc["items"]) == 3 and {"mean", "ci_low", "ci_high", "truth"} <= set(doc["items"][0])
    json.dumps(doc, allow_nan=False)


@pytest.mark.statistical
def test_numeric_simulation_is_calibrated() -> None:
    # 200 repeats: coverage within 5 binomial SDs of 0.95, MSE/theory within 5 SDs (sqrt(2/R)) of 1.
    cfg = SimulationConfig(
        mechanism="hybrid", population="uniform-num:0,10", epsilon=2.0, n_users=5000, repeats=200, seed=3
    )
    res = simulate_numeric(cfg)
    assert abs(res.metrics.coverage - 0.95) <= 5 * math.sqrt(0.95 * 0.05 / 200)
    assert abs(res.metrics.mse_over_theory - 1) <= 5 * math.sqrt(2 / 200)
    assert abs(res.metrics.mse_over_variance - 1) <= 5 * math.sqrt(2 / 200)


def test_multidim_simulation() -> None:
    cfg = SimulationConfig(
        mechanism="multidim",
        population="uniform-num:-1,1",
        epsilon=6.0,
        domain=4,
        n_users=10_000,
        params={"base": "duchi"},
        mode="report",
    )
    res = simulate_numeric(cfg)
    assert isinstance(res.params, MultidimParams) and res.params.k == 2 and res.params.d == 4
    assert res.estimates.shape == (1, 4)
    assert res.n_reports.sum() == 2 * 10_000


@pytest.mark.parametrize(
    ("mechanism", "extra"),
    [("piecewise", {}), ("multidim", {"domain": 3, "params": {"base": "piecewise"}})],
)
def test_grpc_mode_gives_the_report_mode_estimates(mechanism: str, extra: dict[str, object]) -> None:
    # Same seed, same users per draw: the aggregator, fed the batches over gRPC (Collector.Submit), must
    # return through Analyst.GetEstimate exactly what the local accumulator gives.
    common: dict[str, object] = dict(
        mechanism=mechanism, population="normal:0.3,0.4,-1,1", epsilon=2.0, n_users=3000, repeats=2, seed=5
    )
    local = simulate_numeric(SimulationConfig(**common, **extra, mode="report", chunk_size=700))
    remote = simulate_numeric(SimulationConfig(**common, **extra, mode="grpc", batch_size=700))
    assert remote.estimates == pytest.approx(local.estimates, rel=1e-12, abs=1e-15)
    assert remote.std_errors == pytest.approx(local.std_errors, rel=1e-9)
    assert remote.ci_low == pytest.approx(local.ci_low, rel=1e-9, abs=1e-12)
    assert (remote.n_reports == local.n_reports).all()
    assert remote.theory_variance == pytest.approx(local.theory_variance, rel=1e-12)
    assert "grpc" in numeric_to_dict(remote)["summary"]["mode"]


def test_errors_name_the_option() -> None:
    with pytest.raises(InvalidParameterError, match="population"):
        simulate_numeric(SimulationConfig(mechanism="duchi", population="zipf:1.1", epsilon=1.0, n_users=10))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        simulate_numeric(SimulationConfig(mechanism="duchi", population="uniform-num:0,1", n_users=10))
    with pytest.raises(InvalidParameterError, match="domain"):
        simulate_numeric(
            SimulationConfig(mechanism="sr", population="uniform-num:0,1", epsilon=1.0, n_users=10, domain=3)
        )
    with pytest.raises(InvalidParameterError, match="mechanism"):
        simulate(SimulationConfig(mechanism="laplace", population="uniform-num:0,1", epsilon=1.0, n_users=10))


def test_cli_run_numeric(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    png = tmp_path / "run.png"
    result = runner.invoke(
        app,
        ["run", "--mechanism", "laplace", "--population", "normal:0,1", "--epsilon", "1", "--users", "5000",
         "--repeat", "2", "--json-out", str(out), "--plot", str(png)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "coverage" in result.output and "mean estimation" in result.output
    doc = json.loads(out.read_text())
    assert doc["summary"]["mechanism"] == "laplace" and len(doc["items"]) == 2
    assert png.stat().st_size > 0
    result = runner.invoke(
        app, ["run", "--mechanism", "sr", "--population", "zipf:1.1", "--epsilon", "1", "--users", "10"]
    )
    assert result.exit_code == 2 and "--population" in result.output
    result = runner.invoke(
        app,
        ["run", "--mechanism", "piecewise", "--population", "uniform-num:0,1", "--epsilon", "1",
         "--users", "100", "--param", "bogus=1"],
    )  # fmt: skip
    assert result.exit_code == 2 and "--param" in result.output


def test_multidim_with_one_attribute_runs() -> None:
    # D = 1 is a valid multidim campaign; its simulated values are an (n, 1) array, never flattened to the
    # 1-D form of the one-dimensional mechanisms (which multidim's encoder refuses).
    cfg = SimulationConfig(
        mechanism="multidim", population="uniform-num:0,1", epsilon=1.0, domain=1, n_users=2000, seed=5
    )
    res = simulate_numeric(cfg)
    assert isinstance(res.params, MultidimParams) and res.params.d == 1
    assert res.estimates.shape == (1, 1) and int(res.n_reports[0, 0]) == 2000
    assert abs(res.estimates[0, 0] - 0.5) < 6 * res.std_errors[0, 0]


def test_a_run_may_give_the_mechanism_directly_instead_of_epsilon() -> None:
    # Without --epsilon, the mechanism's own fields (as make_params takes them) set it; only a range is
    # not enough.
    cfg = SimulationConfig(
        mechanism="duchi",
        population="uniform-num:0,1",
        n_users=1000,
        params={"low_probability": 0.25},
    )
    res = simulate_numeric(cfg)
    assert res.params.epsilon == pytest.approx(math.log(3.0))
    multi = SimulationConfig(
        mechanism="multidim",
        population="uniform-num:0,1",
        n_users=1000,
        params={"ranges": "0:1,0:2", "k": 1, "base": "duchi", "low_probability": 0.25},
    )
    res = simulate_numeric(multi)
    assert isinstance(res.params, MultidimParams) and res.params.epsilon == pytest.approx(math.log(3.0))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        simulate_numeric(
            SimulationConfig(mechanism="duchi", population="uniform-num:0,1", n_users=10, params={"lo": 0})
        )
