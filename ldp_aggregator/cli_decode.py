"""Decoding commands of ``ldp-aggregator`` (issue 5): ``decode`` and ``associate``.

Registered on the apps of :mod:`ldp_aggregator.cli_app` by :mod:`ldp_aggregator.cli`:

* ``decode ID [--candidates FILE] [--alpha A] [--correction bonferroni|bh] [--json] [--all] [--db PATH]``
  decodes a RAPPOR campaign (:mod:`ldp_aggregator.rappor_decode`): string RAPPOR against the candidates
  in FILE (one per line) or the campaign's own, basic and boolean RAPPOR directly.
* ``associate ID [--candidates FILE] [--second-candidates FILE] [--json] [--db PATH]`` estimates the joint
  distribution of a paired campaign (:mod:`ldp_aggregator.association`).

Both talk to a running server over gRPC (``Analyst.DecodeRappor``, ``Analyst.EstimateAssociation``) or
read a database file directly with ``--db`` (read-only; works while a server runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from ldp_aggregator._proto.ldp.v1 import decode_pb2
from ldp_aggregator.cli_app import (
    CandidatesOpt,
    ConfidenceOpt,
    DbOpt,
    JsonOpt,
    ServerOpt,
    _analyst,
    _fail,
    _print_shuffle,
    _read_lines,
    _rpc,
    answer,
    out,
)
from ldp_aggregator.cli_common import print_json
from ldp_aggregator.server import DEFAULT_LISTEN

__all__ = ["associate_cmd", "decode_cmd", "print_association", "print_decode"]

_CORRECTIONS = {"bonferroni": 1, "bh": 2}


def print_decode(msg: decode_pb2.DecodeRapporResponse, *, show_all: bool = False) -> None:
    """A table of the decoded candidates (detected and selected ones unless ``show_all``) and a summary."""
    corr = "Bonferroni" if msg.correction != 2 else "Benjamini-Hochberg"
    title = (
        f"{msg.campaign_id}: {msg.mechanism} ({msg.method}), n={msg.n_reports:,}, epsilon={msg.epsilon:.4g}, "
        f"{msg.confidence:.0%} intervals, detection {corr} alpha={msg.alpha:g}"
    )
    table = Table(title=Text(title))
    for col in ("candidate", "estimate", "proportion", "std error", "interval", "z", "detected"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    rows = sorted(msg.candidates, key=lambda c: -c.count)
    shown = [c for c in rows if show_all or c.selected or c.detected]
    for c in shown:
        table.add_row(
            Text(c.label),
            f"{c.count:,.0f}",
            f"{c.proportion:.4%}",
            f"{c.std_error:,.0f}",
            f"[{c.ci_low:,.0f}, {c.ci_high:,.0f}]",
            f"{c.z:.2f}",
            "yes" if c.detected else "",
        )
    out.print(table)
    hidden = len(rows) - len(shown)
    if hidden:
        out.print(f"({hidden:,} candidates estimated at 0 not shown; --all or --json lists them)")
    out.print(
        f"detected {msg.n_detected:,} of {len(rows):,} (selected {msg.n_selected:,}); allocated mass "
        f"{msg.allocated_mass:.4f}; unexplained mass {msg.unexplained_mass:.4f} "
        f"+/- {msg.unexplained_mass_se:.4f}"
    )
    out.print(
        f"detection threshold: z={msg.threshold_z:.3f}, i.e. {msg.threshold_count:,.0f} reports "
        f"({msg.threshold_proportion:.4%}) for an isolated candidate"
    )
    if msg.HasField("residuals"):
        r = msg.residuals
        out.print(
            f"residuals: chi2={r.chi2:,.1f} on {r.df:,} df (p={r.p_value:.3g}), "
            f"max |r|={r.max_abs_residual:.2f}"
        )
    for w in msg.warnings:
        out.print(Text.assemble(("warning:", "yellow"), " ", w))
    _print_shuffle(msg)  # issue 17: the campaign declares a shuffler


def decode_cmd(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    candidates: CandidatesOpt = None,
    alpha: Annotated[
        float, typer.Option(help="Detection level in (0, 1) (family-wise, or FDR for bh).")
    ] = 0.05,
    correction: Annotated[str, typer.Option(help="Multiple testing: bonferroni or bh.")] = "bonferroni",
    confidence: ConfidenceOpt = 0.95,
    selection_z: Annotated[
        float | None,
        typer.Option(help="LASSO penalty in z units, > 0.", show_default="z_(1-5/M), sigma-scaled"),
    ] = None,
    as_json: JsonOpt = False,
    show_all: Annotated[bool, typer.Option("--all", help="List every candidate, also those at 0.")] = False,
    db: DbOpt = None,
    server: ServerOpt = DEFAULT_LISTEN,
) -> None:
    """Decode a RAPPOR campaign: estimates, standard errors, intervals, detection, fit diagnostics."""
    from ldp_aggregator.rappor_decode import decode_response_to_dict, decode_to_proto

    if correction not in _CORRECTIONS:
        raise _fail(f"--correction {correction!r}: allowed bonferroni or bh")
    cands = _read_lines(candidates) if candidates is not None else []
    msg = answer(
        db,
        lambda agg: decode_to_proto(
            agg.decode_rappor(
                campaign_id,
                candidates=cands,
                confidence=confidence,
                alpha=alpha,
                correction=correction,
                selection_z=selection_z,
            ),
            campaign_id,
        ),
        lambda: _rpc(
            _analyst(server).DecodeRappor,
            decode_pb2.DecodeRapporRequest(
                campaign_id=campaign_id,
                candidates=cands,
                confidence=confidence,
                alpha=alpha,
                correction=_CORRECTIONS[correction],  # type: ignore[arg-type]
                selection_z=selection_z or 0.0,
            ),
        ),
    )
    if as_json:
        print_json(decode_response_to_dict(msg))
    else:
        print_decode(msg, show_all=show_all)


def print_association(msg: decode_pb2.AssociationResponse) -> None:
    """The joint distribution as a table (proportion +/- SE per cell), the marginals and the test."""
    title = (
        f"{msg.campaign_id}: joint distribution of {msg.first_mechanism} (rows) x {msg.second_mechanism} "
        f"(columns), n={msg.n_reports:,}, epsilon={msg.epsilon:.4g}"
    )
    table = Table(title=Text(title))
    table.add_column("first \\ second")
    for lab in msg.col_labels:
        table.add_column(Text(lab), justify="right")
    table.add_column("marginal", justify="right")
    ncol = len(msg.col_labels)
    for i, lab in enumerate(msg.row_labels):
        cells = msg.cells[i * ncol : (i + 1) * ncol]
        marg = msg.first[i]
        table.add_row(
            Text(lab),
            *(f"{c.proportion:.4f} +/- {c.std_error:.4f}" for c in cells),
            f"{marg.proportion:.4f} +/- {marg.std_error:.4f}",
        )
    table.add_row("marginal", *(f"{m.proportion:.4f} +/- {m.std_error:.4f}" for m in msg.second), "1")
    out.print(table)
    out.print(
        f"independence: likelihood ratio {msg.lr_statistic:.3f} on {msg.df} df, p={msg.p_value:.4g} "
        f"(EM: {msg.iterations} iterations, {'converged' if msg.converged else 'NOT converged'})"
    )
    for w in msg.warnings:
        out.print(Text.assemble(("warning:", "yellow"), " ", w))
    _print_shuffle(msg)  # issue 17: the campaign declares a shuffler


def associate_cmd(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (a paired campaign).")],
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
    db: DbOpt = None,
    server: ServerOpt = DEFAULT_LISTEN,
) -> None:
    """Joint distribution of a paired campaign's two variables, with an independence test.

    EM over the retained raw reports: proportions with standard errors per cell, marginals, and a
    likelihood-ratio test of independence.
    """
    from ldp_aggregator.association import association_response_to_dict, association_to_proto

    first = _read_lines(candidates) if candidates is not None else []
    second = _read_lines(second_candidates, "--second-candidates") if second_candidates is not None else []
    msg = answer(
        db,
        lambda agg: association_to_proto(
            agg.estimate_association(
                campaign_id,
                first_candidates=first,
                second_candidates=second,
                confidence=confidence,
                max_values=max_values,
            ),
            campaign_id,
        ),
        lambda: _rpc(
            _analyst(server).EstimateAssociation,
            decode_pb2.AssociationRequest(
                campaign_id=campaign_id,
                first_candidates=first,
                second_candidates=second,
                confidence=confidence,
                max_values=max_values,
            ),
        ),
    )
    if as_json:
        print_json(association_response_to_dict(msg))
    else:
        print_association(msg)
