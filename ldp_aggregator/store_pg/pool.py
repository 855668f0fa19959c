"""A small pool of PostgreSQL connections for the store's reads and short writes.

Connections that failed (the server restarted, the network dropped) are discarded, never returned to the
pool, so the next use reconnects: a replica recovers by itself once PostgreSQL is back. psycopg errors
leave as :class:`~ldp_client.errors.StoreUnavailableError` (gRPC ``UNAVAILABLE``: retry later).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, TypeVar

from ldp_aggregator.store_pg.conninfo import connect, describe_error
from ldp_client.errors import StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["ConnectionPool"]

_log = logging.getLogger("ldp_aggregator.store")
_T = TypeVar("_T")
_MAX_IDLE: Final = 8


def discard(conn: psycopg.Connection | None) -> None:
    """Close a connection whose state is unknown, ignoring errors (it is not used again)."""
    if conn is None:
        return
    with contextlib.suppress(Exception):
        conn.close()


class ConnectionPool:
    """Idle connections to one URL, handed out one caller at a time (thread-safe).

    Args:
        url: The PostgreSQL URL (checked by the store before).
        where: How messages name the database (the URL without its password).
    """

    def __init__(self, url: str, where: str) -> None:
        self._url = url
        self._where = where
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection] = []
        self._closed = False

    @contextlib.contextmanager
    def connection(self, what: str) -> Iterator[psycopg.Connection]:
        """A connection for one piece of work; psycopg errors become StoreUnavailableError naming ``what``."""
        import psycopg

        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"store {self._where} is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(self._url)
        try:
            yield conn
        except psycopg.Error as exc:
            if conn.broken or conn.closed or isinstance(exc, psycopg.OperationalError):
                discard(conn)
            else:
                self._give_back(conn)
            raise StoreUnavailableError(
                f"could not {what} in {self._where}: {describe_error(exc)} ({type(exc).__name__});"
                " nothing was changed, retry later"
            ) from exc
        except BaseException:
            self._give_back(conn)
            raise
        else:
            self._give_back(conn)

    def run(self, what: str, fn: Callable[[psycopg.Connection], _T]) -> _T:
        """``fn(connection)``, tried once more on a fresh connection if a pooled one turned out dead.

        For reads and for writes that are one transaction (a failed transaction changed nothing): after a
        PostgreSQL restart every idle connection is dead, and the first call should not fail for that.
        """
        try:
            with self.connection(what) as conn:
                return fn(conn)
        except StoreUnavailableError as exc:
            import psycopg

            if not isinstance(exc.__cause__, psycopg.OperationalError):
                raise
            _log.info("retrying %s on a new connection after: %s", what, describe_error(exc.__cause__))
        with self.connection(what) as conn:
            return fn(conn)

    def _give_back(self, conn: psycopg.Connection) -> None:
        if conn.broken or conn.closed:
            discard(conn)
            return
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        discard(conn)

    def close(self) -> None:
        """Close every idle connection; later requests fail (idempotent)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            discard(conn)
