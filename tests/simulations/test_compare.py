"""``ldp-sim compare`` (issue 17): numeric mechanisms, the Gaussian among them, at the same epsilon on the
same population, with the table and strict JSON; every estimator calibrated (seeded); bad options named
in one line, exit 2."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian import calibration
from simulations.cli import app
from simulations.compare import check_mechanisms, compare_mechanisms, compare_to_dict

runner = CliRunner()
FOUR = ["gaussian", "laplace", "piecewise", "duchi"]


@pytest.mark.statistical
def test_every_mechanism_is_calibrated_at_the_same_epsilon() -> None:
    """2000 seeded repeats of 1000 users each: MSE / reported variance in [0.9, 1.1] (its relative SD is
    sqrt(2/2000) = 0.032) and coverage in [0.93, 0.97] (SD 0.005) for every mechanism; the Gaussian's
    variance is its calibrated sigma's (analytic, epsilon 1, delta 1e-6), and at the same epsilon the pure
    mechanisms have the smaller MSE."""
    res = compare_mechanisms(
        FOUR, epsilon=1.0, delta=1e-6, population="normal:0,0.5", users=1000, repeats=2000, seed=17
    )
    doc = compare_to_dict(res)
    rows = {row["mechanism"]: row for row in doc["mechanisms"]}
    for name, row in rows.items():
        assert 0.9 <= row["mse_over_variance"] <= 1.1, (name, row)
        assert 0.93 <= row["coverage"] <= 0.97, (name, row)
        assert row["mean_variance"] == pytest.approx(row["theory_variance"], rel=0.02), name
        assert 0.999 < row["epsilon"] <= 1.0
    assert rows["gaussian"]["delta"] == 1e-6 and all(rows[n]["delta"] == 0.0 for n in FOUR[1:])
    gaussian = res.runs[0]
    lo, hi = gaussian.params.lo, gaussian.params.hi  # type: ignore[attr-defined]
    sigma = calibration.analytic_sigma(1.0, 1e-6) * (hi - lo)
    # Var of one report: the noise's sigma^2 plus the population's own variance (clamped to [lo, hi]).
    assert rows["gaussian"]["theory_variance"] * 1000 == pytest.approx(sigma**2, rel=0.05)
    assert min(rows[n]["mse"] for n in FOUR[1:]) < rows["gaussian"]["mse"]
    assert min(row["mse_over_best"] for row in rows.values()) == 1.0


def test_cli_table_and_strict_json() -> None:
    args = [
        "compare",
        "--mechanisms",
        "gaussian,laplace,piecewise,duchi",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
    ]
    args += ["--population", "normal:0,0.5", "--users", "2000", "--repeat", "3"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    text = " ".join(table.output.split())
    for needle in ("gaussian", "laplace", "piecewise", "duchi", "MSE", "coverage", "1e-06"):
        assert needle in text
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert doc["format"] == "ldp-sim.compare.v1" and doc["repeats"] == 3 and doc["delta"] == 1e-6
    assert [m["mechanism"] for m in doc["mechanisms"]] == FOUR
    assert all(math.isfinite(m["mse"]) and m["mse"] > 0 for m in doc["mechanisms"])
    # The same seed gives the same figures; another seed others.
    again = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert again["mechanisms"] == doc["mechanisms"] or _same_but_time(again, doc)
    other = json.loads(runner.invoke(app, [*args, "--json", "--seed", "5"]).stdout)
    assert other["mechanisms"][1]["mse"] != doc["mechanisms"][1]["mse"]


def _same_but_time(a: dict[str, object], b: dict[str, object]) -> bool:
    strip = [{k: v for k, v in m.items() if k != "elapsed_s"} for m in a["mechanisms"]]  # type: ignore[attr-defined]
    return strip == [{k: v for k, v in m.items() if k != "elapsed_s"} for m in b["mechanisms"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--mechanisms", "gaussian,laplace"], ["invalid --delta", "gaussian"]),
        (["--mechanisms", "laplace,duchi", "--delta", "1e-6"], ["invalid --delta", "none of these"]),
        (["--mechanisms", "laplace,grr", "--delta", "1e-6"], ["invalid --mechanisms", "'grr'", "piecewise"]),
        (["--mechanisms", "laplace"], ["invalid --mechanisms", "two or more"]),
        (["--mechanisms", "laplace,laplace"], ["invalid --mechanisms", "each mechanism once"]),
        (["--mechanisms", "laplace,duchi", "--epsilon", "0"], ["invalid --epsilon"]),
        (["--mechanisms", "laplace,duchi", "--population", "zipf:1.1"], ["invalid --population"]),
        (["--mechanisms", "gaussian,duchi", "--delta", "2"], ["invalid --delta"]),
    ],
)
def test_bad_options_are_one_line(extra: list[str], needles: list[str]) -> None:
    args = ["compare", "--users", "100", "--repeat", "1"]
    if "--epsilon" not in extra:
        args += ["--epsilon", "1"]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_check_mechanisms_names_the_field() -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_mechanisms(["multidim", "laplace"], None)
    assert info.value.field == "mechanisms" and "multidim" in str(info.value)
    assert check_mechanisms([" laplace", "sr "], None) == ("laplace", "sr")
