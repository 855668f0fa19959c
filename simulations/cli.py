"""``ldp-sim``: simulate user populations through the real encoders, accumulators and estimators.

Examples::

    ldp-sim run --mechanism grr --epsilon 2 --population zipf:1.1 --domain 64 --users 1000000
    ldp-sim run --mechanism rappor --param k=128 --param h=2 --param m=64 --population zipf:1.1 \\
        --domain 1000 --users 1000000000 --json out.json --plot out.png
    ldp-sim run --mechanism rr --epsilon 1 --population empirical:answers.csv --mode grpc --users 100000
    ldp-sim run --mechanism piecewise --epsilon 1 --population normal:0,1 --users 100000 --repeat 20
    ldp-sim sweep --mechanism grr --domain 64 --population zipf:1.1 --users 100000 \\
        --over epsilon --values 0.5,1,2,4 --target-error 0.001

Exit codes: 0 success, 1 the simulation failed while running (e.g. the aggregator is unreachable), 2 a bad
option (the message names the option and the value).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from ldp_client.errors import InvalidParameterError, LdpError
from simulations.numeric import is_numeric_mechanism
from simulations.runners import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_SIZE,
    ProgressFn,
    SimulationConfig,
    SimulationError,
    simulate,
    sweep,
)

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, rich_markup_mode=None)

err = Console(stderr=True)


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
    "over": "--over",
    "values": "--values",
    "target_error": "--target-error",
    "error_metric": "--error-metric",
}


def _fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code=code)


def _option_for(field: str) -> str:
    if field in _OPTION_OF:
        return _OPTION_OF[field]
    if field.startswith(("empirical", "population")):
        return "--population"
    if field.startswith("candidates"):
        return "--candidates"
    return "--param"  # a mechanism field (k, h, m, f, p, q, ...)


def _bad_option(exc: InvalidParameterError) -> NoReturn:
    _fail(f"invalid {_option_for(exc.field)}: {exc}")


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


MechanismOpt = Annotated[
    str,
    typer.Option(
        "--mechanism",
        "-m",
        help="rr, grr, rappor, basic-rappor, boolean-rappor, oue, sue, olh, blh, ss, hr, set-valued, or auto "
        "(the lowest-variance frequency oracle; --param max_report_bits=B); means (run only): laplace, "
        "duchi, piecewise, hybrid, sr, multidim.",
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
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot here.")]


@app.command("run")
def run_cmd(
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
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    show_items: Annotated[int, typer.Option("--show-items", help="Items shown in the table.")] = 20,
) -> None:
    """Simulate one configuration: metrics table, per-item estimates, optional JSON and PNG."""
    from simulations.report import items_table, metrics_table, run_header_table, run_to_dict, write_json

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
    )
    if is_numeric_mechanism(config.mechanism):  # issue 6: means of numbers (simulations/numeric.py)
        _run_numeric(config, json_path, plot, show_items)
        return
    try:
        with _progress(config.n_users * config.repeats, show=config.mode != "sum") as progress:
            result = simulate(config, progress=progress)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except (SimulationError, LdpError) as exc:
        _fail(str(exc), code=1)
    _oracle_notes(result)
    out = _out()
    out.print(run_header_table(result))
    out.print(metrics_table(result))
    if show_items > 0:
        out.print(items_table(result, max_rows=show_items))
    if json_path is not None:
        _write(lambda: write_json(json_path, run_to_dict(result)), "--json", json_path)
    if plot is not None:
        from simulations.plots import plot_run

        _write(lambda: plot_run(result, plot), "--plot", plot)


def _run_numeric(
    config: SimulationConfig, json_path: Path | None, plot: Path | None, show_items: int
) -> None:
    """``run`` for a numeric mechanism: means with intervals against the population mean."""
    from simulations.numeric import numeric_tables, plot_numeric, simulate_numeric, write_numeric_json

    try:
        with _progress(config.n_users * config.repeats, show=True) as progress:
            result = simulate_numeric(config, progress=progress)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _fail(str(exc), code=1)
    out = _out()
    for table in numeric_tables(result, max_rows=max(0, show_items)):
        out.print(table)
    if json_path is not None:
        _write(lambda: write_numeric_json(json_path, result), "--json", json_path)
    if plot is not None:
        _write(lambda: plot_numeric(result, plot), "--plot", plot)


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
        _fail(f"invalid {option}: cannot write {str(path)!r}: {exc.strerror or exc}", code=2)
    _out().print(f"wrote {path}")


def _split_values(text: str | None) -> list[str]:
    if text is None:
        return []
    return [v.strip() for v in text.split(",") if v.strip()]


@app.command("sweep")
def sweep_cmd(
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
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
) -> None:
    """Simulate over epsilon, users or a parameter; with --target-error, the users needed at each point.

    With --target-error, each point runs a pilot with the sum runner at 10^9 users (its cost does not
    depend on N), scales the estimator's own variance (proportional to 1/N) to the users that reach the
    target, and verifies by simulating at that N in --mode (--users is then not used).
    """
    from simulations.report import sweep_table, sweep_to_dict, write_json

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
    except (SimulationError, LdpError) as exc:
        _fail(str(exc), code=1)
    _out().print(sweep_table(result))
    if json_path is not None:
        _write(lambda: write_json(json_path, sweep_to_dict(result)), "--json", json_path)
    if plot is not None:
        from simulations.plots import plot_sweep

        _write(lambda: plot_sweep(result, plot), "--plot", plot)


def main() -> None:
    """Console-script entry point (``ldp-sim``)."""
    app()


# Registers ``ldp-sim associate`` (issue 5: paired campaigns); imported last, it uses the helpers above.
from simulations import cli_associate as _cli_associate  # noqa: E402, F401

if __name__ == "__main__":
    main()
