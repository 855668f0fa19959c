"""ldp-sim with CALM marginals (issue 18): the items are the chosen marginals' cells, in every mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client.params import make_params
from simulations.cli import app
from simulations.marginals import marginal_items
from simulations.populations import DirichletPopulation, parse_population
from simulations.runners import SimulationConfig, simulate

ATTRS = "age=young/mid/old;os=android/ios;plan=free/paid"
FIELDS = (("attributes", ATTRS), ("marginals", "age+os;os+plan;age+plan"))


def test_the_dirichlet_population_is_a_seeded_joint() -> None:
    pop = parse_population("dirichlet:0.5,7")
    assert isinstance(pop, DirichletPopulation) and pop.spec == "dirichlet:0.5,7"
    p = pop.probabilities(12)
    np.testing.assert_array_equal(p, parse_population("dirichlet:0.5,7").probabilities(12))
    assert not np.array_equal(p, parse_population("dirichlet:0.5,8").probabilities(12))
    assert p.sum() == pytest.approx(1.0)
    joint = p.reshape(3, 4)  # as two attributes: not the product of its margins
    assert np.abs(joint - np.outer(joint.sum(axis=1), joint.sum(axis=0))).max() > 0.01


def test_marginal_items_project_the_joint() -> None:
    params = make_params("calm", epsilon=1.0, fields=dict(FIELDS))
    labels, value_items, joint = marginal_items(params)
    assert joint == 12 and len(labels) == 6 + 4 + 6
    assert labels[0] == "age=young|os=android" and labels[6] == "os=android|plan=free"
    # Joint index 7 = (mid, ios, paid): cells (mid, ios) = 3, (ios, paid) = 6 + 3, (mid, paid) = 10 + 3.
    assert [int(v[7]) for v in value_items] == [3, 9, 13]


@pytest.mark.parametrize("mode", ["sum", "report", "grpc"])
def test_every_mode_reports_marginal_metrics(mode: str) -> None:
    config = SimulationConfig(
        mechanism="calm",
        population="dirichlet:0.5,7",
        epsilon=1.0,
        n_users=20_000,
        seed=3,
        repeats=2,
        mode=mode,
        workers=1,
        params=FIELDS,
    )
    res = simulate(config)
    mm = res.marginal_metrics
    assert mm is not None and [m["attributes"] for m in mm["marginals"]] == [
        ["age", "os"], ["os", "plan"], ["age", "plan"]
    ]  # fmt: skip
    assert res.truth.shape == (2, 16) and (res.truth.sum(axis=1) == 3 * 20_000).all()
    # Seeded: the cells' MSE is of the order of their reported variance.
    assert 0.3 < mm["mse_over_variance"] < 3.0 and mm["coverage"] >= 0.8


def test_ldp_sim_json_carries_the_marginal_metrics_and_a_bad_domain_is_one_line() -> None:
    args = ["run", "-m", "calm", "--epsilon", "1", "--param", f"attributes={ATTRS}",
            "--param", "marginals=full", "-p", "dirichlet:1,2", "--users", "5000",
            "--mode", "report"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert {"mse_over_variance", "coverage", "marginals"} <= set(summary["marginal_metrics"])
    bad = CliRunner().invoke(app, [*args, "--domain", "10"])
    assert bad.exit_code != 0 and "12, the size of the full joint" in bad.output
