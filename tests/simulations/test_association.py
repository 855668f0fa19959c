"""``ldp-sim associate`` and :func:`simulations.association.simulate_association` (issue 5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from ldp_client.params import BinaryRRParams, PairedParams, RapporParams
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
