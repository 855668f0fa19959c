"""``ldp-aggregator archive``: report archives in Parquet, and their analysis on Dask.

Registered by :mod:`ldp_aggregator.cli` as the ``archive`` group:

* ``archive export ARCHIVE --db PATH|--store URL [--campaign ID ...] [--json]`` appends the raw reports
  committed since the last export (:func:`ldp_aggregator.archive.export_archive`; works while servers hold
  the database: the SQLite file of ``--db``, or the replicas' PostgreSQL of ``--store``, read-only);
* ``archive verify ARCHIVE [--db PATH|--store URL] [--json]`` checks every file and names each bad one
  (exit 2);
* ``archive estimate|decode|associate ARCHIVE ID [--scheduler ADDRESS] [--workers N]`` reduce a campaign's
  files to its accumulator on Dask (:mod:`ldp_aggregator.reduce`: a LocalCluster unless a scheduler is
  named) and answer as ``estimate``, ``decode`` and ``associate`` do, with the same options and output.

Needs the ``cluster`` extra (pyarrow, dask.distributed); without it the commands say so in one line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ldp_aggregator.cli_app import (
    CandidatesOpt,
    ConfidenceOpt,
    JsonOpt,
    _fail,
    _read_lines,
    note,
    open_database,
    out,
    print_estimate,
)
from ldp_aggregator.cli_common import EXIT_USAGE, exit_code_for_error, print_json
from ldp_aggregator.cli_ops import ServerStoreOpt
from ldp_client.errors import LdpError

if TYPE_CHECKING:
    from ldp_aggregator.store import CampaignStore

__all__ = [
    "archive_app",
    "archive_associate",
    "archive_decode",
    "archive_estimate",
    "archive_export",
    "archive_verify",
]

archive_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode="rich",
    help=(
        "Report archives in Parquet (export, verify) and their analysis on Dask (estimate, decode, "
        "associate): docs/operations.md."
    ),
)

ArchiveArg = Annotated[Path, typer.Argument(help="Archive directory.", show_default=False)]
CampaignArg = Annotated[str, typer.Argument(help="Campaign id.")]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        envvar="LDP_DASK_SCHEDULER",
        help="Dask scheduler address (tcp://HOST:PORT); its workers must read the archive's paths.",
        show_default="a LocalCluster of --workers processes",
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Workers of the LocalCluster (no --scheduler).")]


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """A project error (a bad archive file, foreign parameters, no cluster) as one line and its exit code."""
    try:
        yield
    except LdpError as exc:
        raise _fail(str(exc), exit_code_for_error(exc)) from None


_ONE_OF = "give one of them (an SQLite file, or the replicas' PostgreSQL URL)"


def _open_source(db: Path | None, store: str | None) -> CampaignStore | None:
    """The store of ``--db`` (an SQLite file) or ``--store`` (the replicas' PostgreSQL URL), read-only.

    Read-only, so that it works while servers write to it. A URL is checked and refused as the token and
    purge commands refuse it (one line, exit 2 for a malformed URL or a refused login, 4 for a server
    that cannot be reached). None when neither is given.
    """
    if db is not None and store is not None:
        raise _fail(f"--db and --store: {_ONE_OF}")
    if store is not None:
        from ldp_aggregator import store_pg
        from ldp_aggregator.service import open_store

        try:
            return open_store(store_pg.check_url(store, "--store"), read_only=True)
        except LdpError as exc:
            raise _fail(str(exc), exit_code_for_error(exc)) from None
    return open_database(db) if db is not None else None


def archive_export(
    archive: ArchiveArg,
    db: Annotated[
        Path | None,
        typer.Option(
            "--db",
            help="The SQLite database to export from (read-only; a server may hold it).",
            show_default=False,
        ),
    ] = None,
    store: ServerStoreOpt = None,
    campaign: Annotated[
        list[str] | None,
        typer.Option("--campaign", help="Export only this campaign (repeatable).", show_default="every one"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Append the raw reports committed since the last export (never rewrites a file)."""
    from ldp_aggregator.archive import export_archive

    source = _open_source(db, store)
    if source is None:
        raise _fail(f"--db or --store: {_ONE_OF}")
    try:
        with _errors():
            summary = export_archive(source, archive, campaign_ids=campaign or None)
    finally:
        source.close()
    if as_json:
        print_json(
            {
                "archive": str(archive),
                "rows": summary.rows,
                "files": [str(p) for p in summary.files],
                "campaigns": summary.campaigns,
            }
        )
        return
    for cid, stats in summary.campaigns.items():
        out.print(
            f"{cid}: appended {stats['rows']:,} payload(s) in {stats['files']} file(s); archived up to"
            f" position {stats['last_position']}",
            markup=False,
            highlight=False,
        )
    if not summary.campaigns:
        out.print("no campaigns to export")


def archive_verify(
    archive: ArchiveArg,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Also check the parameters against this database's campaigns."),
    ] = None,
    store: ServerStoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every file: checksum, metadata, row counts, positions, campaign parameters. Names bad files."""
    from ldp_aggregator.archive import verify_archive

    source = _open_source(db, store)
    try:
        with _errors():
            report = verify_archive(archive, store=source)
    finally:
        if source is not None:
            source.close()
    if as_json:
        print_json(
            {
                "archive": str(archive),
                "ok": not report.problems,
                "files": report.files,
                "rows": report.rows,
                "campaigns": report.campaigns,
                "problems": [{"path": str(p.path), "problem": p.message} for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            print(f"bad: {p.path}: {p.message}", file=sys.stderr)
        summary = f"{report.files} file(s), {report.rows:,} payload(s), {len(report.campaigns)} campaign(s)"
        if report.problems:
            note.print(f"archive {archive}: {len(report.problems)} bad file(s) of {summary}", markup=False)
        else:
            out.print(f"archive {archive}: ok, {summary}", markup=False, highlight=False)
    if report.problems:
        raise typer.Exit(code=EXIT_USAGE)


def _reduced(archive: Path, campaign_id: str, scheduler: str | None, workers: int) -> Any:
    """The campaign's archive reduced on Dask (a :class:`ldp_aggregator.reduce.ReduceResult`)."""
    from ldp_aggregator.reduce import dask_client, reduce_archive

    with _errors(), dask_client(scheduler, workers=workers) as client:
        result = reduce_archive(client, archive, campaign_id)
    note.print(
        f"reduced {result.files} file(s), {result.rows:,} payload(s), {result.accumulator.n:,} reports on"
        f" Dask in {result.seconds:.2f} s",
        markup=False,
        highlight=False,
    )
    return result


def archive_estimate(
    archive: ArchiveArg,
    campaign_id: CampaignArg,
    as_json: JsonOpt = False,
    candidates: CandidatesOpt = None,
    confidence: ConfidenceOpt = 0.95,
    population_size: Annotated[
        int | None,
        typer.Option(
            "--population-size",
            help="Numeric mechanisms: N for the estimated sums.",
            show_default="the number of reports",
        ),
    ] = None,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = 2,
) -> None:
    """Estimates from the archived reports, as `estimate` answers them from the store."""
    from ldp_aggregator.analysis import estimate_campaign, estimate_to_dict, estimate_to_proto
    from ldp_aggregator.archive import iter_payloads
    from ldp_aggregator.service import estimate_note

    cands = _read_lines(candidates) if candidates is not None else []
    if population_size is not None and population_size < 1:
        raise _fail(f"--population-size={population_size}: allowed an integer >= 1")
    result = _reduced(archive, campaign_id, scheduler, workers)
    with _errors():
        msg = estimate_to_proto(
            estimate_campaign(
                result.info,
                result.accumulator,
                candidates=cands,
                confidence=confidence,
                population_size=population_size,
                # A discovery campaign finds its values in the raw reports, as the server does (issue 16).
                reports=lambda: iter_payloads(archive, campaign_id),
            )
        )
    msg.note = estimate_note(result.info, cands)
    if as_json:
        print_json(estimate_to_dict(msg))
    else:
        print_estimate(msg)


def archive_decode(
    archive: ArchiveArg,
    campaign_id: CampaignArg,
    candidates: CandidatesOpt = None,
    alpha: Annotated[
        float, typer.Option(help="Detection level in (0, 1) (family-wise, or FDR for bh).")
    ] = 0.05,
    correction: Annotated[str, typer.Option(help="Multiple testing: bonferroni or bh.")] = "bonferroni",
    confidence: ConfidenceOpt = 0.95,
    as_json: JsonOpt = False,
    show_all: Annotated[bool, typer.Option("--all", help="List every candidate, also those at 0.")] = False,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = 2,
) -> None:
    """Decode a RAPPOR campaign from the archived reports, as `decode` does from the store."""
    from ldp_aggregator.cli_decode import print_decode
    from ldp_aggregator.rappor_decode import decode_campaign, decode_response_to_dict, decode_to_proto

    if correction not in ("bonferroni", "bh"):
        raise _fail(f"--correction {correction!r}: allowed bonferroni or bh")
    cands = _read_lines(candidates) if candidates is not None else []
    result = _reduced(archive, campaign_id, scheduler, workers)
    with _errors():
        msg = decode_to_proto(
            decode_campaign(
                result.info,
                result.accumulator,
                candidates=cands,
                confidence=confidence,
                alpha=alpha,
                correction=correction,  # type: ignore[arg-type]  # checked above
            ),
            campaign_id,
        )
    if as_json:
        print_json(decode_response_to_dict(msg))
    else:
        print_decode(msg, show_all=show_all)


def archive_associate(
    archive: ArchiveArg,
    campaign_id: CampaignArg,
    candidates: Annotated[
        Path | None,
        typer.Option(help="First side (string RAPPOR): candidates, one per line.", show_default=False),
    ] = None,
    second_candidates: Annotated[
        Path | None,
        typer.Option(help="Second side (string RAPPOR): candidates, one per line.", show_default=False),
    ] = None,
    confidence: ConfidenceOpt = 0.95,
    max_values: Annotated[
        int, typer.Option(help="String-RAPPOR sides: keep this many largest candidates (+ <other>).")
    ] = 10,
    as_json: JsonOpt = False,
    scheduler: SchedulerOpt = None,
    workers: WorkersOpt = 2,
) -> None:
    """Joint distribution of a paired campaign from the archive, as `associate` answers it from the store.

    The marginal sums come from the Dask reduce; the EM, when a side is string RAPPOR, reads the archived
    reports here (each file checked as it is read).
    """
    from ldp_aggregator import association
    from ldp_aggregator.archive import iter_payloads
    from ldp_aggregator.cli_decode import print_association

    first = _read_lines(candidates) if candidates is not None else []
    second = _read_lines(second_candidates, "--second-candidates") if second_candidates is not None else []
    result = _reduced(archive, campaign_id, scheduler, workers)
    with _errors():
        msg = association.association_to_proto(
            association.associate_campaign(
                result.info,
                result.accumulator,
                lambda: iter_payloads(archive, campaign_id),
                first_candidates=first,
                second_candidates=second,
                confidence=confidence,
                max_values=max_values,
                max_iterations=association.DEFAULT_MAX_ITERATIONS,
                tolerance=association.DEFAULT_TOLERANCE,
            ),
            campaign_id,
        )
    if as_json:
        print_json(association.association_response_to_dict(msg))
    else:
        print_association(msg)
