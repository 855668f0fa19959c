"""The :class:`Store`: opening a database, campaigns, and reads of the committed state.

A campaign is kept as opaque serialized parameters (protobuf bytes) plus a few columns; its running
aggregate is any object satisfying the small :class:`~ldp_aggregator.store.records.Accumulator` protocol,
decoded and created through two callables the caller supplies. Batches go through the group-committing
writer (:mod:`ldp_aggregator.store.writer`); reads are served from the committed in-memory mirror or
from read-only connections, which WAL lets run concurrently with the writer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, Self

from ldp_aggregator.store.answers import DEFAULT_COMMIT_WINDOW_S
from ldp_aggregator.store.base import RoundStep
from ldp_aggregator.store.files import DIR_MODE
from ldp_aggregator.store.records import (
    Accumulator,
    CampaignRecord,
    TokenRecord,
    campaign_round,
    check_id,
    now_unix_ms,
)
from ldp_aggregator.store.schema import (
    MIGRATABLE_VERSIONS,
    PURGE_RAW_SQL,
    RAW_SCHEMA,
    SCHEMA_VERSION,
    TABLES_SCHEMA,
    TOKENS_SCHEMA,
    check_version,
    migrate_to_current,
)
from ldp_aggregator.store.tokens import read_auth_required, select_tokens
from ldp_aggregator.store.writer import GroupCommitWriter
from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    InvalidParameterError,
    RoundNotOpenError,
    StoreUnavailableError,
    shown,
)

__all__ = ["Store"]

# The store's modules log under the package's name, as the single module did.
_log = logging.getLogger("ldp_aggregator.store")

# Rows fetched per round trip by raw_payloads(): each chunk is its own short read transaction, so a slow
# consumer never pins an old WAL snapshot (which would stop checkpoints and let the WAL grow).
_RAW_CHUNK_ROWS: Final = 256
_PAGE_SIZES: Final = frozenset(1 << k for k in range(9, 17))


class Store(GroupCommitWriter):
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
        commit_window_s: While callers are concurrent, commits start at most this often, so groups grow
            (:class:`~ldp_aggregator.store.answers.CommitPacer`); 0 commits as soon as anything waits.
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
        clock: Callable[[], int] = now_unix_ms,
        commit_window_s: float = DEFAULT_COMMIT_WINDOW_S,
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
        if not 0 <= commit_window_s <= 1:
            raise InvalidParameterError("commit_window_s", commit_window_s, "a number of seconds in [0, 1]")
        if page_size not in _PAGE_SIZES:
            raise InvalidParameterError("page_size", page_size, "a power of two in [512, 65536]")
        super().__init__(
            Path(path),
            busy_timeout_s=float(busy_timeout_s),
            page_size=page_size,
            retain_raw=retain_raw,
            group_commit_max=group_commit_max,
            max_pending=max_pending,
            read_only=read_only,
            clock=clock,
            commit_window_s=float(commit_window_s),
        )
        self._decode = decode_accumulator
        self._zero = zero_accumulator
        if read_only:
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
        self._start_writer(f"ldp-store-writer:{path}")

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
        clock: Callable[[], int] = now_unix_ms,
        commit_window_s: float = DEFAULT_COMMIT_WINDOW_S,
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
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
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
            commit_window_s=commit_window_s,
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

    @property
    def location(self) -> str:
        """The database file, as a string (for messages and logs)."""
        return str(self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting work, commit everything already submitted, stop the writer, close connections.

        Idempotent. Submissions made before ``close`` resolve normally (or fail with
        StoreUnavailableError if their commit fails); later ones fail with StoreUnavailableError.
        """
        self._stop_writer()
        self._close_files()

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
        check_id("campaign_id", campaign_id)

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

    def advance_round(self, campaign_id: str, round_: int, step: RoundStep) -> CampaignRecord:
        """Close round ``round_`` of an adaptive discovery campaign and store what ``step`` publishes
        (:meth:`ldp_aggregator.store.base.CampaignStore.advance_round`).

        Runs on the writer thread, after every batch queued before it and before any queued after it, so
        no batch of the round can commit once ``step`` has read the reports.

        Raises:
            CampaignNotFoundError, CampaignClosedError, RoundNotOpenError: nothing changed.
            StoreUnavailableError: The commit failed or the store is closed.
        """
        check_id("campaign_id", campaign_id)

        def advance(conn: sqlite3.Connection) -> CampaignRecord:
            record = self._campaigns.get(campaign_id)
            if record is None:
                raise CampaignNotFoundError(campaign_id)
            if record.closed:
                raise CampaignClosedError(campaign_id)
            current = campaign_round(record)
            if current != round_:
                raise RoundNotOpenError(campaign_id, round_, current)
            sql = "SELECT payload FROM raw_reports WHERE campaign_id = ? ORDER BY position"
            rows: Iterator[Any] = conn.execute(sql, (campaign_id,)) if self._retain_raw else iter(())
            payloads = (bytes(row[0]) for row in rows)
            blob, closed = step(record, payloads)
            self._transaction(
                conn,
                lambda: conn.execute(
                    "UPDATE campaigns SET params = ?, closed = ? WHERE id = ?",
                    (blob, int(closed), campaign_id),
                ),
                what=f"advance the round of campaign {shown(campaign_id)}",
            )
            new = dataclasses.replace(record, params_blob=blob, closed=closed)
            with self._state_lock:
                self._campaigns[campaign_id] = new
            return new

        result: CampaignRecord = self._run_in_writer(advance)
        return result

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
        return (payload for _, payload in self.iter_raw_batches(campaign_id))

    def iter_raw_batches(self, campaign_id: str, after_position: int = 0) -> Iterator[tuple[int, bytes]]:
        """The campaign's retained raw batches after ``after_position``, in ingest order: (position, payload).

        A position is the raw row's ``position`` (an AUTOINCREMENT key): increasing in commit order (one
        writer commits groups one after another) and never reused or renumbered, even after a purge deleted
        the newest rows or a VACUUM (see :data:`~ldp_aggregator.store.schema.RAW_SCHEMA`). A reader that saw
        position P resumes with ``after_position=P`` and misses nothing committed since. Read lazily, in
        short read transactions.

        Raises:
            CampaignNotFoundError: No such campaign (raised at call time, not on first ``next``).
            InvalidParameterError: ``after_position`` is not an integer >= 0.
        """
        if isinstance(after_position, bool) or not isinstance(after_position, int) or after_position < 0:
            raise InvalidParameterError("after_position", after_position, "an integer >= 0")
        self.get_campaign(campaign_id)
        return self._iter_raw(campaign_id, after_position)

    def _iter_raw(self, campaign_id: str, after_position: int) -> Iterator[tuple[int, bytes]]:
        if not self._has_raw_table:
            return
        last_rowid = after_position
        while True:
            with self._reader() as conn:
                rows = conn.execute(
                    "SELECT rowid, payload FROM raw_reports WHERE campaign_id = ? AND rowid > ?"
                    " ORDER BY rowid LIMIT ?",
                    (campaign_id, last_rowid, _RAW_CHUNK_ROWS),
                ).fetchall()
            for rowid, payload in rows:
                last_rowid = int(rowid)
                yield last_rowid, bytes(payload)
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
                cur = conn.execute(PURGE_RAW_SQL, (older_than_unix_ms,))
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
            return select_tokens(conn)

    def auth_required(self) -> bool:
        """Whether a token was ever added to this database: then every call needs one, for good.

        Persisted (the ``auth_required`` meta row, set with the first token), so that revoking every token
        and restarting never switches authentication off.
        """
        with self._reader() as conn:
            return read_auth_required(conn)

    # ------------------------------------------------------------------ schema and state

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
                for stmt in TABLES_SCHEMA:
                    conn.execute(stmt)
                conn.execute(TOKENS_SCHEMA)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
            elif (found := check_version(conn, tables, where)) in MIGRATABLE_VERSIONS:
                # In the same transaction as the version bump, so a crash leaves either the complete old
                # file or the complete new one.
                _log.info("migrating %s from schema_version %s to %d", where, found, SCHEMA_VERSION)
                migrate_to_current(conn, tables, where, found)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            if self._retain_raw:
                for stmt in RAW_SCHEMA:
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
            check_version(conn, tables, where)
            self._load_state(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read database {where}: {exc}") from exc
        finally:
            conn.close()
        return "raw_reports" in tables

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
