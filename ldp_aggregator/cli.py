"""``ldp-aggregator``: run the service, manage campaigns, read estimates (Typer).

Campaign and estimate commands talk to a running server over gRPC (``--server HOST:PORT``);
``estimate``, ``decode``, ``associate`` and ``campaign export`` can also read a database file directly
(``--db``), which needs no server. Client options (access token, TLS) come before the command, or from the
environment: ``ldp-aggregator --token T --tls-ca ca.pem campaign list --server host:50051``, or
``LDP_TOKEN``, ``LDP_TLS_CA``, ``LDP_TLS_CERT``, ``LDP_TLS_KEY``. Exit codes, ``--json`` and errors follow
:mod:`ldp_aggregator.cli_common` (shared with ``ldp-sim``).

This is the entry module: it assembles the command tree from the command modules and nothing imports it
back. The apps, consoles and helpers the commands share are in :mod:`ldp_aggregator.cli_app`; the
commands are in :mod:`ldp_aggregator.cli_campaigns` (serve, campaign create/list/show, estimate),
:mod:`ldp_aggregator.cli_decode` (decode, associate), :mod:`ldp_aggregator.cli_ops` (tokens, purge,
campaign close/export), :mod:`ldp_aggregator.cli_followup` (campaign follow-up) and
:mod:`ldp_aggregator.cli_archive` (report archives in Parquet, analysis on Dask).
"""

from __future__ import annotations

from ldp_aggregator import cli_archive, cli_campaigns, cli_decode, cli_followup, cli_ops
from ldp_aggregator.cli_app import app, campaign_app, token_app

__all__ = ["app", "main"]

# Registration order is the order --help lists them (commands first, then the campaign and token groups).
app.command("serve")(cli_campaigns.serve_cmd)
campaign_app.command("create")(cli_campaigns.campaign_create)
campaign_app.command("list")(cli_campaigns.campaign_list)
campaign_app.command("show")(cli_campaigns.campaign_show)
app.command("estimate")(cli_campaigns.estimate_cmd)
app.command("decode")(cli_decode.decode_cmd)
app.command("associate")(cli_decode.associate_cmd)
token_app.command("create")(cli_ops.token_create)
token_app.command("list")(cli_ops.token_list)
token_app.command("revoke")(cli_ops.token_revoke)
app.command("purge")(cli_ops.purge_cmd)
campaign_app.command("close")(cli_ops.campaign_close)
campaign_app.command("next-round")(cli_ops.campaign_next_round)
campaign_app.command("export")(cli_ops.campaign_export)
campaign_app.command("follow-up")(cli_followup.campaign_follow_up)
app.add_typer(cli_archive.archive_app, name="archive")
cli_archive.archive_app.command("export")(cli_archive.archive_export)
cli_archive.archive_app.command("verify")(cli_archive.archive_verify)
cli_archive.archive_app.command("estimate")(cli_archive.archive_estimate)
cli_archive.archive_app.command("decode")(cli_archive.archive_decode)
cli_archive.archive_app.command("associate")(cli_archive.archive_associate)


def main() -> None:
    """Console-script entry point (``ldp-aggregator``)."""
    app(prog_name="ldp-aggregator")
