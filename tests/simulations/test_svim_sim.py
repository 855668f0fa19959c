"""``ldp-sim run --mechanism svim`` (issue 18): both stages on the planted set population, every mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from simulations.cli import app
from simulations.set_population import SetPopulation, parse_set_population

runner = CliRunner()
ARGS = [
    "run",
    "--mechanism",
    "svim",
    "-p",
    "sets",
    "-d",
    "40",
    "--epsilon",
    "4",
    "--param",
    "max_items=8",
    "--seed",
    "5",
    "--json",
]


@pytest.mark.parametrize(("mode", "n"), [("sum", 100_000), ("report", 100_000), ("grpc", 30_000)])
def test_both_stages_find_the_planted_itemsets(mode: str, n: int) -> None:
    result = runner.invoke(app, [*ARGS, "-n", str(n), "--mode", mode])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["summary"]["mechanism"] == "svim" and doc["summary"]["n_users"] == n
    assert set(doc["metrics"]) == {"items", "itemsets"}
    items, sets = doc["stages"]["items"], doc["stages"]["itemsets"]
    assert items["n_reports"] + sets["n_reports"] == n
    assert doc["metrics"]["items"]["recall_top10"] >= 0.8
    assert sets["ranked"][0]["label"] == "0+1"  # the most frequent planted pair
    for key in ("mse", "mse_over_variance", "coverage", "precision_top10", "recall_top10"):
        assert key in doc["metrics"]["itemsets"]


def test_the_set_population_plants_its_itemsets() -> None:
    sets = SetPopulation().sets(50_000, 30, np.random.default_rng(0))
    held = np.zeros((sets.shape[0], 31), dtype=bool)
    held[np.arange(sets.shape[0])[:, None], np.where(sets >= 0, sets, 30)] = True
    assert (sets >= 0).any(axis=1).all()
    pairs = {(a, b): np.mean(held[:, a] & held[:, b]) for a in range(10) for b in range(a + 1, 10)}
    assert pairs[(0, 1)] >= 0.30 - 0.01 and max(pairs, key=pairs.__getitem__) == (0, 1)  # planted, plus noise
    assert np.mean(held[:, 2] & held[:, 3] & held[:, 4]) >= 0.22 - 0.01
    assert parse_set_population("zipf:1.1") is None and parse_set_population("sets:2") == SetPopulation(
        extra=2
    )


def test_a_bad_set_population_is_refused_in_one_line() -> None:
    result = runner.invoke(
        app,
        [
            "run",
            "--mechanism",
            "svim",
            "-p",
            "sets:0",
            "-d",
            "40",
            "--epsilon",
            "4",
            "--param",
            "max_items=8",
            "-n",
            "1000",
        ],
    )
    assert result.exit_code != 0
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1, result.output
