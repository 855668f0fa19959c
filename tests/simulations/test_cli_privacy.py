"""``ldp-sim privacy compose|shuffle`` (issue 17): the figures of the accounting functions, a table or strict
JSON, and one ``error:`` line with exit 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldp_client.accounting import (
    advanced_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    pld,
    shuffle,
)
from simulations.cli import app

runner = CliRunner()


def test_compose_pure_reports_json(tmp_path: Path) -> None:
    out = tmp_path / "compose.json"
    result = runner.invoke(
        app,
        [
            *("privacy", "compose", "-m", "pure:0.5x100", "--delta", "1e-6", "--target-epsilon", "10"),
            *("--json", "--json-out", str(out)),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert json.loads(out.read_text()) == doc
    methods = {m["method"]: m for m in doc["methods"]}
    assert methods["basic"]["epsilon"] == pytest.approx(50.0)
    assert methods["advanced"]["epsilon"] == pytest.approx(advanced_composition(0.5, 0.0, 100, 1e-6).epsilon)
    assert methods["optimal"]["epsilon"] == pytest.approx(optimal_composition_epsilon(0.5, 100, 1e-6))
    numerical = methods["numerical"]["epsilon"]
    assert (
        methods["optimal"]["epsilon"] <= numerical <= methods["optimal"]["epsilon"] + 100 * pld.DEFAULT_STEP
    )
    assert doc["delta_at_target"]["optimal"] == pytest.approx(optimal_composition_delta(0.5, 100, 10.0))
    assert doc["reports"] == 100


def test_compose_mixed_mechanisms_table() -> None:
    result = runner.invoke(
        app, ["privacy", "compose", "-m", "grr:1:16x30", "-m", "laplace:2x10", "-m", "gaussian:4"]
    )
    assert result.exit_code == 0, result.output
    assert "41 reports composed" in result.stdout
    expected = pld.compose(
        [(pld.randomized_response(1.0, 16), 30), (pld.laplace(2.0), 10), pld.gaussian(4.0)]
    ).epsilon_for_delta(1e-6)
    assert f"{expected:.6g}" in result.stdout
    assert "no pure epsilon" in result.stdout  # basic/advanced do not apply to a Gaussian mechanism


def test_shuffle_json_and_table() -> None:
    result = runner.invoke(
        app, ["privacy", "shuffle", "--epsilon0", "4", "--n", "1000000", "--n", "100", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert rows[0]["epsilon_closed_form"] == pytest.approx(shuffle.closed_form_epsilon(10**6, 4.0, 1e-6))
    assert rows[0]["epsilon_numerical"] == pytest.approx(shuffle.numerical_epsilon(10**6, 4.0, 1e-6))
    assert rows[0]["closed_form_applies"] and not rows[1]["closed_form_applies"]
    assert rows[1]["epsilon_closed_form"] == 4.0
    table = runner.invoke(app, ["privacy", "shuffle", "--epsilon0", "4", "--n", "1000000"])
    assert table.exit_code == 0
    assert "0.200985" in table.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["compose", "-m", "foo:1"], ["--mechanism", "'foo:1'", "pure:EPS"]),
        (["compose", "-m", "pure:-1"], ["--mechanism", "EPS >= 0"]),
        (["compose", "-m", "grr:1:2.5"], ["--mechanism", "D an integer >= 2"]),
        (["compose", "-m", "laplace:0"], ["--mechanism", "both > 0"]),
        (["compose", "-m", "pure:1x0"], ["--mechanism", "COUNT >= 1"]),
        (["compose", "-m", "pure:nan"], ["--mechanism", "finite"]),
        (["compose", "-m", "pure:1", "--delta", "1"], ["--delta", "(0, 1)"]),
        (["compose", "-m", "pure:1", "--delta-prime", "0"], ["--delta-prime", "(0, 1)"]),
        (["compose", "-m", "gaussian:1", "--step", "0"], ["--step", "(0, 1]"]),
        (["shuffle", "--epsilon0", "4", "--n", "1"], ["--n", "[2,"]),
        (["shuffle", "--epsilon0", "-4", "--n", "100"], ["--epsilon0", ">= 0"]),
        (["shuffle", "--epsilon0", "4", "--n", "100", "--delta", "0"], ["--delta", "(0, 1)"]),
        (["shuffle", "--epsilon0", "4", "--n", "100", "--tolerance", "1"], ["--tolerance", "(0, 0.1]"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needles: list[str]) -> None:
    result = runner.invoke(app, ["privacy", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.output
