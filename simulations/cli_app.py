"""The root of ``ldp-sim``: its Typer app, consoles, shared options and the helpers of its commands.

The command modules (:mod:`simulations.cli_run`: ``run`` and ``sweep``; :mod:`simulations.cli_associate`:
``associate``) import what they share from here; :mod:`simulations.cli`, the entry module, registers
them on :data:`app`. Exit codes, ``--json``, ``--version`` and error lines follow
:mod:`ldp_aggregator.cli_common`, shared with ``ldp-aggregator``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from ldp_aggregator.cli_common import (
    EXIT_INTERNAL,
    EXIT_USAGE,
    exit_code_for_status,
    fail,
    new_app,
    param_error_text,
    print_json,
    token_option,
    version_option,
)
from ldp_aggregator.client_access import (
    TLS_HINT,
    ClientAccess,
    ClientOptionError,
    TokenHints,
    check_token,
    read_client_access,
    rpc_error_message,
)
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.params import MECHANISM_NAMES
from ldp_client.spec import Kind
from simulations.runners import (
    ProgressFn,
    SimulationConfig,
)

__all__ = [
    "AlphaOpt",
    "BatchOpt",
    "CampaignOpt",
    "CandidatesOpt",
    "ChunkOpt",
    "ClientOpt",
    "ConfidenceOpt",
    "DomainOpt",
    "EpsilonOpt",
    "JsonOpt",
    "JsonOutOpt",
    "MechanismOpt",
    "ModeOpt",
    "ParamOpt",
    "PlotOpt",
    "PopulationOpt",
    "RepeatOpt",
    "ReporterTokenOpt",
    "SeedOpt",
    "ServerOpt",
    "TokenOpt",
    "UsersOpt",
    "WorkersOpt",
    "app",
    "err",
]

_HELP = (
    "Simulate user populations through the real encoders, accumulators and estimators.\n\n"
    "Modes: [bold]sum[/bold] (exact sufficient statistics: 10^9 users in about a second), [bold]report"
    "[/bold] (every report encoded), [bold]grpc[/bold] (reports sent to an aggregator by client processes). "
    "Results: tables, --json (stdout), --json-out PATH, --plot PATH."
)
_EXAMPLES = """[bold]Examples[/bold] (-m mechanism, -e epsilon, -p population, -d domain, -n users)
  ldp-sim run -m grr -e 2 -p zipf:1.1 -d 64 -n 1000000
  ldp-sim run -m rappor --param k=128 --param h=2 --param m=64 -d 1000 -n 1000000000 --plot out.png
  ldp-sim run -m rr -e 1 -p empirical:answers.csv --mode grpc -n 100000 --json-out out.json
  ldp-sim run -m piecewise -e 1 -p normal:0,1 -n 100000 --repeat 20 --json
  ldp-sim sweep -m grr -d 64 --over epsilon --values 0.5,1,2,4 --target-error 0.001
  ldp-sim associate --first rappor --second rr --param first.k=32 --param second.epsilon=1
  ldp-sim privacy compose -m pure:0.5x100 --delta 1e-6
  ldp-sim privacy shuffle --epsilon0 4 --n 1000000"""

app = new_app(help_text=_HELP, epilog=_EXAMPLES)

err = Console(stderr=True)


@app.callback()
def _root(version: Annotated[bool, version_option("ldp-sim")] = False) -> None:
    """Simulate user populations through the real encoders, accumulators and estimators."""
    del version  # handled by its eager callback


def _out() -> Console:
    """Console for results: the terminal's width, or 120 columns when writing to a file or pipe."""
    return Console() if sys.stdout.isatty() else Console(width=120)


# Field names of the errors raised by the config, prepare() and sweep(), and the option each comes from.
_OPTION_OF = {
    "mechanism": "--mechanism",
    "population": "--population",
    "domain": "--domain",
    "domain_size": "--domain",
    "n_users": "--users",
    "epsilon": "--epsilon",
    "params": "--param",
    "mode": "--mode",
    "seed": "--seed",
    "repeats": "--repeat",
    "candidates": "--candidates",
    "confidence": "--confidence",
    "detection_alpha": "--alpha",
    "chunk_size": "--chunk-size",
    "campaign_id": "--campaign-id",
    "server": "--server",
    "workers": "--workers",
    "batch_size": "--batch-size",
    "grpc_client": "--grpc-client",
    "access": "--token",
    "reporter_access": "--reporter-token",
    "over": "--over",
    "values": "--values",
    "target_error": "--target-error",
    "error_metric": "--error-metric",
}


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    fail(message, code)


def _run_failed(exc: LdpError, config: SimulationConfig | None = None) -> NoReturn:
    """A simulation that could not finish: exit 4 (aggregator unreachable), 3 (it refused), else 1."""
    status = getattr(exc, "status", None)
    _fail(_failure_text(exc, config), exit_code_for_status(status) if status else EXIT_INTERNAL)


ENV_REPORTER_TOKEN = "LDP_REPORTER_TOKEN"
_TOKEN_USAGE = (
    "after run or sweep (ldp-sim run --mode grpc --server HOST:PORT --token TOKEN --reporter-token TOKEN)"
)
# Which token each side of a simulation needs (ldp_aggregator.auth: only admins create campaigns, only
# reporters submit), for the access errors.
_ANALYST_HINTS = TokenHints(
    usage=_TOKEN_USAGE, role="admin", purpose="ldp-sim creates campaigns and reads their estimates"
)
_REPORTER_HINTS = TokenHints(
    usage=_TOKEN_USAGE,
    option="--reporter-token",
    env=ENV_REPORTER_TOKEN,
    role="reporter",
    purpose="ldp-sim's clients submit the reports, to campaigns it names per run: a token not limited to "
    "campaigns; an admin token may not submit",
)


def _failure_text(exc: LdpError, config: SimulationConfig | None) -> str:
    """The error line: a refused token names the ldp-sim option and variable that fix it."""
    status = getattr(exc, "status", None)
    if config is None or config.server is None:
        return str(exc)
    if status in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        call = getattr(exc, "call", None) or ""
        collector = call.startswith("Collector.")
        access = (config.reporter_access or config.access) if collector else config.access
        line = rpc_error_message(
            status,
            getattr(exc, "details", ""),
            token_given=access is not None and access.token is not None,
            server=config.server,
            hints=_REPORTER_HINTS if collector else _ANALYST_HINTS,
        )
        return f"{call.partition('.')[2] or 'a call'} on the aggregator at {config.server}: {line}"
    if status == "UNAVAILABLE":
        return f"{exc}; is ldp-aggregator serve running there? {TLS_HINT[0].upper()}{TLS_HINT[1:]}"
    return str(exc)


# Client options (only with --mode grpc --server): their parameter names and option names.
_ACCESS_OPTIONS = {
    "token": "--token",
    "reporter_token": "--reporter-token",
    "tls_ca": "--tls-ca",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
}


def _client_access(
    ctx: typer.Context,
    mode: str,
    server: str | None,
    given: dict[str, Any],
) -> tuple[ClientAccess | None, ClientAccess | None]:
    """(Analyst access, reporter access) from the client options, the PEM files read here, once.

    They apply to ``--mode grpc --server`` only (the aggregator ``ldp-sim`` starts itself has no token or
    TLS): given on the command line otherwise, they are refused; from the environment, ignored. A server
    with access tokens needs two: an admin token (``--token``) and a reporter token
    (``--reporter-token``), since only admins create campaigns and only reporters submit.
    """
    if mode != "grpc" or server is None:
        for name, option in _ACCESS_OPTIONS.items():
            source = getattr(ctx.get_parameter_source(name), "name", None)  # COMMANDLINE or ENVIRONMENT
            if given[name] is not None and source == "COMMANDLINE":
                _fail(
                    f"{option}: only with --mode grpc --server HOST:PORT (a running aggregator; the one "
                    "ldp-sim starts itself has no access tokens and no TLS)"
                )
        return None, None
    try:
        access = read_client_access(
            token=given["token"], tls_ca=given["tls_ca"], tls_cert=given["tls_cert"], tls_key=given["tls_key"]
        )
        reporter_token = check_token(given["reporter_token"], "--reporter-token", ENV_REPORTER_TOKEN)
    except ClientOptionError as exc:
        _fail(str(exc))
    if (access.token is None) != (reporter_token is None):
        missing = "--reporter-token (or LDP_REPORTER_TOKEN)" if access.token else "--token (or LDP_TOKEN)"
        _fail(
            f"{missing} is missing: against a server with access tokens ldp-sim needs two: --token "
            "(LDP_TOKEN), an admin token, to create campaigns and read their estimates, and --reporter-token "
            "(LDP_REPORTER_TOKEN), a reporter token, for its clients to submit the reports (an admin token "
            "may not submit); create them with ldp-aggregator token create --role admin|reporter --db PATH"
        )
    return access, (access.with_token(reporter_token) if reporter_token else None)


def _option_for(field: str) -> str:
    if field in _OPTION_OF:
        return _OPTION_OF[field]
    if field.startswith(("empirical", "population")):
        return "--population"
    if field.startswith("candidates"):
        return "--candidates"
    return "--param"  # a mechanism field (k, h, m, f, p, q, ...)


def _bad_option(exc: InvalidParameterError) -> NoReturn:
    _fail(f"invalid {_option_for(exc.field)}: {param_error_text(exc)}")


def _parse_params(items: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            _fail(f"invalid --param: {item!r}: expected NAME=VALUE, e.g. --param k=128")
        fields[name.strip()] = value.strip()
    return fields


def _read_candidates(path: Path | None) -> tuple[str, ...] | None:
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"invalid --candidates: cannot read {str(path)!r}: {exc}")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@contextlib.contextmanager
def _progress(total: int, show: bool) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr when it is a terminal and the run is long enough to need one."""
    if not (show and sys.stderr.isatty()):
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} users"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("users", total=total)
        yield lambda n: bar.advance(task, n)


def _config(**kwargs: Any) -> SimulationConfig:
    try:
        return SimulationConfig(**kwargs)
    except InvalidParameterError as exc:
        _bad_option(exc)


# The mechanisms `ldp-sim run` offers: every one make_params builds; those of kind MEAN (ldp_client.registry)
# run as means (simulations.numeric), paired campaigns (kind PAIRED) as `ldp-sim associate` does.
_MEAN_NAMES = [s.name for s in registry.SPECS if s.kind is Kind.MEAN]
_PAIRED_NAMES = [s.name for s in registry.SPECS if s.kind is Kind.PAIRED]
_FREQUENCY_NAMES = [n for n in MECHANISM_NAMES if n not in _MEAN_NAMES and n not in _PAIRED_NAMES]
MechanismOpt = Annotated[
    str,
    typer.Option(
        "--mechanism",
        "-m",
        help=f"{', '.join(_FREQUENCY_NAMES)}, or auto (the lowest-variance frequency oracle; --param "
        f"max_report_bits=B); means (run only): {', '.join(_MEAN_NAMES)}; two variables (run "
        f"only: {', '.join(_PAIRED_NAMES)}, --param first=MECH --param first.NAME=VALUE ..., the association "
        "as ldp-sim associate).",
    ),
]
PopulationOpt = Annotated[
    str,
    typer.Option(
        "--population",
        "-p",
        help="zipf:S, uniform, geometric:P or empirical:PATH (a value,count CSV); numeric mechanisms: "
        "normal:MU,SIGMA[,LO,HI] or uniform-num:LO,HI.",
    ),
]
DomainOpt = Annotated[
    int | None,
    typer.Option(
        "--domain",
        "-d",
        help="Number of population values D (default: 2 for rr/boolean-rappor, the CSV's values); "
        "multidim: the number of attributes (default 2).",
    ),
]
UsersOpt = Annotated[int, typer.Option("--users", "-n", help="Users per repeat (one report each).")]
EpsilonOpt = Annotated[
    float | None,
    typer.Option(
        "--epsilon", "-e", help="Epsilon (rr, grr, the frequency oracles, auto, numeric mechanisms)."
    ),
]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param", help="NAME=VALUE for any mechanism parameter (k, h, m, f, p, q, ...); repeatable."
    ),
]
ModeOpt = Annotated[str, typer.Option("--mode", help="sum (exact sufficient statistics), report or grpc.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every generator.")]
RepeatOpt = Annotated[int, typer.Option("--repeat", "-r", help="Independent repeats.")]
CandidatesOpt = Annotated[
    Path | None,
    typer.Option(
        "--candidates",
        help="Mechanisms whose devices hash strings (rappor, ...): file of candidate strings, one per line "
        "(default: the labels).",
    ),
]
ConfidenceOpt = Annotated[float, typer.Option("--confidence", help="Level of the intervals.")]
AlphaOpt = Annotated[
    float, typer.Option("--alpha", help="rappor: family-wise level of the Bonferroni detection test.")
]
ChunkOpt = Annotated[int, typer.Option("--chunk-size", help="report mode: users encoded per chunk.")]
ServerOpt = Annotated[
    str | None, typer.Option("--server", help="grpc mode: HOST:PORT of a running aggregator.")
]
WorkersOpt = Annotated[int, typer.Option("--workers", help="grpc mode: client worker processes.")]
BatchOpt = Annotated[int, typer.Option("--batch-size", help="grpc mode: reports per batch.")]
ClientOpt = Annotated[
    str, typer.Option("--grpc-client", help="grpc mode: batch (encode_batch + Submit) or reporter (rr, grr).")
]
CampaignOpt = Annotated[str, typer.Option("--campaign-id", help="Campaign id (keys RAPPOR's hashing).")]
TokenOpt = Annotated[
    str | None,
    token_option(
        "grpc mode with --server: an ADMIN access token (ldp-sim creates campaigns and reads estimates)."
    ),
]
ReporterTokenOpt = Annotated[
    str | None,
    token_option(
        "grpc mode with --server: a REPORTER access token (its clients submit the reports).",
        "--reporter-token",
        ENV_REPORTER_TOKEN,
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the results as one JSON document on stdout (no tables).")
]
JsonOutOpt = Annotated[
    Path | None,
    typer.Option("--json-out", help="Also write the JSON document to this file.", show_default=False),
]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot here.", show_default=False)]


def _check_outputs(*paths: Path | None) -> None:
    """Refuse output paths whose directory does not exist before simulating anything."""
    for option, path in zip(("--json-out", "--plot"), paths, strict=True):
        if path is not None and not path.parent.is_dir():
            _fail(f"{option} {str(path)!r}: the directory {str(path.parent)!r} does not exist")


def _emit_json(doc: dict[str, Any], as_json: bool, json_out: Path | None) -> None:
    """The result document on stdout (``--json``) and/or into a file (``--json-out``)."""
    if as_json:
        print_json(doc)
    if json_out is not None:
        from simulations.report import write_json

        _write(lambda: write_json(json_out, doc), "--json-out", json_out)


def _write(action: Any, option: str, path: Path) -> None:
    try:
        action()
    except OSError as exc:
        _fail(f"invalid {option}: cannot write {str(path)!r}: {exc.strerror or exc}")
    err.print(f"wrote {path}", markup=False, highlight=False)  # stderr: stdout may carry --json
