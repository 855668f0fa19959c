""":class:`PostgresStore`: the store on PostgreSQL, shared by several aggregator replicas.

Each replica (process) opens its own PostgresStore on the same database. What it promises is what the
SQLite store promises (:mod:`ldp_aggregator.store.base`), across replicas. This module holds the store's
face: opening (schema check or creation, :mod:`~ldp_aggregator.store_pg.schema`), campaigns, reads, raw
reports and tokens; the queue, group commit and the shard rows are :mod:`~ldp_aggregator.store_pg.writer`.

* **Reads** go to the database, so every replica sees every replica's commits: a snapshot (record,
  accumulator, batch count) is one ``REPEATABLE READ`` transaction that decodes only the shard rows whose
  version changed since the last read and merges them (``+``). Campaign records are cached for
  ``campaign_cache_s`` (the commit itself always reads the row, so a close is enforced at once).
* **Raw reports** come back in commit order with stable positions (:meth:`PostgresStore.iter_raw_batches`).
* **Outages** fail reads and writes with :class:`~ldp_client.errors.StoreUnavailableError` (gRPC
  ``UNAVAILABLE``, "retry later"); connections are re-made on the next call, so a replica recovers by
  itself (see the writer for what happens to a group in flight).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Self

from ldp_aggregator.store.answers import DEFAULT_COMMIT_WINDOW_S
from ldp_aggregator.store.base import RoundStep
from ldp_aggregator.store.records import (
    Accumulator,
    CampaignRecord,
    TokenRecord,
    campaign_round,
    check_id,
    now_unix_ms,
)
from ldp_aggregator.store_pg import admin
from ldp_aggregator.store_pg.conninfo import check_url, redact
from ldp_aggregator.store_pg.pool import ConnectionPool
from ldp_aggregator.store_pg.schema import ensure_schema
from ldp_aggregator.store_pg.writer import (
    CAMPAIGN_COLUMNS,
    ShardWriter,
    record_from_row,
)
from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    InvalidParameterError,
    RoundNotOpenError,
    StoreUnavailableError,
    shown,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

_RAW_CHUNK_ROWS: Final = 256


class PostgresStore(ShardWriter):
    """The aggregator's store on PostgreSQL (psycopg 3); several replicas may share one database.

    Args:
        url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?...]`` (the tables go to the current
            schema; see :mod:`ldp_aggregator.store_pg.schema`).
        retain_raw: Keep each batch's raw payload (in the batch's transaction).
        decode_accumulator: ``(campaign, blob) -> Accumulator``, inverse of ``Accumulator.to_bytes``.
        zero_accumulator: ``campaign -> Accumulator`` with nothing summed.
        group_commit_max: Most submissions committed in one transaction.
        commit_window_s: While callers are concurrent, commits start at most this often, so groups grow
            (:class:`~ldp_aggregator.store.answers.CommitPacer`); 0 commits as soon as anything waits.
        max_pending: Most submissions waiting for the writer; beyond it ``submit`` fails fast with
            StoreUnavailableError (back-pressure while the database is slow or away).
        campaign_cache_s: How long a campaign record read from the database is reused by
            :meth:`get_campaign` (a close made on another replica shows there within this time; the
            commit itself always checks the row).
        read_only: Reads only (a command line reading estimates): no writer, no schema creation.
        clock: Milliseconds since the Unix epoch, for ``received_unix_ms``.

    Raises:
        InvalidParameterError: A malformed URL, or the server refused the login (wrong user or password,
            no such database).
        PostgresUnreachableError: The server cannot be reached (a StoreUnavailableError).
        StoreSchemaError: The tables were made by a newer or unknown version, or by another program.
    """

    def __init__(
        self,
        url: str,
        *,
        retain_raw: bool = True,
        decode_accumulator: Callable[[CampaignRecord, bytes], Accumulator],
        zero_accumulator: Callable[[CampaignRecord], Accumulator],
        group_commit_max: int = 256,
        max_pending: int = 100_000,
        campaign_cache_s: float = 1.0,
        read_only: bool = False,
        clock: Callable[[], int] = now_unix_ms,
        commit_window_s: float = DEFAULT_COMMIT_WINDOW_S,
    ) -> None:
        check_url(url)
        for name, flag in (("retain_raw", retain_raw), ("read_only", read_only)):
            if not isinstance(flag, bool):
                raise InvalidParameterError(name, flag, "a bool")
        for name, value in (("group_commit_max", group_commit_max), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, value, "an integer >= 1")
        if not 0 <= commit_window_s <= 1:
            raise InvalidParameterError("commit_window_s", commit_window_s, "a number of seconds in [0, 1]")
        if not campaign_cache_s >= 0:
            raise InvalidParameterError("campaign_cache_s", campaign_cache_s, "a number >= 0")
        self._location = redact(url)
        super().__init__(
            url,
            f"PostgreSQL {self._location}",
            retain_raw=retain_raw,
            decode_accumulator=decode_accumulator,
            zero_accumulator=zero_accumulator,
            group_commit_max=group_commit_max,
            max_pending=max_pending,
            read_only=read_only,
            clock=clock,
            commit_window_s=float(commit_window_s),
        )
        self._campaign_cache_s = float(campaign_cache_s)
        self._pool = ConnectionPool(url, self._where)
        # What snapshots decoded and merged, so an unchanged shard is never decoded twice.
        self._read_shards: dict[tuple[str, int], tuple[int, Accumulator]] = {}
        self._merged: dict[str, tuple[tuple[tuple[int, int], ...], Accumulator]] = {}

        try:
            with self._pool.connection("open the store") as conn:
                ensure_schema(conn, self._where, create=not read_only)
        except BaseException:
            self._pool.close()
            raise
        if not read_only:
            self._start_writer(f"ldp-store-writer:{self._location}")

    @classmethod
    def open(
        cls,
        url: str,
        *,
        retain_raw: bool = True,
        decode_accumulator: Callable[[CampaignRecord, bytes], Accumulator],
        zero_accumulator: Callable[[CampaignRecord], Accumulator],
        read_only: bool = False,
        **options: Any,
    ) -> PostgresStore:
        """Open the store (see the class); the same call shape as :meth:`ldp_aggregator.store.Store.open`."""
        return cls(
            url,
            retain_raw=retain_raw,
            decode_accumulator=decode_accumulator,
            zero_accumulator=zero_accumulator,
            read_only=read_only,
            **options,
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def retain_raw(self) -> bool:
        """Whether raw payloads are kept."""
        return self._retain_raw

    @property
    def location(self) -> str:
        """The URL without its password."""
        return self._location

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Refuse new work, commit what was already submitted, close the connections (idempotent)."""
        self._stop_writer()
        self._pool.close()

    # ------------------------------------------------------------------ campaigns

    def create_campaign(self, record: CampaignRecord) -> None:
        """Store a new campaign (no shard row until its first batch), durably.

        Raises:
            CampaignExistsError: A campaign with this id exists, made by any replica (nothing changed).
            StoreUnavailableError: The database cannot be written now, or the store is read-only.
        """
        if not isinstance(record, CampaignRecord):
            raise InvalidParameterError("record", record, "a CampaignRecord")
        self._check_writable()
        zero = self._zero(record)  # a parameter error surfaces before any write
        if zero.n != 0:
            raise InvalidParameterError("zero_accumulator", zero.n, "an accumulator with n = 0")
        with self._pool.connection(f"create campaign {shown(record.campaign_id)}") as conn:
            cur = conn.execute(
                f"INSERT INTO ldp_campaigns ({CAMPAIGN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (
                    record.campaign_id,
                    record.mechanism,
                    record.params_blob,
                    record.description,
                    record.created_unix_ms,
                    record.closed,
                ),
            )
            created = cur.rowcount == 1
        if not created:
            raise CampaignExistsError(record.campaign_id)
        self._remember(record)

    def get_campaign(self, campaign_id: str) -> CampaignRecord:
        """The campaign's record (cached up to ``campaign_cache_s``). Raises CampaignNotFoundError.

        While the database cannot be read, a record read before is returned as it was (the commit checks
        the row anyway); without one, StoreUnavailableError.
        """
        now = time.monotonic()
        with self._state_lock:
            entry = self._campaigns.get(campaign_id)
        if entry is not None and now - entry[1] < self._campaign_cache_s:
            return entry[0]
        try:
            row = self._pool.run(
                "read a campaign",
                lambda conn: conn.execute(
                    f"SELECT {CAMPAIGN_COLUMNS} FROM ldp_campaigns WHERE id = %s", (campaign_id,)
                ).fetchone(),
            )
        except StoreUnavailableError:
            if entry is None:
                raise
            with self._state_lock:  # try the database again only after another campaign_cache_s
                self._campaigns[campaign_id] = (entry[0], now)
            return entry[0]
        if row is None:
            with self._state_lock:
                self._campaigns.pop(campaign_id, None)
            raise CampaignNotFoundError(campaign_id)
        return self._remember(record_from_row(row))

    def list_campaigns(self) -> list[CampaignRecord]:
        """Every campaign, made by any replica, oldest first (ties by id)."""
        rows = self._pool.run(
            "list campaigns",
            lambda conn: conn.execute(
                f"SELECT {CAMPAIGN_COLUMNS} FROM ldp_campaigns ORDER BY created_unix_ms, id"
            ).fetchall(),
        )
        return [self._remember(record_from_row(row)) for row in rows]

    def close_campaign(self, campaign_id: str) -> None:
        """Close a campaign for every replica, durably (idempotent).

        The UPDATE waits for the transactions holding the row ``FOR SHARE`` (commits of batches of this
        campaign) and every commit after it reads ``closed``: no batch is accepted after the close returns.

        Raises:
            CampaignNotFoundError: No such campaign.
            StoreUnavailableError: The database cannot be written now, or the store is read-only.
        """
        check_id("campaign_id", campaign_id)
        self._check_writable()

        def close(conn: psycopg.Connection) -> tuple[Any, ...] | None:
            return conn.execute(
                f"UPDATE ldp_campaigns SET closed = TRUE WHERE id = %s RETURNING {CAMPAIGN_COLUMNS}",
                (campaign_id,),
            ).fetchone()

        row = self._pool.run(f"close campaign {shown(campaign_id)}", close)  # idempotent: safe to retry
        if row is None:
            raise CampaignNotFoundError(campaign_id)
        self._remember(record_from_row(row))

    def advance_round(self, campaign_id: str, round_: int, step: RoundStep) -> CampaignRecord:
        """Close round ``round_`` of an adaptive discovery campaign and store what ``step`` publishes, for
        every replica (:meth:`ldp_aggregator.store.base.CampaignStore.advance_round`).

        One transaction holding the campaign's row ``FOR UPDATE``: commits of its batches (which hold the
        row ``FOR SHARE``) wait for it, and it waits for them, so ``step`` reads every batch of the round
        and no batch of the round commits after it. A second NextRound waits, then finds the new round.

        Raises:
            CampaignNotFoundError, CampaignClosedError, RoundNotOpenError: nothing changed.
            StoreUnavailableError: The database cannot be written now, or the store is read-only.
        """
        check_id("campaign_id", campaign_id)
        self._check_writable()

        def advance(conn: psycopg.Connection) -> tuple[Any, ...]:
            with conn.transaction():
                row = conn.execute(
                    f"SELECT {CAMPAIGN_COLUMNS} FROM ldp_campaigns WHERE id = %s FOR UPDATE", (campaign_id,)
                ).fetchone()
                if row is None:
                    raise CampaignNotFoundError(campaign_id)
                record = record_from_row(row)
                if record.closed:
                    raise CampaignClosedError(campaign_id)
                current = campaign_round(record)
                if current != round_:
                    raise RoundNotOpenError(campaign_id, round_, current)
                payloads = (
                    bytes(r[0])
                    for r in conn.execute(
                        "SELECT payload FROM ldp_raw_reports WHERE campaign_id = %s ORDER BY seq",
                        (campaign_id,),
                    )
                )
                blob, closed = step(record, payloads)
                new = conn.execute(
                    "UPDATE ldp_campaigns SET params = %s, closed = %s WHERE id = %s"
                    f" RETURNING {CAMPAIGN_COLUMNS}",
                    (blob, closed, campaign_id),
                ).fetchone()
                assert new is not None  # the row is locked FOR UPDATE
                return tuple(new)

        return self._remember(
            record_from_row(self._pool.run(f"advance the round of {shown(campaign_id)}", advance))
        )

    def _remember(self, record: CampaignRecord) -> CampaignRecord:
        with self._state_lock:
            self._campaigns[record.campaign_id] = (record, time.monotonic())
        return record

    def _check_writable(self) -> None:
        if self._read_only:
            raise StoreUnavailableError(f"store {self._where} was opened read-only and accepts no writes")

    # ------------------------------------------------------------------ reads

    def snapshot(self, campaign_id: str) -> tuple[CampaignRecord, Accumulator, int]:
        """Record, accumulator (the merge of every shard, every replica's commits) and batch count.

        One ``REPEATABLE READ`` transaction, so the three agree. The accumulator may be shared with
        other callers: treat it as read-only. Raises CampaignNotFoundError, StoreUnavailableError.
        """

        def read(
            conn: psycopg.Connection,
        ) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]], dict[int, bytes]]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                row = conn.execute(
                    f"SELECT {CAMPAIGN_COLUMNS} FROM ldp_campaigns WHERE id = %s", (campaign_id,)
                ).fetchone()
                if row is None:
                    return None, [], {}
                shards = conn.execute(
                    "SELECT shard, version, n_reports, n_batches FROM ldp_accumulator_shards"
                    " WHERE campaign_id = %s ORDER BY shard",
                    (campaign_id,),
                ).fetchall()
                with self._state_lock:
                    stale = [
                        int(s)
                        for s, v, _, _ in shards
                        if self._read_shards.get((campaign_id, int(s)), (None,))[0] != v
                    ]
                blobs: dict[int, bytes] = {}
                if stale:
                    for shard, data in conn.execute(
                        "SELECT shard, data FROM ldp_accumulator_shards"
                        " WHERE campaign_id = %s AND shard = ANY(%s)",
                        (campaign_id, stale),
                    ):
                        blobs[int(shard)] = bytes(data)
                return row, shards, blobs

        row, shards, blobs = self._pool.run(f"read campaign {shown(campaign_id)}", read)
        if row is None:
            raise CampaignNotFoundError(campaign_id)
        record = self._remember(record_from_row(row))
        key = tuple((int(s), int(v)) for s, v, _, _ in shards)
        n_batches = sum(int(nb) for _, _, _, nb in shards)
        with self._state_lock:
            merged = self._merged.get(campaign_id)
        if merged is not None and merged[0] == key:
            return record, merged[1], n_batches
        parts: list[Accumulator] = []
        for shard, version, n_reports, _ in shards:
            s, v = int(shard), int(version)
            blob = blobs.get(s)
            if blob is None:
                with self._state_lock:
                    cached = self._read_shards.get((campaign_id, s))
                if cached is None or cached[0] != v:  # changed between the two statements: cannot be
                    raise StoreUnavailableError(f"shard {s} of campaign {shown(campaign_id)} changed; retry")
                acc = cached[1]
            else:
                acc = self._decode_shard(record, s, blob, int(n_reports))
                with self._state_lock:
                    self._read_shards[(campaign_id, s)] = (v, acc)
            parts.append(acc)
        total = self._merge(record, parts)
        with self._state_lock:
            self._merged[campaign_id] = (key, total)
        return record, total, n_batches

    def _merge(self, record: CampaignRecord, parts: list[Accumulator]) -> Accumulator:
        """The sum of the shards' accumulators (a new object unless there is one shard or none)."""
        if not parts:
            return self._zero(record)
        if len(parts) == 1:
            return parts[0]
        total = parts[0] + parts[1]
        for part in parts[2:]:
            total += part
        return total

    def accumulator(self, campaign_id: str) -> Accumulator:
        """The campaign's committed accumulator, all replicas' batches (read-only)."""
        return self.snapshot(campaign_id)[1]

    def batch_count(self, campaign_id: str) -> int:
        """Distinct committed batches of the campaign (every replica's). Raises CampaignNotFoundError."""
        self.get_campaign(campaign_id)
        row = self._pool.run(
            "count batches",
            lambda conn: conn.execute(
                "SELECT coalesce(sum(n_batches), 0) FROM ldp_accumulator_shards WHERE campaign_id = %s",
                (campaign_id,),
            ).fetchone(),
        )
        return int(row[0]) if row is not None else 0

    def has_batch(self, campaign_id: str, batch_id: str) -> bool:
        """Whether this batch id is committed for the campaign. Raises CampaignNotFoundError."""
        self.get_campaign(campaign_id)
        row = self._pool.run(
            "look up a batch",
            lambda conn: conn.execute(
                "SELECT 1 FROM ldp_batches WHERE campaign_id = %s AND batch_id = %s", (campaign_id, batch_id)
            ).fetchone(),
        )
        return row is not None

    def raw_payloads(self, campaign_id: str) -> Iterator[bytes]:
        """Committed raw payloads of the campaign (every replica's) in commit order, lazily.

        Raises CampaignNotFoundError at call time.
        """
        return (payload for _, payload in self.iter_raw_batches(campaign_id))

    def iter_raw_batches(self, campaign_id: str, after_position: int = 0) -> Iterator[tuple[int, bytes]]:
        """The campaign's retained raw batches after ``after_position``, in commit order: (position, payload).

        The position is the row's ``seq``. The transactions that append raw rows take their ``seq``
        values under one advisory lock held to COMMIT (see
        :data:`~ldp_aggregator.store_pg.writer.RAW_ORDER_LOCK_SQL`), so ``seq`` order is commit order
        across replicas: once a reader saw position P, no transaction can still commit a row below it, and
        resuming with ``after_position=P`` misses nothing. A sequence never hands a value out
        twice, so positions are not reused after a purge either. Read lazily, in short transactions.

        Raises:
            CampaignNotFoundError: No such campaign (raised at call time).
            InvalidParameterError: ``after_position`` is not an integer >= 0.
        """
        if isinstance(after_position, bool) or not isinstance(after_position, int) or after_position < 0:
            raise InvalidParameterError("after_position", after_position, "an integer >= 0")
        self.get_campaign(campaign_id)
        return self._iter_raw(campaign_id, after_position)

    def _iter_raw(self, campaign_id: str, after_position: int) -> Iterator[tuple[int, bytes]]:
        last = after_position

        def chunk(conn: psycopg.Connection, after: int) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT seq, payload FROM ldp_raw_reports WHERE campaign_id = %s AND seq > %s"
                " ORDER BY seq LIMIT %s",
                (campaign_id, after, _RAW_CHUNK_ROWS),
            ).fetchall()

        while True:
            rows = self._pool.run("read raw reports", functools.partial(chunk, after=last))
            for seq, payload in rows:
                last = int(seq)
                yield last, bytes(payload)
            if len(rows) < _RAW_CHUNK_ROWS:
                return

    def purge_raw(self, older_than_unix_ms: int) -> int:
        """Delete raw payloads received before ``older_than_unix_ms`` (every replica's); returns rows deleted.

        Batch ids and accumulators are kept (duplicates are still detected, estimates unchanged).
        """
        if isinstance(older_than_unix_ms, bool) or not isinstance(older_than_unix_ms, int):
            raise InvalidParameterError("older_than_unix_ms", older_than_unix_ms, "an integer")
        self._check_writable()
        return self._pool.run("purge raw reports", lambda conn: admin.purge_raw(conn, older_than_unix_ms))

    def list_tokens(self) -> list[TokenRecord]:
        """Every access token row, read from the database now (tokens made by any replica or the CLI)."""
        return self._pool.run("read access tokens", admin.select_tokens)

    def auth_required(self) -> bool:
        """Whether a token was ever added to this database: then every call needs one, for good."""
        return self._pool.run("read auth_required", admin.read_auth_required)
