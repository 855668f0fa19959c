"""The PostgreSQL store against a real PostgreSQL (a throwaway cluster the session starts; see conftest).

Two :class:`PostgresStore` objects on the same tables are two replicas: what one commits, the other
sees; a batch id is counted once whichever replica gets it, however often and however concurrently; a
close on one is enforced on the other; accumulators live in shard rows that a replica never waits for.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import psycopg
import pytest

from ldp_aggregator.accumulators import CountAccumulator, batch_delta
from ldp_aggregator.auth import new_token_record
from ldp_aggregator.service import decode_accumulator, open_store, zero_accumulator
from ldp_aggregator.store import CampaignRecord, CampaignStore, StoreSchemaError
from ldp_aggregator.store_pg import (
    PostgresStore,
    PostgresUnreachableError,
    add_token,
    list_tokens,
    purge_raw_url,
    revoke_token,
)
from ldp_client import wire
from ldp_client.errors import (
    CampaignClosedError,
    CampaignExistsError,
    CampaignNotFoundError,
    InvalidParameterError,
    StoreUnavailableError,
)
from ldp_client.params import GRRParams
from tests.ldp_aggregator.pg_cluster import PgCluster, new_schema_url

PARAMS = GRRParams.from_epsilon(8, 1.0)
D = PARAMS.domain.size
BATCH = 50


def _record(cid: str = "c") -> CampaignRecord:
    msg = wire.campaign_to_proto(campaign_id=cid, params=PARAMS)
    return CampaignRecord(
        campaign_id=cid, mechanism=PARAMS.name, params_blob=msg.SerializeToString(), created_unix_ms=1
    )


def _values(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, D, BATCH)


def _submit(store: CampaignStore, i: int, cid: str = "c") -> Future:  # type: ignore[type-arg]
    values = _values(i)
    return store.submit(cid, f"b{i}", BATCH, batch_delta(PARAMS, values), f"raw{i}".encode())


def _counts(batches: range | list[int]) -> np.ndarray:
    total = np.zeros(D, dtype=np.int64)
    for i in batches:
        total += np.bincount(_values(i), minlength=D)
    return total


@pytest.fixture
def replicas(pg_url: str) -> Iterator[tuple[CampaignStore, CampaignStore]]:
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_two_replicas_count_every_batch_once_and_see_each_others_commits(
    replicas: tuple[CampaignStore, CampaignStore], tmp_path: Path
) -> None:
    a, b = replicas
    a.create_campaign(_record())
    assert b.get_campaign("c") == a.get_campaign("c")  # made on one, visible on the other
    with pytest.raises(CampaignExistsError):
        b.create_campaign(_record())
    first = [_submit(a, i) for i in range(10)]
    assert all(not f.result(timeout=30).duplicate for f in first)
    # The same ids on the other replica (a client retrying there) are duplicates; new ones count.
    again = [_submit(b, i) for i in range(20)]
    outcomes = [f.result(timeout=30) for f in again]
    assert [o.duplicate for o in outcomes] == [True] * 10 + [False] * 10
    for store in (a, b):
        _, acc, n_batches = store.snapshot("c")
        assert isinstance(acc, CountAccumulator)
        assert n_batches == 20 and acc.n == 20 * BATCH
        np.testing.assert_array_equal(acc.counts, _counts(range(20)))
        assert store.has_batch("c", "b19") and not store.has_batch("c", "b20")
    # Exactly the accumulator the SQLite store holds after the same batches.
    sqlite = open_store(str(tmp_path / "ldp.sqlite3"))
    try:
        sqlite.create_campaign(_record())
        for i in range(20):
            _submit(sqlite, i).result(timeout=30)
        assert sqlite.accumulator("c").to_bytes() == a.accumulator("c").to_bytes()
    finally:
        sqlite.close()


def test_concurrent_retries_on_both_replicas_count_each_batch_exactly_once(
    replicas: tuple[CampaignStore, CampaignStore],
) -> None:
    a, b = replicas
    a.create_campaign(_record())
    n = 120
    results: dict[str, list[object]] = {"a": [], "b": []}

    def send(name: str, store: CampaignStore, order: list[int]) -> None:
        futures = [_submit(store, i) for i in order]
        results[name] = [f.result(timeout=60) for f in futures]

    # Both replicas get every batch at once, in opposite orders (the worst case for lock order).
    threads = [
        threading.Thread(target=send, args=("a", a, list(range(n)))),
        threading.Thread(target=send, args=("b", b, list(reversed(range(n))))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    accepted = sum(1 for o in results["a"] + results["b"] if not o.duplicate)  # type: ignore[attr-defined]
    assert accepted == n
    _, acc, n_batches = b.snapshot("c")
    assert n_batches == n and acc.n == n * BATCH
    np.testing.assert_array_equal(acc.counts, _counts(range(n)))  # type: ignore[attr-defined]


def test_a_replica_never_waits_for_another_replicas_accumulator_row(
    replicas: tuple[CampaignStore, CampaignStore], pg_url: str
) -> None:
    a, b = replicas
    a.create_campaign(_record())
    _submit(a, 0).result(timeout=30)
    # Another replica's commit in flight holds the campaign's only shard row (and the campaign row).
    with psycopg.connect(pg_url) as other:
        other.execute("SELECT 1 FROM ldp_accumulator_shards WHERE campaign_id = 'c' FOR UPDATE")
        other.execute("SELECT 1 FROM ldp_campaigns WHERE id = 'c' FOR SHARE")
        # This commit does not wait for that row: it takes (adds) another shard and commits meanwhile.
        assert not _submit(b, 1).result(timeout=30).duplicate
        other.rollback()
    with psycopg.connect(pg_url) as conn:
        shards = conn.execute("SELECT count(*) FROM ldp_accumulator_shards").fetchone()
    assert shards is not None and shards[0] == 2
    _, acc, n_batches = a.snapshot("c")
    assert n_batches == 2
    np.testing.assert_array_equal(acc.counts, _counts([0, 1]))  # type: ignore[attr-defined]


def test_a_close_on_one_replica_refuses_new_batches_on_the_other(
    replicas: tuple[CampaignStore, CampaignStore],
) -> None:
    a, b = replicas
    a.create_campaign(_record())
    _submit(b, 0).result(timeout=30)
    assert not b.get_campaign("c").closed  # cached by b as open
    a.close_campaign("c")
    with pytest.raises(CampaignClosedError):
        _submit(b, 1).result(timeout=30)  # the commit reads the row: refused at once on b too
    assert _submit(b, 0).result(timeout=30).duplicate  # a retry of a stored batch still says so
    assert b.list_campaigns()[0].closed and b.get_campaign("c").closed
    assert b.batch_count("c") == 1
    with pytest.raises(CampaignNotFoundError):
        a.close_campaign("nope")
    with pytest.raises(CampaignNotFoundError):
        _submit(a, 2, cid="nope").result(timeout=30)


def test_raw_reports_are_kept_and_purged_for_every_replica(
    replicas: tuple[CampaignStore, CampaignStore], pg_url: str
) -> None:
    a, b = replicas
    a.create_campaign(_record())
    for i in range(3):
        _submit(a if i % 2 else b, i).result(timeout=30)
    assert sorted(a.raw_payloads("c")) == [b"raw0", b"raw1", b"raw2"]
    assert purge_raw_url(pg_url, 0) == 0  # nothing is older than the epoch
    assert b.purge_raw(2**62) == 3
    assert list(a.raw_payloads("c")) == []
    assert a.has_batch("c", "b1") and a.accumulator("c").n == 3 * BATCH  # ids and sums are kept


def test_tokens_and_auth_required_are_shared_by_every_replica(
    replicas: tuple[CampaignStore, CampaignStore], pg_url: str
) -> None:
    a, b = replicas
    assert not a.auth_required() and a.list_tokens() == []
    _, record = new_token_record("admin", name="ops")
    add_token(pg_url, record)
    assert [t.token_id for t in b.list_tokens()] == [record.token_id]
    with pytest.raises(InvalidParameterError):
        add_token(pg_url, record)  # same id and digest
    assert revoke_token(pg_url, record.token_id) and not revoke_token(pg_url, record.token_id)
    assert list_tokens(pg_url)[0].revoked
    assert a.auth_required() and b.auth_required()  # stays on with every token revoked


def test_tables_are_created_once_by_replicas_starting_together(pg_url: str) -> None:
    stores: list[CampaignStore] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def start() -> None:
        try:
            store = open_store(pg_url)
        except BaseException as exc:
            errors.append(exc)
        else:
            with lock:
                stores.append(store)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for store in stores:
        store.close()
    assert errors == [] and len(stores) == 4


def test_newer_or_foreign_tables_are_refused(pg_url: str, pg_server: str) -> None:
    open_store(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE ldp_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreSchemaError, match="schema_version='99'"):
        open_store(pg_url)
    foreign = new_schema_url(pg_server)
    with psycopg.connect(foreign, autocommit=True) as conn:
        conn.execute("CREATE TABLE ldp_campaigns (id TEXT)")
    with pytest.raises(StoreSchemaError, match="no ldp_meta table"):
        open_store(foreign)


def test_bad_urls_and_logins_fail_with_one_line_that_hides_the_password(pg_server: str) -> None:
    conninfo = psycopg.conninfo.conninfo_to_dict(pg_server)
    host, port = conninfo["host"], conninfo["port"]
    for url, kind in (
        ("mysql://u@h/db", InvalidParameterError),
        ("postgresql://u:pw@h:notaport/db", InvalidParameterError),
        (f"postgresql://postgres:wrong-secret@{host}:{port}/postgres", InvalidParameterError),
        (f"postgresql://nobody:wrong-secret@{host}:{port}/postgres", InvalidParameterError),
    ):
        with pytest.raises(kind) as info:
            PostgresStore.open(
                url, decode_accumulator=decode_accumulator, zero_accumulator=zero_accumulator
            ).close()
        message = str(info.value)
        assert "\n" not in message and "wrong-secret" not in message and "pw@" not in message, message
    with socket_closed_port() as closed:
        with pytest.raises(PostgresUnreachableError, match="cannot reach PostgreSQL") as info:
            open_store(f"postgresql://postgres:wrong-secret@127.0.0.1:{closed}/postgres")
        assert "wrong-secret" not in str(info.value)


class socket_closed_port:
    """A loopback port nothing listens on (bound, not listening, while in use)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_a_replica_answers_unavailable_while_postgres_is_down_and_recovers_by_itself(
    pg_cluster: PgCluster,
) -> None:
    url = new_schema_url(pg_cluster.url)
    store = open_store(url)
    try:
        store.create_campaign(_record())
        _submit(store, 0).result(timeout=30)
        pg_cluster.stop("immediate")  # a crash: what was acknowledged must come back from the WAL
        with pytest.raises(StoreUnavailableError, match="retry later"):
            _submit(store, 1).result(timeout=30)
        assert store.stats().last_commit_failed
        assert store.get_campaign("c").campaign_id == "c"  # the last known record, while the database is away
        pg_cluster.start()
        # The same store object, no reopen: the next group reconnects.
        assert not _submit(store, 1).result(timeout=30).duplicate
        assert _submit(store, 0).result(timeout=30).duplicate
        assert not store.stats().last_commit_failed
        _, acc, n_batches = store.snapshot("c")
        assert n_batches == 2
        np.testing.assert_array_equal(acc.counts, _counts([0, 1]))  # type: ignore[attr-defined]
    finally:
        store.close()


def test_without_postgresql_the_tests_skip_with_the_reason_except_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy of the PostgreSQL fixtures, on a machine that has no binaries and no external server."""
    from tests.ldp_aggregator import conftest, pg_cluster

    monkeypatch.setattr(pg_cluster, "bindir", lambda: None)
    monkeypatch.delenv(pg_cluster.EXTERNAL_DSN_VAR, raising=False)
    reason = pg_cluster.unavailable_reason()
    assert reason is not None and "install Debian's `postgresql` package" in reason
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL binaries"):
        conftest._pg_unavailable(reason)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(
        pytest.fail.Exception, match="PostgreSQL is required under CI: no PostgreSQL binaries"
    ):
        conftest._pg_unavailable(reason)
