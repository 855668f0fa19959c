"""Simulations of the issue-6 frequency oracles: exact sum samplers, runners, ``ldp-sim`` and auto."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from ldp_client.mechanisms.hr import in_support
from ldp_client.params import HadamardParams, OUEParams, SUEParams, make_params
from simulations.cli import app
from simulations.oracle_sampling import has_sum_sampler, sample_hr_counts, sample_ue_support
from simulations.runners import SimulationConfig, simulate, sweep

ALPHA = 1e-6
runner = CliRunner()


@pytest.mark.statistical
@pytest.mark.parametrize("cls", [OUEParams, SUEParams])
def test_ue_support_sampler_is_binomial(cls: type[OUEParams]) -> None:
    params = cls.from_epsilon(5, 1.0)
    counts = np.array([400, 300, 200, 100, 0])
    rng = np.random.default_rng(8)
    draws = np.array([sample_ue_support(params, counts, rng)[1] for _ in range(2000)])
    n = counts.sum()
    mean = counts * params.p_star + (n - counts) * params.q_star
    var = counts * params.p_star * (1 - params.p_star) + (n - counts) * params.q_star * (1 - params.q_star)
    z = stats.norm.isf(ALPHA / 10)
    assert np.all(np.abs(draws.mean(axis=0) - mean) <= z * np.sqrt(var / 2000))
    lo, hi = stats.chi2.ppf([ALPHA / 10, 1 - ALPHA / 10], 1999) / 1999
    assert np.all((draws.var(axis=0, ddof=1) / var >= lo) & (draws.var(axis=0, ddof=1) / var <= hi))


@pytest.mark.statistical
def test_hr_count_sampler_matches_the_channel() -> None:
    params = HadamardParams.from_epsilon(5, 1.0)  # K = 8
    counts = np.array([500, 250, 120, 80, 50])
    rng = np.random.default_rng(9)
    draws = np.array([sample_hr_counts(params, counts, rng) for _ in range(1000)])
    assert set(draws.sum(axis=1).tolist()) == {1000}
    p, k = params.p_star, params.order
    mean = np.array(
        [
            sum(c * (2 * p / k if in_support(x, j) else 2 * (1 - p) / k) for x, c in enumerate(counts))
            for j in range(k)
        ]
    )
    # Each N_j is a sum of independent Bernoullis: Var = sum c pi (1 - pi).
    var = np.array(
        [
            sum(
                c * q * (1 - q)
                for x, c in enumerate(counts)
                for q in [2 * p / k if in_support(x, j) else 2 * (1 - p) / k]
            )
            for j in range(k)
        ]
    )
    z = stats.norm.isf(ALPHA / (2 * k))
    assert np.all(np.abs(draws.mean(axis=0) - mean) <= z * np.sqrt(var / 1000))


def test_sum_sampler_availability() -> None:
    assert has_sum_sampler(make_params("oue", epsilon=1.0, domain=8))
    assert has_sum_sampler(make_params("hr", epsilon=1.0, domain=8))
    for name in ("olh", "blh", "ss"):
        assert not has_sum_sampler(make_params(name, epsilon=1.0, domain=8))


@pytest.mark.statistical
@pytest.mark.parametrize("mechanism", ["oue", "sue", "olh", "blh", "ss", "hr", "auto"])
@pytest.mark.parametrize("mode", ["sum", "report"])
def test_simulate_every_oracle(mechanism: str, mode: str) -> None:
    cfg = SimulationConfig(
        mechanism=mechanism,
        population="zipf:1.1",
        n_users=20_000,
        domain=16,
        epsilon=1.0,
        mode=mode,
        repeats=3,
    )
    res = simulate(cfg)
    assert res.params.name != "auto"
    assert res.estimates.shape == (3, 16)
    z = (res.estimates - res.truth) / res.std_errors
    assert np.all(np.abs(z) < stats.norm.isf(ALPHA / (2 * 48)))


def test_simulate_set_valued_and_sweep_auto() -> None:
    cfg = SimulationConfig(
        mechanism="set-valued",
        population="uniform",
        n_users=5000,
        domain=8,
        epsilon=2.0,
        params={"max_items": "2", "inner": "grr"},
        mode="report",
    )
    res = simulate(cfg)
    assert res.params.name == "set-valued" and res.n_reports.tolist() == [5000]
    sw = sweep(
        SimulationConfig(mechanism="auto", population="zipf:1.1", n_users=5000, domain=64, epsilon=1.0),
        over="epsilon",
        values=["1", "4"],
    )
    assert [p.result.params.name for p in sw.points] == ["ss", "grr"]  # GRR for d < 3 e^eps + 2


def test_ldp_sim_cli_oracles(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    res = runner.invoke(
        app,
        [
            "run",
            "--mechanism",
            "oue",
            "--epsilon",
            "1",
            "--domain",
            "32",
            "--users",
            "20000",
            "--json-out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["summary"]["params"]["q"] == pytest.approx(OUEParams.from_epsilon(32, 1.0).q)
    res = runner.invoke(
        app, ["run", "--mechanism", "auto", "--epsilon", "2", "--domain", "64", "--users", "5000"]
    )
    assert res.exit_code == 0 and "auto chose ss" in res.output
    res = runner.invoke(
        app, ["run", "--mechanism", "olh", "--epsilon", "2", "--domain", "64", "--users", "5000"]
    )
    assert res.exit_code == 0 and "no exact sum sampler" in res.output
    js = tmp_path / "sv.json"
    res = runner.invoke(
        app,
        [
            "run",
            "--mechanism",
            "set-valued",
            "--epsilon",
            "2",
            "--domain",
            "16",
            "--users",
            "5000",
            "--param",
            "max_items=3",
            "--param",
            "inner=olh",
            "--json-out",
            str(js),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(js.read_text())["summary"]["params"]["max_items"] == 3
    res = runner.invoke(
        app, ["run", "--mechanism", "ss", "--epsilon", "1", "--domain", "16", "--param", "k=99"]
    )
    assert res.exit_code == 2 and "k=" in res.output
