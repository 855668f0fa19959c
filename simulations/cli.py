"""``ldp-sim``: simulate user populations through the real encoders, accumulators and estimators.

Commands ``run``, ``sweep`` and ``associate`` (:mod:`simulations.cli_associate`). Exit codes, ``--json``,
``--version`` and error lines follow :mod:`ldp_aggregator.cli_common`, shared with ``ldp-aggregator``:
``--json`` prints the result document on stdout (and no tables), ``--json-out PATH`` writes it to a file.
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
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
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
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.numeric_params import NUMERIC_MECHANISM_NAMES
from ldp_client.params import MECHANISM_NAMES, PairedParams
from simulations.numeric import is_numeric_mechanism
from simulations.runners import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_SIZE,
    ProgressFn,
    SimulationConfig,
    simulate,
    sweep,
)

__all__ = ["app", "main"]

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
  ldp-sim associate --first rappor --second rr --param first.k=32 --param second.epsilon=1"""

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


# The mechanisms `ldp-sim run` offers: every one make_params builds (the registered ones first, from
# ldp_client.registry), but paired campaigns, which `ldp-sim associate` simulates.
_FREQUENCY_NAMES = [n for n in MECHANISM_NAMES if n not in NUMERIC_MECHANISM_NAMES and n != PairedParams.name]
MechanismOpt = Annotated[
    str,
    typer.Option(
        "--mechanism",
        "-m",
        help=f"{', '.join(_FREQUENCY_NAMES)}, or auto (the lowest-variance frequency oracle; --param "
        f"max_report_bits=B); means (run only): {', '.join(NUMERIC_MECHANISM_NAMES)}.",
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
        "--candidates", help="rappor: file of candidate strings, one per line (default: the labels)."
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


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    mechanism: MechanismOpt,
    population: PopulationOpt = "zipf:1.1",
    domain: DomainOpt = None,
    users: UsersOpt = 100_000,
    epsilon: EpsilonOpt = None,
    param: ParamOpt = None,
    mode: ModeOpt = "sum",
    seed: SeedOpt = 0,
    repeat: RepeatOpt = 1,
    candidates: CandidatesOpt = None,
    confidence: ConfidenceOpt = 0.95,
    alpha: AlphaOpt = 0.05,
    chunk_size: ChunkOpt = DEFAULT_CHUNK_SIZE,
    server: ServerOpt = None,
    workers: WorkersOpt = 2,
    batch_size: BatchOpt = DEFAULT_BATCH_SIZE,
    grpc_client: ClientOpt = "batch",
    campaign_id: CampaignOpt = "ldp-sim",
    token: TokenOpt = None,
    reporter_token: ReporterTokenOpt = None,
    tls_ca: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
    plot: PlotOpt = None,
    show_items: Annotated[int, typer.Option("--show-items", help="Items shown in the table.")] = 20,
) -> None:
    """Simulate one configuration: metrics table, per-item estimates, optional JSON and PNG."""
    from simulations.report import items_table, metrics_table, run_header_table, run_to_dict

    _check_outputs(json_out, plot)
    access, reporter_access = _client_access(
        ctx,
        mode,
        server,
        dict(token=token, reporter_token=reporter_token, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key),
    )
    config = _config(
        mechanism=mechanism,
        population=population,
        n_users=users,
        domain=domain,
        epsilon=epsilon,
        params=_parse_params(param or []),
        mode=mode,
        seed=seed,
        repeats=repeat,
        candidates=_read_candidates(candidates),
        confidence=confidence,
        detection_alpha=alpha,
        chunk_size=chunk_size,
        campaign_id=campaign_id,
        server=server,
        workers=workers,
        batch_size=batch_size,
        grpc_client=grpc_client,
        access=access,
        reporter_access=reporter_access,
    )
    if is_numeric_mechanism(config.mechanism):  # issue 6: means of numbers (simulations/numeric.py)
        _run_numeric(config, as_json, json_out, plot, show_items)
        return
    try:
        with _progress(config.n_users * config.repeats, show=config.mode != "sum") as progress:
            result = simulate(config, progress=progress)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc, config)
    _oracle_notes(result)
    if not as_json:
        out = _out()
        out.print(run_header_table(result))
        out.print(metrics_table(result))
        if show_items > 0:
            out.print(items_table(result, max_rows=show_items))
    _emit_json(run_to_dict(result), as_json, json_out)
    if plot is not None:
        from simulations.plots import plot_run

        _write(lambda: plot_run(result, plot), "--plot", plot)


def _run_numeric(
    config: SimulationConfig, as_json: bool, json_out: Path | None, plot: Path | None, show_items: int
) -> None:
    """``run`` for a numeric mechanism: means with intervals against the population mean."""
    from simulations.numeric import numeric_tables, numeric_to_dict, plot_numeric, simulate_numeric

    try:
        with _progress(config.n_users * config.repeats, show=True) as progress:
            result = simulate_numeric(config, progress=progress)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc, config)
    if not as_json:
        out = _out()
        for table in numeric_tables(result, max_rows=max(0, show_items)):
            out.print(table)
    _emit_json(numeric_to_dict(result), as_json, json_out)
    if plot is not None:
        _write(lambda: plot_numeric(result, plot), "--plot", plot)


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


def _oracle_notes(result: Any) -> None:
    """Issue 6: say which mechanism auto chose and why, and when the sum runner encoded every report."""
    from ldp_client.params import FREQUENCY_ORACLE_TYPES
    from simulations.oracle_sampling import has_sum_sampler

    cfg = result.config
    if result.interval_warning is not None:  # issue 13: the intervals are approximate at this n
        err.print(result.interval_warning, highlight=False, markup=False)
    if cfg.mechanism == "auto":
        from ldp_client.auto import auto_choice

        choice = auto_choice(epsilon=cfg.epsilon, domain=result.domain_size, fields=dict(cfg.param_fields))
        err.print(f"auto chose {choice.mechanism}: {choice.reason}", highlight=False, markup=False)
    params = result.params
    if cfg.mode == "sum" and isinstance(params, FREQUENCY_ORACLE_TYPES) and not has_sum_sampler(params):
        err.print(
            f"note: {params.name} has no exact sum sampler (support counts are dependent through each "
            "report's seed or subset): the sum mode encoded every report, as --mode report does",
            highlight=False,
            markup=False,
        )


def _write(action: Any, option: str, path: Path) -> None:
    try:
        action()
    except OSError as exc:
        _fail(f"invalid {option}: cannot write {str(path)!r}: {exc.strerror or exc}")
    err.print(f"wrote {path}", markup=False, highlight=False)  # stderr: stdout may carry --json


def _split_values(text: str | None) -> list[str]:
    if text is None:
        return []
    return [v.strip() for v in text.split(",") if v.strip()]


@app.command("sweep")
def sweep_cmd(
    ctx: typer.Context,
    mechanism: MechanismOpt,
    population: PopulationOpt = "zipf:1.1",
    domain: DomainOpt = None,
    users: UsersOpt = 100_000,
    epsilon: EpsilonOpt = None,
    param: ParamOpt = None,
    mode: ModeOpt = "sum",
    seed: SeedOpt = 0,
    repeat: RepeatOpt = 1,
    candidates: CandidatesOpt = None,
    confidence: ConfidenceOpt = 0.95,
    alpha: AlphaOpt = 0.05,
    chunk_size: ChunkOpt = DEFAULT_CHUNK_SIZE,
    server: ServerOpt = None,
    workers: WorkersOpt = 2,
    batch_size: BatchOpt = DEFAULT_BATCH_SIZE,
    grpc_client: ClientOpt = "batch",
    campaign_id: CampaignOpt = "ldp-sim",
    token: TokenOpt = None,
    reporter_token: ReporterTokenOpt = None,
    tls_ca: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    over: Annotated[
        str | None,
        typer.Option("--over", help="Axis: epsilon, users, domain or a mechanism parameter (k, f, ...)."),
    ] = None,
    values: Annotated[
        str | None, typer.Option("--values", help="Comma-separated values of the axis, e.g. 0.5,1,2,4.")
    ] = None,
    target_error: Annotated[
        float | None,
        typer.Option(
            "--target-error",
            help="Solve for the users reaching this error (frequency scale) at each point, then verify.",
        ),
    ] = None,
    error_metric: Annotated[
        str,
        typer.Option(
            "--error-metric",
            help="max-se (largest std error of a frequency) or rmse (RMSE of the frequencies).",
        ),
    ] = "max-se",
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Simulate over epsilon, users or a parameter; with --target-error, the users needed at each point.

    With --target-error, each point runs a pilot with the sum runner at 10^9 users (its cost does not
    depend on N), scales the estimator's own variance (proportional to 1/N) to the users that reach the
    target, and verifies by simulating at that N in --mode (--users is then not used).
    """
    from simulations.report import sweep_table, sweep_to_dict

    _check_outputs(json_out, plot)
    access, reporter_access = _client_access(
        ctx,
        mode,
        server,
        dict(token=token, reporter_token=reporter_token, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key),
    )
    config = _config(
        mechanism=mechanism,
        population=population,
        n_users=users,
        domain=domain,
        epsilon=epsilon,
        params=_parse_params(param or []),
        mode=mode,
        seed=seed,
        repeats=repeat,
        candidates=_read_candidates(candidates),
        confidence=confidence,
        detection_alpha=alpha,
        chunk_size=chunk_size,
        campaign_id=campaign_id,
        server=server,
        workers=workers,
        batch_size=batch_size,
        grpc_client=grpc_client,
        access=access,
        reporter_access=reporter_access,
    )
    vals = _split_values(values)
    if values is not None and not vals:
        _fail(f"invalid --values: {values!r}: expected comma-separated values, e.g. 0.5,1,2,4")
    if over is None and vals:
        _fail("invalid --values: give the axis they are for with --over (e.g. --over epsilon)")
    try:
        result = sweep(
            config,
            over=over,
            values=vals,
            target_error=target_error,
            error_metric=error_metric,  # type: ignore[arg-type]  # validated by sweep()
        )
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc, config)
    if not as_json:
        _out().print(sweep_table(result))
    _emit_json(sweep_to_dict(result), as_json, json_out)
    if plot is not None:
        from simulations.plots import plot_sweep

        _write(lambda: plot_sweep(result, plot), "--plot", plot)


def main() -> None:
    """Console-script entry point (``ldp-sim``)."""
    app(prog_name="ldp-sim")


# Registers ``ldp-sim associate`` (issue 5: paired campaigns); imported last, it uses the helpers above.
from simulations import cli_associate as _cli_associate  # noqa: E402, F401

if __name__ == "__main__":
    main()
