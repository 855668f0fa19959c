"""The PostgreSQL schema: its tables, its version, and creating or migrating it safely beside other replicas.

The tables live in the connection's current schema (``public`` unless the URL sets ``search_path``, e.g.
``?options=-csearch_path%3Dldp``), with an ``ldp_`` prefix so they can share a database with others:

* ``ldp_meta`` (key, value): ``schema_version`` decides whether this code may use the tables;
  ``auth_required`` is set with the first access token and never cleared;
* ``ldp_campaigns``: one row per campaign (the serialized ``Campaign`` message, ``closed``). A submitting
  transaction holds its campaigns' rows ``FOR SHARE`` and closing one updates its row, so a close and a
  submit never interleave: a batch either committed before the close or is refused after it, on every
  replica;
* ``ldp_batches`` (campaign, batch id): the idempotency key, inserted ``ON CONFLICT DO NOTHING`` in the
  same transaction as the accumulator update;
* ``ldp_accumulator_shards`` (campaign, shard): a campaign's accumulator is the sum of its shard rows,
  each the checksummed byte form of an accumulator. A writer updates one shard row per campaign it
  touches, taken with ``FOR UPDATE SKIP LOCKED``: concurrent replicas never wait on one another's row
  (a writer that finds every shard busy adds a new one), and reads merge the rows;
* ``ldp_raw_reports``: raw payloads when retention is on (in commit-insertion order by ``seq``);
* ``ldp_tokens``: access tokens, only their SHA-256 (as in the SQLite store).

Schema history: version 1 is the first. Creating and migrating run in one transaction under a
transaction-level advisory lock keyed on the schema name, so replicas starting together create the tables
once, and a crash leaves either nothing or the whole schema. Migrations from older versions are the
functions of :data:`MIGRATIONS` (none yet); a newer or unknown version is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ldp_aggregator.store.records import StoreSchemaError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "AUTH_REQUIRED_KEY",
    "KNOWN_TABLES",
    "MIGRATIONS",
    "PG_SCHEMA_VERSION",
    "TABLES",
    "check_version",
    "ensure_schema",
    "existing_tables",
]

_log = logging.getLogger("ldp_aggregator.store")

#: Version of the PostgreSQL schema this code writes (its own numbering: the SQLite file has its own).
PG_SCHEMA_VERSION: Final = 1
#: ``ldp_meta`` key set when the first token is added, never cleared: authentication stays on.
AUTH_REQUIRED_KEY: Final = "auth_required"

TABLES: Final = (
    "CREATE TABLE ldp_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE ldp_campaigns (
        id TEXT PRIMARY KEY,
        mechanism TEXT NOT NULL,
        params BYTEA NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        created_unix_ms BIGINT NOT NULL,
        closed BOOLEAN NOT NULL DEFAULT FALSE
    )""",
    """CREATE TABLE ldp_batches (
        campaign_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        n_reports BIGINT NOT NULL CHECK (n_reports >= 0),
        received_unix_ms BIGINT NOT NULL,
        PRIMARY KEY (campaign_id, batch_id)
    )""",
    # data: the accumulator's to_bytes() form ('' while nothing is summed); version counts updates, so a
    # writer that kept the shard's decoded accumulator in memory knows whether it is still current.
    """CREATE TABLE ldp_accumulator_shards (
        campaign_id TEXT NOT NULL REFERENCES ldp_campaigns (id),
        shard BIGINT NOT NULL,
        data BYTEA NOT NULL,
        n_reports BIGINT NOT NULL CHECK (n_reports >= 0),
        n_batches BIGINT NOT NULL CHECK (n_batches >= 0),
        version BIGINT NOT NULL,
        PRIMARY KEY (campaign_id, shard)
    )""",
    """CREATE TABLE ldp_raw_reports (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        campaign_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        received_unix_ms BIGINT NOT NULL,
        payload BYTEA NOT NULL
    )""",
    "CREATE INDEX ldp_raw_reports_by_campaign ON ldp_raw_reports (campaign_id, seq)",
    "CREATE INDEX ldp_raw_reports_by_time ON ldp_raw_reports (received_unix_ms)",
    """CREATE TABLE ldp_tokens (
        id TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        sha256 BYTEA NOT NULL UNIQUE CHECK (length(sha256) = 32),
        created_unix_ms BIGINT NOT NULL,
        revoked_unix_ms BIGINT,
        campaigns TEXT
    )""",
)
KNOWN_TABLES: Final = frozenset(
    {"ldp_meta", "ldp_campaigns", "ldp_batches", "ldp_accumulator_shards", "ldp_raw_reports", "ldp_tokens"}
)
#: version -> the function bringing a schema of that version to the next one (inside the caller's
#: transaction). Empty while version 1 is the only one.
MIGRATIONS: Final[dict[int, Callable[[psycopg.Connection], None]]] = {}
# pg_advisory_xact_lock key: one lock per schema name, so replicas in other schemas never wait.
_LOCK_SQL: Final = "SELECT pg_advisory_xact_lock(hashtextextended('ldp-aggregator:' || current_schema(), 0))"


def existing_tables(conn: psycopg.Connection) -> set[str]:
    """Names of this store's tables (``ldp_*``) in the connection's current schema."""
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_name LIKE 'ldp\\_%'"
    ).fetchall()
    return {str(r[0]) for r in rows}


def check_version(conn: psycopg.Connection, tables: set[str], where: str) -> int:
    """The schema's version if this code can use it (current or migratable); else StoreSchemaError."""
    if "ldp_meta" not in tables:
        raise StoreSchemaError(
            f"{where} has tables {sorted(tables)} but no ldp_meta table: they were not made by"
            " ldp-aggregator; refusing to use them"
        )
    row = conn.execute("SELECT value FROM ldp_meta WHERE key = 'schema_version'").fetchone()
    found = None if row is None else str(row[0])
    version = int(found) if found is not None and found.isdigit() else None
    if version is None or not (version == PG_SCHEMA_VERSION or version in MIGRATIONS):
        raise StoreSchemaError(
            f"{where} has schema_version={found!r}; this ldp-aggregator reads and writes only"
            f" schema_version={str(PG_SCHEMA_VERSION)!r} (a newer or unknown version): upgrade the software"
            " or use another database"
        )
    unknown = tables - KNOWN_TABLES
    if unknown:
        raise StoreSchemaError(f"{where} has unknown tables {sorted(unknown)}; refusing to use them")
    return version


def ensure_schema(conn: psycopg.Connection, where: str, *, create: bool = True) -> None:
    """Create the tables (when absent and ``create``), or check and migrate them; one transaction.

    Raises:
        StoreSchemaError: Foreign or newer tables.
        InvalidParameterError: ``create`` is False and there are no tables (nothing to read or change).
    """
    from ldp_client.errors import InvalidParameterError

    with conn.transaction():
        conn.execute(_LOCK_SQL)
        tables = existing_tables(conn)
        if not tables:
            if not create:
                raise InvalidParameterError(
                    "store",
                    where,
                    "a database holding ldp-aggregator tables (this one has none: `ldp-aggregator serve"
                    " --store URL` or `token create --store URL` creates them)",
                )
            for stmt in TABLES:
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO ldp_meta (key, value) VALUES ('schema_version', %s)", (str(PG_SCHEMA_VERSION),)
            )
            _log.info("created the ldp-aggregator tables (schema_version %d) in %s", PG_SCHEMA_VERSION, where)
            return
        version = check_version(conn, tables, where)
        while version != PG_SCHEMA_VERSION:
            _log.info("migrating %s from schema_version %d", where, version)
            MIGRATIONS[version](conn)
            version += 1
            conn.execute("UPDATE ldp_meta SET value = %s WHERE key = 'schema_version'", (str(version),))
