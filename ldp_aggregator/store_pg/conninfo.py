"""PostgreSQL connection strings: checking them, hiding their password, connecting, naming failures.

A store URL is a libpq URL (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE...]``; libpq
also reads ``PGPASSWORD``/``PGPASSFILE`` and the other ``PG*`` variables). Whatever is shown to a person
(errors, logs) goes through :func:`redact`, so a password never reaches a log line or a terminal.

Connection failures are sorted in two: what retrying cannot fix (a malformed URL, a wrong password, a
database that does not exist) is :class:`~ldp_client.errors.InvalidParameterError`, exit code 2 on the
command line; a server that cannot be reached (down, restarting, refusing connections) is
:class:`PostgresUnreachableError`, a :class:`~ldp_client.errors.StoreUnavailableError` (exit code 4,
``UNAVAILABLE`` to gRPC clients: retry later).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ldp_aggregator.store.base import POSTGRES_SCHEMES, is_postgres_url
from ldp_client.errors import InvalidParameterError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CONNECT_TIMEOUT_S",
    "PostgresUnreachableError",
    "check_url",
    "connect",
    "describe_error",
    "redact",
]

#: Seconds libpq waits for a connection before giving up (a replica answers UNAVAILABLE meanwhile).
CONNECT_TIMEOUT_S: Final = 5
# SQLSTATE classes of errors that retrying the same URL cannot fix: 28 (invalid authorization: wrong user
# or password, pg_hba.conf refusal), 3D (the database does not exist), 42501 (insufficient privilege).
_PERMANENT_SQLSTATE_PREFIXES: Final = ("28", "3D", "42501")
_URL_PASSWORD = re.compile(r"^(?P<head>[a-z]+://[^/@:?#]*):[^/@?#]*@", re.IGNORECASE)
_PARAM_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&#]*", re.IGNORECASE)


class PostgresUnreachableError(StoreUnavailableError):
    """The PostgreSQL server cannot be reached now (down, restarting, refusing connections): retry later."""


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    text = _URL_PASSWORD.sub(r"\g<head>:***@", url)
    return _PARAM_PASSWORD.sub(r"\g<key>***", text)


def check_url(url: object, field: str = "store") -> str:
    """Return ``url`` if it is a well-formed PostgreSQL URL, else raise InvalidParameterError naming it."""
    allowed = "a PostgreSQL URL, postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAM=VALUE]"
    if not isinstance(url, str) or not is_postgres_url(url):
        shown_value = redact(url) if isinstance(url, str) else url
        raise InvalidParameterError(field, shown_value, f"{allowed} (it starts with {POSTGRES_SCHEMES[0]})")
    from psycopg import conninfo

    try:
        params = conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidParameterError(field, redact(url), f"{allowed} ({redact(reason)})") from None
    if not params.get("dbname"):
        raise InvalidParameterError(field, redact(url), f"{allowed}: the URL names no database")
    ports = str(params.get("port") or "").split(",")
    if any(p and not (p.isdigit() and 0 < int(p) < 65536) for p in ports):
        raise InvalidParameterError(field, redact(url), f"{allowed}: a port is a number in 1..65535")
    return url


def describe_error(exc: BaseException) -> str:
    """One line for a psycopg error: its primary message (no DETAIL/HINT lines, no password)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or str(exc) or type(exc).__name__
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return redact(" ".join(lines[:2]) if lines else type(exc).__name__)


def _is_permanent(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and state.startswith(_PERMANENT_SQLSTATE_PREFIXES):
        return True
    # libpq reports some server refusals before a SQLSTATE is known (the text is libpq's, stable).
    text = str(exc)
    return any(
        phrase in text
        for phrase in (
            "password authentication failed",
            "no password supplied",
            "does not exist",
            "no pg_hba.conf entry",
        )
    )


def connect(
    url: str, *, field: str = "store", application_name: str = "ldp-aggregator"
) -> psycopg.Connection:
    """An autocommit connection to ``url``, or a one-line project error naming the URL (password hidden).

    Raises:
        InvalidParameterError: A malformed URL, or the server refused it for good (wrong user or password,
            no such database, no permission).
        PostgresUnreachableError: The server cannot be reached now.
    """
    import psycopg

    check_url(url, field)
    try:
        return psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=application_name,
        )
    except psycopg.Error as exc:
        reason = describe_error(exc)
        if _is_permanent(exc):
            raise InvalidParameterError(
                field, redact(url), f"a database this user can log in to (the server said: {reason})"
            ) from None
        raise PostgresUnreachableError(
            f"{field}={redact(url)}: cannot reach PostgreSQL ({reason}); retry when the server is up"
        ) from None
