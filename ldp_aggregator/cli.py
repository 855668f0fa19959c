"""``ldp-aggregator``: run the service, manage campaigns, read estimates (Typer).

Campaign and estimate commands talk to a running server over gRPC (``--server HOST:PORT``);
``estimate``, ``decode``, ``associate`` and ``campaign export`` can also read a database file directly
(``--db``), which needs no server. Client options (access token, TLS) come before the command, or from the
environment: ``ldp-aggregator --token T --tls-ca ca.pem campaign list --server host:50051``, or
``LDP_TOKEN``, ``LDP_TLS_CA``, ``LDP_TLS_CERT``, ``LDP_TLS_KEY``. Token, retention and export commands are in
:mod:`ldp_aggregator.cli_ops`, decoding in :mod:`ldp_aggregator.cli_decode`. Exit codes, ``--json`` and
errors follow :mod:`ldp_aggregator.cli_common` (shared with ``ldp-sim``).
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import grpc
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ldp_aggregator.analysis import estimate_to_dict, estimate_to_proto
from ldp_aggregator.cli_common import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    exit_code_for_error,
    exit_code_for_status,
    new_app,
    param_error_text,
    print_error,
    print_json,
    token_option,
    version_option,
)
from ldp_aggregator.client_access import (
    ClientAccess,
    ClientOptionError,
    TokenHints,
    read_client_access,
    rpc_error_message,
)
from ldp_aggregator.config import load_settings
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.logs import configure_logging
from ldp_aggregator.server import DEFAULT_DB, DEFAULT_LISTEN, run_server
from ldp_aggregator.store import StoreLockedError
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, estimates_pb2, services_pb2, services_pb2_grpc
from ldp_client.errors import LdpError, StoreUnavailableError
from ldp_client.params import AUTO_MECHANISM, MECHANISM_NAMES, make_params

if TYPE_CHECKING:
    from ldp_aggregator.store import Store

__all__ = ["app", "main"]

_HELP = (
    "Run the LDP aggregator service, manage campaigns and access tokens, read estimates.\n\n"
    "Campaign, estimate and decode commands talk to a running server ([bold]--server[/bold] HOST:PORT or "
    f"LDP_SERVER, default {DEFAULT_LISTEN}); estimate, decode, associate and campaign export can read a "
    "database file instead ([bold]--db[/bold] PATH).\n"
    "Access token and TLS options go [bold]before[/bold] the command, or in the environment: "
    "ldp-aggregator --token TOKEN campaign list, or LDP_TOKEN, LDP_TLS_CA, LDP_TLS_CERT, LDP_TLS_KEY.\n"
    "Create the first token (an admin one) with: ldp-aggregator token create --role admin --db PATH"
)

app = new_app(help_text=_HELP, epilog="Guides: README.md, docs/operations.md, docs/tls.md.")
campaign_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode="rich", help="Create, list, show, close and export campaigns."
)
app.add_typer(campaign_app, name="campaign")

# Results on stdout: the terminal's width, or 120 columns into a file or pipe (as ldp-sim).
out = Console(width=None if sys.stdout.isatty() else 120)
note = Console(
    stderr=True, highlight=False, soft_wrap=True
)  # notes beside the data on stdout (a token, JSON) go to stderr

ServerOpt = Annotated[
    str, typer.Option("--server", envvar="LDP_SERVER", help="Aggregator address HOST:PORT.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of a table.")]


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``error: message`` (one line on stderr); returns the Exit to raise (exit 2: bad input)."""
    print_error(message)
    return typer.Exit(code=code)


@dataclass(kw_only=True)
class _ClientOptions:
    """How client commands reach a server (set by the root options or the environment).

    Kept as given; the files are read (:func:`~ldp_aggregator.client_access.read_client_access`) only
    when a command opens a channel, so commands that need none (serve, token, --db) never read them.
    """

    token: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    server: str = DEFAULT_LISTEN  # the last server a channel was opened to (for error messages)

    def access(self) -> ClientAccess:
        try:
            return read_client_access(
                token=self.token, tls_ca=self.tls_ca, tls_cert=self.tls_cert, tls_key=self.tls_key
            )
        except ClientOptionError as exc:
            raise _fail(str(exc)) from None


_client = _ClientOptions()

#: How this command line takes a token, for the access errors.
_TOKEN_HINTS = TokenHints(usage="before the command (ldp-aggregator --token TOKEN campaign list)")


@app.callback()
def _root(
    token: Annotated[str | None, token_option("Access token sent to the server (see token create).")] = None,
    tls_ca: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    version: Annotated[bool, version_option("ldp-aggregator")] = False,
) -> None:
    """Run the aggregator service, manage campaigns and tokens, read estimates."""
    del version  # handled by its eager callback
    _client.token, _client.tls_ca, _client.tls_cert, _client.tls_key = token, tls_ca, tls_cert, tls_key


def _channel(server: str) -> grpc.Channel:
    _client.server = server
    # Exports and decodes of large campaigns exceed gRPC's default 4 MiB receive limit; the server caps
    # its answers (max_message_bytes plus the accumulator limit), so the client accepts up to 1 GiB.
    return _client.access().channel(server, options=[("grpc.max_receive_message_length", 1 << 30)])


def _analyst(server: str) -> services_pb2_grpc.AnalystStub:
    return services_pb2_grpc.AnalystStub(_channel(server))


def _rpc(call: Any, *args: Any) -> Any:
    try:
        return call(*args, timeout=60)  # the channel sends the token (ClientAccess.channel)
    except grpc.RpcError as exc:
        status: grpc.StatusCode = exc.code()
        details: str = exc.details() or ""
        message = rpc_error_message(
            status.name, details, token_given=bool(_client.token), server=_client.server, hints=_TOKEN_HINTS
        )
        raise _fail(message, exit_code_for_status(status.name)) from None


DB_ALLOWED = "allowed an ldp-aggregator database file (made by ldp-aggregator serve --db PATH)"


def open_database(db: Path) -> Store:
    """``--db PATH`` opened read-only (works while a server holds it), or a one-line error naming it."""
    from ldp_aggregator.service import open_store

    allowed = DB_ALLOWED
    if not db.is_file():
        raise _fail(f"--db {db}: no such database file; {allowed}")
    try:
        return open_store(str(db), read_only=True)
    except StoreUnavailableError as exc:
        raise _fail(f"--db {db}: {exc}; {allowed}") from None


def _opt(help_text: str, default_shown: str, *names: str) -> Any:
    """An option whose value None means "from --config, else the built-in default" (shown in the help)."""
    return typer.Option(*names, help=help_text, show_default=default_shown)


@app.command("serve")
def serve_cmd(
    config: Annotated[
        Path | None,
        typer.Option(
            help="TOML settings file (docs/operations.md); options override it.", show_default=False
        ),
    ] = None,
    db: Annotated[Path | None, _opt("SQLite database file.", str(DEFAULT_DB))] = None,
    listen: Annotated[str | None, _opt("Address to listen on, HOST:PORT.", DEFAULT_LISTEN)] = None,
    retain_raw: Annotated[
        bool | None, _opt("Keep raw reports (needed by associate).", "retain", "--retain-raw/--no-retain-raw")
    ] = None,
    max_message_bytes: Annotated[int | None, _opt("Largest accepted request, bytes.", "16 MiB")] = None,
    tls_cert: Annotated[
        Path | None, _opt("Server certificate chain (PEM): TLS (docs/tls.md).", "no TLS")
    ] = None,
    tls_key: Annotated[Path | None, _opt("Private key of --tls-cert (PEM).", "none")] = None,
    tls_client_ca: Annotated[
        Path | None, _opt("Require client certificates signed by this CA (mutual TLS).", "none")
    ] = None,
    metrics_port: Annotated[
        int | None, _opt("Prometheus /metrics on 127.0.0.1:PORT (0: off).", "off")
    ] = None,
    log_format: Annotated[str | None, _opt("Log lines: json or text.", "text")] = None,
    log_level: Annotated[str | None, _opt("debug, info, warning or error.", "info")] = None,
    raw_retention_days: Annotated[
        float | None, _opt("Purge raw reports older than this many days (0: keep).", "keep")
    ] = None,
    purge_interval_s: Annotated[float | None, _opt("Seconds between purges.", "3600")] = None,
    rate_requests: Annotated[float | None, _opt("Requests/s per token (0: unlimited).", "0")] = None,
    rate_reports: Annotated[float | None, _opt("Reports/s per token (0: unlimited).", "0")] = None,
    rate_burst_s: Annotated[float | None, _opt("Rate-limit burst, in seconds of rate.", "1")] = None,
    max_batch_reports: Annotated[int | None, _opt("Most reports per batch.", "1,000,000")] = None,
    max_candidates: Annotated[int | None, _opt("Most candidates per request.", "10,000")] = None,
    token_refresh_s: Annotated[float | None, _opt("Seconds between token reloads.", "1")] = None,
) -> None:
    """Run the aggregator until SIGINT/SIGTERM, then drain and commit.

    Prints "ready on port N" on stdout once it listens; logs go to stderr.
    """
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
    except StoreLockedError as exc:  # another server holds the database
        raise _fail(str(exc), EXIT_UNAVAILABLE) from None
    except LdpError as exc:  # a bad setting, certificate, port or database file
        raise _fail(str(exc)) from None


def _read_lines(path: Path, option: str = "--candidates") -> list[str]:
    """The non-blank lines of a text file given with ``option`` (one candidate per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise _fail(f"{option} {path}: cannot read it ({reason}); allowed a UTF-8 text file") from None
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
            raise _fail(
                f"--from-file {from_file}: cannot read it ({exc}); allowed a TOML campaign file"
            ) from None
    mech = mechanism or spec.get("mechanism")
    if mech is None:
        raise _fail(f"--mechanism is required (one of {', '.join(MECHANISM_NAMES)}, or in --from-file)")
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
            note.print(f"auto chose {choice.mechanism}: {choice.reason}", markup=False)
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
        raise _fail(param_error_text(exc)) from None


def _print_campaign(c: campaign_pb2.Campaign, *, as_json: bool = False) -> None:
    """A campaign as a few lines of text, or as JSON (:func:`ldp_aggregator.export.campaign_to_dict`)."""
    if as_json:
        print_json(campaign_to_dict(c))
        return
    info = wire.campaign_from_proto(c)
    closed = " [closed]" if c.closed else ""
    out.print(f"{c.id} ({info.params.name}){closed}", markup=False, highlight=False)
    if c.description:
        out.print(f"  {c.description}", markup=False, highlight=False)
    out.print(f"  params: {info.params!r}", markup=False)
    out.print(f"  epsilon per report: {c.epsilon:.6g}   longitudinal epsilon: {c.epsilon_inf:.6g}")
    if info.candidates:
        out.print(f"  candidates: {len(info.candidates)}")


@campaign_app.command("create")
def campaign_create(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (1 to 128 Unicode code points).")],
    mechanism: Annotated[
        str | None,
        typer.Option(
            help=f"Mechanism: {', '.join(MECHANISM_NAMES)}, or auto (the lowest-variance frequency oracle "
            "for --domain at --epsilon; optional --param max_report_bits=B).",
            show_default=False,
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            help="Per-report epsilon (rr, grr, the frequency oracles, auto, numeric mechanisms).",
            show_default=False,
        ),
    ] = None,
    domain: Annotated[
        int | None,
        typer.Option(
            help="Domain size (values 0..D-1) for grr, basic-rappor; multidim: the number of attributes "
            "(with --param lo=.. --param hi=..; numeric mechanisms take --param lo/hi, not a domain).",
            show_default=False,
        ),
    ] = None,
    labels: Annotated[
        str | None, typer.Option(help="Comma-separated domain labels.", show_default=False)
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="Mechanism field NAME=VALUE (repeatable), e.g. --param k=128.", show_default=False),
    ] = None,
    candidates: Annotated[
        Path | None,
        typer.Option(help="File of candidate strings, one per line (string RAPPOR).", show_default=False),
    ] = None,
    description: Annotated[str, typer.Option(help="Free text.")] = "",
    from_file: Annotated[
        Path | None,
        typer.Option(
            help="TOML file with the campaign (examples/campaign.toml); options override it.",
            show_default=False,
        ),
    ] = None,
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Create a campaign (options, or a TOML file with mechanism, epsilon, domain, params, candidates)."""
    msg = _campaign_from_options(
        campaign_id, mechanism, epsilon, domain, labels, param or [], candidates, description, from_file
    )
    created = _rpc(_analyst(server).CreateCampaign, services_pb2.CreateCampaignRequest(campaign=msg))
    _print_campaign(created, as_json=as_json)


@campaign_app.command("list")
def campaign_list(server: ServerOpt = DEFAULT_LISTEN, as_json: JsonOpt = False) -> None:
    """List campaigns (JSON: {"campaigns": [...]}, each as campaign show --json)."""
    resp = _rpc(_analyst(server).ListCampaigns, services_pb2.ListCampaignsRequest())
    if as_json:
        print_json({"campaigns": [campaign_to_dict(c) for c in resp.campaigns]})
        return
    table = Table("id", "mechanism", "epsilon", "epsilon_inf", "closed", "description")
    for c in resp.campaigns:
        table.add_row(
            Text(c.id),
            c.WhichOneof("mechanism") or "",
            f"{c.epsilon:.4g}",
            f"{c.epsilon_inf:.4g}",
            "yes" if c.closed else "",
            Text(c.description),
        )
    out.print(table)


@campaign_app.command("show")
def campaign_show(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Show one campaign: mechanism, parameters, epsilons, candidates."""
    _print_campaign(
        _rpc(_analyst(server).GetCampaign, services_pb2.GetCampaignRequest(campaign_id=campaign_id)),
        as_json=as_json,
    )


def answer(db: Path | None, local: Callable[[Any], Any], remote: Callable[[], Any]) -> Any:
    """``local(Aggregator)`` on the database file ``db`` (read-only), or ``remote()`` (an Analyst call).

    A project error met locally ends the command like the server's answer would (same exit code).
    """
    if db is None:
        return remote()
    from ldp_aggregator.service import Aggregator

    store = open_database(db)
    try:
        return local(Aggregator(store))
    except LdpError as exc:
        raise _fail(str(exc), exit_code_for_error(exc)) from None
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
    table = Table(title=Text(title))
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
        row: list[str | Text] = [
            Text(it.label),
            f"{it.count:,.0f}",
            f"{it.std_error:,.0f}",
            f"[{it.ci_low:,.0f}, {it.ci_high:,.0f}]",
        ]
        if norm_sub is not None:
            row.append(f"{norm_sub[i]:,.0f}")
        if truth is not None:
            t = truth.get(it.label, 0)
            row += [f"{t:,}", "yes" if it.ci_low <= t <= it.ci_high else "[red]no[/red]"]
        table.add_row(*row)
    out.print(table)
    if msg.note:
        out.print(Text(f"({msg.note})"))
    elif msg.HasField("rappor_bits") and not msg.items:
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
    table = Table(title=Text(title))
    for col in ("attribute", "mean", "std error", "interval", "sum", "sum std error", "reports"):
        table.add_column(col, justify="left" if col == "attribute" else "right")
    for m in msg.means:
        table.add_row(
            Text(m.label),
            f"{m.mean:.6g}",
            f"{m.std_error:.3g}",
            f"[{m.ci_low:.6g}, {m.ci_high:.6g}]",
            f"{m.sum:.6g}",
            f"{m.sum_std_error:.3g}",
            f"{m.n:,}",
        )
    out.print(table)


DbOpt = Annotated[
    Path | None,
    typer.Option(
        "--db", help="Read this database file directly (read-only) instead of a server.", show_default=False
    ),
]
CandidatesOpt = Annotated[
    Path | None,
    typer.Option(
        "--candidates",
        help="String RAPPOR: candidate strings, one per line (default: the campaign's).",
        show_default=False,
    ),
]
ConfidenceOpt = Annotated[float, typer.Option(help="Interval confidence level, in (0, 1).")]


@app.command("estimate")
def estimate_cmd(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    as_json: JsonOpt = False,
    candidates: CandidatesOpt = None,
    confidence: ConfidenceOpt = 0.95,
    db: DbOpt = None,
    server: ServerOpt = DEFAULT_LISTEN,
    population_size: Annotated[
        int | None,
        typer.Option(
            "--population-size",
            help="Numeric mechanisms: N for the estimated sums.",
            show_default="the number of reports",
        ),
    ] = None,
) -> None:
    """Estimates with standard errors and confidence intervals."""
    cands = _read_lines(candidates) if candidates is not None else []
    if population_size is not None and population_size < 1:
        raise _fail(f"--population-size={population_size}: allowed an integer >= 1")

    def from_db(agg: Any) -> estimates_pb2.EstimateResponse:  # an ldp_aggregator.service.Aggregator
        msg = estimate_to_proto(
            agg.estimate(
                campaign_id, candidates=cands, confidence=confidence, population_size=population_size
            )
        )
        msg.note = agg.estimate_note(campaign_id, cands)  # as the server's GetEstimate says it
        return msg

    msg = answer(
        db,
        from_db,
        lambda: _rpc(
            _analyst(server).GetEstimate,
            estimates_pb2.EstimateRequest(
                campaign_id=campaign_id,
                candidates=cands,
                confidence=confidence,
                population_size=population_size or 0,
            ),
        ),
    )
    if as_json:
        print_json(estimate_to_dict(msg))
    else:
        print_estimate(msg)


def main() -> None:
    """Console-script entry point (``ldp-aggregator``)."""
    app(prog_name="ldp-aggregator")


# Registers the token, purge and campaign close/export commands on ``app`` (imported last: it uses the
# helpers above), and the decode and associate commands (issue 5).
from ldp_aggregator import cli_decode as _cli_decode  # noqa: E402, F401
from ldp_aggregator import cli_ops as _cli_ops  # noqa: E402, F401
