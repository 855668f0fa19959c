"""Durable storage of campaigns, batch ids, raw reports and accumulators: the only module touching the DB.

The store is mechanism-agnostic. A campaign is kept as opaque serialized parameters (protobuf bytes) plus a
few columns; a campaign's running aggregate is any object satisfying the small :class:`Accumulator`
protocol (a mergeable sum with ``+`` and ``to_bytes``), decoded and created through two callables the
caller supplies. That keeps the store free of mechanism knowledge and lets the same code store RR, GRR
and RAPPOR sums.

Durability model (see DESIGN.md, "Storage and durability"):

* SQLite in WAL mode with ``synchronous=FULL``: a transaction is on stable storage when COMMIT returns.
* One writer thread owns the only writing connection and implements **group commit**: it drains every
  pending submission (up to ``group_commit_max``) into one transaction that inserts the new batch ids,
  appends raw reports when retention is on, and rewrites each touched campaign's accumulator once. Only
  after COMMIT returns are the in-memory accumulators swapped and the callers' futures resolved, so an
  acknowledged batch is never lost, even on ``kill -9``; a retried batch id is a no-op, so a batch is
  never counted twice. Many concurrent batches share one fsync, which is what makes hundreds of durable
  batches per second possible.
* If a transaction fails (disk full, I/O error, read-only file), it is rolled back, the in-memory state
  is left as it was, and every submission of the group fails with
  :class:`~ldp_client.errors.StoreUnavailableError` (retryable). The writer keeps running, so later
  submissions succeed once the disk recovers.
* The in-memory accumulators mirror the committed database because this process is the database's only
  writer; an exclusive lock file (``<db>.lock``) makes a second :class:`Store` on the same file fail
  loudly instead of silently diverging.

Nothing here stores an IP address, a client identifier or any other per-device metadata: a batch row is
(campaign, client-chosen batch id, report count, server receive time). Batch ids and report ids share one
namespace per campaign (the wire contract): a single report is stored under its report id, like a batch.

Access tokens (schema version 2) live in the same file, in a ``tokens`` table that is never joined with
reports: (id, role, name, SHA-256 of the token, created, revoked, and since version 3 the campaigns a
token is limited to). The token itself is never stored. Once a token has been added, the ``meta`` row
``auth_required`` stays set for good (version 3): revoking every token never switches authentication off.

Files are private: the database, its WAL and shared-memory files and the lock file are created with mode
0600 (SQLite gives the WAL and shared-memory files the database's mode) and a directory the store creates
with 0700; an existing file readable by group or others is tightened to 0600 on open (or a warning is
logged when that is not permitted).

Schema history: version 1 (campaigns, batches, accumulators, raw reports); version 2 adds ``tokens``;
version 3 stores single reports under their plain report id (version 2 used ``"r:" + report_id``, which
collided with batch ids starting with ``r:``), adds token campaign scopes and ``auth_required``, and lets a
campaign's accumulator row hold an empty blob while nothing has been summed (creating a large campaign
then writes a few bytes instead of its whole zero accumulator). Older files are migrated in place by a
writable Store, in one transaction.

The module functions :func:`add_token`, :func:`revoke_token`, :func:`list_tokens` and :func:`purge_raw_file`
use their own short connection, so the CLI can run them while a server holds the database: none of
them touches state a :class:`Store` mirrors in memory (a server reads tokens with
:meth:`Store.list_tokens`, from the database, on every refresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sqlite3
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, Self, TypeVar

from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    InvalidParameterError,
    InvalidReportError,
    LdpError,
    StoreUnavailableError,
    shown,
)

__all__ = [
    "MAX_ID_LENGTH",
    "SCHEMA_VERSION",
    "Accumulator",
    "BatchDelta",
    "CampaignRecord",
    "Store",
    "StoreLockedError",
    "StoreSchemaError",
    "StoreStats",
    "SubmitOutcome",
    "TokenRecord",
    "add_token",
    "auth_required_file",
    "list_tokens",
    "purge_raw_file",
    "revoke_token",
]

_log = logging.getLogger(__name__)

#: Version of the on-disk schema this code writes. Version 1 and 2 files are migrated in place when a
#: writable Store opens them (read as they are when opened read-only); others are refused.
SCHEMA_VERSION: Final = 3
#: Older schema versions this code can migrate from (and read without migrating).
_MIGRATABLE_VERSIONS: Final = frozenset({"1", "2"})
#: Longest campaign id or batch id (characters) the store accepts.
MAX_ID_LENGTH: Final = 256
# Rows fetched per round trip by raw_payloads(): each chunk is its own short read transaction, so a slow
# consumer never pins an old WAL snapshot (which would stop checkpoints and let the WAL grow).
_RAW_CHUNK_ROWS: Final = 256
# SQLite allows 32766 bound parameters per statement (since 3.32); stay far below for IN (...) lists.
_IN_LIST_CHUNK: Final = 500
_PAGE_SIZES: Final = frozenset(1 << k for k in range(9, 17))

_T = TypeVar("_T")

_SCHEMA: Final = (
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
_TOKENS_SCHEMA: Final = """CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '',
    sha256 BLOB NOT NULL UNIQUE CHECK (length(sha256) = 32),
    created_unix_ms INTEGER NOT NULL,
    revoked_unix_ms INTEGER,
    campaigns TEXT
)"""
#: ``meta`` key set (to '1') when the first token is added, never cleared: authentication stays on.
_AUTH_REQUIRED_KEY: Final = "auth_required"
#: Modes of what the store creates: only the server's user may read reports and token digests.
_FILE_MODE: Final = 0o600
_DIR_MODE: Final = 0o700
# Before schema 3 a single report was stored under "r:" + report_id.
_LEGACY_REPORT_PREFIX: Final = "r:"
# Created only when raw retention is on. A rowid table (payloads can be large) read in insertion order.
_RAW_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS raw_reports (
        campaign_id TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        payload BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS raw_reports_by_campaign ON raw_reports (campaign_id)",
)
_PURGE_RAW_SQL: Final = (
    "DELETE FROM raw_reports WHERE rowid IN ("
    " SELECT r.rowid FROM raw_reports AS r JOIN batches AS b"
    " ON b.campaign_id = r.campaign_id AND b.batch_id = r.batch_id"
    " WHERE b.received_unix_ms < ?)"
)
_KNOWN_TABLES: Final = frozenset({"meta", "campaigns", "batches", "accumulators", "raw_reports", "tokens"})


class StoreSchemaError(LdpError):
    """The database file was written by a different (newer or unknown) schema and is not opened.

    Not retryable: upgrade the software, or point the store at another file.
    """


class StoreLockedError(StoreUnavailableError):
    """Another :class:`Store` (usually a running server) holds the database's lock file."""


class Accumulator(Protocol):
    """What the store needs from a campaign's aggregate: a mergeable, serializable sum.

    ``a + b`` must return a NEW object and leave both operands unchanged: the writer builds the next
    state as ``committed + delta`` and only swaps it in after COMMIT, so a failed transaction leaves the
    committed object untouched.
    """

    def __add__(self, other: Any) -> Self: ...  # another accumulator of its kind, or a BatchDelta it accepts

    def to_bytes(self) -> bytes: ...

    @property
    def n(self) -> int:
        """Number of reports summed into this accumulator."""
        ...


class BatchDelta(Protocol):
    """What one batch adds to its campaign's accumulator (the writer computes ``committed + delta``).

    An accumulator of the campaign's kind, or a lighter increment that kind accepts in ``+`` (e.g.
    :class:`ldp_aggregator.accumulators.BitRows` for a single RAPPOR report).
    """

    @property
    def n(self) -> int:
        """Number of reports in the batch."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class CampaignRecord:
    """One campaign as stored: an id, the mechanism name and its serialized parameters.

    Attributes:
        campaign_id: Unique id, 1..MAX_ID_LENGTH characters.
        mechanism: Mechanism name (e.g. ``"rr"``, ``"grr"``, ``"rappor"``); opaque to the store.
        params_blob: Serialized parameters (the wire ``Campaign`` protobuf); opaque to the store.
        description: Free text for operators.
        created_unix_ms: Creation time, milliseconds since the Unix epoch.
        closed: A closed campaign accepts no new batches (retries of stored batches still answer
            "duplicate").
    """

    campaign_id: str
    mechanism: str
    params_blob: bytes
    description: str = ""
    created_unix_ms: int
    closed: bool = False

    def __post_init__(self) -> None:
        _check_id("campaign_id", self.campaign_id)
        if not isinstance(self.mechanism, str) or not 1 <= len(self.mechanism) <= MAX_ID_LENGTH:
            raise InvalidParameterError("mechanism", self.mechanism, f"a string of 1..{MAX_ID_LENGTH} chars")
        if isinstance(self.params_blob, bytearray | memoryview):
            object.__setattr__(self, "params_blob", bytes(self.params_blob))
        if not isinstance(self.params_blob, bytes):
            raise InvalidParameterError("params_blob", self.params_blob, "bytes")
        if not isinstance(self.description, str):
            raise InvalidParameterError("description", self.description, "a string")
        if (
            isinstance(self.created_unix_ms, bool)
            or not isinstance(self.created_unix_ms, int)
            or self.created_unix_ms < 0
        ):
            raise InvalidParameterError("created_unix_ms", self.created_unix_ms, "an integer >= 0")
        if not isinstance(self.closed, bool):
            raise InvalidParameterError("closed", self.closed, "a bool")


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenRecord:
    """One access token as stored: never the token, only its SHA-256.

    Attributes:
        token_id: Public id (shown by ``token list``, used to revoke), 1..MAX_ID_LENGTH characters.
        role: Role name; opaque to the store (``ldp_aggregator.auth`` gives it meaning).
        name: Free text for operators (who or what uses the token).
        sha256: SHA-256 digest of the token string (32 bytes).
        created_unix_ms: Creation time, milliseconds since the Unix epoch.
        revoked_unix_ms: Revocation time, or None while the token is valid.
        campaigns: The campaign ids the token is limited to (distinct, sorted), or None for every campaign.
    """

    token_id: str
    role: str
    name: str = ""
    sha256: bytes
    created_unix_ms: int
    revoked_unix_ms: int | None = None
    campaigns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _check_id("token_id", self.token_id)
        _check_id("role", self.role)
        if not isinstance(self.name, str) or len(self.name) > MAX_ID_LENGTH:
            raise InvalidParameterError("name", self.name, f"a string of at most {MAX_ID_LENGTH} characters")
        if isinstance(self.sha256, bytearray | memoryview):
            object.__setattr__(self, "sha256", bytes(self.sha256))
        if not isinstance(self.sha256, bytes) or len(self.sha256) != 32:
            raise InvalidParameterError("sha256", self.sha256, "32 bytes (a SHA-256 digest)")
        for field, value in (
            ("created_unix_ms", self.created_unix_ms),
            ("revoked_unix_ms", self.revoked_unix_ms),
        ):
            if value is None and field == "revoked_unix_ms":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidParameterError(field, value, "an integer >= 0")
        if self.campaigns is not None:
            if isinstance(self.campaigns, str) or not isinstance(self.campaigns, tuple | list | frozenset):
                raise InvalidParameterError("campaigns", self.campaigns, "a sequence of campaign ids or None")
            if not self.campaigns:
                raise InvalidParameterError("campaigns", (), "one campaign id or more (None: every campaign)")
            for cid in self.campaigns:
                _check_id("campaigns", cid)
            object.__setattr__(self, "campaigns", tuple(sorted(set(self.campaigns))))

    @property
    def revoked(self) -> bool:
        """Whether the token has been revoked."""
        return self.revoked_unix_ms is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class SubmitOutcome:
    """Result of a committed submission.

    Attributes:
        duplicate: The batch id was already stored (a retry); nothing was added.
        accepted: Reports added to the campaign by this call (0 for a duplicate).
    """

    duplicate: bool
    accepted: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStats:
    """Counters since the store was opened (for metrics and benchmarks)."""

    commits: int
    failed_commits: int
    batches_accepted: int
    batches_duplicate: int
    reports_accepted: int
    pending: int
    last_commit_failed: bool = False


def _check_id(field: str, value: object) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise InvalidParameterError(field, value, f"a string of 1..{MAX_ID_LENGTH} characters")


def _now_unix_ms() -> int:
    return time.time_ns() // 1_000_000


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


class _Submission:
    __slots__ = ("batch_id", "campaign_id", "delta", "future", "n_reports", "raw_payload")

    def __init__(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None,
    ) -> None:
        self.campaign_id = campaign_id
        self.batch_id = batch_id
        self.n_reports = n_reports
        self.delta = delta
        self.raw_payload = raw_payload
        self.future: Future[SubmitOutcome] = Future()


class _Command:
    """A non-batch write (create/close campaign, purge) run alone, in queue order, by the writer."""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        self.fn = fn
        self.future: Future[Any] = Future()


class Store:
    """SQLite-backed, thread-safe store with a single group-committing writer thread.

    Reads (campaigns, accumulators, batch counts) are served from the committed in-memory mirror;
    ``has_batch``/``raw_payloads`` use separate read-only connections, which WAL lets run concurrently
    with the writer.

    Args:
        path: Database file (its directory must exist; :meth:`open` creates it).
        retain_raw: Keep each batch's raw payload in ``raw_reports`` (in the batch's transaction).
        decode_accumulator: ``(campaign, blob) -> Accumulator``, inverse of ``Accumulator.to_bytes``.
        zero_accumulator: ``campaign -> Accumulator`` with nothing summed, used when a campaign is created.
        group_commit_max: Most submissions committed in one transaction.
        max_pending: Most submissions waiting for the writer; beyond it ``submit`` fails fast with
            StoreUnavailableError (back-pressure instead of unbounded memory when the disk stalls).
        busy_timeout_s: How long a connection waits for a lock held by a checkpoint or a reader.
        page_size: SQLite page size in bytes, used only when the file is created. 16 KiB rather than
            SQLite's 4 KiB default: raw payloads are large blobs (RAPPOR k=4096 is 512 KiB per 1,000
            reports) and bigger pages cut their overflow-page overhead (~+30% batches/s measured with
            512 KB payloads by bench/bench_store.py) at no measurable cost for small batches.
        read_only: Open an existing database for reading only, e.g. a CLI computing estimates while the
            server runs: no writer thread and no lock file; campaigns, accumulators and batch counts are
            a snapshot taken at open; every write raises or fails with StoreUnavailableError.
        clock: Milliseconds since the Unix epoch, for ``received_unix_ms`` (injectable for tests).

    Raises:
        StoreSchemaError: The file has a newer or unknown schema.
        StoreUnavailableError: The file cannot be opened or written, or another Store holds it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retain_raw: bool = True,
        decode_accumulator: Callable[[CampaignRecord, bytes], Accumulator],
        zero_accumulator: Callable[[CampaignRecord], Accumulator],
        group_commit_max: int = 256,
        max_pending: int = 100_000,
        busy_timeout_s: float = 10.0,
        page_size: int = 16384,
        read_only: bool = False,
        clock: Callable[[], int] = _now_unix_ms,
    ) -> None:
        if str(path) == ":memory:" or str(path).startswith("file:"):
            raise InvalidParameterError(
                "path", str(path), "a filesystem path (the store needs a shared file)"
            )
        for name, flag in (("retain_raw", retain_raw), ("read_only", read_only)):
            if not isinstance(flag, bool):
                raise InvalidParameterError(name, flag, "a bool")
        for name, value in (("group_commit_max", group_commit_max), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, value, "an integer >= 1")
        if not busy_timeout_s > 0:
            raise InvalidParameterError("busy_timeout_s", busy_timeout_s, "a number > 0")
        if page_size not in _PAGE_SIZES:
            raise InvalidParameterError("page_size", page_size, "a power of two in [512, 65536]")
        self._path = Path(path)
        self._retain_raw = retain_raw
        self._decode = decode_accumulator
        self._zero = zero_accumulator
        self._group_max = group_commit_max
        self._max_pending = max_pending
        self._busy_timeout_s = float(busy_timeout_s)
        self._page_size = page_size
        self._read_only = read_only
        self._clock = clock

        # Committed in-memory mirror of the database; written only by the writer thread after COMMIT.
        self._state_lock = threading.Lock()
        self._campaigns: dict[str, CampaignRecord] = {}
        self._acc: dict[str, Accumulator] = {}
        self._n_batches: dict[str, int] = {}
        self._commits = 0
        self._failed_commits = 0
        self._batches_accepted = 0
        self._batches_duplicate = 0
        self._reports_accepted = 0
        self._last_commit_failed = False  # for health checks: is the disk refusing writes right now?

        # Writer queue. The condition guards _pending/_accepting/_stopping.
        self._cv = threading.Condition()
        self._pending: deque[_Submission | _Command] = deque()
        self._accepting = not read_only
        self._stopping = read_only

        self._readers_lock = threading.Lock()
        self._idle_readers: list[sqlite3.Connection] = []
        self._closed = False

        self._wconn: sqlite3.Connection | None = None
        self._writer: threading.Thread | None = None
        if read_only:
            self._lock_fd: int | None = None
            self._has_raw_table = self._load_read_only()
            return
        self._lock_fd = self._acquire_file_lock()
        try:
            self._secure_files()
            self._wconn = self._connect_writer()
            self._has_raw_table = self._init_schema(self._wconn)
            self._load_state(self._wconn)
        except BaseException:
            if self._wconn is not None:
                self._wconn.close()
            self._release_file_lock()
            raise
        self._writer = threading.Thread(
            target=self._writer_main, name=f"ldp-store-writer:{path}", daemon=True
        )
        self._writer.start()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        retain_raw: bool = True,
        decode_accumulator: Callable[[CampaignRecord, bytes], Accumulator],
        zero_accumulator: Callable[[CampaignRecord], Accumulator],
        group_commit_max: int = 256,
        max_pending: int = 100_000,
        busy_timeout_s: float = 10.0,
        page_size: int = 16384,
        read_only: bool = False,
        clock: Callable[[], int] = _now_unix_ms,
    ) -> Store:
        """Create the parent directories of ``path`` if needed, then open the store (see the class)."""
        if read_only:
            return cls(
                path,
                retain_raw=retain_raw,
                decode_accumulator=decode_accumulator,
                zero_accumulator=zero_accumulator,
                read_only=True,
            )
        try:
            # 0700 for the directory the store creates (its parents get the usual mode): it holds reports.
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create the directory of {str(path)!r}: {exc}") from exc
        return cls(
            path,
            retain_raw=retain_raw,
            decode_accumulator=decode_accumulator,
            zero_accumulator=zero_accumulator,
            group_commit_max=group_commit_max,
            max_pending=max_pending,
            busy_timeout_s=busy_timeout_s,
            page_size=page_size,
            read_only=read_only,
            clock=clock,
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def retain_raw(self) -> bool:
        """Whether raw payloads are kept."""
        return self._retain_raw

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting work, commit everything already submitted, stop the writer, close connections.

        Idempotent. Submissions made before ``close`` resolve normally (or fail with
        StoreUnavailableError if their commit fails); later ones fail with StoreUnavailableError.
        """
        if self._writer is not None and threading.current_thread() is self._writer:
            # Future callbacks run on the writer thread; it cannot wait for itself to drain.
            raise RuntimeError("Store.close() must not be called from a submission's done-callback")
        with self._cv:
            self._accepting = False
            self._stopping = True
            self._cv.notify_all()
        if self._writer is not None:
            self._writer.join()
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

    # ------------------------------------------------------------------ campaigns

    def create_campaign(self, record: CampaignRecord) -> None:
        """Store a new campaign with an empty accumulator, durably.

        Raises:
            CampaignExistsError: A campaign with this id exists (nothing is changed).
            StoreUnavailableError: The commit failed or the store is closed.
        """
        if not isinstance(record, CampaignRecord):
            raise InvalidParameterError("record", record, "a CampaignRecord")
        # Built here, outside the writer, so a parameter error surfaces to the caller before any write (and
        # a large accumulator's allocation never holds up the writer's commits of other campaigns). It is
        # not serialized: the row holds an empty blob until the first batch (schema 3), so creating even a
        # large campaign writes a few bytes.
        zero = self._zero(record)
        if zero.n != 0:
            raise InvalidParameterError("zero_accumulator", zero.n, "an accumulator with n = 0")

        def create(conn: sqlite3.Connection) -> None:
            if record.campaign_id in self._campaigns:
                raise CampaignExistsError(record.campaign_id)

            def body() -> None:
                conn.execute(
                    "INSERT INTO campaigns (id, mechanism, params, description, created_unix_ms, closed)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        record.campaign_id,
                        record.mechanism,
                        record.params_blob,
                        record.description,
                        record.created_unix_ms,
                        int(record.closed),
                    ),
                )
                conn.execute(
                    "INSERT INTO accumulators (campaign_id, data, n_reports, n_batches) VALUES (?, ?, 0, 0)",
                    (record.campaign_id, b""),
                )

            self._transaction(conn, body, what=f"create campaign {shown(record.campaign_id)}")
            with self._state_lock:
                self._campaigns[record.campaign_id] = record
                self._acc[record.campaign_id] = zero
                self._n_batches[record.campaign_id] = 0

        self._run_in_writer(create)

    def get_campaign(self, campaign_id: str) -> CampaignRecord:
        """The committed campaign record. Raises CampaignNotFoundError."""
        with self._state_lock:
            record = self._campaigns.get(campaign_id)
        if record is None:
            raise CampaignNotFoundError(campaign_id)
        return record

    def list_campaigns(self) -> list[CampaignRecord]:
        """All campaigns, oldest first (ties by id)."""
        with self._state_lock:
            records = list(self._campaigns.values())
        records.sort(key=lambda r: (r.created_unix_ms, r.campaign_id))
        return records

    def close_campaign(self, campaign_id: str) -> None:
        """Mark a campaign closed (idempotent): it accepts no new batches from now on.

        Raises:
            CampaignNotFoundError: No such campaign.
            StoreUnavailableError: The commit failed or the store is closed.
        """
        _check_id("campaign_id", campaign_id)

        def close(conn: sqlite3.Connection) -> None:
            record = self._campaigns.get(campaign_id)
            if record is None:
                raise CampaignNotFoundError(campaign_id)
            if record.closed:
                return
            self._transaction(
                conn,
                lambda: conn.execute("UPDATE campaigns SET closed = 1 WHERE id = ?", (campaign_id,)),
                what=f"close campaign {shown(campaign_id)}",
            )
            with self._state_lock:
                self._campaigns[campaign_id] = dataclasses.replace(record, closed=True)

        self._run_in_writer(close)

    # ------------------------------------------------------------------ ingest

    def submit(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
    ) -> Future[SubmitOutcome]:
        """Queue one batch; the future resolves only after the transaction holding it has committed.

        Args:
            campaign_id: Target campaign.
            batch_id: Client-chosen id; a batch id already stored for this campaign is a no-op
                (``SubmitOutcome(duplicate=True, accepted=0)``), so retries are safe.
            n_reports: Reports in the batch; must equal ``delta.n``.
            delta: What the batch adds (built by the caller from the validated batch): its accumulator, or
                an increment the campaign's accumulator accepts in ``+`` (:class:`BatchDelta`).
            raw_payload: Serialized batch to retain when retention is on (ignored otherwise).

        Returns:
            A future of SubmitOutcome. It fails with CampaignNotFoundError, CampaignClosedError (new batch
            for a closed campaign), or StoreUnavailableError (commit failed, queue full, store closed);
            none of these change stored state. Cancelling the future before the writer takes it drops
            the batch.

        Raises:
            InvalidParameterError: Malformed ids.
            InvalidReportError: ``n_reports`` is negative or differs from ``delta.n``.
        """
        _check_id("campaign_id", campaign_id)
        _check_id("batch_id", batch_id)
        if isinstance(n_reports, bool) or not isinstance(n_reports, int) or n_reports < 0:
            raise InvalidReportError("n_reports", n_reports, "an integer >= 0")
        if delta.n != n_reports:
            raise InvalidReportError("n_reports", n_reports, f"the batch accumulator's n={delta.n}")
        if raw_payload is not None and not isinstance(raw_payload, bytes):
            raw_payload = bytes(raw_payload)
        sub = _Submission(campaign_id, batch_id, n_reports, delta, raw_payload)
        with self._cv:
            if not self._accepting:
                sub.future.set_exception(StoreUnavailableError(self._refusal()))
            elif len(self._pending) >= self._max_pending:
                sub.future.set_exception(
                    StoreUnavailableError(
                        f"store {str(self._path)!r} has {len(self._pending)} submissions waiting for the disk"
                        f" (max_pending={self._max_pending}); retry later"
                    )
                )
            else:
                self._pending.append(sub)
                self._cv.notify()
        return sub.future

    async def submit_async(
        self,
        campaign_id: str,
        batch_id: str,
        n_reports: int,
        delta: BatchDelta,
        raw_payload: bytes | None = None,
    ) -> SubmitOutcome:
        """:meth:`submit` for asyncio code (grpc.aio servicers): returns once the batch is committed."""
        return await asyncio.wrap_future(self.submit(campaign_id, batch_id, n_reports, delta, raw_payload))

    # ------------------------------------------------------------------ reads

    def accumulator(self, campaign_id: str) -> Accumulator:
        """The campaign's committed accumulator. Shared object: treat it as read-only.

        Raises:
            CampaignNotFoundError: No such campaign.
        """
        with self._state_lock:
            acc = self._acc.get(campaign_id)
        if acc is None:
            raise CampaignNotFoundError(campaign_id)
        return acc

    def snapshot(self, campaign_id: str) -> tuple[CampaignRecord, Accumulator, int]:
        """The campaign's record, committed accumulator and batch count, consistent with each other.

        The accumulator is the shared committed object (the writer replaces it, never mutates it): treat
        it as read-only. Raises CampaignNotFoundError.
        """
        with self._state_lock:
            record = self._campaigns.get(campaign_id)
            acc = self._acc.get(campaign_id)
            count = self._n_batches.get(campaign_id)
        if record is None or acc is None or count is None:
            raise CampaignNotFoundError(campaign_id)
        return record, acc, count

    def batch_count(self, campaign_id: str) -> int:
        """Number of distinct committed batches of the campaign. Raises CampaignNotFoundError."""
        with self._state_lock:
            count = self._n_batches.get(campaign_id)
        if count is None:
            raise CampaignNotFoundError(campaign_id)
        return count

    def has_batch(self, campaign_id: str, batch_id: str) -> bool:
        """Whether this batch id is committed for the campaign. Raises CampaignNotFoundError."""
        self.get_campaign(campaign_id)
        with self._reader() as conn:
            row = conn.execute(
                "SELECT 1 FROM batches WHERE campaign_id = ? AND batch_id = ?", (campaign_id, batch_id)
            ).fetchone()
        return row is not None

    def raw_payloads(self, campaign_id: str) -> Iterator[bytes]:
        """Committed raw payloads of the campaign, in commit order (lazily, in short read transactions).

        Batches committed while iterating may or may not be included. Empty when retention was never on.

        Raises:
            CampaignNotFoundError: No such campaign (raised at call time, not on first ``next``).
        """
        self.get_campaign(campaign_id)
        return self._iter_raw(campaign_id)

    def _iter_raw(self, campaign_id: str) -> Iterator[bytes]:
        if not self._has_raw_table:
            return
        last_rowid = -1
        while True:
            with self._reader() as conn:
                rows = conn.execute(
                    "SELECT rowid, payload FROM raw_reports WHERE campaign_id = ? AND rowid > ?"
                    " ORDER BY rowid LIMIT ?",
                    (campaign_id, last_rowid, _RAW_CHUNK_ROWS),
                ).fetchall()
            for rowid, payload in rows:
                last_rowid = rowid
                yield bytes(payload)
            if len(rows) < _RAW_CHUNK_ROWS:
                return

    def purge_raw(self, older_than_unix_ms: int) -> int:
        """Delete raw payloads of batches received before ``older_than_unix_ms``; returns rows deleted.

        Batch ids and accumulators are kept (duplicates are still detected, estimates unchanged).
        """
        if isinstance(older_than_unix_ms, bool) or not isinstance(older_than_unix_ms, int):
            raise InvalidParameterError("older_than_unix_ms", older_than_unix_ms, "an integer")

        def purge(conn: sqlite3.Connection) -> int:
            if not self._has_raw_table:
                return 0
            deleted = 0

            def body() -> None:
                nonlocal deleted
                cur = conn.execute(_PURGE_RAW_SQL, (older_than_unix_ms,))
                deleted = cur.rowcount

            self._transaction(conn, body, what="purge raw reports")
            return deleted

        result: int = self._run_in_writer(purge)
        return result

    def list_tokens(self) -> list[TokenRecord]:
        """Every access token row (valid and revoked), read from the database now.

        Read from the file rather than a mirror, so tokens created or revoked by another process (the CLI
        while the server runs) are seen at the next call. Empty for a version 1 file opened read-only.
        """
        with self._reader() as conn:
            return _select_tokens(conn)

    def auth_required(self) -> bool:
        """Whether a token was ever added to this database: then every call needs one, for good.

        Persisted (the ``auth_required`` meta row, set with the first token), so that revoking every token
        and restarting never switches authentication off.
        """
        with self._reader() as conn:
            return _auth_required(conn)

    def stats(self) -> StoreStats:
        """Counters since open."""
        with self._cv:
            pending = len(self._pending)
        with self._state_lock:
            return StoreStats(
                commits=self._commits,
                failed_commits=self._failed_commits,
                batches_accepted=self._batches_accepted,
                batches_duplicate=self._batches_duplicate,
                reports_accepted=self._reports_accepted,
                pending=pending,
                last_commit_failed=self._last_commit_failed,
            )

    # ------------------------------------------------------------------ connections and schema

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
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
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

    def _init_schema(self, conn: sqlite3.Connection) -> bool:
        """Create or verify the schema; returns whether the raw_reports table exists."""
        where = repr(str(self._path))
        try:
            # page_size only takes effect on a new, empty file, so it must precede the first write (which
            # switching to WAL is); on an existing database it is a no-op.
            conn.execute(f"PRAGMA page_size = {int(self._page_size)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailableError(f"cannot open {where} as an SQLite database: {exc}") from exc
        if str(mode).lower() != "wal":
            raise StoreUnavailableError(f"database {where} cannot use WAL journaling (got {mode!r})")

        def body() -> None:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(_TOKENS_SCHEMA)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            elif (found := self._check_version(conn, tables, where)) in _MIGRATABLE_VERSIONS:
                # In the same transaction as the version bump, so a crash leaves either the complete old
                # file or the complete new one.
                _log.info("migrating %s from schema_version %s to %d", where, found, SCHEMA_VERSION)
                _migrate_to_current(conn, tables, where)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            if self._retain_raw:
                for stmt in _RAW_SCHEMA:
                    conn.execute(stmt)

        self._transaction(conn, body, what="initialise the schema")
        row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'raw_reports'")
        return row.fetchone() is not None

    def _load_read_only(self) -> bool:
        """Verify an existing database and load the snapshot; returns whether raw_reports exists."""
        where = repr(str(self._path))
        if not self._path.is_file():
            raise StoreUnavailableError(f"database {where} does not exist (read-only open creates nothing)")
        conn = self._connect()
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("BEGIN")  # one snapshot for the checks and the load
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                raise StoreUnavailableError(f"database {where} is empty: it was never initialised by a Store")
            self._check_version(conn, tables, where)
            self._load_state(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read database {where}: {exc}") from exc
        finally:
            conn.close()
        return "raw_reports" in tables

    @staticmethod
    def _check_version(conn: sqlite3.Connection, tables: set[str], where: str) -> str:
        """Refuse foreign, newer or unknown files; returns the file's version (current or migratable)."""
        if "meta" not in tables:
            raise StoreSchemaError(
                f"database {where} has tables {sorted(tables)} but no 'meta' table: it was not written by"
                " ldp_aggregator; refusing to open it"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        found = None if row is None else row[0]
        if found != str(SCHEMA_VERSION) and found not in _MIGRATABLE_VERSIONS:
            raise StoreSchemaError(
                f"database {where} has schema_version={found!r}; this ldp_aggregator reads and writes only"
                f" schema_version={SCHEMA_VERSION!r} (a newer or unknown version): upgrade the software or"
                " use another database file"
            )
        unknown = tables - _KNOWN_TABLES
        if unknown:
            raise StoreSchemaError(
                f"database {where} has unknown tables {sorted(unknown)}; refusing to open it"
            )
        return str(found)

    def _load_state(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT c.id, c.mechanism, c.params, c.description, c.created_unix_ms, c.closed,"
            " a.data, a.n_reports, a.n_batches"
            " FROM campaigns AS c LEFT JOIN accumulators AS a ON a.campaign_id = c.id"
        ).fetchall()
        for cid, mechanism, params, description, created, closed, data, n_reports, n_batches in rows:
            record = CampaignRecord(
                campaign_id=cid,
                mechanism=mechanism,
                params_blob=bytes(params),
                description=description,
                created_unix_ms=created,
                closed=bool(closed),
            )
            if data is None:
                raise StoreUnavailableError(f"campaign {cid!r} has no accumulator row in {str(self._path)!r}")
            try:
                # An empty blob: nothing summed yet (schema 3 writes no zero accumulator at creation).
                acc = self._zero(record) if len(data) == 0 else self._decode(record, bytes(data))
            except Exception as exc:
                raise StoreUnavailableError(
                    f"cannot decode the accumulator of campaign {cid!r}: {exc}"
                ) from exc
            if acc.n != n_reports:
                raise StoreUnavailableError(
                    f"accumulator of campaign {cid!r} decodes to n={acc.n}"
                    f" but its row says n_reports={n_reports}"
                )
            self._campaigns[cid] = record
            self._acc[cid] = acc
            self._n_batches[cid] = n_batches

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

    # ------------------------------------------------------------------ writer thread

    def _run_in_writer(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn(writer_connection)`` on the writer thread, after everything queued before it."""
        cmd = _Command(fn)
        with self._cv:
            if not self._accepting:
                raise StoreUnavailableError(self._refusal())
            self._pending.append(cmd)
            self._cv.notify()
        result: _T = cmd.future.result()
        return result

    def _refusal(self) -> str:
        if self._read_only:
            return f"store {str(self._path)!r} was opened read-only and accepts no writes"
        return f"store {str(self._path)!r} is closed"

    def _writer_connection(self) -> sqlite3.Connection:
        if self._wconn is None:
            self._wconn = self._connect_writer()
        return self._wconn

    def _writer_main(self) -> None:
        while True:
            command: _Command | None = None
            group: list[_Submission] = []
            with self._cv:
                while not self._pending and not self._stopping:
                    self._cv.wait()
                if not self._pending:
                    return  # stopping and drained
                head = self._pending[0]
                if isinstance(head, _Command):
                    command = head
                    self._pending.popleft()
                else:
                    # Group commit: everything queued while the previous commit was fsyncing, up to a
                    # command (which must run after the submissions queued before it, and before later ones).
                    while self._pending and len(group) < self._group_max:
                        item = self._pending[0]
                        if isinstance(item, _Command):
                            break
                        self._pending.popleft()
                        group.append(item)
            try:
                if command is not None:
                    self._run_command(command)
                else:
                    self._commit_group(group)
            except Exception as exc:  # pragma: no cover - defensive: the writer must never die
                _log.exception("unexpected error in the store writer")
                for s in group:
                    if not s.future.done():
                        s.future.set_exception(StoreUnavailableError(f"internal store error: {exc!r}"))

    def _run_command(self, cmd: _Command) -> None:
        if not cmd.future.set_running_or_notify_cancel():
            return
        try:
            result = cmd.fn(self._writer_connection())
        except BaseException as exc:
            cmd.future.set_exception(exc)
        else:
            cmd.future.set_result(result)

    def _existing_batch_ids(self, conn: sqlite3.Connection, subs: list[_Submission]) -> set[tuple[str, str]]:
        """(campaign, batch) pairs of ``subs`` already committed: one query per campaign and 500 ids."""
        by_campaign: dict[str, list[str]] = {}
        for s in subs:
            by_campaign.setdefault(s.campaign_id, []).append(s.batch_id)
        found: set[tuple[str, str]] = set()
        for cid, bids in by_campaign.items():
            for start in range(0, len(bids), _IN_LIST_CHUNK):
                chunk = bids[start : start + _IN_LIST_CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"SELECT batch_id FROM batches WHERE campaign_id = ? AND batch_id IN ({marks})",
                    (cid, *chunk),
                )
                found.update((cid, bid) for (bid,) in cur)
        return found

    def _commit_group(self, group: list[_Submission]) -> None:
        # Drop submissions cancelled while queued; mark the rest running (no longer cancellable).
        live = [s for s in group if s.future.set_running_or_notify_cancel()]
        subs: list[_Submission] = []
        for s in live:
            if s.campaign_id in self._campaigns:
                subs.append(s)
            else:
                s.future.set_exception(CampaignNotFoundError(s.campaign_id))
        if not subs:
            return

        outcomes: list[tuple[_Submission, SubmitOutcome | BaseException]] = []
        working: dict[str, Accumulator] = {}  # next state per touched campaign; committed state untouched
        n_batches: dict[str, int] = {}
        batch_rows: list[tuple[str, str, int, int]] = []
        raw_rows: list[tuple[str, str, bytes]] = []
        accepted = duplicates = reports = 0
        try:
            conn = self._writer_connection()
            conn.execute("BEGIN IMMEDIATE")
            existing = self._existing_batch_ids(conn, subs)
            seen: set[tuple[str, str]] = set()
            now = self._clock()
            for s in subs:
                key = (s.campaign_id, s.batch_id)
                if key in existing or key in seen:
                    outcomes.append((s, SubmitOutcome(duplicate=True, accepted=0)))
                    duplicates += 1
                    continue
                cid = s.campaign_id
                if self._campaigns[cid].closed:
                    outcomes.append((s, CampaignClosedError(cid)))
                    continue
                try:
                    # The first batch of a group makes a new object (committed state stays untouched
                    # until COMMIT); later ones add into it in place, when the type supports it.
                    current = working.get(cid)
                    if current is None:
                        new_acc = self._acc[cid] + s.delta
                    else:
                        current += s.delta
                        new_acc = current
                except Exception as exc:  # a delta that does not fit its campaign fails alone
                    outcomes.append((s, exc))
                    continue
                working[cid] = new_acc
                n_batches[cid] = n_batches.get(cid, self._n_batches[cid]) + 1
                seen.add(key)
                batch_rows.append((cid, s.batch_id, s.n_reports, now))
                if self._retain_raw and s.raw_payload is not None:
                    raw_rows.append((cid, s.batch_id, s.raw_payload))
                outcomes.append((s, SubmitOutcome(duplicate=False, accepted=s.n_reports)))
                accepted += 1
                reports += s.n_reports
            if batch_rows:
                conn.executemany(
                    "INSERT INTO batches (campaign_id, batch_id, n_reports, received_unix_ms)"
                    " VALUES (?, ?, ?, ?)",
                    batch_rows,
                )
            if raw_rows:
                conn.executemany(
                    "INSERT INTO raw_reports (campaign_id, batch_id, payload) VALUES (?, ?, ?)", raw_rows
                )
            if working:
                # One accumulator write per touched campaign per group, whatever the group size.
                conn.executemany(
                    "UPDATE accumulators SET data = ?, n_reports = ?, n_batches = ? WHERE campaign_id = ?",
                    [(acc.to_bytes(), acc.n, n_batches[cid], cid) for cid, acc in working.items()],
                )
            conn.execute("COMMIT")
        except Exception as exc:
            if self._wconn is not None:
                self._rollback(self._wconn)
            with self._state_lock:
                self._failed_commits += 1
                self._last_commit_failed = True
            reason = f"{exc} ({type(exc).__name__})"
            _log.warning("store commit of %d batch(es) failed: %s", len(subs), reason)
            for s in subs:
                err = StoreUnavailableError(
                    f"could not commit batch {shown(s.batch_id)} of campaign {shown(s.campaign_id)} to"
                    f" {str(self._path)!r}: {reason}; nothing was stored, retry later"
                )
                err.__cause__ = exc
                s.future.set_exception(err)
            return

        # Committed and durable: publish the new state, then acknowledge.
        with self._state_lock:
            self._acc.update(working)
            self._n_batches.update(n_batches)
            self._commits += 1
            self._last_commit_failed = False
            self._batches_accepted += accepted
            self._batches_duplicate += duplicates
            self._reports_accepted += reports
        for s, outcome in outcomes:
            if isinstance(outcome, SubmitOutcome):
                s.future.set_result(outcome)
            else:
                s.future.set_exception(outcome)


# ---------------------------------------------------------------------------------------------- migration


def _migrate_to_current(conn: sqlite3.Connection, tables: set[str], where: str) -> None:
    """Bring a schema 1 or 2 file to the current version (inside the caller's transaction)."""
    if "tokens" not in tables:  # 1 -> 2
        conn.execute(_TOKENS_SCHEMA)
    else:  # 2 -> 3: token scopes; a file that ever had a token keeps authentication on
        columns = {row[1] for row in conn.execute("PRAGMA table_info(tokens)")}
        if "campaigns" not in columns:
            conn.execute("ALTER TABLE tokens ADD COLUMN campaigns TEXT")
        if conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None:
            _set_auth_required(conn)
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
                if len(reports) + len(batches) >= _IN_LIST_CHUNK:
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


def _set_auth_required(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (_AUTH_REQUIRED_KEY,))


# ---------------------------------------------------------------------------------------------- maintenance
# Token and retention maintenance from another process (the CLI) while a server may hold the database.
# Safe alongside a running Store: WAL lets a second connection write (each call is one short BEGIN
# IMMEDIATE transaction, waiting up to the busy timeout for the server's writer), and none of these rows is
# mirrored in a Store's memory.

_TOKEN_COLUMNS: Final = "id, role, name, sha256, created_unix_ms, revoked_unix_ms"


def _scope_from_column(token_id: str, text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        ids = json.loads(text)
    except ValueError:
        ids = None
    if not isinstance(ids, list) or not ids or not all(isinstance(c, str) and c for c in ids):
        # Fail closed: a scope that cannot be read limits the token to no campaign at all.
        _log.warning("token %s has an unreadable campaign scope; it is refused for every campaign", token_id)
        return ()
    return tuple(ids)


def _select_tokens(conn: sqlite3.Connection) -> list[TokenRecord]:
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
    records = []
    for tid, role, name, digest, created, revoked, campaigns in rows:
        scope_ids = _scope_from_column(tid, campaigns)
        record = TokenRecord(
            token_id=tid,
            role=role,
            name=name,
            sha256=bytes(digest),
            created_unix_ms=created,
            revoked_unix_ms=revoked,
            campaigns=scope_ids or None,
        )
        if scope_ids == ():  # unreadable (see above): an empty scope, which no campaign passes
            object.__setattr__(record, "campaigns", ())
        records.append(record)
    return records


def _auth_required(conn: sqlite3.Connection) -> bool:
    """Whether a token was ever added: the ``auth_required`` meta row, or any token row (valid or not)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (_AUTH_REQUIRED_KEY,)).fetchone()
    if row is not None and row[0] == "1":
        return True
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tokens'"
    ).fetchone()
    return has_table is not None and conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None


@contextlib.contextmanager
def _maintenance_connection(
    path: str | os.PathLike[str], busy_timeout_s: float = 30.0
) -> Iterator[sqlite3.Connection]:
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


def add_token(path: str | os.PathLike[str], record: TokenRecord) -> None:
    """Durably insert an access token row (safe while a server holds the database).

    Raises:
        InvalidParameterError: ``record`` is not a TokenRecord, or its id or digest is already stored.
        StoreUnavailableError, StoreSchemaError: the file is missing, unwritable or at another version.
    """
    if not isinstance(record, TokenRecord):
        raise InvalidParameterError("record", record, "a TokenRecord")
    scope = None if record.campaigns is None else json.dumps(list(record.campaigns), ensure_ascii=False)
    with _maintenance_connection(path) as conn:
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
        _set_auth_required(conn)
        conn.execute("COMMIT")


def revoke_token(path: str | os.PathLike[str], token_id: str, *, when_unix_ms: int | None = None) -> bool:
    """Mark a token revoked; returns False if it already was (safe while a server holds the database).

    Raises:
        InvalidParameterError: No token has this id.
        StoreUnavailableError, StoreSchemaError: as :func:`add_token`.
    """
    _check_id("token_id", token_id)
    when = _now_unix_ms() if when_unix_ms is None else when_unix_ms
    with _maintenance_connection(path) as conn:
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
    with _maintenance_connection(path) as conn:
        return _select_tokens(conn)


def auth_required_file(path: str | os.PathLike[str]) -> bool:
    """Whether a token was ever added to the database file (then authentication stays on for good)."""
    with _maintenance_connection(path) as conn:
        return _auth_required(conn)


def purge_raw_file(path: str | os.PathLike[str], older_than_unix_ms: int) -> int:
    """:meth:`Store.purge_raw` on a database file, whether or not a server holds it; returns rows deleted."""
    if isinstance(older_than_unix_ms, bool) or not isinstance(older_than_unix_ms, int):
        raise InvalidParameterError("older_than_unix_ms", older_than_unix_ms, "an integer")
    with _maintenance_connection(path) as conn:
        if (
            conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'raw_reports'"
            ).fetchone()
            is None
        ):
            return 0
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(_PURGE_RAW_SQL, (older_than_unix_ms,))
        deleted = cur.rowcount
        conn.execute("COMMIT")
    return deleted
