"""``ldp-sim associate`` and :func:`simulations.association.simulate_association` (issue 5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from ldp_client.params import BinaryRRParams, GRRParams, PairedParams, RapporParams
from simulations.association import AssociationConfig, simulate_association
from simulations.cli import app


@pytest.mark.statistical
def test_simulated_association_against_truth() -> None:
    params = PairedParams(first=BinaryRRParams.from_epsilon(2.0), second=BinaryRRParams.from_epsilon(2.0))
    dep = simulate_association(
        AssociationConfig(params=params, first_domain=2, dependence=0.6, n_users=50_000, seed=1)
    )
    ind = simulate_association(
        AssociationConfig(params=params, first_domain=2, dependence=0.0, n_users=50_000, seed=2)
    )
    assert dep.p_values[0] < 1e-6
    assert ind.p_values[0] > 1e-6  # P(p < 1e-6) = 1e-6 under independence
    for res in (dep, ind):
        assert np.all(np.abs(res.estimates - res.truth) <= 5 * res.std_errors)
        assert res.truth[0].sum() == pytest.approx(1.0)


def test_config_validation() -> None:
    params = PairedParams(first=RapporParams(k=16, h=2, m=4), second=BinaryRRParams.from_epsilon(1.0))
    with pytest.raises(InvalidParameterError) as info:
        AssociationConfig(params=params, second_domain=3)
    assert info.value.field == "second_domain"
    with pytest.raises(InvalidParameterError):
        AssociationConfig(params=params, dependence=1.5)


@pytest.mark.statistical
def test_ldp_sim_associate_cli(tmp_path: Path) -> None:
    out_json = tmp_path / "assoc.json"
    result = CliRunner().invoke(
        app,
        [
            "associate",
            "--first",
            "rappor",
            "--second",
            "rr",
            "--param",
            "first.k=16",
            "--param",
            "first.m=8",
            "--param",
            "first.f=0.25",
            "--param",
            "first.p=0.25",
            "--param",
            "first.q=0.75",
            "--param",
            "second.epsilon=2",
            "--domain",
            "3",
            "--dependence",
            "0.8",
            "--users",
            "40000",
            "--extra-candidates",
            "2",
            "--json-out",
            str(out_json),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "independence test rejects" in result.output
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["rejection_rate"] == 1.0 and doc["col_labels"] == ["no", "yes"]
    bad = CliRunner().invoke(app, ["associate", "--first", "oue", "--second", "rr"])
    assert bad.exit_code == 2


def test_a_grr_side_is_simulated_over_its_own_values() -> None:
    # Issue 14: a declared-domain side (grr) has no candidates; its population's values are its labels.
    params = PairedParams(
        first=GRRParams.from_epsilon(["a", "b", "c"], 3.0), second=BinaryRRParams.from_epsilon(2.0)
    )
    res = simulate_association(
        AssociationConfig(params=params, first_domain=3, dependence=0.5, n_users=20_000, seed=4)
    )
    assert res.row_labels == ("a", "b", "c") and res.col_labels == ("no", "yes")
    assert res.truth[0].sum() == pytest.approx(1.0)
    assert np.all(np.abs(res.estimates - res.truth) <= 6 * res.std_errors + 1e-9)


def test_ldp_sim_run_simulates_a_paired_campaign() -> None:
    # Issue 14: every registered mechanism is offered by `ldp-sim run`; a paired one runs the association.
    args = ["run", "-m", "paired", "--param", "first=grr", "--param", "first.epsilon=3", "--param"]
    args += ["first.domain=a,b,c", "--param", "second=boolean-rappor", "-n", "5000", "--seed", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["summary"]["mechanism"] == "paired" and doc["summary"]["n_users"] == 5000
    assert doc["summary"]["domains"] == [3, 2]
    assert doc["association"]["row_labels"] == ["a", "b", "c"]
    assert doc["association"]["col_labels"] == ["false", "true"]
    table = CliRunner().invoke(app, args[:-1])
    assert table.exit_code == 0 and "joint distribution: grr (rows) x boolean-rappor" in table.stdout
    refused = CliRunner().invoke(app, [*args[:-1], "--epsilon", "1"])
    assert refused.exit_code != 0 and "--epsilon" in refused.output
