"""``ldp-sim days`` (issue 17): a device's spend over D days of daily reports, and the daily accuracy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client.errors import InvalidParameterError
from simulations.cli import app
from simulations.longitudinal import DaysConfig, parse_campaign, simulate_days

runner = CliRunner()


def test_a_fixed_value_costs_epsilon_inf_once_and_fresh_noise_adds_up() -> None:
    fresh = parse_campaign("grr:domain=5,epsilon=1")
    memo = parse_campaign("lgrr:domain=5,epsilon=1,epsilon_inf=2.5")
    res = simulate_days(DaysConfig(campaigns=(fresh, memo), days=10, devices=50))
    grr, lgrr = res.campaigns
    np.testing.assert_allclose(grr.spend_mean, np.arange(1, 11) * grr.epsilon)
    eps, eps_inf = lgrr.epsilon, lgrr.epsilon_inf
    np.testing.assert_allclose(lgrr.spend_mean, np.minimum(np.arange(1, 11) * eps, eps_inf))
    assert lgrr.spend_mean[-1] == pytest.approx(2.5, abs=1e-6)
    np.testing.assert_allclose(res.total_mean, grr.spend_mean + lgrr.spend_mean)
    # The daily standard error is the oracle's sqrt(Var* / n): for GRR (e^eps + d - 2) / (e^eps - 1)^2
    # (Wang et al., USENIX Security 2017, §4.1), n = 100,000 reports a day by default.
    e = math.exp(grr.epsilon)
    assert grr.daily_std_error == pytest.approx(math.sqrt((e + 3) / (e - 1) ** 2 / 100_000), rel=1e-6)


def test_changing_values_add_epsilon_inf_per_distinct_value() -> None:
    # Every day a new value: a memoized mechanism over 2 values spends at most 2 epsilon_inf; a numeric one
    # (every change a new value) as many reports as it made, each worth epsilon_inf = epsilon.
    two = parse_campaign("losue:domain=2,epsilon=0.5,epsilon_inf=1")
    mean = parse_campaign("onebitmean:epsilon=1,lo=0,hi=1,buckets=4")
    res = simulate_days(DaysConfig(campaigns=(two, mean), days=20, change_probability=1.0, devices=200))
    losue, obm = res.campaigns
    assert losue.spend_max[-1] <= 2 * losue.epsilon_inf + 1e-12
    assert losue.spend_mean[-1] > losue.epsilon_inf  # most devices met both values
    np.testing.assert_allclose(obm.spend_mean, np.arange(1, 21) * obm.epsilon)
    assert obm.accuracy_name == "mean"


def test_bad_campaigns_are_named() -> None:
    with pytest.raises(InvalidParameterError) as info:
        parse_campaign("lgrr:domain=5,epsilon")
    assert info.value.field == "campaign"
    with pytest.raises(InvalidParameterError):
        parse_campaign("nope:domain=5")
    with pytest.raises(InvalidParameterError) as info:
        DaysConfig(campaigns=(parse_campaign("grr:domain=3,epsilon=1"),), days=0)
    assert info.value.field == "days"


def test_cli_days_json_and_errors(tmp_path: object) -> None:
    result = runner.invoke(
        app,
        ["days", "--days", "5", "--devices", "20", "--campaign", "dbitflip:domain=8,epsilon=2,d=2", "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (camp,) = doc["campaigns"]
    assert camp["mechanism"] == "dbitflip" and camp["spent_value_fixed"] == pytest.approx(camp["epsilon"])
    bad = runner.invoke(app, ["days", "--campaign", "grr:domain=3,epsilon=x"])
    assert bad.exit_code == 2 and "epsilon" in bad.output and "Traceback" not in bad.output


def test_the_tight_total_of_a_fixed_value_is_the_optimal_composition_and_never_above_basic() -> None:
    """Ten daily grr reports at epsilon 0.2 plus one memoized lgrr value: the tight total composes 10 x 0.2
    and epsilon_inf once (privacy loss distributions), below the basic 2 + epsilon_inf, at the given delta."""
    from ldp_client.accounting.composition import optimal_composition_epsilon

    fresh = parse_campaign("grr:domain=5,epsilon=0.2")
    res = simulate_days(DaysConfig(campaigns=(fresh,), days=100, devices=10, delta=1e-6))
    eps, delta = res.tight_fixed
    assert delta == pytest.approx(1e-6)
    grr_eps = res.campaigns[0].epsilon
    assert eps == pytest.approx(optimal_composition_epsilon(grr_eps, 100, 1e-6), abs=100 * 1e-3)
    assert eps < res.total_fixed[-1]
    memo = parse_campaign("lgrr:domain=5,epsilon=1,epsilon_inf=2.5")
    both = simulate_days(DaysConfig(campaigns=(fresh, memo), days=100, devices=10, delta=1e-6))
    assert eps < both.tight_fixed[0] <= both.total_fixed[-1]
    with pytest.raises(InvalidParameterError, match="delta"):
        DaysConfig(campaigns=(fresh,), delta=0.0)
