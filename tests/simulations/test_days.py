"""``ldp-sim days`` (issue 17): a device's spend over D days of daily reports, and the daily accuracy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_client import registry
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


# ------------------------------------------------------------------------- the device ledger's own figure


def test_the_ledger_column_is_the_real_ledgers_charge_and_prepays_epsilon_inf() -> None:
    """Two days of one unchanging lgrr value: the bound is min(2 eps, eps_inf) = 2 eps, the device ledger
    charges eps_inf at the first report (it cannot know how many follow); both agree from day 3. The
    ledger's figure comes from the real DeviceLedger, so a change to its rule shows here."""
    fresh = parse_campaign("grr:domain=5,epsilon=1")
    memo = parse_campaign("lgrr:domain=5,epsilon=1,epsilon_inf=2.5")
    res = simulate_days(DaysConfig(campaigns=(fresh, memo), days=4, devices=50, delta=1e-6))
    grr, lgrr = res.campaigns
    np.testing.assert_allclose(grr.ledger_fixed, grr.spend_fixed)  # fresh noise: D epsilon, both
    assert lgrr.epsilon_inf == pytest.approx(2.5, abs=1e-6)  # the quantised epsilon_inf, as charged
    np.testing.assert_allclose(lgrr.ledger_fixed, [lgrr.epsilon_inf] * 4, rtol=1e-12)
    np.testing.assert_allclose(lgrr.spend_fixed, np.minimum(np.arange(1, 5) * lgrr.epsilon, lgrr.epsilon_inf))
    assert lgrr.ledger_fixed[0] > lgrr.spend_fixed[0] and lgrr.ledger_fixed[-1] == pytest.approx(
        lgrr.spend_fixed[-1]
    )
    assert res.ledger is not None
    np.testing.assert_allclose(res.ledger.total, grr.ledger_fixed + lgrr.ledger_fixed, rtol=1e-12)
    # The ledger's numerical composer (BudgetPolicy(composition="numerical")): never above its basic total.
    eps, delta = res.ledger.tight
    assert eps <= res.ledger.total[-1] and 0 <= delta <= 1e-6 * (1 + 1e-9)
    doc = res.to_dict()
    assert doc["total"]["ledger_value_fixed"] == pytest.approx(float(res.ledger.total[-1]))
    assert doc["campaigns"][1]["ledger_value_fixed"] == pytest.approx(lgrr.epsilon_inf)


def test_the_ledgers_rule_over_devices_is_the_real_ledger_on_a_changing_device() -> None:
    """The 'ledger: mean' column charges V epsilon_inf per device (V distinct values so far): the real
    DeviceLedger given a value sequence with V distinct values charges exactly that, repeats nothing."""
    from simulations.device_ledger import device_values, ledger_days

    lgrr = parse_campaign("lgrr:domain=5,epsilon=1,epsilon_inf=2.5").params
    values = device_values(lgrr, "c0", 5)
    seq = [values[0], values[0], values[1], values[0], values[2], values[2]]
    got = ledger_days([lgrr], [seq], 1e-9)
    distinct = np.array([len(set(seq[: d + 1])) for d in range(len(seq))])
    eps_inf = float(registry.spec_for(lgrr).epsilon_inf(lgrr))
    np.testing.assert_allclose(got.per_campaign[0], distinct * eps_inf, rtol=1e-12)
    campaign = parse_campaign("lgrr:domain=5,epsilon=1,epsilon_inf=2.5")
    res = simulate_days(DaysConfig(campaigns=(campaign,), days=6, devices=300, change_probability=0.5))
    (c,) = res.campaigns
    assert np.all(c.ledger_mean >= c.spend_mean - 1e-12)  # the ledger pre-pays: never below the bound
    assert c.ledger_mean[0] == pytest.approx(eps_inf)


def test_cli_days_plot_writes_a_png_with_the_curves(tmp_path: Path) -> None:
    from matplotlib.image import imread

    path = tmp_path / "days.png"
    args = ["days", "--days", "12", "--devices", "40", "--change-probability", "0.2", "--plot", str(path)]
    args += ["--campaign", "grr:domain=5,epsilon=0.5", "--campaign", "lgrr:domain=5,epsilon=1,epsilon_inf=2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # rich folds a path longer than the 80-column line (pytest-xdist's tmp paths are), so compare unfolded.
    assert "ledger" in result.output and f"wrote{path}" in "".join(result.output.split())
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = imread(str(path))
    assert image.shape[0] > 300 and image.shape[1] > 600  # 8 x 4.5 inches at 110 dpi
    rgb = image[..., :3].reshape(-1, 3)
    colours = np.unique(np.round(rgb * 255).astype(np.int64), axis=0)
    assert len(colours) > 50  # curves, labels and a legend, not a blank canvas
    assert np.mean(np.all(rgb > 0.98, axis=1)) < 0.97  # some of it is drawn
    # An unwritable path is one error line, exit 2 (checked before the simulation).
    bad = runner.invoke(app, [*args[:-4], "--plot", str(tmp_path / "missing" / "x.png"), *args[-4:]])
    assert bad.exit_code == 2 and "--plot" in bad.output and "Traceback" not in bad.output
