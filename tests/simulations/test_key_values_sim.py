"""ldp-sim with key-value data (issue 18, pckv): the kv-zipf population, every mode, JSON metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from simulations.cli import app
from simulations.key_values import KeyValuePopulation, key_value_metrics, parse_key_value_population

runner = CliRunner()
ARGS = ["--mechanism", "pckv", "-d", "6", "--epsilon", "2", "--param", "padding=2", "--param", "lo=1",
        "--param", "hi=5", "-p", "kv-zipf:0.8,keys=2", "-n", "20000", "--seed", "3", "--json"]  # fmt: skip


def test_the_population_is_seeded_and_has_the_declared_means() -> None:
    pop = KeyValuePopulation(d=5, s=1.0, max_keys=3, lo=1.0, hi=5.0)
    keys, values = pop.sample(200_000, 4, np.random.default_rng(1))
    again, _ = pop.sample(200_000, 4, np.random.default_rng(1))
    assert (keys == again).all() and (keys[:, 3] == -1).all()
    held = (keys >= 0).sum(axis=1)
    assert held.min() == 1 and held.max() == 3
    assert all(len(set(r[r >= 0])) == len(r[r >= 0]) for r in keys[:1000])  # distinct keys per user
    counts, sums = pop.truth(keys, values)
    assert counts[0] > counts[1] > counts[4]  # Zipf
    np.testing.assert_allclose(sums / counts, pop.means, atol=0.02)
    assert ((values[keys >= 0] >= 1.0) & (values[keys >= 0] <= 5.0)).all()


def test_key_value_metrics() -> None:
    truth = np.array([[1.0, 2.0], [1.0, np.nan]])
    est = np.array([[1.5, 2.0], [0.0, 3.0]])
    se = np.array([[0.5, 1.0], [0.25, 1.0]])
    m = key_value_metrics(truth, est, se, 1.96)
    assert m["entries"] == 3 and m["mse"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert m["coverage"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("spec", ["kv-zipf:", "kv-zipf:1,keys=0", "kv-zipf:1,other=2", "zipf:1.1"])
def test_a_bad_population_is_refused(spec: str) -> None:
    with pytest.raises(InvalidParameterError):
        parse_key_value_population(spec, 5, -1.0, 1.0)


def test_every_mode_gives_the_same_estimates_and_json_metrics() -> None:
    docs = {}
    for mode in ("sum", "report", "grpc"):
        result = runner.invoke(app, ["run", *ARGS, "--mode", mode])
        assert result.exit_code == 0, result.output
        docs[mode] = json.loads(result.stdout)
    # No exact sampler: sum encodes every report, so a seed gives the same reports; grpc's Analyst agrees.
    for mode in ("report", "grpc"):
        for a, b in zip(docs["sum"]["keys"], docs[mode]["keys"], strict=True):
            assert a["frequency"] == pytest.approx(b["frequency"], rel=1e-9)
            assert a["mean"] == pytest.approx(b["mean"], rel=1e-9)
    doc = docs["sum"]
    assert doc["mechanism"] == "pckv" and doc["n_users"] == 20000 and len(doc["keys"]) == 6
    for name in ("frequency_metrics", "mean_metrics"):
        assert set(doc[name]) == {"mse", "mean_variance", "mse_over_variance", "coverage", "entries"}
    assert doc["epsilon"] == pytest.approx(2.0)


def test_a_key_value_population_needs_a_key_value_mechanism() -> None:
    result = runner.invoke(app, ["run", "--mechanism", "grr", "-d", "5", "--epsilon", "1", "-p", "kv-zipf:1"])
    assert result.exit_code == 2, result.output
    assert "pckv" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_population_wider_than_the_padding_is_one_line() -> None:
    args = [
        "--mechanism",
        "pckv",
        "-d",
        "5",
        "--epsilon",
        "1",
        "--param",
        "padding=1",
        "-p",
        "kv-zipf:1,keys=2",
    ]
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    assert "padding" in result.output and len(result.output.strip().splitlines()) == 1
