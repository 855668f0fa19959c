"""Key-value estimation (issue 18, pckv): exactness at expected counts, calibration, the Analyst and CLI."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator.accumulators import accumulator_for, add_columns
from ldp_aggregator.cli import app
from ldp_aggregator.estimators import estimate_support
from ldp_aggregator.key_values import campaign_key_values, estimate_key_values
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.pckv import SPEC, PCKVEncoder, PCKVParams
from simulations.key_values import KeyValuePopulation, simulate_key_values
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()


def _expected_counts(params: PCKVParams, mappings: list[dict[int, float]], weights: list[int]) -> np.ndarray:
    """E[counts] of the report indices, from the exact output distributions."""
    total = np.zeros(2 * params.extended_size)
    for m, w in zip(mappings, weights, strict=True):
        for y, p in SPEC.exact_outputs(params, m).items():
            total[y] += w * float(p)
    return total


def test_estimators_are_exact_at_expected_counts() -> None:
    params = PCKVParams.from_epsilon(4, 1.5, padding=3, lo=0.0, hi=10.0)
    mappings = [{0: 10.0, 1: 2.5}, {1: 7.5}, {0: 0.0, 2: 5.0, 3: 10.0}, {3: 1.0}]
    weights = [3000, 5000, 2000, 1000]
    counts = _expected_counts(params, mappings, weights)
    acc = SimpleNamespace(counts=counts, n=sum(weights))
    est = campaign_key_values(params, acc)
    assert est is not None
    holders = [5000, 8000, 2000, 3000]
    sums = [3000 * 10.0 + 2000 * 0.0, 3000 * 2.5 + 5000 * 7.5, 2000 * 5.0, 2000 * 10.0 + 1000 * 1.0]
    for k, it in enumerate(est.items):
        assert it.frequency == pytest.approx(holders[k] / 11000, rel=1e-9)
        assert it.mean == pytest.approx(sums[k] / holders[k], rel=1e-9)
    # The frequencies are the pure-oracle estimator's over the spec's Support (one estimator, two views).
    support = estimate_support(SPEC.support(params, acc), mechanism="pckv", epsilon=params.epsilon)
    for it, s in zip(est.items, support.items, strict=True):
        assert it.count == pytest.approx(s.count, rel=1e-9)
        assert it.frequency_std_error * 11000 == pytest.approx(s.std_error, rel=1e-9)


def test_another_mechanism_has_no_key_values_and_confidence_is_checked() -> None:
    from ldp_client.mechanisms.grr import GRRParams

    params = GRRParams.from_epsilon(3, 1.0)
    assert campaign_key_values(params, accumulator_for(params)) is None
    kv = SPEC.key_value_counts(
        PCKVParams.from_epsilon(2, 1.0, padding=1), SimpleNamespace(counts=np.ones(6), n=6)
    )
    assert kv is not None
    with pytest.raises(InvalidParameterError):
        estimate_key_values(kv, confidence=1.0)


def test_an_unheld_key_has_no_mean() -> None:
    params = PCKVParams.from_epsilon(3, 2.0, padding=1)
    acc = accumulator_for(params)
    keys = np.zeros((5000, 1), dtype=np.int64)
    add_columns(
        acc, params, PCKVEncoder(params).encode_batch(keys, np.ones((5000, 1)), np.random.default_rng(1))
    )
    est = campaign_key_values(params, acc)
    assert est is not None
    assert est.items[0].mean == pytest.approx(1.0, abs=0.1)
    assert all(math.isnan(it.mean) or it.count > 0 for it in est.items)


@pytest.mark.statistical
@pytest.mark.parametrize(("eps", "seed", "mu"), [(4.0, 11, (0.85, 0.95)), (2.0, 12, (0.2, 0.8))])
def test_frequencies_and_means_are_calibrated(eps: float, seed: int, mu: tuple[float, float]) -> None:
    # 250 seeded repeats x 8 keys: MSE/variance within [0.9, 1.1] and coverage within [0.93, 0.97] are
    # about 3 sampling standard errors wide (sqrt(2/2000) ~ 0.03, sqrt(0.0475/2000) ~ 0.005). Values vary
    # little within a key (kappa = 20), where the variance bound of the mean is tight (docs/key-values.md).
    # Means near the top of the range make the delta method's covariance term count: without it the
    # first case's MSE/variance falls to about 0.55.
    params = PCKVParams.from_epsilon(8, eps, padding=2, lo=1.0, hi=5.0)
    pop = KeyValuePopulation(d=8, s=0.5, max_keys=2, kappa=20.0, lo=1.0, hi=5.0, mu_lo=mu[0], mu_hi=mu[1])
    n = 20_000 if eps == 4.0 else 60_000
    doc = simulate_key_values(params, pop, n_users=n, repeats=250, seed=seed, mode="sum")
    for name in ("frequency_metrics", "mean_metrics"):
        m = doc[name]
        assert m["entries"] == 2000
        assert 0.9 <= m["mse_over_variance"] <= 1.1, (name, m)
        assert 0.93 <= m["coverage"] <= 0.97, (name, m)


def _create_and_submit(running: Running) -> tuple[PCKVParams, np.ndarray, np.ndarray]:
    code = runner.invoke(
        app,
        ["campaign", "create", "ratings", "--mechanism", "pckv", "--labels", "maps,mail,chat,news",
         "--epsilon", "2", "--param", "padding=2", "--param", "lo=1", "--param", "hi=5",
         "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0, code.output
    params = PCKVParams.from_epsilon(("maps", "mail", "chat", "news"), 2.0, padding=2, lo=1.0, hi=5.0)
    pop = KeyValuePopulation(d=4, s=0.5, max_keys=2, lo=1.0, hi=5.0)
    rng = np.random.default_rng(18)
    keys, values = pop.sample(40_000, 2, rng)
    columns = PCKVEncoder(params).encode_batch(keys, values, rng)
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="ratings", batch_id="b", params=params, columns=columns)
    )
    return params, keys, values


def test_the_analyst_and_the_cli_answer_frequencies_and_means(running: Running) -> None:
    _, keys, values = _create_and_submit(running)
    counts, sums = KeyValuePopulation(d=4).truth(keys, values)
    server, db = running.server.target, str(running.server.config.db)
    result = runner.invoke(app, ["estimate", "ratings", "--json", "--server", server])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["key_values"]
    assert [r["key"] for r in rows] == ["maps", "mail", "chat", "news"]
    for k, r in enumerate(rows):
        # Seeded: every 95% interval holds the truth here.
        assert r["frequency_ci_low"] <= counts[k] / 40_000 <= r["frequency_ci_high"], r
        assert r["mean_ci_low"] <= sums[k] / counts[k] <= r["mean_ci_high"], r
        assert 0 < r["mean_std_error"] < 0.5 and 1.0 <= r["mean_clipped"] <= 5.0
    from_db = runner.invoke(app, ["estimate", "ratings", "--json", "--db", db])
    assert from_db.exit_code == 0, from_db.output
    assert json.loads(from_db.output)["key_values"] == rows
    table = runner.invoke(app, ["estimate", "ratings", "--server", server])
    assert table.exit_code == 0 and "keys and mean values" in table.output and "maps" in table.output


def test_a_campaign_with_a_bad_range_is_one_line(running: Running) -> None:
    result = runner.invoke(
        app,
        ["campaign", "create", "bad", "--mechanism", "pckv", "--domain", "3", "--epsilon", "1",
         "--param", "padding=2", "--param", "lo=5", "--param", "hi=1", "--server", running.server.target],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "hi" in result.output and len(result.output.strip().splitlines()) == 1
