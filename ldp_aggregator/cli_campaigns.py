"""Core commands of ``ldp-aggregator``: ``serve``, ``campaign create|list|show`` and ``estimate``.

Registered on the apps of :mod:`ldp_aggregator.cli_app` by :mod:`ldp_aggregator.cli`. Campaign and
estimate commands talk to a running server over gRPC (``--server HOST:PORT``); ``estimate`` can also read a
database file directly (``--db``), which needs no server.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ldp_aggregator import marginals as marginal_answers
from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.analysis import estimate_to_dict
from ldp_aggregator.cli_app import (
    CandidatesOpt,
    ConfidenceOpt,
    DbOpt,
    JsonOpt,
    ServerOpt,
    _analyst,
    _fail,
    _print_campaign,
    _read_lines,
    _rpc,
    answer,
    note,
    out,
    print_estimate,
)
from ldp_aggregator.cli_common import EXIT_UNAVAILABLE, param_error_text, print_json
from ldp_aggregator.config import load_settings
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.itemsets import mining_to_dict
from ldp_aggregator.logs import configure_logging
from ldp_aggregator.ranges import add_to_proto, parse_range
from ldp_aggregator.server import DEFAULT_DB, DEFAULT_LISTEN, run_server
from ldp_aggregator.store import StoreLockedError
from ldp_aggregator.store_pg import PostgresUnreachableError
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2
from ldp_client.accounting.shuffle import ShufflerDeclaration
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.params import AUTO_MECHANISM, MECHANISM_NAMES, make_params

__all__ = ["campaign_create", "campaign_list", "campaign_show", "estimate_cmd", "serve_cmd"]


def _opt(help_text: str, default_shown: str, *names: str) -> Any:
    """An option whose value None means "from --config, else the built-in default" (shown in the help)."""
    return typer.Option(*names, help=help_text, show_default=default_shown)


def serve_cmd(
    config: Annotated[
        Path | None,
        typer.Option(
            help="TOML settings file (docs/operations.md); options override it.", show_default=False
        ),
    ] = None,
    db: Annotated[Path | None, _opt("SQLite database file.", str(DEFAULT_DB))] = None,
    store: Annotated[
        str | None,
        _opt(
            "PostgreSQL URL (postgresql://USER@HOST[:PORT]/DB) shared by replicas, instead of --db.",
            "none (SQLite --db)",
        ),
    ] = None,
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
    web_port: Annotated[
        int | None,
        _opt("Read-only web view on --web-host:PORT (0: a free port; docs/web.md).", "off"),
    ] = None,
    web_host: Annotated[
        str | None, _opt("Address of the web view (non-loopback needs access tokens).", "127.0.0.1")
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

    Prints "ready on port N" on stdout once it listens, then "web view on URL" with --web-port; logs go
    to stderr.
    """
    overrides = {
        "db": db,
        "store": store,
        "listen": listen,
        "retain_raw": retain_raw,
        "max_message_bytes": max_message_bytes,
        "tls_cert": tls_cert,
        "tls_key": tls_key,
        "tls_client_ca": tls_client_ca,
        "metrics_port": metrics_port,
        "web_port": web_port,
        "web_host": web_host,
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
        run_server(
            settings.server,
            on_ready=lambda port: print(f"ready on port {port}", flush=True),
            on_web=lambda url: print(f"web view on {url}", flush=True),
        )
    except (StoreLockedError, PostgresUnreachableError) as exc:  # held by another server; PostgreSQL away
        raise _fail(str(exc), EXIT_UNAVAILABLE) from None
    except LdpError as exc:  # a bad setting, certificate, port, database file or PostgreSQL URL / login
        raise _fail(str(exc)) from None


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
    shuffler: tuple[int | None, float | None] = (None, None),
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
            shuffler=_shuffler(shuffler, spec.get("shuffler")),
        )
    except LdpError as exc:
        raise _fail(param_error_text(exc)) from None


def _shuffler(options: tuple[int | None, float | None], table: Any) -> ShufflerDeclaration | None:
    """Issue 17: the campaign's shuffler from --shuffler-batch/--shuffler-delta, else the TOML file's
    ``[shuffler]`` table (``batch_reports``, ``delta``); None when neither declares one."""
    batch, delta = options
    if batch is None and delta is not None:
        raise _fail(f"--shuffler-delta {delta:g} needs --shuffler-batch (the reports shuffled together)")
    if batch is None and table is not None:
        if not isinstance(table, dict) or "batch_reports" not in table:
            raise _fail(f"--from-file: shuffler={table!r}; allowed a table with batch_reports (and delta)")
        batch, delta = table["batch_reports"], table.get("delta")
    if batch is None:
        return None
    try:
        declared_delta = DEFAULT_SHUFFLER_DELTA if delta is None else delta
        return ShufflerDeclaration(batch_reports=batch, delta=declared_delta)
    except InvalidParameterError as exc:
        option = "--shuffler-batch" if exc.field.endswith("batch_reports") else "--shuffler-delta"
        raise _fail(f"invalid {option} (or [shuffler] of --from-file): {exc}") from None


DEFAULT_SHUFFLER_DELTA = 1e-6
"""delta of a shuffler's central guarantee when the campaign declares none."""


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
        typer.Option(
            help="File of candidate strings, one per line (mechanisms whose devices hash strings: string "
            "RAPPOR, ...).",
            show_default=False,
        ),
    ] = None,
    description: Annotated[str, typer.Option(help="Free text.")] = "",
    from_file: Annotated[
        Path | None,
        typer.Option(
            help="TOML file with the campaign (examples/campaign.toml); options override it.",
            show_default=False,
        ),
    ] = None,
    shuffler_batch: Annotated[
        int | None,
        typer.Option(
            help="The reports go through a shuffler that permutes batches of this many: every estimate "
            "then shows the central (epsilon, delta) of a batch (docs/privacy-accounting.md).",
            show_default=False,
        ),
    ] = None,
    shuffler_delta: Annotated[
        float | None,
        typer.Option(
            help=f"delta of that central guarantee, in (0, 1) (default {DEFAULT_SHUFFLER_DELTA:g}).",
            show_default=False,
        ),
    ] = None,
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Create a campaign (options, or a TOML file with mechanism, epsilon, domain, params, candidates,
    shuffler)."""
    msg = _campaign_from_options(
        campaign_id,
        mechanism,
        epsilon,
        domain,
        labels,
        param or [],
        candidates,
        description,
        from_file,
        (shuffler_batch, shuffler_delta),
    )
    created = _rpc(_analyst(server).CreateCampaign, analyst_pb2.CreateCampaignRequest(campaign=msg))
    _print_campaign(created, as_json=as_json)


def campaign_list(server: ServerOpt = DEFAULT_LISTEN, as_json: JsonOpt = False) -> None:
    """List campaigns (JSON: {"campaigns": [...]}, each as campaign show --json)."""
    resp = _rpc(_analyst(server).ListCampaigns, analyst_pb2.ListCampaignsRequest())
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


def campaign_show(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Show one campaign: mechanism, parameters, epsilons, candidates."""
    _print_campaign(
        _rpc(_analyst(server).GetCampaign, collector_pb2.GetCampaignRequest(campaign_id=campaign_id)),
        as_json=as_json,
    )


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
    range_: Annotated[
        list[str] | None,
        typer.Option(
            "--range",
            help="Range mechanisms (hio, haar): estimate the users in positions LO..HI of the ordered domain "
            "(inclusive, 0-based); repeatable.",
        ),
    ] = None,
    quantile: Annotated[
        list[float] | None,
        typer.Option("--quantile", help="Range mechanisms: estimate the q-quantile, 0 < q < 1; repeatable."),
    ] = None,
    marginal: Annotated[
        list[str] | None,
        typer.Option(
            "--marginal",
            help="Marginal mechanisms (calm): estimate the marginal over attributes A,B,... (covered by one "
            "chosen marginal); repeatable.",
        ),
    ] = None,
    non_negative: Annotated[
        bool,
        typer.Option("--non-negative", help="With --marginal: add the non-negative version of each cell."),
    ] = False,
) -> None:
    """Estimates with standard errors and confidence intervals."""
    cands = _read_lines(candidates) if candidates is not None else []
    if population_size is not None and population_size < 1:
        raise _fail(f"--population-size={population_size}: allowed an integer >= 1")
    try:
        wanted = [parse_range(text, ()) for text in range_ or []]
    except LdpError as exc:
        raise _fail(f"--range: {param_error_text(exc)}") from None
    qs = list(quantile or [])
    marg = [tuple(a.strip() for a in text.split(",")) for text in marginal or []]

    def from_db(agg: Any) -> estimates_pb2.EstimateResponse:  # an ldp_aggregator.service.Aggregator
        # GetEstimate's own answer (with its note and a key-value campaign's keys), then its ranges.
        msg: estimates_pb2.EstimateResponse = agg.estimate_message(
            campaign_id, candidates=cands, confidence=confidence, population_size=population_size
        )
        if wanted or qs:  # issue 18, as GetEstimate answers them
            add_to_proto(msg, *agg.estimate_ranges(campaign_id, wanted, qs, confidence))
        if marg:  # issue 18, as GetEstimate answers them
            marginal_answers.add_to_proto(
                msg, agg.estimate_marginals(campaign_id, marg, confidence, [non_negative] * len(marg))
            )
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
                ranges=[estimates_pb2.RangeQuery(lo=lo, hi=hi) for lo, hi in wanted],
                quantiles=qs,
                marginals=[
                    estimates_pb2.MarginalQuery(attributes=list(m), non_negative=non_negative) for m in marg
                ],
            ),
        ),
    )
    if as_json:
        print_json(estimate_to_dict(msg))
    else:
        print_estimate(msg)
        _print_ranges(msg)
        _print_key_values(msg)
        _print_itemsets(msg)
        _print_marginals(msg)


def _print_marginals(msg: estimates_pb2.EstimateResponse) -> None:
    """Issue 18: the requested marginals, a table each (cell, estimate, share, standard error, interval)."""
    for m in msg.marginals:
        table = Table(title=Text(f"marginal {', '.join(m.attributes)}, {msg.confidence:.0%} intervals"))
        cols = ["cell", "estimate", "share", "std error", "interval"]
        cols += ["non-negative"] if m.non_negative else []
        for col in cols:
            table.add_column(col, justify="left" if col == "cell" else "right")
        for c in m.cells:
            row: list[Text | str] = [
                Text(", ".join(f"{a}={v}" for a, v in zip(m.attributes, c.labels, strict=True))),
                f"{c.count:,.0f}",
                f"{c.frequency:.4f}",
                f"{c.std_error:,.0f}",
                f"[{c.ci_low:,.0f}, {c.ci_high:,.0f}]",
            ]
            table.add_row(*row, *([f"{c.non_negative_count:,.0f}"] if m.non_negative else []))
        out.print(table)


def _print_ranges(msg: estimates_pb2.EstimateResponse) -> None:
    """Issue 18: the requested ranges (estimate, standard error, interval) and quantiles."""
    if msg.ranges:
        table = Table(title=Text(f"ranges, {msg.confidence:.0%} intervals"))
        for col in ("range", "estimate", "share", "std error", "interval"):
            table.add_column(col, justify="left" if col == "range" else "right")
        for r in msg.ranges:
            table.add_row(
                Text(f"[{r.lo_label}, {r.hi_label}]"),
                f"{r.count:,.0f}",
                f"{r.frequency:.4f}",
                f"{r.std_error:,.0f}",
                f"[{r.ci_low:,.0f}, {r.ci_high:,.0f}]",
            )
        out.print(table)
    for q in msg.quantiles:
        out.print(Text(f"quantile {q.q:g}: {q.label} (position {q.position})"))


def _print_key_values(msg: estimates_pb2.EstimateResponse) -> None:
    """Issue 18: each key's frequency and mean value (estimate, standard error, interval)."""
    if not msg.key_values:
        return
    table = Table(title=Text(f"keys and mean values, {msg.confidence:.0%} intervals"))
    for col in ("key", "frequency", "std error", "interval", "mean", "std error ", "interval "):
        table.add_column(col, justify="left" if col == "key" else "right")
    for kv in msg.key_values:
        table.add_row(
            Text(kv.key),
            f"{kv.frequency:.4f}",
            f"{kv.frequency_std_error:.4f}",
            f"[{kv.frequency_ci_low:.4f}, {kv.frequency_ci_high:.4f}]",
            f"{kv.mean:.4g}",
            f"{kv.mean_std_error:.3g}",
            f"[{kv.mean_ci_low:.4g}, {kv.mean_ci_high:.4g}]",
        )
    out.print(table)


def _print_itemsets(msg: estimates_pb2.EstimateResponse) -> None:
    """Issue 18: an SVIM stage's values ranked, with the corrected estimates, and its set sizes."""
    doc = mining_to_dict(msg).get("itemsets")
    if doc is None:
        return
    table = Table(title=Text(f"svim {doc['stage']}: ranked, {msg.confidence:.0%} intervals"))
    for col in ("rank", doc["stage"], "estimate", "std error", "interval", "corrected"):
        table.add_column(col, justify="left" if col == doc["stage"] else "right")
    for r in doc["ranked"]:
        table.add_row(
            str(r["rank"]),
            Text(r["label"]),
            f"{r['estimate']:,.0f}",
            f"{r['std_error']:,.0f}",
            f"[{r['ci_low']:,.0f}, {r['ci_high']:,.0f}]",
            f"{r['corrected']:,.0f}",
        )
    out.print(table)
    out.print(
        Text(
            f"size group {doc['size_reports']:,} reports, padding-and-sampling group {doc['ps_reports']:,};"
            f" correction u(L) = {doc['correction']:.4f}; suggested max_items {doc['suggested_max_items']}"
        )
    )
