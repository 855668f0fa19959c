"""``ldp-aggregator``: run the service, manage campaigns, read estimates (Typer).

Campaign and estimate commands talk to a running server over gRPC (``--server HOST:PORT``);
``estimate`` can also read a database file directly (``--db``), which needs no server. Client options
(access token, TLS) come before the command, or from the environment: ``ldp-aggregator --token T
--tls-ca ca.pem campaign list --server host:50051``, or ``LDP_TOKEN``, ``LDP_TLS_CA``, ``LDP_TLS_CERT``,
``LDP_TLS_KEY``. Token, retention and export commands are in :mod:`ldp_aggregator.cli_ops`.
"""

from __future__ import annotations

import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import grpc
import typer
from rich.console import Console
from rich.table import Table

from ldp_aggregator.analysis import estimate_to_dict, estimate_to_proto
from ldp_aggregator.config import load_settings
from ldp_aggregator.logs import configure_logging
from ldp_aggregator.server import DEFAULT_LISTEN, run_server
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, estimates_pb2, services_pb2, services_pb2_grpc
from ldp_client.errors import LdpError
from ldp_client.params import AUTO_MECHANISM, MECHANISM_NAMES, make_params

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


@dataclass(kw_only=True)
class _ClientOptions:
    """How client commands reach a server (set by the root options or the environment)."""

    token: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    def credentials(self) -> grpc.ChannelCredentials | None:
        if self.tls_ca is None and self.tls_cert is None:
            return None
        if (self.tls_cert is None) != (self.tls_key is None):
            raise _fail("--tls-cert and --tls-key go together (the client certificate and its key)")

        def read(opt: str, path: Path | None) -> bytes | None:
            if path is None:
                return None
            try:
                return path.read_bytes()
            except OSError as exc:
                raise _fail(f"{opt} {path}: {exc.strerror}") from None

        return grpc.ssl_channel_credentials(
            root_certificates=read("--tls-ca", self.tls_ca),
            private_key=read("--tls-key", self.tls_key),
            certificate_chain=read("--tls-cert", self.tls_cert),
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


_client = _ClientOptions()


@app.callback()
def _root(
    token: Annotated[
        str | None,
        typer.Option(envvar="LDP_TOKEN", help="Access token sent to the server.", show_default=False),
    ] = None,
    tls_ca: Annotated[
        Path | None, typer.Option(envvar="LDP_TLS_CA", help="Use TLS, trusting this CA (PEM).")
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(envvar="LDP_TLS_CERT", help="Client certificate (PEM), for mutual TLS.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(envvar="LDP_TLS_KEY", help="Key of --tls-cert (PEM).")
    ] = None,
) -> None:
    """Run the aggregator service, manage campaigns and tokens, read estimates."""
    _client.token, _client.tls_ca, _client.tls_cert, _client.tls_key = token, tls_ca, tls_cert, tls_key


def _channel(server: str) -> grpc.Channel:
    creds = _client.credentials()
    return grpc.secure_channel(server, creds) if creds is not None else grpc.insecure_channel(server)


def _analyst(server: str) -> services_pb2_grpc.AnalystStub:
    return services_pb2_grpc.AnalystStub(_channel(server))


def _rpc(call: Any, *args: Any) -> Any:
    try:
        return call(*args, timeout=60, metadata=_client.metadata())
    except grpc.RpcError as exc:
        raise _fail(f"{exc.code().name}: {exc.details()}") from None


@app.command("serve")
def serve_cmd(
    config: Annotated[
        Path | None, typer.Option(help="TOML settings file (docs/operations.md); options override it.")
    ] = None,
    db: Annotated[Path | None, typer.Option(help="SQLite database file [ldp-data/ldp.sqlite3].")] = None,
    listen: Annotated[
        str | None, typer.Option(help=f"Address to listen on, HOST:PORT [{DEFAULT_LISTEN}].")
    ] = None,
    retain_raw: Annotated[
        bool | None, typer.Option("--retain-raw/--no-retain-raw", help="Keep raw reports [yes].")
    ] = None,
    max_message_bytes: Annotated[int | None, typer.Option(help="Largest accepted request [16 MiB].")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="Server certificate chain (PEM): TLS.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Private key of --tls-cert (PEM).")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option(help="Require client certificates signed by this CA (mutual TLS).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Prometheus /metrics on 127.0.0.1:PORT (0: off) [off].")
    ] = None,
    log_format: Annotated[str | None, typer.Option(help="Log lines: json or text [text].")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error [info].")] = None,
    raw_retention_days: Annotated[
        float | None, typer.Option(help="Purge raw reports older than this (0: keep) [keep].")
    ] = None,
    purge_interval_s: Annotated[float | None, typer.Option(help="Seconds between purges [3600].")] = None,
    rate_requests: Annotated[
        float | None, typer.Option(help="Requests/s per token (0: unlimited) [0].")
    ] = None,
    rate_reports: Annotated[
        float | None, typer.Option(help="Reports/s per token (0: unlimited) [0].")
    ] = None,
    rate_burst_s: Annotated[
        float | None, typer.Option(help="Rate-limit burst, in seconds of rate [1].")
    ] = None,
    max_batch_reports: Annotated[int | None, typer.Option(help="Most reports per batch [1,000,000].")] = None,
    max_candidates: Annotated[int | None, typer.Option(help="Most candidates per request [10,000].")] = None,
    token_refresh_s: Annotated[float | None, typer.Option(help="Seconds between token reloads [1].")] = None,
) -> None:
    """Run the aggregator until SIGINT/SIGTERM, then drain and commit."""
    overrides = {
        "db": db,
        "listen": listen,
        "retain_raw": retain_raw,
        "max_message_bytes": max_message_bytes,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "tls_client_ca": tls_client_ca,
        "metrics_port": metrics_port,
        "log_format": log_format,
        "log_level": log_level,
        "raw_retention_days": raw_retention_days,
        "purge_interval_s": purge_interval_s,
        "requests_per_s": rate_requests,
        "reports_per_s": rate_reports,
        "burst_s": rate_burst_s,
        "max_batch_reports": max_batch_reports,
        "max_candidates": max_candidates,
        "token_refresh_s": token_refresh_s,
    }
    try:
        settings = load_settings(config, overrides)
        configure_logging(settings.log_format, settings.log_level.upper())
        run_server(settings.server, on_ready=lambda port: print(f"ready on port {port}", flush=True))
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
        if mech == AUTO_MECHANISM:  # issue 6: resolved to a concrete mechanism before the campaign exists
            from ldp_client.auto import auto_choice

            choice = auto_choice(epsilon=eps, domain=dom, fields=fields)
            err.print(f"auto chose {choice.mechanism}: {choice.reason}", highlight=False, markup=False)
            p: Any = choice.params
        else:
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
    closed = " \\[closed]" if c.closed else ""  # "\\[": a literal bracket, not rich markup
    out.print(f"[bold]{c.id}[/bold] ({info.params.name}){closed}")
    if c.description:
        out.print(f"  {c.description}")
    out.print(f"  params: {info.params!r}")
    out.print(f"  epsilon per report: {c.epsilon:.6g}   longitudinal epsilon: {c.epsilon_inf:.6g}")
    if info.candidates:
        out.print(f"  candidates: {len(info.candidates)}")


@campaign_app.command("create")
def campaign_create(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (1-128 characters).")],
    mechanism: Annotated[
        str | None,
        typer.Option(
            help=f"Mechanism: {', '.join(MECHANISM_NAMES)}, or auto (the lowest-variance frequency oracle "
            "for --domain at --epsilon; optional --param max_report_bits=B)."
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(help="Per-report epsilon (rr, grr, the frequency oracles, auto, numeric mechanisms)."),
    ] = None,
    domain: Annotated[
        int | None,
        typer.Option(
            help="Domain size (values 0..D-1) for grr, basic-rappor; multidim: the number of attributes "
            "(with --param lo=.. --param hi=..; numeric mechanisms take --param lo/hi, not a domain)."
        ),
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


def _estimate_from_db(
    db: Path, campaign_id: str, cands: list[str], confidence: float, population_size: int | None = None
) -> Any:
    from ldp_aggregator.service import Aggregator, open_store

    if not db.exists():
        raise _fail(f"--db {db}: no such database file")
    store = open_store(str(db), read_only=True)
    try:
        return estimate_to_proto(
            Aggregator(store).estimate(
                campaign_id, candidates=cands, confidence=confidence, population_size=population_size
            )
        )
    except LdpError as exc:
        raise _fail(str(exc)) from None
    finally:
        store.close()


def print_estimate(msg: estimates_pb2.EstimateResponse, *, truth: dict[str, int] | None = None) -> None:
    """A table of estimates with their intervals (and the truth, when known)."""
    if msg.means:  # issue 6: numeric mechanisms
        _print_means(msg)
        return
    title = (
        f"{msg.campaign_id}: {msg.mechanism}, n={msg.n_reports:,}, epsilon={msg.epsilon:.4g}, "
        f"{msg.confidence:.0%} intervals"
    )
    table = Table(title=title)
    for col in ("item", "estimate", "std error", "interval"):
        table.add_column(col, justify="left" if col == "item" else "right")
    # Issue 6: the Norm-Sub counts, labelled as such, beside (never instead of) the unbiased estimate.
    norm_sub = next((list(pp.counts) for pp in msg.postprocessed if pp.method == "norm-sub"), None)
    if norm_sub is not None:
        table.add_column("norm-sub", justify="right")
    if truth is not None:
        table.add_column("truth", justify="right")
        table.add_column("covered", justify="center")
    for i, it in enumerate(msg.items):
        row = [it.label, f"{it.count:,.0f}", f"{it.std_error:,.0f}", f"[{it.ci_low:,.0f}, {it.ci_high:,.0f}]"]
        if norm_sub is not None:
            row.append(f"{norm_sub[i]:,.0f}")
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


def _print_means(msg: estimates_pb2.EstimateResponse) -> None:
    """Numeric mechanisms: mean and sum of every attribute, with standard errors and intervals."""
    title = (
        f"{msg.campaign_id}: {msg.mechanism}, n={msg.n_reports:,}, epsilon={msg.epsilon:.4g}, "
        f"{msg.confidence:.0%} intervals, sums over N={msg.population_size:,}"
    )
    table = Table(title=title)
    for col in ("attribute", "mean", "std error", "interval", "sum", "sum std error", "reports"):
        table.add_column(col, justify="left" if col == "attribute" else "right")
    for m in msg.means:
        table.add_row(
            m.label,
            f"{m.mean:.6g}",
            f"{m.std_error:.3g}",
            f"[{m.ci_low:.6g}, {m.ci_high:.6g}]",
            f"{m.sum:.6g}",
            f"{m.sum_std_error:.3g}",
            f"{m.n:,}",
        )
    out.print(table)


@app.command("estimate")
def estimate_cmd(
    campaign_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    candidates: Annotated[Path | None, typer.Option(help="RAPPOR candidate strings, one per line.")] = None,
    confidence: Annotated[float, typer.Option(help="Interval confidence level.")] = 0.95,
    db: Annotated[Path | None, typer.Option(help="Read this database directly instead of a server.")] = None,
    server: ServerOpt = DEFAULT_LISTEN,
    population_size: Annotated[
        int | None,
        typer.Option(
            "--population-size", help="Numeric mechanisms: N for the estimated sums (default: the reports)."
        ),
    ] = None,
) -> None:
    """Estimates with standard errors and confidence intervals."""
    cands = _read_lines(candidates) if candidates is not None else []
    if population_size is not None and population_size < 1:
        raise _fail(f"--population-size={population_size}: allowed an integer >= 1")
    if db is not None:
        msg = _estimate_from_db(db, campaign_id, cands, confidence, population_size)
    else:
        req = estimates_pb2.EstimateRequest(
            campaign_id=campaign_id,
            candidates=cands,
            confidence=confidence,
            population_size=population_size or 0,
        )
        msg = _rpc(_analyst(server).GetEstimate, req)
    if as_json:
        sys.stdout.write(json.dumps(estimate_to_dict(msg), indent=2) + "\n")
    else:
        print_estimate(msg)


def main() -> None:
    """Console-script entry point."""
    app()


# Registers the token, purge and campaign close/export commands on ``app`` (imported last: it uses the
# helpers above), and the decode and associate commands (issue 5).
from ldp_aggregator import cli_decode as _cli_decode  # noqa: E402, F401
from ldp_aggregator import cli_ops as _cli_ops  # noqa: E402, F401
