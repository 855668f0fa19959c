"""Operator commands of ``ldp-aggregator``: access tokens, raw-report retention, closing and exporting.

Registered on the apps of :mod:`ldp_aggregator.cli_app` by :mod:`ldp_aggregator.cli`:

Each works on the server's SQLite file (``--db PATH``) or on the replicas' PostgreSQL database
(``--store URL``), whether or not servers run on it.

* ``token create --role reporter|analyst|admin [--name N] [--campaign ID ...] --db PATH`` prints a new
  token ONCE (only its SHA-256 is stored): the token alone on stdout
  (``export LDP_TOKEN=$(ldp-aggregator token create ...)``), its id and role on stderr; ``--campaign``
  (repeatable, reporter tokens only) limits the token to those campaigns; ``token list [--json] --db PATH``;
  ``token revoke ID --db PATH``. They work whether or not a server holds the database; a running server
  picks changes up within its ``token_refresh_s``.
* ``purge --older-than 30d --db PATH`` deletes raw reports received before then (accumulators, batch
  ids and estimates are kept).
* ``campaign close ID [--json]`` (admin token) and ``campaign export ID [--json] [--db PATH]`` (analyst).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from ldp_aggregator import store_pg
from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_aggregator.auth import Role, new_token_record
from ldp_aggregator.cli_app import (
    DB_ALLOWED,
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
from ldp_aggregator.cli_common import exit_code_for_error, print_json
from ldp_aggregator.export import export_to_dict
from ldp_aggregator.server import DEFAULT_DB, DEFAULT_LISTEN
from ldp_aggregator.service import open_store
from ldp_aggregator.store import StoreLockedError, add_token, list_tokens, purge_raw_file, revoke_token
from ldp_client._proto.ldp.v1 import collector_pb2
from ldp_client.errors import LdpError

__all__ = [
    "campaign_close",
    "campaign_export",
    "parse_duration",
    "purge_cmd",
    "token_create",
    "token_list",
    "token_revoke",
]

ServerDbOpt = Annotated[
    Path | None,
    typer.Option("--db", help="The server's SQLite database file.", show_default=str(DEFAULT_DB)),
]
ServerStoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="The replicas' PostgreSQL URL (postgresql://USER@HOST[:PORT]/DB), instead of --db.",
        show_default=False,
    ),
]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"3600s"``, ``"2w"`` -> seconds (a bare number is days)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if match is None:
        raise _fail(f"--older-than {text!r}: expected a number and a unit s, m, h, d or w (e.g. 30d)")
    return float(match.group(1)) * _UNITS[match.group(2) or "d"]


@dataclass(frozen=True)
class _Target:
    """The database an operator command works on: an SQLite file (``--db``) or PostgreSQL (``--store``)."""

    db: Path | None
    url: str | None

    @property
    def label(self) -> str:
        """How error lines name it (a URL without its password)."""
        return f"--db {self.db}" if self.url is None else f"--store {store_pg.redact(self.url)}"

    def fail(self, exc: LdpError) -> typer.Exit:
        """One line for an error met on this database, with the exit code of its kind."""
        text = str(exc) if self.url is not None else f"--db {self.db}: {exc}"
        return _fail(text, exit_code_for_error(exc))


def _prepare(db: Path | None, store: str | None, *, create: bool) -> _Target:
    """The database of ``--db`` or ``--store``, created or migrated if needed (a running server did both)."""
    if db is not None and store is not None:
        raise _fail("--db and --store: give one of them (an SQLite file, or the replicas' PostgreSQL URL)")
    if store is not None:
        try:
            store_pg.prepare(store_pg.check_url(store, "--store"), create=create)
        except LdpError as exc:
            raise _fail(str(exc), exit_code_for_error(exc)) from None
        return _Target(db=None, url=store)
    path = DEFAULT_DB if db is None else db
    if not create and not path.is_file():
        raise _fail(f"--db {path}: no such database file; {DB_ALLOWED}")
    try:
        open_store(str(path)).close()
    except StoreLockedError:
        pass  # a server has it open: it created and migrated the file at start
    except LdpError as exc:  # not a database, or one of another program: the file given is unusable
        raise _fail(f"--db {path}: {exc}; {DB_ALLOWED}") from None
    return _Target(db=path, url=None)


def token_create(
    role: Annotated[
        str,
        typer.Option(
            help="reporter (submit reports), analyst (read, decode) or admin (read, create, close)."
        ),
    ],
    name: Annotated[str, typer.Option(help="Who or what uses it (free text).")] = "",
    campaign: Annotated[
        list[str] | None,
        typer.Option(
            "--campaign",
            help="Reporter tokens: limit the token to this campaign id (repeat for several).",
            show_default=False,
        ),
    ] = None,
    db: ServerDbOpt = None,
    store: ServerStoreOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {id, role, name, campaigns, token} as JSON.")
    ] = False,
) -> None:
    """Create a token and print it once: it cannot be shown again (only its SHA-256 is stored).

    The token alone goes to stdout, its id and role to stderr: export LDP_TOKEN=$(ldp-aggregator token
    create --role admin --db PATH). The first token switches authentication on for every call: create
    an admin token first and keep it, to manage campaigns afterwards.
    """
    if role not in {r.value for r in Role}:
        raise _fail(f"--role {role!r}: allowed {', '.join(r.value for r in Role)}")
    if campaign and role != Role.REPORTER.value:
        raise _fail(f"--campaign: only for --role reporter (a {role} token cannot be limited to campaigns)")
    target = _prepare(db, store, create=True)
    try:
        token, record = new_token_record(role, name=name, campaigns=campaign or None)
        if target.url is not None:
            store_pg.add_token(target.url, record)
        else:
            add_token(DEFAULT_DB if target.db is None else target.db, record)
    except LdpError as exc:
        raise target.fail(exc) from None
    scope = None if record.campaigns is None else list(record.campaigns)
    if as_json:
        print_json(
            {"id": record.token_id, "role": record.role, "name": name, "campaigns": scope, "token": token}
        )
        return
    note.print(
        Text(
            f"token id: {record.token_id}   role: {record.role}"
            + (f"   name: {name}" if name else "")
            + (f"   campaigns: {', '.join(scope)}" if scope is not None else "")
            + "   (the token is shown once: store it now, it cannot be recovered)"
        )
    )
    sys.stdout.write(token + "\n")


def _when(ms: int | None) -> str:
    return "" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000))


def token_list(db: ServerDbOpt = None, store: ServerStoreOpt = None, as_json: JsonOpt = False) -> None:
    """List tokens (ids, roles, names, dates; never the tokens)."""
    target = _prepare(db, store, create=False)
    try:
        tokens = list_tokens(target.db) if target.db is not None else store_pg.list_tokens(str(target.url))
    except LdpError as exc:
        raise target.fail(exc) from None
    if as_json:
        print_json(
            {
                "tokens": [
                    {
                        "id": t.token_id,
                        "role": t.role,
                        "name": t.name,
                        "campaigns": None if t.campaigns is None else list(t.campaigns),
                        "created_unix_ms": t.created_unix_ms,
                        "revoked_unix_ms": t.revoked_unix_ms,
                    }
                    for t in tokens
                ]
            }
        )
        return
    table = Table("id", "role", "campaigns", "name", "created (UTC)", "revoked (UTC)")
    for t in tokens:
        scope = "all" if t.campaigns is None else ", ".join(t.campaigns)
        table.add_row(
            t.token_id, t.role, Text(scope), Text(t.name), _when(t.created_unix_ms), _when(t.revoked_unix_ms)
        )
    out.print(table)


def token_revoke(
    token_id: Annotated[str, typer.Argument(help="Token id (see `token list`).")],
    db: ServerDbOpt = None,
    store: ServerStoreOpt = None,
) -> None:
    """Revoke a token; a running server refuses it within its token refresh interval (1 s by default)."""
    target = _prepare(db, store, create=False)
    try:
        if target.db is not None:
            changed = revoke_token(target.db, token_id)
        else:
            changed = store_pg.revoke_token(str(target.url), token_id)
    except LdpError as exc:
        raise target.fail(exc) from None
    out.print(f"revoked {token_id}" if changed else f"{token_id} was already revoked")


def purge_cmd(
    older_than: Annotated[str, typer.Option(help="Age, e.g. 30d, 12h, 90m (a bare number is days).")],
    db: ServerDbOpt = None,
    store: ServerStoreOpt = None,
) -> None:
    """Delete raw reports received more than --older-than ago (accumulators and estimates are kept)."""
    seconds = parse_duration(older_than)
    target = _prepare(db, store, create=False)
    cutoff = int((time.time() - seconds) * 1000)
    try:
        if target.db is not None:
            deleted = purge_raw_file(target.db, cutoff)
        else:
            deleted = store_pg.purge_raw_url(str(target.url), cutoff)
    except LdpError as exc:
        raise target.fail(exc) from None
    out.print(f"purged {deleted} raw report batch(es) received before {older_than} ago")


def campaign_close(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Close a campaign (admin token): it accepts no more reports."""
    req = analyst_pb2.CloseCampaignRequest(campaign_id=campaign_id)
    _print_campaign(_rpc(_analyst(server).CloseCampaign, req), as_json=as_json)


def campaign_next_round(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id (an adaptive discovery campaign).")],
    round_: Annotated[
        int | None,
        typer.Option(
            "--round",
            min=0,
            help="The round to close; default the round collecting now (read first). Given, a repeated"
            " command closes nothing twice.",
            show_default=False,
        ),
    ] = None,
    server: ServerOpt = DEFAULT_LISTEN,
    as_json: JsonOpt = False,
) -> None:
    """Close the round an adaptive discovery campaign collects (admin token): run its discovery step and
    publish the prefixes it kept as the next round's candidates; the last round closes the campaign."""
    analyst = _analyst(server)
    if round_ is None:
        found = _rpc(analyst.GetCampaign, collector_pb2.GetCampaignRequest(campaign_id=campaign_id))
        round_ = found.discovery_round
    req = analyst_pb2.NextRoundRequest(campaign_id=campaign_id, round=round_)
    _print_campaign(_rpc(analyst.NextRound, req), as_json=as_json)


def campaign_export(
    campaign_id: Annotated[str, typer.Argument(help="Campaign id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the full JSON document on stdout.")] = False,
    candidates: CandidatesOpt = None,
    confidence: ConfidenceOpt = 0.95,
    db: DbOpt = None,
    server: ServerOpt = DEFAULT_LISTEN,
) -> None:
    """Export a campaign's accumulator and estimates (analyst token), as JSON with --json."""
    cands = _read_lines(candidates) if candidates is not None else []
    msg = answer(
        db,
        lambda agg: agg.export_campaign(campaign_id, candidates=cands, confidence=confidence),
        lambda: _rpc(
            _analyst(server).ExportCampaign,
            analyst_pb2.ExportCampaignRequest(
                campaign_id=campaign_id, candidates=cands, confidence=confidence
            ),
        ),
    )
    doc = export_to_dict(msg)
    if as_json:
        print_json(doc)
        return
    acc = doc["accumulator"]
    shapes = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in acc["arrays"].items() if isinstance(v, dict))
    _print_campaign(msg.campaign)
    out.print(f"  {msg.n_reports:,} reports in {msg.n_batches:,} batches; {acc['type']}: {shapes}")
    print_estimate(msg.estimate)
