"""The on-disk schema: its tables, its version check, and the in-place migration of older files.

Schema history: version 1 (campaigns, batches, accumulators, raw reports); version 2 adds ``tokens``;
version 3 stores single reports under their plain report id (version 2 used ``"r:" + report_id``, which
collided with batch ids starting with ``r:``), adds token campaign scopes and ``auth_required``, and lets a
campaign's accumulator row hold an empty blob while nothing has been summed (creating a large campaign
then writes a few bytes instead of its whole zero accumulator). Older files are migrated in place by a
writable Store, in one transaction (:func:`migrate_to_current`).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

from ldp_aggregator.store.records import StoreSchemaError

__all__ = [
    "AUTH_REQUIRED_KEY",
    "IN_LIST_CHUNK",
    "KNOWN_TABLES",
    "MIGRATABLE_VERSIONS",
    "PURGE_RAW_SQL",
    "RAW_POSITION_KEY",
    "RAW_SCHEMA",
    "RECORD_RAW_POSITION_SQL",
    "SCHEMA_VERSION",
    "TABLES_SCHEMA",
    "TOKENS_SCHEMA",
    "check_version",
    "last_raw_position",
    "migrate_to_current",
    "set_auth_required",
]

# The store's modules log under the package's name, as the single module did.
_log = logging.getLogger("ldp_aggregator.store")

#: Version of the on-disk schema this code writes. Version 1 and 2 files are migrated in place when a
#: writable Store opens them (read as they are when opened read-only); others are refused.
SCHEMA_VERSION: Final = 3
#: Older schema versions this code can migrate from (and read without migrating).
MIGRATABLE_VERSIONS: Final = frozenset({"1", "2"})
# SQLite allows 32766 bound parameters per statement (since 3.32); stay far below for IN (...) lists.
IN_LIST_CHUNK: Final = 500

TABLES_SCHEMA: Final = (
    # key/value metadata; the 'schema_version' row decides whether this code may open the file.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE campaigns (
        id TEXT PRIMARY KEY,
        mechanism TEXT NOT NULL,
        params BLOB NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_unix_ms INTEGER NOT NULL,
        closed INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1))
    )""",
    # WITHOUT ROWID: the primary key *is* the table, so the duplicate check and the insert touch one b-tree.
    """CREATE TABLE batches (
        campaign_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        n_reports INTEGER NOT NULL CHECK (n_reports >= 0),
        received_unix_ms INTEGER NOT NULL,
        PRIMARY KEY (campaign_id, batch_id)
    ) WITHOUT ROWID""",
    # n_reports / n_batches duplicate what the blob implies so listings need not decode every blob.
    """CREATE TABLE accumulators (
        campaign_id TEXT PRIMARY KEY,
        data BLOB NOT NULL,
        n_reports INTEGER NOT NULL CHECK (n_reports >= 0),
        n_batches INTEGER NOT NULL CHECK (n_batches >= 0)
    )""",
)
# Schema version 2: access tokens. Only the SHA-256 of a token is kept (the token is shown once, at
# creation); nothing links a token to the reports sent with it. Version 3 adds ``campaigns``: NULL for a
# token valid for every campaign, else a JSON array of the campaign ids it is limited to.
TOKENS_SCHEMA: Final = """CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    sha256 BLOB NOT NULL UNIQUE CHECK (length(sha256) = 32),
    created_unix_ms INTEGER NOT NULL,
    revoked_unix_ms INTEGER,
    campaigns TEXT
)"""
#: ``meta`` key set (to '1') when the first token is added, never cleared: authentication stays on.
AUTH_REQUIRED_KEY: Final = "auth_required"
# Before schema 3 a single report was stored under "r:" + report_id.
_LEGACY_REPORT_PREFIX: Final = "r:"
# Created only when raw retention is on. A rowid table (payloads can be large) read in insertion order.
RAW_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS raw_reports (
        campaign_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        payload BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS raw_reports_by_campaign ON raw_reports (campaign_id)",
)
#: ``meta`` key: the highest ``raw_reports`` position (rowid) ever used. A purge may delete the newest
#: rows, after which SQLite would hand out their rowids again; the writer numbers new rows past this
#: instead, so a position names one raw batch for good (readers resume after the last one they saw).
RAW_POSITION_KEY: Final = "raw_reports_last_position"
#: Run in a purge's transaction before :data:`PURGE_RAW_SQL`: remember the highest position in use.
RECORD_RAW_POSITION_SQL: Final = (
    f"INSERT INTO meta (key, value) SELECT '{RAW_POSITION_KEY}', CAST(coalesce(max(rowid), 0) AS TEXT)"
    " FROM raw_reports WHERE true ON CONFLICT (key) DO UPDATE"
    " SET value = CAST(max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT)"
)
PURGE_RAW_SQL: Final = (
    "DELETE FROM raw_reports WHERE rowid IN ("
    " SELECT r.rowid FROM raw_reports AS r JOIN batches AS b"
    " ON b.campaign_id = r.campaign_id AND b.batch_id = r.batch_id"
    " WHERE b.received_unix_ms < ?)"
)
KNOWN_TABLES: Final = frozenset({"meta", "campaigns", "batches", "accumulators", "raw_reports", "tokens"})


def last_raw_position(conn: sqlite3.Connection) -> int:
    """The highest ``raw_reports`` position ever used (0 if none): new rows are numbered after it."""
    in_table = conn.execute("SELECT coalesce(max(rowid), 0) FROM raw_reports").fetchone()[0]
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (RAW_POSITION_KEY,)).fetchone()
    return max(int(in_table), int(row[0]) if row is not None else 0)


def check_version(conn: sqlite3.Connection, tables: set[str], where: str) -> str:
    """Refuse foreign, newer or unknown files; returns the file's version (current or migratable)."""
    if "meta" not in tables:
        raise StoreSchemaError(
            f"database {where} has tables {sorted(tables)} but no 'meta' table: it was not written by"
            " ldp_aggregator; refusing to open it"
        )
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    found = None if row is None else row[0]
    if found != str(SCHEMA_VERSION) and found not in MIGRATABLE_VERSIONS:
        raise StoreSchemaError(
            f"database {where} has schema_version={found!r}; this ldp_aggregator reads and writes only"
            f" schema_version={SCHEMA_VERSION!r} (a newer or unknown version): upgrade the software or"
            " use another database file"
        )
    unknown = tables - KNOWN_TABLES
    if unknown:
        raise StoreSchemaError(f"database {where} has unknown tables {sorted(unknown)}; refusing to open it")
    return str(found)


# ---------------------------------------------------------------------------------------------- migration


def migrate_to_current(conn: sqlite3.Connection, tables: set[str], where: str) -> None:
    """Bring a schema 1 or 2 file to the current version (inside the caller's transaction)."""
    if "tokens" not in tables:  # 1 -> 2
        conn.execute(TOKENS_SCHEMA)
    else:  # 2 -> 3: token scopes; a file that ever had a token keeps authentication on
        columns = {row[1] for row in conn.execute("PRAGMA table_info(tokens)")}
        if "campaigns" not in columns:
            conn.execute("ALTER TABLE tokens ADD COLUMN campaigns TEXT")
        if conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None:
            set_auth_required(conn)
    renamed, aliased = _migrate_report_keys(conn, has_raw="raw_reports" in tables)
    if renamed or aliased:
        _log.info(
            "%s: %d single report(s) moved from 'r:<report id>' to '<report id>'; %d key(s) without a"
            " retained payload kept under both spellings (a retry of either is a duplicate)",
            where, renamed, aliased,
        )  # fmt: skip


def _proto_string_field_2(payload: bytes) -> str | None:
    """Field 2 of a serialized message (``Report.report_id`` or ``ReportBatch.batch_id``), or None.

    A minimal walk over the protobuf wire format, so the migration needs no message class and treats a
    Report and a ReportBatch alike (both keep their id in field 2).
    """

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if i >= len(payload) or shift > 63:
                raise ValueError("truncated varint")
            byte = payload[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                return value, i

    i = 0
    try:
        while i < len(payload):
            key, i = varint(i)
            field, wire_type = key >> 3, key & 7
            if wire_type == 0:
                _, i = varint(i)
            elif wire_type == 1:
                i += 8
            elif wire_type == 5:
                i += 4
            elif wire_type == 2:
                length, i = varint(i)
                if i + length > len(payload):
                    return None
                if field == 2:
                    return payload[i : i + length].decode("utf-8")
                i += length
            else:
                return None
    except (ValueError, UnicodeDecodeError):
        return None
    return None


def _migrate_report_keys(conn: sqlite3.Connection, *, has_raw: bool) -> tuple[int, int]:
    """Schema 2 -> 3: single reports stored as ``"r:" + report_id`` move to their plain report id.

    A key ``r:X`` of one report was either report ``X`` or a batch whose id is ``r:X``. The retained raw
    payload says which (its field 2 is the id the client sent); such reports are renamed to ``X``, in
    ``batches`` and ``raw_reports``, unless ``X`` is already taken. Without a payload (retention off or
    purged) the key is kept and ``X`` is added beside it (0 reports), so that a retry of either is still
    recognised as a duplicate and nothing acknowledged is ever counted twice. Returns (renamed, aliased).
    """
    conn.execute(
        "CREATE TEMP TABLE legacy_keys (campaign_id TEXT NOT NULL, batch_id TEXT NOT NULL,"
        " PRIMARY KEY (campaign_id, batch_id)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TEMP TABLE legacy_reports (campaign_id TEXT NOT NULL, batch_id TEXT NOT NULL,"
        " PRIMARY KEY (campaign_id, batch_id)) WITHOUT ROWID"
    )
    conn.execute("CREATE TEMP TABLE legacy_batches (campaign_id TEXT NOT NULL, batch_id TEXT NOT NULL)")
    try:
        conn.execute(
            "INSERT INTO temp.legacy_keys SELECT campaign_id, batch_id FROM batches"
            " WHERE substr(batch_id, 1, 2) = ? AND length(batch_id) > 2 AND n_reports = 1",
            (_LEGACY_REPORT_PREFIX,),
        )
        if has_raw:
            # CROSS JOIN keeps raw_reports as the outer loop: one pass over it, a key lookup per row.
            rows = conn.execute(
                "SELECT r.campaign_id, r.batch_id, r.payload FROM raw_reports AS r"
                " CROSS JOIN temp.legacy_keys AS k"
                " ON k.campaign_id = r.campaign_id AND k.batch_id = r.batch_id"
            )
            reports: list[tuple[str, str]] = []
            batches: list[tuple[str, str]] = []
            for cid, bid, payload in rows:
                sent_id = _proto_string_field_2(bytes(payload))
                if sent_id == bid[len(_LEGACY_REPORT_PREFIX) :]:
                    reports.append((cid, bid))
                elif sent_id == bid:
                    batches.append((cid, bid))
                if len(reports) + len(batches) >= IN_LIST_CHUNK:
                    _flush_legacy(conn, reports, batches)
            _flush_legacy(conn, reports, batches)
        renamed = conn.execute(
            "UPDATE OR IGNORE batches SET batch_id = substr(batch_id, 3)"
            " WHERE (campaign_id, batch_id) IN (SELECT campaign_id, batch_id FROM temp.legacy_reports)"
        ).rowcount
        if has_raw:
            # Only where the batch row moved (its old key is gone): a conflicting id keeps both as they were.
            conn.execute(
                "UPDATE raw_reports SET batch_id = substr(batch_id, 3)"
                " WHERE (campaign_id, batch_id) IN (SELECT campaign_id, batch_id FROM temp.legacy_reports)"
                " AND NOT EXISTS (SELECT 1 FROM batches AS b"
                " WHERE b.campaign_id = raw_reports.campaign_id AND b.batch_id = raw_reports.batch_id)"
            )
        aliased = conn.execute(
            "INSERT OR IGNORE INTO batches (campaign_id, batch_id, n_reports, received_unix_ms)"
            " SELECT b.campaign_id, substr(b.batch_id, 3), 0, b.received_unix_ms"
            " FROM temp.legacy_keys AS k JOIN batches AS b"
            " ON b.campaign_id = k.campaign_id AND b.batch_id = k.batch_id"
            " WHERE NOT EXISTS (SELECT 1 FROM temp.legacy_reports AS r"
            "  WHERE r.campaign_id = k.campaign_id AND r.batch_id = k.batch_id)"
            " AND NOT EXISTS (SELECT 1 FROM temp.legacy_batches AS x"
            "  WHERE x.campaign_id = k.campaign_id AND x.batch_id = k.batch_id)"
        ).rowcount
    finally:
        for table in ("legacy_keys", "legacy_reports", "legacy_batches"):
            conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
    return renamed, aliased


def _flush_legacy(
    conn: sqlite3.Connection, reports: list[tuple[str, str]], batches: list[tuple[str, str]]
) -> None:
    conn.executemany("INSERT OR IGNORE INTO temp.legacy_reports VALUES (?, ?)", reports)
    conn.executemany("INSERT INTO temp.legacy_batches VALUES (?, ?)", batches)
    reports.clear()
    batches.clear()


def set_auth_required(conn: sqlite3.Connection) -> None:
    """Set the ``auth_required`` meta row: from now on this database needs tokens, for good."""
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (AUTH_REQUIRED_KEY,))
