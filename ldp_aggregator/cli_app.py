"""The root of ``ldp-aggregator``: its Typer apps, consoles, shared options and client helpers.

The command modules (:mod:`ldp_aggregator.cli_campaigns`, :mod:`ldp_aggregator.cli_decode`,
:mod:`ldp_aggregator.cli_ops`) import what they share from here; :mod:`ldp_aggregator.cli`, the entry
module, registers their commands on these apps. Client options (access token, TLS) are root options,
given before the command or in the environment (``LDP_TOKEN``, ``LDP_TLS_CA``, ``LDP_TLS_CERT``,
``LDP_TLS_KEY``); the files are read only when a command opens a channel. Exit codes, ``--json`` and
errors follow :mod:`ldp_aggregator.cli_common` (shared with ``ldp-sim``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import grpc
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ldp_aggregator._proto.ldp.v1 import analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.cli_common import (
    EXIT_USAGE,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    exit_code_for_error,
    exit_code_for_status,
    new_app,
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
from ldp_aggregator.discovery_rounds import describe_round
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.server import DEFAULT_LISTEN
from ldp_aggregator.shuffle_view import shuffle_text
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import LdpError, StoreUnavailableError
from ldp_client.mechanisms.pem import PEMParams

if TYPE_CHECKING:
    from ldp_aggregator.store import CampaignStore


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

token_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="Create, list and revoke access tokens (stored hashed).",
)
app.add_typer(token_app, name="token")

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


def _analyst(server: str) -> analyst_pb2_grpc.AnalystStub:
    return analyst_pb2_grpc.AnalystStub(_channel(server))


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


def open_database(db: Path) -> CampaignStore:
    """``--db PATH`` opened read-only (works while a server holds it), or a one-line error naming it."""
    from ldp_aggregator.service import open_store

    allowed = DB_ALLOWED
    if not db.is_file():
        raise _fail(f"--db {db}: no such database file; {allowed}")
    try:
        return open_store(str(db), read_only=True)
    except StoreUnavailableError as exc:
        raise _fail(f"--db {db}: {exc}; {allowed}") from None


def _read_lines(path: Path, option: str = "--candidates") -> list[str]:
    """The non-blank lines of a text file given with ``option`` (one candidate per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise _fail(f"{option} {path}: cannot read it ({reason}); allowed a UTF-8 text file") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


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
    if isinstance(info.params, PEMParams) and info.params.adaptive:  # issue 16: rounds
        out.print(f"  rounds: {describe_round(info)}", markup=False)
    if info.shuffler is not None:  # issue 17
        out.print(
            f"  shuffler: batches of {info.shuffler.batch_reports:,} reports, delta {info.shuffler.delta:g}",
            markup=False,
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
        _print_shuffle(msg)
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
    _print_shuffle(msg)


def _print_shuffle(msg: Any) -> None:
    """Issue 17: the line of :func:`shuffle_text` under a table (nothing without a shuffler)."""
    line = shuffle_text(msg)
    if line is not None:
        out.print(Text(line))


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
        help="Mechanisms whose devices hash strings (string RAPPOR, ...): candidate strings, one per line "
        "(default: the campaign's).",
        show_default=False,
    ),
]
ConfidenceOpt = Annotated[float, typer.Option(help="Interval confidence level, in (0, 1).")]
