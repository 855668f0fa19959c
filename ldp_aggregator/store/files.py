"""The store's files: private modes, the exclusive lock file, and its SQLite connections.

Files are private: the database, its WAL and shared-memory files and the lock file are created with mode
0600 (SQLite gives the WAL and shared-memory files the database's mode) and a directory the store creates
with 0700; an existing file readable by group or others is tightened to 0600 on open (or a warning is
logged when that is not permitted).

The in-memory accumulators mirror the committed database only because one process writes it; the lock
file (``<db>.lock``, ``flock``) makes a second :class:`~ldp_aggregator.store.Store` on the same file fail
loudly instead of silently diverging. :class:`StoreFiles` is the base of the Store: it owns the writing
connection, the pool of read-only connections, and the transaction and rollback rules both use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from ldp_aggregator.store.records import StoreLockedError
from ldp_client.errors import StoreUnavailableError

__all__ = ["DIR_MODE", "FILE_MODE", "StoreFiles"]

# The store's modules log under the package's name, as the single module did.
_log = logging.getLogger("ldp_aggregator.store")

#: Modes of what the store creates: only the server's user may read reports and token digests.
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


def _make_private(path: Path) -> None:
    """Remove group and other permissions from ``path`` if it has any (a warning says what was done)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return  # missing (no WAL yet): SQLite will create it with the database file's mode
    if not mode & 0o077:
        return
    private = mode & ~0o077
    try:
        os.chmod(path, private)
    except OSError as exc:
        _log.warning(
            "%s has mode %04o: other users may read reports or token digests, and it could not be made"
            " private (%s); fix it with: chmod %04o %s",
            path, mode, exc.strerror, private, path,
        )  # fmt: skip
    else:
        _log.warning("%s had mode %04o (readable by other users): changed to %04o", path, mode, private)


class StoreFiles:
    """The database file, its lock and its connections: the base of :class:`~ldp_aggregator.store.Store`.

    Args:
        path: Database file.
        busy_timeout_s: How long a connection waits for a lock held by a checkpoint or a reader.
        page_size: SQLite page size in bytes, used only when the file is created.
    """

    def __init__(self, path: Path, *, busy_timeout_s: float, page_size: int) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._page_size = page_size
        self._readers_lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._closed = False
        self._wconn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None

    def _acquire_file_lock(self) -> int | None:
        if sys.platform == "win32":  # pragma: no cover - no flock; SQLite's own locking still applies
            return None
        import fcntl

        lock_path = f"{self._path}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot open lock file {lock_path!r}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLockedError(
                f"database {str(self._path)!r} is already open in another Store (lock {lock_path!r} is held);"
                " only one writer may own it"
            ) from exc
        return fd

    def _secure_files(self) -> None:
        """Create the database file with mode 0600 if missing; tighten existing files others can read.

        SQLite creates the WAL and shared-memory files with the database file's mode, so a private
        database file keeps them private too.
        """
        if sys.platform == "win32":  # pragma: no cover - POSIX modes only
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot open database file {str(self._path)!r}: {exc}") from exc
        os.close(fd)
        for suffix in ("", "-wal", "-shm", ".lock"):
            _make_private(Path(f"{self._path}{suffix}"))

    def _release_file_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # explicit BEGIN/COMMIT only
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open database {str(self._path)!r}: {exc}") from exc
        return conn

    def _connect_writer(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            # FULL: the WAL is fsynced at every commit, so a committed (acknowledged) group survives power
            # loss, not only a process crash.
            conn.execute("PRAGMA synchronous = FULL")
            # macOS: a plain fsync does not flush the drive's cache; F_FULLFSYNC does. No-op elsewhere.
            conn.execute("PRAGMA fullfsync = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"cannot configure database {str(self._path)!r}: {exc}") from exc
        return conn

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._readers_lock:
            if self._closed:
                raise StoreUnavailableError(f"store {str(self._path)!r} is closed")
            conn = self._idle_readers.pop() if self._idle_readers else None
        try:
            if conn is None:
                conn = self._connect()
                conn.execute("PRAGMA query_only = ON")  # readers never write, by construction
            yield conn
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read {str(self._path)!r}: {exc}") from exc
        finally:
            if conn is not None:
                with self._readers_lock:
                    if self._closed:
                        conn.close()
                    else:
                        self._idle_readers.append(conn)

    def _transaction(self, conn: sqlite3.Connection, body: Callable[[], object], *, what: str) -> None:
        """BEGIN IMMEDIATE; body; COMMIT. On failure roll back; SQLite errors become StoreUnavailableError."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            body()
            conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback(conn)
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailableError(
                    f"could not {what} in {str(self._path)!r}: {exc} ({type(exc).__name__});"
                    " nothing was changed, retry later"
                ) from exc
            raise

    def _rollback(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is in an unknown state: drop it; the writer reconnects on its next use.
            _log.warning("rollback failed on %s; reconnecting", self._path, exc_info=True)
            with contextlib.suppress(sqlite3.Error):
                conn.close()
            if conn is self._wconn:
                self._wconn = None

    def _writer_connection(self) -> sqlite3.Connection:
        if self._wconn is None:
            self._wconn = self._connect_writer()
        return self._wconn

    def _close_files(self) -> None:
        """Close the idle readers and the writing connection, then release the lock file (idempotent).

        Called once the writer thread has stopped.
        """
        with self._readers_lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle_readers = self._idle_readers, []
        for conn in idle:
            conn.close()
        if self._wconn is not None:
            # The last connection to close checkpoints the WAL into the main file.
            with contextlib.suppress(sqlite3.Error):
                self._wconn.close()
            self._wconn = None
        self._release_file_lock()
