"""Access tokens, the persisted authentication switch and the raw-report purge, on PostgreSQL.

The functions taking a connection are what :class:`~ldp_aggregator.store_pg.PostgresStore` runs; those
taking a URL are the command line's (``token create|list|revoke --store URL``, ``purge --store URL``):
each opens one short connection and runs one transaction, safe while replicas serve the same database
(a replica re-reads the tokens every ``token_refresh_s``). As in the SQLite store, only a token's SHA-256
is kept, and once a token has been added the ``auth_required`` row stays set for good.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ldp_aggregator.store.records import TokenRecord, check_id, now_unix_ms, token_from_row
from ldp_aggregator.store_pg.conninfo import connect, describe_error, redact
from ldp_aggregator.store_pg.schema import AUTH_REQUIRED_KEY, ensure_schema
from ldp_client.errors import InvalidParameterError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "add_token",
    "list_tokens",
    "prepare",
    "purge_raw",
    "purge_raw_url",
    "read_auth_required",
    "revoke_token",
    "select_tokens",
    "url_auth_required",
]

_TOKEN_COLUMNS: Final = "id, role, name, sha256, created_unix_ms, revoked_unix_ms, campaigns"


def select_tokens(conn: psycopg.Connection) -> list[TokenRecord]:
    """Every token row, oldest first."""
    rows = conn.execute(f"SELECT {_TOKEN_COLUMNS} FROM ldp_tokens ORDER BY created_unix_ms, id").fetchall()
    return [token_from_row(*row) for row in rows]


def read_auth_required(conn: psycopg.Connection) -> bool:
    """Whether a token was ever added: the ``auth_required`` row, or any token row."""
    row = conn.execute("SELECT value FROM ldp_meta WHERE key = %s", (AUTH_REQUIRED_KEY,)).fetchone()
    if row is not None and row[0] == "1":
        return True
    return conn.execute("SELECT 1 FROM ldp_tokens LIMIT 1").fetchone() is not None


def purge_raw(conn: psycopg.Connection, older_than_unix_ms: int) -> int:
    """Delete raw payloads received before the time (one statement); returns the rows deleted."""
    cur = conn.execute("DELETE FROM ldp_raw_reports WHERE received_unix_ms < %s", (older_than_unix_ms,))
    return max(cur.rowcount, 0)


@contextlib.contextmanager
def _session(url: str, what: str, *, create: bool = False) -> Iterator[psycopg.Connection]:
    """A short connection whose tables are checked (and created when ``create``); psycopg errors become
    StoreUnavailableError naming ``what``."""
    import psycopg

    conn = connect(url)
    where = f"PostgreSQL {redact(url)}"
    try:
        ensure_schema(conn, where, create=create)
        yield conn
    except psycopg.Error as exc:
        raise StoreUnavailableError(
            f"could not {what} in {where}: {describe_error(exc)} ({type(exc).__name__});"
            " nothing was changed, retry later"
        ) from exc
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def prepare(url: str, *, create: bool) -> None:
    """Check that ``url`` can be used (and create or migrate the tables when ``create``)."""
    with _session(url, "prepare the tables", create=create):
        pass


def add_token(url: str, record: TokenRecord) -> None:
    """Durably insert an access token row and set ``auth_required`` (one transaction).

    Raises:
        InvalidParameterError: Not a TokenRecord, or its id or digest is already stored.
        StoreUnavailableError, StoreSchemaError: The database cannot be used.
    """
    import psycopg

    if not isinstance(record, TokenRecord):
        raise InvalidParameterError("record", record, "a TokenRecord")
    scope = None if record.campaigns is None else json.dumps(list(record.campaigns), ensure_ascii=False)
    with _session(url, "add a token", create=True) as conn:
        try:
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO ldp_tokens ({_TOKEN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        record.token_id,
                        record.role,
                        record.name,
                        record.sha256,
                        record.created_unix_ms,
                        record.revoked_unix_ms,
                        scope,
                    ),
                )
                conn.execute(
                    "INSERT INTO ldp_meta (key, value) VALUES (%s, '1')"
                    " ON CONFLICT (key) DO UPDATE SET value = '1'",
                    (AUTH_REQUIRED_KEY,),
                )
        except psycopg.errors.UniqueViolation:
            raise InvalidParameterError(
                "token_id", record.token_id, "an id and digest not yet stored"
            ) from None


def revoke_token(url: str, token_id: str, *, when_unix_ms: int | None = None) -> bool:
    """Mark a token revoked; returns False if it already was.

    Raises:
        InvalidParameterError: No token has this id.
        StoreUnavailableError, StoreSchemaError: The database cannot be used.
    """
    check_id("token_id", token_id)
    when = now_unix_ms() if when_unix_ms is None else when_unix_ms
    with _session(url, "revoke a token") as conn, conn.transaction():
        row = conn.execute(
            "SELECT revoked_unix_ms FROM ldp_tokens WHERE id = %s FOR UPDATE", (token_id,)
        ).fetchone()
        if row is None:
            raise InvalidParameterError("token_id", token_id, "the id of a stored token (see `token list`)")
        if row[0] is not None:
            return False
        conn.execute("UPDATE ldp_tokens SET revoked_unix_ms = %s WHERE id = %s", (when, token_id))
    return True


def list_tokens(url: str) -> list[TokenRecord]:
    """Every token row of the database, oldest first."""
    with _session(url, "list tokens") as conn:
        return select_tokens(conn)


def url_auth_required(url: str) -> bool:
    """Whether a token was ever added to the database."""
    with _session(url, "read auth_required") as conn:
        return read_auth_required(conn)


def purge_raw_url(url: str, older_than_unix_ms: int) -> int:
    """:func:`purge_raw` on the database of ``url``; returns rows deleted."""
    if isinstance(older_than_unix_ms, bool) or not isinstance(older_than_unix_ms, int):
        raise InvalidParameterError("older_than_unix_ms", older_than_unix_ms, "an integer")
    with _session(url, "purge raw reports") as conn:
        return purge_raw(conn, older_than_unix_ms)
