"""``ldp-sim days``: after D days of daily reports to these campaigns, what has a device spent, and what is
the accuracy of each day's estimate? (issue 17; the model is :mod:`simulations.longitudinal`).

Registered on the ``ldp-sim`` app (:mod:`simulations.cli_app`) by :mod:`simulations.cli`. Example::

    ldp-sim days --days 30 --change-probability 0.05 --campaign grr:domain=10,epsilon=1
        --campaign lgrr:domain=10,epsilon=1,epsilon_inf=3 --plot days.png
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from ldp_aggregator.cli_common import param_error_text
from ldp_client.errors import InvalidParameterError
from simulations.cli_app import JsonOpt, JsonOutOpt, _check_outputs, _emit_json, _fail, _out, _write
from simulations.longitudinal import DaysConfig, DaysResult, parse_campaign, plot_days, simulate_days

__all__ = ["days_cmd"]


def _table(result: DaysResult) -> object:
    from rich.table import Table

    cfg = result.config
    table = Table(
        title=f"a device after {cfg.days} days of daily reports "
        f"(value changes w.p. {cfg.change_probability:g} a day; {cfg.devices:,} devices)"
    )
    cols = ("campaign", "epsilon", "epsilon_inf", "spent, value fixed", "ledger, value fixed", "spent: mean")
    for col in (*cols, "ledger: mean", "p95", "max"):
        if col == "campaign":
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right")
    table.add_column(f"daily SE ({cfg.users:,} users)", justify="right")
    for c in result.campaigns:
        table.add_row(
            c.label,
            f"{c.epsilon:.4g}",
            "inf" if math.isinf(c.epsilon_inf) else f"{c.epsilon_inf:.4g}",
            f"{c.spend_fixed[-1]:.4g}",
            f"{c.ledger_fixed[-1]:.4g}",
            f"{c.spend_mean[-1]:.4g}",
            f"{c.ledger_mean[-1]:.4g}",
            f"{c.spend_p95[-1]:.4g}",
            f"{c.spend_max[-1]:.4g}",
            "-" if math.isnan(c.daily_std_error) else f"{c.daily_std_error:.3g} ({c.accuracy_name})",
        )
    if len(result.campaigns) > 1:
        table.add_row(
            "device total",
            "",
            "",
            f"{result.total_fixed[-1]:.4g}",
            "" if result.ledger is None else f"{result.ledger.total[-1]:.4g}",
            f"{result.total_mean[-1]:.4g}",
            f"{sum(c.ledger_mean[-1] for c in result.campaigns):.4g}",
            f"<= {result.total_p95[-1]:.4g}",
            "",
            "",
        )
    eps, delta = result.tight_fixed
    caption = (
        f"a device whose values never change, all campaigns together: epsilon {eps:.4g} at delta {delta:.3g}"
        f" (privacy loss distributions; basic composition: {result.total_fixed[-1]:.4g})"
    )
    if result.ledger is not None:
        l_eps, l_delta = result.ledger.tight
        caption += (
            f"; the device ledger charges {result.ledger.total[-1]:.4g} (basic), {l_eps:.4g} at delta "
            f"{l_delta:.3g} (numerical): epsilon_inf per memoized value, paid at its first report"
        )
    table.caption = caption
    return table


def days_cmd(
    campaign: Annotated[
        list[str],
        typer.Option(
            "--campaign",
            help="A campaign the device reports to daily: NAME:field=value,... (epsilon, domain, fields); "
            "repeat the option for several.",
        ),
    ],
    days: Annotated[int, typer.Option(help="Days of daily reports (D).")] = 30,
    change_probability: Annotated[
        float, typer.Option(help="Probability that a device's value changes on a given day.")
    ] = 0.0,
    devices: Annotated[int, typer.Option(help="Simulated devices for the spend's distribution.")] = 10_000,
    users: Annotated[
        int, typer.Option(help="Reports per day behind each day's estimate (its SE).")
    ] = 100_000,
    seed: Annotated[int, typer.Option(help="Root seed.")] = 0,
    delta: Annotated[
        float, typer.Option(help="delta of the tight (epsilon, delta) total (privacy loss distributions).")
    ] = 1e-9,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of the spend per day.")] = None,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
) -> None:
    """What a device has spent after D days of daily reports to the campaigns, and each day's accuracy."""
    _check_outputs(json_out, plot)
    try:
        cfg = DaysConfig(
            campaigns=tuple(parse_campaign(c) for c in campaign),
            days=days,
            change_probability=change_probability,
            devices=devices,
            users=users,
            seed=seed,
            delta=delta,
        )
        result = simulate_days(cfg)
    except InvalidParameterError as exc:
        _fail(f"invalid option ({exc.field}): {param_error_text(exc)}")
    if not as_json:
        _out().print(_table(result))
    if plot is not None:
        _write(lambda: plot_days(result, str(plot)), "--plot", plot)
    _emit_json(result.to_dict(), as_json, json_out)
