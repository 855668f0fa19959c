"""``ldp-aggregator``: run the service, manage campaigns, read estimates (Typer).

Campaign and estimate commands talk to a running server over gRPC (``--server HOST:PORT``);
``estimate`` can also read a database file directly (``--db``), which needs no server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any

import grpc
import typer
from rich.console import Console
from rich.table import Table

from ldp_aggregator.analysis import estimate_to_dict, estimate_to_proto
from ldp_aggregator.server import DEFAULT_DB, DEFAULT_LISTEN, ServerConfig, serve
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, estimates_pb2, services_pb2, services_pb2_grpc
from ldp_client.errors import LdpError
from ldp_client.params import MECHANISM_NAMES, make_params

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
campaign_app = typer.Typer(no_args_is_help=True, help="Create, list and show campaigns on a running server.")
app.add_typer(campaign_app, name="campaign")

out = Console()
err = Console(stderr=True, soft_wrap=True)  # error lines stay whole for grep and logs

ServerOpt = Annotated[str, typer.Option("--server", help="Aggregator address HOST:PORT.")]


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=2)


def _analyst(server: str) -> services_pb2_grpc.AnalystStub:
    return services_pb2_grpc.AnalystStub(grpc.insecure_channel(server))


def _rpc(call: Any, *args: Any) -> Any:
    try:
        return call(*args, timeout=60)
    except grpc.RpcError as exc:
        raise _fail(f"{exc.code().name}: {exc.details()}") from None


@app.command("serve")
def serve_cmd(
    db: Annotated[Path, typer.Option(help="SQLite database file.")] = DEFAULT_DB,
    listen: Annotated[str, typer.Option(help="Address to listen on, HOST:PORT.")] = DEFAULT_LISTEN,
    retain_raw: Annotated[bool, typer.Option(help="Keep raw reports next to the accumulators.")] = True,
    max_message_bytes: Annotated[int, typer.Option(help="Largest accepted request.")] = 16 * 1024 * 1024,
) -> None:
    """Run the aggregator until SIGINT/SIGTERM, then drain and commit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServerConfig(
            db=db, listen=listen, retain_raw=retain_raw, max_message_bytes=max_message_bytes
        )
        asyncio.run(serve(config, on_ready=lambda port: print(f"ready on port {port}", flush=True)))
    except LdpError as exc:
        raise _fail(str(exc)) from None


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _campaign_from_options(
    campaign_id: str,
    mechanism: str | None,
    epsilon: float | None,
    domain: int | None,
    labels: str | None,
    params: list[str],
    candidates_file: Path | None,
    description: str,
    from_file: Path | None,
) -> campaign_pb2.Campaign:
    spec: dict[str, Any] = {}
    if from_file is not None:
        try:
            spec = tomllib.loads(from_file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise _fail(f"cannot read campaign file {from_file}: {exc}") from None
    mech = mechanism or spec.get("mechanism")
    if mech is None:
        raise _fail(f"--mechanism is required (one of {', '.join(MECHANISM_NAMES)})")
    fields: dict[str, object] = dict(spec.get("params", {}))
    for item in params:
        name, sep, value = item.partition("=")
        if not sep:
            raise _fail(f"--param {item!r}: expected NAME=VALUE")
        fields[name.strip()] = value.strip()
    dom: Any = spec.get("domain")
    if labels is not None:
        dom = [x.strip() for x in labels.split(",")]
    elif domain is not None:
        dom = domain
    cands: list[str] = list(spec.get("candidates", []))
    if candidates_file is not None:
        cands = _read_lines(candidates_file)
    eps = epsilon if epsilon is not None else spec.get("epsilon")
    try:
        p = make_params(mech, epsilon=eps, domain=dom, fields=fields)
        return wire.campaign_to_proto(
            campaign_id=campaign_id,
            params=p,
            description=description or spec.get("description", ""),
            candidates=cands,
        )
    except LdpError as exc:
        raise _fail(str(exc)) from None


def _print_campaign(c: campaign_pb2.Campaign) -> None:
    info = wire.campaign_from_proto(c)
    out.print(f"[bold]{c.id}[/bold] ({info.params.name}){' [closed]' if c.closed else ''}")
    if c.description:
        out.print(f"  {c.description}")
    out.print(f"  params: {info.params!r}")
    out.print(f"  epsilon per report: {c.epsilon:.6g}   longitudinal epsilon: {c.epsilon_inf:.6g}")
    if info.candidates:
        out.print(f"  candidates: {len(info.candidates)}")


@campaign_app.command("create")
def campaign_create(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (1-128 characters).")],
    mechanism: Annotated[str | None, typer.Option(help=f"Mechanism: {', '.join(MECHANISM_NAMES)}.")] = None,
    epsilon: Annotated[float | None, typer.Option(help="Per-report epsilon (rr, grr).")] = None,
    domain: Annotated[
        int | None, typer.Option(help="Domain size (values 0..D-1) for grr, basic-rappor.")
    ] = None,
    labels: Annotated[str | None, typer.Option(help="Comma-separated domain labels.")] = None,
    param: Annotated[list[str] | None, typer.Option(help="Mechanism field NAME=VALUE (repeatable).")] = None,
    candidates: Annotated[Path | None, typer.Option(help="File of candidate strings, one per line.")] = None,
    description: Annotated[str, typer.Option(help="Free text.")] = "",
    from_file: Annotated[Path | None, typer.Option(help="TOML file with the campaign definition.")] = None,
    server: ServerOpt = DEFAULT_LISTEN,
) -> None:
    """Create a campaign (options, or a TOML file with mechanism, epsilon, domain, params, candidates)."""
    msg = _campaign_from_options(
        campaign_id, mechanism, epsilon, domain, labels, param or [], candidates, description, from_file
    )
    created = _rpc(_analyst(server).CreateCampaign, services_pb2.CreateCampaignRequest(campaign=msg))
    _print_campaign(created)


@campaign_app.command("list")
def campaign_list(server: ServerOpt = DEFAULT_LISTEN) -> None:
    """List campaigns."""
    resp = _rpc(_analyst(server).ListCampaigns, services_pb2.ListCampaignsRequest())
    table = Table("id", "mechanism", "epsilon", "epsilon_inf", "closed", "description")
    for c in resp.campaigns:
        table.add_row(
            c.id,
            c.WhichOneof("mechanism") or "",
            f"{c.epsilon:.4g}",
            f"{c.epsilon_inf:.4g}",
            "yes" if c.closed else "",
            c.description,
        )
    out.print(table)


@campaign_app.command("show")
def campaign_show(campaign_id: str, server: ServerOpt = DEFAULT_LISTEN) -> None:
    """Show one campaign."""
    _print_campaign(
        _rpc(_analyst(server).GetCampaign, services_pb2.GetCampaignRequest(campaign_id=campaign_id))
    )


def _estimate_from_db(db: Path, campaign_id: str, cands: list[str], confidence: float) -> Any:
    from ldp_aggregator.service import Aggregator, open_store

    if not db.exists():
        raise _fail(f"--db {db}: no such database file")
    store = open_store(str(db), read_only=True)
    try:
        return estimate_to_proto(
            Aggregator(store).estimate(campaign_id, candidates=cands, confidence=confidence)
        )
    except LdpError as exc:
        raise _fail(str(exc)) from None
    finally:
        store.close()


def print_estimate(msg: estimates_pb2.EstimateResponse, *, truth: dict[str, int] | None = None) -> None:
    """A table of estimates with their intervals (and the truth, when known)."""
    title = (
        f"{msg.campaign_id}: {msg.mechanism}, n={msg.n_reports:,}, epsilon={msg.epsilon:.4g}, "
        f"{msg.confidence:.0%} intervals"
    )
    table = Table(title=title)
    for col in ("item", "estimate", "std error", "interval"):
        table.add_column(col, justify="left" if col == "item" else "right")
    if truth is not None:
        table.add_column("truth", justify="right")
        table.add_column("covered", justify="center")
    for it in msg.items:
        row = [it.label, f"{it.count:,.0f}", f"{it.std_error:,.0f}", f"[{it.ci_low:,.0f}, {it.ci_high:,.0f}]"]
        if truth is not None:
            t = truth.get(it.label, 0)
            row += [f"{t:,}", "yes" if it.ci_low <= t <= it.ci_high else "[red]no[/red]"]
        table.add_row(*row)
    out.print(table)
    if msg.HasField("rappor_bits") and not msg.items:
        out.print(
            f"(bit-level estimates only: {msg.rappor_bits.m} cohorts x {msg.rappor_bits.k} bits; "
            "give candidates for per-string estimates)"
        )


@app.command("estimate")
def estimate_cmd(
    campaign_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    candidates: Annotated[Path | None, typer.Option(help="RAPPOR candidate strings, one per line.")] = None,
    confidence: Annotated[float, typer.Option(help="Interval confidence level.")] = 0.95,
    db: Annotated[Path | None, typer.Option(help="Read this database directly instead of a server.")] = None,
    server: ServerOpt = DEFAULT_LISTEN,
) -> None:
    """Estimates with standard errors and confidence intervals."""
    cands = _read_lines(candidates) if candidates is not None else []
    if db is not None:
        msg = _estimate_from_db(db, campaign_id, cands, confidence)
    else:
        req = estimates_pb2.EstimateRequest(campaign_id=campaign_id, candidates=cands, confidence=confidence)
        msg = _rpc(_analyst(server).GetEstimate, req)
    if as_json:
        sys.stdout.write(json.dumps(estimate_to_dict(msg), indent=2) + "\n")
    else:
        print_estimate(msg)


def main() -> None:
    """Console-script entry point."""
    app()
