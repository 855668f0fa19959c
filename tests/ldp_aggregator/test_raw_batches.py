"""Retained raw batches read back in ingest order with stable positions (``iter_raw_batches``), both stores.

The report archive exports raw batches incrementally: it remembers the last position it wrote and asks
for what came after. That needs positions that follow commit order (on PostgreSQL across replicas) and
are never handed out again, also after a purge deleted the newest rows.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from ldp_aggregator.accumulators import batch_delta
from ldp_aggregator.service import open_store
from ldp_aggregator.store import CampaignRecord, CampaignStore, purge_raw_file
from ldp_aggregator.store_pg.writer import RAW_ORDER_LOCK_SQL
from ldp_client import wire
from ldp_client.errors import CampaignNotFoundError, InvalidParameterError
from ldp_client.params import GRRParams

PARAMS = GRRParams.from_epsilon(8, 1.0)  # the campaign of the any_store fixture


def _add(store: CampaignStore, name: str) -> None:
    store.submit("c", name, 2, batch_delta(PARAMS, np.array([1, 2])), name.encode()).result(timeout=60)


def test_raw_batches_come_in_ingest_order_and_resume_after_a_position(any_store: CampaignStore) -> None:
    for i in range(5):
        _add(any_store, f"b{i}")
    batches = list(any_store.iter_raw_batches("c"))
    assert [payload for _, payload in batches] == [f"b{i}".encode() for i in range(5)]
    positions = [p for p, _ in batches]
    assert positions == sorted(positions) and len(set(positions)) == 5 and positions[0] >= 1
    assert list(any_store.iter_raw_batches("c", after_position=positions[2])) == batches[3:]
    assert list(any_store.iter_raw_batches("c", after_position=positions[-1])) == []
    assert list(any_store.raw_payloads("c")) == [payload for _, payload in batches]


def test_positions_are_not_reused_after_a_purge_of_the_newest_rows(any_store: CampaignStore) -> None:
    for i in range(3):
        _add(any_store, f"old{i}")
    last_seen = max(p for p, _ in any_store.iter_raw_batches("c"))
    assert any_store.purge_raw(older_than_unix_ms=2**62) == 3  # everything, the newest row too
    _add(any_store, "new")
    # A reader that stopped at last_seen must still get the new batch (SQLite would reuse rowid 1).
    [(position, payload)] = any_store.iter_raw_batches("c", after_position=last_seen)
    assert payload == b"new" and position > last_seen


def test_positions_are_not_reused_after_a_purge_and_a_restart(tmp_path: Path) -> None:
    """SQLite hands out max(rowid) + 1: after purging the newest rows and reopening, the store still
    numbers new raw batches past every position it ever used (kept in ``meta``)."""
    path = tmp_path / "ldp.sqlite3"
    with open_store(str(path)) as store:
        msg = wire.campaign_to_proto(campaign_id="c", params=PARAMS)
        store.create_campaign(
            CampaignRecord(
                campaign_id="c", mechanism=PARAMS.name, params_blob=msg.SerializeToString(), created_unix_ms=1
            )
        )
        for i in range(3):
            _add(store, f"old{i}")
        last_seen = max(p for p, _ in store.iter_raw_batches("c"))
    assert purge_raw_file(path, older_than_unix_ms=2**62) == 3  # the CLI's purge, from another process
    with open_store(str(path)) as store:
        _add(store, "new")
        [(position, payload)] = store.iter_raw_batches("c", after_position=last_seen)
    assert payload == b"new" and position > last_seen


def test_iter_raw_batches_refuses_bad_arguments_at_call_time(any_store: CampaignStore) -> None:
    with pytest.raises(CampaignNotFoundError):
        any_store.iter_raw_batches("nope")
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(InvalidParameterError, match="after_position"):
            any_store.iter_raw_batches("c", after_position=bad)  # type: ignore[arg-type]


def test_positions_follow_commit_order_across_replicas(pg_url: str) -> None:
    """A replica whose raw rows got lower positions commits first: a reader never skips past a row that
    is still to commit (another replica's transaction is held open here, past its raw append)."""
    any_replica = open_store(pg_url)
    try:
        msg = wire.campaign_to_proto(campaign_id="c", params=PARAMS)
        any_replica.create_campaign(
            CampaignRecord(
                campaign_id="c", mechanism=PARAMS.name, params_blob=msg.SerializeToString(), created_unix_ms=1
            )
        )
        with psycopg.connect(pg_url) as other, psycopg.connect(pg_url, autocommit=True) as watch:
            other.execute(RAW_ORDER_LOCK_SQL)
            row = other.execute(
                "INSERT INTO ldp_raw_reports (campaign_id, batch_id, received_unix_ms, payload)"
                " VALUES ('c', 'first', 1, 'first') RETURNING seq"
            ).fetchone()
            assert row is not None
            first = int(row[0])
            later = threading.Thread(target=_add, args=(any_replica, "later"))
            later.start()
            deadline = time.monotonic() + 30
            while True:  # the replica's commit waits for the open transaction's raw order lock
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                if waiting is not None and waiting[0] == 1:
                    break
                assert time.monotonic() < deadline, "the replica did not wait for the earlier raw append"
                time.sleep(0.01)
            assert list(any_replica.iter_raw_batches("c")) == []
            other.commit()
            later.join(timeout=60)
        batches = list(any_replica.iter_raw_batches("c"))
        assert [payload for _, payload in batches] == [b"first", b"later"]
        assert batches[0][0] == first < batches[1][0]
    finally:
        any_replica.close()
