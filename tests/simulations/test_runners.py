"""Tests of simulations.runners: configuration errors, the three runners, sweeps and target-error sizing."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from ldp_client.errors import InvalidParameterError
from ldp_client.params import GRRParams
from simulations import runners
from simulations.runners import (
    SimulationConfig,
    SimulationError,
    prepare,
    required_users,
    simulate,
    sweep,
)

# Small configurations of every mechanism (fast in every runner).
SMALL: dict[str, dict[str, Any]] = {
    "rr": {"mechanism": "rr", "epsilon": 1.0, "population": "zipf:1.0"},
    "grr": {"mechanism": "grr", "epsilon": 2.0, "population": "zipf:1.1", "domain": 6},
    "rappor": {
        "mechanism": "rappor",
        "population": "zipf:1.1",
        "domain": 6,
        "params": {"k": 16, "h": 2, "m": 4},
    },
    "basic-rappor": {"mechanism": "basic-rappor", "population": "geometric:0.3", "domain": 6},
    "boolean-rappor": {"mechanism": "boolean-rappor", "population": "uniform"},
}


def _cfg(name: str, **overrides: Any) -> SimulationConfig:
    kwargs = dict(SMALL[name])
    kwargs.setdefault("n_users", 5000)
    kwargs.update(overrides)
    return SimulationConfig(**kwargs)


def _write_csv(tmp_path: Path, rows: list[tuple[str, int]]) -> Path:
    path = tmp_path / "pop.csv"
    path.write_text("value,count\n" + "".join(f"{v},{c}\n" for v, c in rows), encoding="utf-8")
    return path


def _assert_within_5se(result: runners.SimulationResult) -> None:
    """Every (repeat, item) estimate within 5 of its standard errors of the truth."""
    z = np.abs(result.estimates - result.truth) / result.std_errors
    assert np.all(result.std_errors > 0)
    assert float(z.max()) <= 5.0, (result.labels, z)


# ----------------------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"n_users": 0}, "n_users"),
        ({"n_users": -5}, "n_users"),
        ({"n_users": 2.5}, "n_users"),
        ({"mechanism": "nope"}, "mechanism"),  # ("oue" is a mechanism since issue 6)
        ({"mode": "fast"}, "mode"),
        ({"repeats": 0}, "repeats"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"seed": -1}, "seed"),
        ({"confidence": 1.0}, "confidence"),
        ({"detection_alpha": 0.0}, "detection_alpha"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"server": "localhost"}, "server"),
        ({"workers": 0}, "workers"),
        ({"batch_size": 0}, "batch_size"),
        ({"grpc_client": "carrier-pigeon"}, "grpc_client"),
        ({"candidates": ("a", "b")}, "candidates"),  # grr takes no candidates
        ({"params": {"k": [1]}}, "params"),
        ({"population": ""}, "population"),
    ],
)
def test_config_rejects_bad_fields(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        _cfg("grr", **overrides)
    assert info.value.field == field


def test_config_reporter_client_only_for_rr_and_grr() -> None:
    with pytest.raises(InvalidParameterError) as info:
        _cfg("rappor", grpc_client="reporter")
    assert info.value.field == "grpc_client"
    assert "one client secret" in str(info.value)
    assert _cfg("grr", grpc_client="reporter").grpc_client == "reporter"


def test_config_rejects_duplicate_or_empty_candidates() -> None:
    with pytest.raises(InvalidParameterError, match="repeated"):
        _cfg("rappor", candidates=("a", "a"))
    with pytest.raises(InvalidParameterError):
        _cfg("rappor", candidates=())


def test_config_params_accept_pairs_and_mapping_later_wins() -> None:
    cfg = _cfg("rappor", params=[("k", "8"), ("k", "32"), ("m", 2)])
    assert cfg.param_fields == {"k": "32", "m": 2}
    assert _cfg("rappor").param_fields == {"k": 16, "h": 2, "m": 4}


# -------------------------------------------------------------------------------------- prepare errors


def test_prepare_unknown_population() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("grr", population="zipff:1.1"))
    assert info.value.field == "population"
    assert "zipff:1.1" in str(info.value)


def test_prepare_numeric_population_refused() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("grr", population="normal:0,0.5"))
    assert info.value.field == "population"
    assert "categorical" in str(info.value)


def test_prepare_domain_smaller_than_support(tmp_path: Path) -> None:
    csv = _write_csv(tmp_path, [("a", 5), ("b", 3), ("c", 2), ("d", 1), ("e", 1)])
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("grr", population=f"empirical:{csv}", domain=3))
    assert info.value.field == "domain"
    assert info.value.value == 3
    assert "at least 5" in str(info.value)


def test_prepare_domain_required_for_parametric_population() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("grr", domain=None))
    assert info.value.field == "domain"


def test_prepare_rr_domain_must_be_two() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("rr", domain=3))
    assert info.value.field == "domain"
    assert "2 for rr" in str(info.value)


@pytest.mark.parametrize(
    ("params", "needle"),
    [({"zz": "1"}, "zz"), ({"k": "abc"}, "k=abc"), ({"k": "0"}, "k=0"), ({"f": "1.5"}, "f=1.5")],
)
def test_prepare_bad_param(params: dict[str, str], needle: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("rappor", params=params))
    assert info.value.field == "params"
    assert needle in str(info.value)


def test_prepare_epsilon_errors() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("rappor", epsilon=1.0))
    assert info.value.field == "epsilon"
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("grr", epsilon=None))
    assert info.value.field == "epsilon"


def test_prepare_candidates_none_held() -> None:
    with pytest.raises(InvalidParameterError) as info:
        prepare(_cfg("rappor", candidates=("x", "y")))
    assert info.value.field == "candidates"


def test_prepare_defaults_and_items(tmp_path: Path) -> None:
    rr = prepare(_cfg("rr"))
    assert rr.domain_size == 2 and rr.items == ("0", "1")
    csv = _write_csv(tmp_path, [("red", 5), ("green", 3), ("blue", 0)])
    grr = prepare(_cfg("grr", population=f"empirical:{csv}", domain=None))
    assert grr.domain_size == 3 and grr.items == ("red", "green", "blue")
    assert isinstance(grr.params, GRRParams) and grr.params.domain.size == 3
    rap = prepare(_cfg("rappor", candidates=("3", "nope", "0")))
    assert rap.items == ("3", "nope", "0")
    assert rap.item_index.tolist() == [3, -1, 0]
    assert rap.item_truth(np.array([7, 0, 0, 4, 0, 0])).tolist() == [4, 0, 7]


# ---------------------------------------------------------------------------------------------- runners


@pytest.mark.statistical
@pytest.mark.parametrize("mode", ["sum", "report"])
@pytest.mark.parametrize("name", list(SMALL))
def test_runner_small_population(name: str, mode: str) -> None:
    result = simulate(_cfg(name, mode=mode, repeats=5, seed=11))
    m = len(result.labels)
    assert result.truth.shape == result.estimates.shape == (5, m)
    assert result.n_reports.tolist() == [5000] * 5
    assert result.truth.sum(axis=1).tolist() == [5000] * 5  # the items cover the population here
    assert np.all(result.ci_low <= result.ci_high)
    _assert_within_5se(result)
    assert result.metrics.n_repeats == 5 and result.metrics.n_items == m
    assert result.metrics.coverage is not None and result.metrics.mse_over_variance is not None
    assert (result.detected is not None) == (name == "rappor")


def test_runner_is_deterministic_for_a_seed() -> None:
    for mode in ("sum", "report"):
        a = simulate(_cfg("rappor", mode=mode, repeats=2, seed=5))
        b = simulate(_cfg("rappor", mode=mode, repeats=2, seed=5))
        c = simulate(_cfg("rappor", mode=mode, repeats=2, seed=6))
        assert np.array_equal(a.truth, b.truth) and np.array_equal(a.estimates, b.estimates)
        assert not np.array_equal(a.estimates, c.estimates)


def test_report_runner_streams_in_chunks() -> None:
    """A chunk size that does not divide N still encodes every user exactly once."""
    result = simulate(_cfg("grr", mode="report", n_users=10_007, chunk_size=1000))
    assert result.n_reports.tolist() == [10_007]
    assert int(result.truth.sum()) == 10_007


def test_progress_counts_every_user() -> None:
    seen: list[int] = []
    simulate(_cfg("grr", mode="report", n_users=2500, chunk_size=1000, repeats=2), progress=seen.append)
    assert seen == [1000, 1000, 500, 1000, 1000, 500]
    seen.clear()
    simulate(_cfg("grr", mode="sum", n_users=2500, repeats=3), progress=seen.append)
    assert seen == [2500, 2500, 2500]


def test_sum_runner_billion_users_rr() -> None:
    result = simulate(_cfg("rr", n_users=10**9))
    assert result.n_reports.tolist() == [10**9]
    assert int(result.truth.sum()) == 10**9


@pytest.mark.statistical
def test_rappor_candidates_detection(tmp_path: Path) -> None:
    """Three held strings are detected, three absent candidates are not; the held mass is allocated."""
    csv = _write_csv(tmp_path, [("apple", 500), ("banana", 300), ("cherry", 200)])
    cands = ("apple", "banana", "cherry", "durian", "elder", "fig")
    result = simulate(
        SimulationConfig(
            mechanism="rappor",
            population=f"empirical:{csv}",
            n_users=10**6,
            params={"k": 32, "h": 2, "m": 8},
            candidates=cands,
            detection_alpha=1e-6,  # a false positive has probability <= 1e-6
            seed=3,
        )
    )
    assert result.labels == cands
    assert result.truth[0, 3:].tolist() == [0, 0, 0]
    assert result.detected is not None
    assert result.detected[0].tolist() == [True, True, True, False, False, False]
    m = result.metrics
    assert (m.detected, m.false_positives, m.false_negatives) == (3.0, 0.0, 0.0)
    se_mass = math.sqrt(float(np.sum(result.std_errors[0, :3] ** 2))) / 10**6
    assert m.allocated_mass is not None and abs(m.allocated_mass - 1.0) <= 5 * se_mass
    # The detection threshold is the one-sided Bonferroni z for 6 candidates.
    assert result.detection_z == pytest.approx(stats.norm.isf(1e-6 / 6))
    _assert_within_5se(result)


def test_rappor_candidate_absent_from_population_has_zero_truth() -> None:
    result = simulate(_cfg("rappor", candidates=("0", "1", "2", "zzz")))
    assert result.truth[0, 3] == 0
    assert result.truth[0, :3].sum() < 5000  # only three of the six values are candidates


# --------------------------------------------------------------------------- sum and report agree


@pytest.mark.statistical
@pytest.mark.parametrize("name", list(SMALL))
def test_sum_and_report_agree_in_distribution(name: str) -> None:
    """Over 200 seeded repeats per runner: per item, the means of the estimates agree within z = 5 of
    their standard error, both are within z = 5 of the expected count N pi (the estimators are unbiased),
    and the variances agree within the two-sided F band at alpha 1e-6 (Bonferroni over items)."""
    R, N = 200, 2000
    a = simulate(_cfg(name, mode="sum", n_users=N, repeats=R, seed=101))
    b = simulate(_cfg(name, mode="report", n_users=N, repeats=R, seed=202))
    prep = prepare(_cfg(name, n_users=N))
    expected = N * prep.population.probabilities(prep.domain_size)[prep.item_index]
    m = len(a.labels)
    lo_f = stats.f.ppf(1e-6 / m / 2, R - 1, R - 1)
    hi_f = stats.f.ppf(1 - 1e-6 / m / 2, R - 1, R - 1)
    for i in range(m):
        ea, eb = a.estimates[:, i], b.estimates[:, i]
        va, vb = ea.var(ddof=1), eb.var(ddof=1)
        se_diff = math.sqrt(va / R + vb / R)
        assert abs(ea.mean() - eb.mean()) <= 5 * se_diff, (name, i)
        assert abs(ea.mean() - expected[i]) <= 5 * math.sqrt(va / R), (name, i, "sum")
        assert abs(eb.mean() - expected[i]) <= 5 * math.sqrt(vb / R), (name, i, "report")
        assert lo_f <= va / vb <= hi_f, (name, i, va, vb)
        # The truth itself (a multinomial count) has the same law in both runners.
        ta, tb = a.truth[:, i], b.truth[:, i]
        assert abs(ta.mean() - tb.mean()) <= 5 * math.sqrt(ta.var(ddof=1) / R + tb.var(ddof=1) / R + 1e-12)


# ------------------------------------------------------------------------------------------------ gRPC


@pytest.mark.statistical
@pytest.mark.timeout(90)
def test_grpc_runner_end_to_end_rappor() -> None:
    """In-process aggregator, 2 spawned workers, 3000 users in batches of 500, estimates over gRPC."""
    result = simulate(_cfg("rappor", mode="grpc", n_users=3000, workers=2, batch_size=500, repeats=2, seed=9))
    assert result.n_reports.tolist() == [3000, 3000]
    assert result.truth.sum(axis=1).tolist() == [3000, 3000]
    _assert_within_5se(result)
    # Same seed, same reports: the gRPC path is reproducible with the batch client.
    again = simulate(_cfg("rappor", mode="grpc", n_users=3000, workers=2, batch_size=500, repeats=2, seed=9))
    assert np.array_equal(result.truth, again.truth)
    assert np.allclose(result.estimates, again.estimates)


@pytest.mark.statistical
@pytest.mark.timeout(90)
def test_grpc_runner_reporter_client_with_external_server(tmp_path: Path) -> None:
    """The production Reporter in 2 workers against a server given by address (--server)."""
    from ldp_aggregator.server import BackgroundServer, ServerConfig

    config = ServerConfig(db=tmp_path / "agg.sqlite3", listen="127.0.0.1:0")
    with BackgroundServer(config) as server:
        result = simulate(
            _cfg(
                "grr",
                mode="grpc",
                n_users=2000,
                workers=2,
                batch_size=400,
                grpc_client="reporter",
                server=server.target,
            )
        )
        assert server.aggregator is not None
        campaigns = server.aggregator.store.list_campaigns()
    assert len(campaigns) == 1 and campaigns[0].campaign_id.startswith("ldp-sim-")
    assert result.n_reports.tolist() == [2000]
    assert int(result.truth.sum()) == 2000
    _assert_within_5se(result)


def test_grpc_runner_unreachable_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runners.grpc_runner, "_CONNECT_TIMEOUT_S", 0.5)
    with pytest.raises(SimulationError, match="cannot connect"):
        simulate(_cfg("grr", mode="grpc", n_users=10, server="127.0.0.1:1"))


# ---------------------------------------------------------------------------------------------- sweeps


def test_sweep_over_epsilon() -> None:
    result = sweep(_cfg("grr", repeats=2), over="epsilon", values=["1", 2, "4"])
    assert [p.value for p in result.points] == [1.0, 2.0, 4.0]
    assert [p.result.config.epsilon for p in result.points] == [1.0, 2.0, 4.0]
    se = [p.result.max_std_error_frequency for p in result.points]
    assert se[0] > se[1] > se[2]
    assert all(p.required_users is None for p in result.points)


def test_sweep_over_users_and_param() -> None:
    res = sweep(_cfg("grr"), over="users", values=["1e3", "10000"])
    assert [p.result.config.n_users for p in res.points] == [1000, 10_000]
    res = sweep(_cfg("rappor"), over="k", values=["8", "32"])
    assert [p.result.params.k for p in res.points] == [8, 32]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"over": "zz", "values": ["1"]}, "over"),
        ({"over": "users", "values": ["1.5"]}, "values"),
        ({"over": "epsilon", "values": ["x"]}, "values"),
        ({"over": "epsilon", "values": []}, "values"),
        ({"over": None, "values": ["1"]}, "over"),
        ({}, "over"),
        ({"over": "users", "values": ["100"], "target_error": 0.01}, "over"),
        ({"target_error": 0.0}, "target_error"),
        ({"target_error": 0.01, "error_metric": "mae"}, "error_metric"),
    ],
)
def test_sweep_errors(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        sweep(_cfg("grr"), **kwargs)
    assert info.value.field == field


@pytest.mark.statistical
def test_target_error_matches_analytic_users() -> None:
    """For GRR the users needed for a max frequency SE of X is max_v n Var_v / X^2 (Wang et al. 2017)."""
    target = 0.005
    res = sweep(_cfg("grr", epsilon=1.0), target_error=target, error_metric="max-se")
    (point,) = res.points
    params = point.result.params
    assert isinstance(params, GRRParams)
    p, q = params.p, params.q
    prep = prepare(_cfg("grr", epsilon=1.0))
    f = prep.population.probabilities(prep.domain_size)
    n_var = q * (1 - q) / (p - q) ** 2 + f * (1 - p - q) / (p - q)
    analytic = float(n_var.max()) / target**2
    assert point.required_users is not None
    assert point.required_users == pytest.approx(analytic, rel=1e-3)
    assert point.result.config.n_users == point.required_users
    # Verified by simulation at that N: the estimator's max SE is the target (plug-in noise ~1e-3).
    assert point.result.error("max-se") / target == pytest.approx(1.0, abs=0.02)


def test_required_users_scales_inverse_square() -> None:
    pilot = simulate(_cfg("grr", n_users=10**6))
    e0 = pilot.predicted_error("rmse")
    n, predicted = required_users(pilot, e0 / 2, "rmse")
    assert n == pytest.approx(4 * 10**6, rel=1e-9, abs=1)
    assert predicted == pytest.approx(e0 / 2, rel=1e-6)
    with pytest.raises(InvalidParameterError):
        required_users(pilot, -1.0, "rmse")
    with pytest.raises(InvalidParameterError):
        required_users(pilot, 1e-12, "rmse")  # beyond 2^53 users
