"""``ldp-sim``: simulate user populations through the real encoders, accumulators and estimators.

Commands ``run`` and ``sweep`` (:mod:`simulations.cli_run`), ``associate``
(:mod:`simulations.cli_associate`), ``days`` (:mod:`simulations.cli_days`), ``compare``
(:mod:`simulations.cli_compare`) and the group ``privacy`` (:mod:`simulations.cli_privacy`: ``compose``,
``shuffle``; ``gaussian`` from :mod:`simulations.cli_gaussian`). Exit codes, ``--json``, ``--version`` and
error lines follow :mod:`ldp_aggregator.cli_common`, shared with ``ldp-aggregator``: ``--json`` prints the
result document on stdout (and no tables), ``--json-out PATH`` writes it to a file.

This is the entry module: it registers the commands on the app of :mod:`simulations.cli_app` (which holds
what the commands share) and nothing imports it back.
"""

from __future__ import annotations

from simulations import cli_associate, cli_compare, cli_days, cli_gaussian, cli_privacy, cli_run
from simulations.cli_app import app

__all__ = ["app", "main"]

# Registration order is the order --help lists them.
app.command("run")(cli_run.run_cmd)
app.command("sweep")(cli_run.sweep_cmd)
app.command("associate")(cli_associate.associate_cmd)
app.command("days")(cli_days.days_cmd)
app.command("compare")(cli_compare.compare_cmd)
app.add_typer(cli_privacy.privacy_app, name="privacy")
cli_privacy.privacy_app.command("compose")(cli_privacy.compose_cmd)
cli_privacy.privacy_app.command("shuffle")(cli_privacy.shuffle_cmd)
cli_privacy.privacy_app.command("gaussian")(cli_gaussian.gaussian_cmd)


def main() -> None:
    """Console-script entry point (``ldp-sim``)."""
    app(prog_name="ldp-sim")


if __name__ == "__main__":
    main()
