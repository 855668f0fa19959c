"""``ldp-sim run`` and ``ldp-sim sweep``: one configuration, or a sweep over epsilon, users or a parameter.

Registered on the ``ldp-sim`` app (:mod:`simulations.cli_app`) by :mod:`simulations.cli`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ldp_aggregator.cli_common import TlsCaOpt, TlsCertOpt, TlsKeyOpt
from ldp_client import registry, wire
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.mechanisms.paired import PairedParams
from ldp_client.spec import Kind
from simulations.cli_app import (
    AlphaOpt,
    BatchOpt,
    CampaignOpt,
    CandidatesOpt,
    ChunkOpt,
    ClientOpt,
    ConfidenceOpt,
    DomainOpt,
    EpsilonOpt,
    JsonOpt,
    JsonOutOpt,
    MechanismOpt,
    ModeOpt,
    ParamOpt,
    PlotOpt,
    PopulationOpt,
    RepeatOpt,
    ReporterTokenOpt,
    SeedOpt,
    ServerOpt,
    TokenOpt,
    UsersOpt,
    WorkersOpt,
    _bad_option,
    _check_outputs,
    _client_access,
    _config,
    _emit_json,
    _fail,
    _out,
    _parse_params,
    _progress,
    _read_candidates,
    _run_failed,
    _write,
    err,
)
from simulations.itemsets import is_svim_run
from simulations.key_values import is_key_value_population
from simulations.numeric import is_numeric_mechanism
from simulations.runners import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, SimulationConfig, simulate, sweep

__all__ = ["run_cmd", "sweep_cmd"]


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
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="report mode: encode partitions of users on a Dask cluster (a LocalCluster of --workers"
            " processes, or --scheduler).",
        ),
    ] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            envvar="LDP_DASK_SCHEDULER",
            help="With --cluster: a running Dask scheduler, tcp://HOST:PORT.",
            show_default="a LocalCluster",
        ),
    ] = None,
) -> None:
    """Simulate one configuration: metrics table, per-item estimates, optional JSON and PNG."""
    from simulations.report import items_table, metrics_table, run_header_table, run_to_dict

    _check_outputs(json_out, plot)
    spec = registry.find_named(mechanism)
    if spec is not None and spec.kind is Kind.PAIRED:  # issue 14: two variables, their association
        refused = [
            name
            for name, given in (
                ("--mode grpc", mode == "grpc"),
                ("--server", server is not None),
                ("--candidates", candidates is not None),
                ("--epsilon", epsilon is not None),
                ("--plot", plot is not None),
                ("--cluster", cluster),
            )
            if given
        ]
        if refused:
            _fail(
                f"invalid {refused[0]}: not for {mechanism} (its association is simulated in process, and "
                "each side takes its own fields: --param first.epsilon=..., as ldp-sim associate)"
            )
        _run_paired(
            mechanism, population, domain, users, param, mode, seed, repeat, confidence, alpha, campaign_id,
            as_json, json_out,
        )  # fmt: skip
        return
    access, reporter_access = _client_access(
        ctx,
        mode,
        server,
        dict(token=token, reporter_token=reporter_token, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key),
    )
    if is_key_value_population(population):  # issue 18: key-value data (simulations/key_values.py)
        _run_key_values(
            mechanism, population, domain, users, epsilon, param, mode, seed, repeat, confidence, server,
            campaign_id, as_json, json_out,
        )  # fmt: skip
        return
    if spec is not None and spec.kind is Kind.DISCOVERY:  # issue 16: values found by the server
        refused = [
            name
            for name, given in (
                ("--candidates", candidates is not None),
                ("--repeat", repeat != 1),
                ("--plot", plot is not None),
            )
            if given
        ]
        if refused:
            _fail(f"invalid {refused[0]}: not for {mechanism} (it discovers the values; one run)")
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
    if scheduler is not None and not cluster:
        _fail("invalid --scheduler: only with --cluster")
    if cluster and (config.mode != "report" or is_numeric_mechanism(config.mechanism)):
        _fail(
            f"invalid --cluster: for frequency mechanisms with --mode report (every report encoded), not"
            f" {config.mechanism} with --mode {config.mode}"
        )
    if spec is not None and spec.kind is Kind.DISCOVERY:
        _run_discovery(config, as_json, json_out, show_items)
        return
    if is_svim_run(config.mechanism):  # issue 18: set-valued item and itemset mining
        if repeat != 1 or candidates is not None or plot is not None or cluster:
            _fail(f"invalid option for {mechanism}: one run (no --repeat, --candidates, --plot, --cluster)")
        _run_svim(config, as_json, json_out, show_items)
        return
    if is_numeric_mechanism(config.mechanism):  # issue 6: means of numbers (simulations/numeric.py)
        _run_numeric(config, as_json, json_out, plot, show_items)
        return
    try:
        if cluster:
            result = _simulate_on_cluster(config, scheduler, workers)
        else:
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


def _simulate_on_cluster(config: SimulationConfig, scheduler: str | None, workers: int) -> Any:
    """``run --cluster``: the report runner's partitions on Dask (:mod:`simulations.cluster`)."""
    from ldp_aggregator.reduce import ClusterError, dask_client
    from simulations.cluster import simulate_on_cluster

    try:
        with dask_client(scheduler, workers=workers) as client:
            return simulate_on_cluster(config, client)
    except ClusterError as exc:
        _fail(str(exc))


def _run_discovery(config: SimulationConfig, as_json: bool, json_out: Path | None, show_items: int) -> None:
    """``run`` for a discovery mechanism (issue 16): the values found, scored against the truth."""
    from simulations.discovery import discovery_sim_to_dict, discovery_table, simulate_discovery

    try:
        result = simulate_discovery(config)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc, config)
    doc = discovery_sim_to_dict(result)
    if not as_json:
        out = _out()
        out.print(
            ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in doc["metrics"].items()
            )
        )
        if show_items > 0:
            out.print(discovery_table(result, max_rows=show_items))
    _emit_json(doc, as_json, json_out)


def _run_svim(config: SimulationConfig, as_json: bool, json_out: Path | None, show_items: int) -> None:
    """``run`` for svim (issue 18): its stages on a set-valued population, scored against the truth."""
    from simulations.itemsets import simulate_svim, svim_sim_to_dict, svim_table

    try:
        result = simulate_svim(config)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc, config)
    if not as_json and show_items > 0:
        out = _out()
        for table in svim_table(result, max_rows=show_items):
            out.print(table)
    _emit_json(svim_sim_to_dict(result), as_json, json_out)


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


def _run_paired(
    mechanism: str,
    population: str,
    domain: int | None,
    users: int,
    param: list[str] | None,
    mode: str,
    seed: int,
    repeat: int,
    confidence: float,
    alpha: float,
    campaign_id: str,
    as_json: bool,
    json_out: Path | None,
) -> None:
    """``run`` for a paired campaign (kind PAIRED): the association simulation of ``ldp-sim associate``,
    the first variable over ``--population`` and the second uniform, each over its side's values (a
    string-RAPPOR side: ``--domain``). Every report is encoded, in either mode."""
    import time

    from ldp_client.params import make_params
    from simulations.association import (
        AssociationConfig,
        association_table,
        describe,
        side_domain,
        simulate_association,
    )

    started = time.perf_counter()
    try:
        params = make_params(mechanism, fields=dict(_parse_params(param or [])))
        if not isinstance(params, PairedParams):  # unreachable: the kind is PAIRED
            raise InvalidParameterError("mechanism", mechanism, "a paired mechanism")
        cfg = AssociationConfig(
            params=params,
            first_population=population,
            second_population="uniform",
            first_domain=side_domain(params.first, domain),
            second_domain=side_domain(params.second, domain),
            n_users=users,
            repeats=repeat,
            seed=seed,
            confidence=confidence,
            alpha=alpha,
            campaign_id=campaign_id,
        )
        result = simulate_association(cfg)
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc)
    summary = {
        "format": "ldp-sim.association-run.v1",
        "mechanism": mechanism,
        "first": params.first.name,
        "second": params.second.name,
        "epsilon": params.epsilon,
        "epsilon_inf": wire.epsilon_inf(params),
        "mode": mode,
        "population": population,
        "domains": [cfg.first_domain, cfg.second_domain],
        "n_users": users,
        "repeats": repeat,
        "seed": seed,
        "confidence": confidence,
        "elapsed_s": time.perf_counter() - started,
    }
    if not as_json:
        out = _out()
        out.print(association_table(result))
        for line in describe(result):
            out.print(line)
    _emit_json({"summary": summary, "association": result.to_dict()}, as_json, json_out)


def _oracle_notes(result: Any) -> None:
    """Issue 6: say which mechanism auto chose and why, and when the sum runner encoded every report."""
    from simulations.oracle_sampling import has_sum_sampler

    cfg = result.config
    if result.interval_warning is not None:  # issue 13: the intervals are approximate at this n
        err.print(result.interval_warning, highlight=False, markup=False)
    if cfg.mechanism == "auto":
        from ldp_client.auto import auto_choice

        choice = auto_choice(epsilon=cfg.epsilon, domain=result.domain_size, fields=dict(cfg.param_fields))
        err.print(f"auto chose {choice.mechanism}: {choice.reason}", highlight=False, markup=False)
    params = result.params
    if cfg.mode == "sum" and not has_sum_sampler(params):
        err.print(
            f"note: {params.name} has no exact sum sampler (the sums of its reports cannot be drawn "
            "directly): the sum mode encoded every report, as --mode report does",
            highlight=False,
            markup=False,
        )


def _split_values(text: str | None) -> list[str]:
    if text is None:
        return []
    return [v.strip() for v in text.split(",") if v.strip()]


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


def _run_key_values(
    mechanism: str, population: str, domain: int | None, users: int, epsilon: float | None,
    param: list[str] | None, mode: str, seed: int, repeat: int, confidence: float, server: str | None,
    campaign_id: str, as_json: bool, json_out: Path | None,
) -> None:  # fmt: skip
    """``run`` over a key-value population (issue 18): each key's frequency and mean against the truth."""
    from rich.table import Table

    from ldp_client.mechanisms.pckv import PCKVParams
    from ldp_client.params import make_params
    from simulations.key_values import parse_key_value_population, simulate_key_values

    try:
        params = make_params(
            mechanism, epsilon=epsilon, domain=domain, fields=dict(_parse_params(param or []))
        )
        if not isinstance(params, PCKVParams):
            raise InvalidParameterError("population", population, "a key-value mechanism (pckv) for kv-zipf")
        pop = parse_key_value_population(population, params.domain.size, params.lo, params.hi)
        doc = simulate_key_values(
            params, pop, n_users=users, repeats=repeat, seed=seed, mode=mode, confidence=confidence,
            server=server, campaign_id=campaign_id,
        )  # fmt: skip
    except InvalidParameterError as exc:
        _bad_option(exc)
    except LdpError as exc:
        _run_failed(exc)
    if not as_json:
        table = Table(title=f"{mechanism}: {users:,} users, epsilon {params.epsilon:.4g}, {mode} mode")
        for col in ("key", "true freq", "frequency", "std error", "true mean", "mean", "std error "):
            table.add_column(col, justify="left" if col == "key" else "right")
        for k in doc["keys"]:
            table.add_row(
                k["key"], f"{k['true_frequency']:.4f}", f"{k['frequency']:.4f}",
                f"{k['frequency_std_error']:.4f}", f"{k['true_mean']:.4g}", f"{k['mean']:.4g}",
                f"{k['mean_std_error']:.3g}",
            )  # fmt: skip
        out = _out()
        out.print(table)
        for name in ("frequency_metrics", "mean_metrics"):
            out.print(f"{name}: " + ", ".join(f"{k} {v:.4g}" for k, v in doc[name].items()))
    _emit_json(doc, as_json, json_out)
