"""Maintenance of a database file from another process (the CLI) while a server may hold it.

Safe alongside a running Store: WAL lets a second connection write (each call is one short BEGIN
IMMEDIATE transaction, waiting up to the busy timeout for the server's writer), and none of the rows these
calls touch is mirrored in a Store's memory (a server reads tokens from the database on every refresh).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ldp_aggregator.store.records import StoreSchemaError
from ldp_aggregator.store.schema import PURGE_RAW_SQL, RECORD_RAW_POSITION_SQL, SCHEMA_VERSION
from ldp_client.errors import InvalidParameterError, StoreUnavailableError

__all__ = ["maintenance_connection", "purge_raw_file"]


@contextlib.contextmanager
def maintenance_connection(
    path: str | os.PathLike[str], busy_timeout_s: float = 30.0
) -> Iterator[sqlite3.Connection]:
    """A short connection to an existing database at the current schema version (SQLite errors become
    StoreUnavailableError; an open transaction is rolled back on the way out)."""
    where = repr(str(path))
    if not Path(path).is_file():
        raise StoreUnavailableError(f"database {where} does not exist")
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"cannot open database {where}: {exc}") from exc
    try:
        conn.execute("PRAGMA synchronous = FULL")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise StoreSchemaError(
                f"database {where} has schema_version={None if row is None else row[0]!r}, not"
                f" {str(SCHEMA_VERSION)!r}: open it once with this version's server (or Store) to migrate it"
            )
        yield conn
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"cannot use database {where}: {exc} ({type(exc).__name__})") from exc
    finally:
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        conn.close()


def purge_raw_file(path: str | os.PathLike[str], older_than_unix_ms: int) -> int:
    """:meth:`Store.purge_raw` on a database file, whether or not a server holds it; returns rows deleted."""
    if isinstance(older_than_unix_ms, bool) or not isinstance(older_than_unix_ms, int):
        raise InvalidParameterError("older_than_unix_ms", older_than_unix_ms, "an integer")
    with maintenance_connection(path) as conn:
        if (
            conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'raw_reports'"
            ).fetchone()
            is None
        ):
            return 0
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(RECORD_RAW_POSITION_SQL)  # positions of purged rows are never handed out again
        cur = conn.execute(PURGE_RAW_SQL, (older_than_unix_ms,))
        deleted = cur.rowcount
        conn.execute("COMMIT")
    return deleted
