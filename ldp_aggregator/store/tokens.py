"""Access tokens and the persisted authentication switch, read and changed in the database file.

Access tokens (schema version 2) live in the same file as the reports, in a ``tokens`` table that is
never joined with them: (id, role, name, SHA-256 of the token, created, revoked, and since version 3 the
campaigns a token is limited to). The token itself is never stored. Once a token has been added, the
``meta`` row ``auth_required`` stays set for good (version 3): revoking every token never switches
authentication off.

:func:`add_token`, :func:`revoke_token`, :func:`list_tokens` and :func:`auth_required_file` use their own
short connection (:func:`~ldp_aggregator.store.maintenance.maintenance_connection`), so the CLI can run
them while a server holds the database; a server reads the same rows through
:meth:`~ldp_aggregator.store.Store.list_tokens`, from the database, on every refresh.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Final

from ldp_aggregator.store.maintenance import maintenance_connection
from ldp_aggregator.store.records import TokenRecord, check_id, now_unix_ms, token_from_row
from ldp_aggregator.store.schema import AUTH_REQUIRED_KEY, set_auth_required
from ldp_client.errors import InvalidParameterError

__all__ = [
    "add_token",
    "auth_required_file",
    "list_tokens",
    "read_auth_required",
    "revoke_token",
    "select_tokens",
]


_TOKEN_COLUMNS: Final = "id, role, name, sha256, created_unix_ms, revoked_unix_ms"


def select_tokens(conn: sqlite3.Connection) -> list[TokenRecord]:
    """Every token row of the database ``conn`` reads, oldest first (empty when it has no tokens table)."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tokens'"
    ).fetchone()
    if has_table is None:
        return []
    has_scope = any(row[1] == "campaigns" for row in conn.execute("PRAGMA table_info(tokens)"))
    scope = "campaigns" if has_scope else "NULL"  # a version 2 file opened read-only has no scopes
    rows = conn.execute(
        f"SELECT {_TOKEN_COLUMNS}, {scope} FROM tokens ORDER BY created_unix_ms, id"
    ).fetchall()
    return [token_from_row(*row) for row in rows]


def read_auth_required(conn: sqlite3.Connection) -> bool:
    """Whether a token was ever added: the ``auth_required`` meta row, or any token row (valid or not)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (AUTH_REQUIRED_KEY,)).fetchone()
    if row is not None and row[0] == "1":
        return True
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tokens'"
    ).fetchone()
    return has_table is not None and conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None


def add_token(path: str | os.PathLike[str], record: TokenRecord) -> None:
    """Durably insert an access token row (safe while a server holds the database).

    Raises:
        InvalidParameterError: ``record`` is not a TokenRecord, or its id or digest is already stored.
        StoreUnavailableError, StoreSchemaError: the file is missing, unwritable or at another version.
    """
    if not isinstance(record, TokenRecord):
        raise InvalidParameterError("record", record, "a TokenRecord")
    scope = None if record.campaigns is None else json.dumps(list(record.campaigns), ensure_ascii=False)
    with maintenance_connection(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                f"INSERT INTO tokens ({_TOKEN_COLUMNS}, campaigns) VALUES (?, ?, ?, ?, ?, ?, ?)",
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
        except sqlite3.IntegrityError as exc:
            raise InvalidParameterError(
                "token_id", record.token_id, f"an id and digest not yet stored ({exc})"
            ) from None
        # In the same transaction: from now on this database needs tokens, even if all are revoked.
        set_auth_required(conn)
        conn.execute("COMMIT")


def revoke_token(path: str | os.PathLike[str], token_id: str, *, when_unix_ms: int | None = None) -> bool:
    """Mark a token revoked; returns False if it already was (safe while a server holds the database).

    Raises:
        InvalidParameterError: No token has this id.
        StoreUnavailableError, StoreSchemaError: as :func:`add_token`.
    """
    check_id("token_id", token_id)
    when = now_unix_ms() if when_unix_ms is None else when_unix_ms
    with maintenance_connection(path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT revoked_unix_ms FROM tokens WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            raise InvalidParameterError("token_id", token_id, "the id of a stored token (see `token list`)")
        if row[0] is not None:
            conn.execute("ROLLBACK")
            return False
        conn.execute("UPDATE tokens SET revoked_unix_ms = ? WHERE id = ?", (when, token_id))
        conn.execute("COMMIT")
    return True


def list_tokens(path: str | os.PathLike[str]) -> list[TokenRecord]:
    """Every token row of the database file, oldest first (safe while a server holds the database)."""
    with maintenance_connection(path) as conn:
        return select_tokens(conn)


def auth_required_file(path: str | os.PathLike[str]) -> bool:
    """Whether a token was ever added to the database file (then authentication stays on for good)."""
    with maintenance_connection(path) as conn:
        return read_auth_required(conn)
