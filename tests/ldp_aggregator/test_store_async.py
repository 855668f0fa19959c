"""Single reports from asyncio callers (gRPC handlers) share group commits, on SQLite and on PostgreSQL.

What makes a replica's single-report ingest run at the speed of group commit (issue 15, item 4): the
submissions one event loop makes during one iteration reach the writer together, commit in one
transaction, and are answered with one wake-up of the loop; each answer comes only after the COMMIT.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldp_aggregator.accumulators import batch_delta
from ldp_aggregator.service import decode_accumulator, zero_accumulator
from ldp_aggregator.store import CampaignRecord, CampaignStore, Store, SubmitOutcome
from ldp_aggregator.store.answers import CommitPacer
from ldp_aggregator.store_pg import PostgresStore
from ldp_client import wire
from ldp_client.errors import StoreUnavailableError
from ldp_client.params import GRRParams

PARAMS = GRRParams.from_epsilon(8, 1.0)  # the campaign of the any_store fixture

N_CALLERS = 64


def _report(store: CampaignStore, i: int) -> Any:
    return store.submit_async("c", f"r{i}", 1, batch_delta(PARAMS, np.array([i % 8])), f"raw{i}".encode())


def test_concurrent_single_reports_share_one_commit_and_are_answered_after_it(
    any_store: CampaignStore,
) -> None:
    async def main() -> tuple[list[SubmitOutcome], int, list[bool]]:
        loop = asyncio.get_running_loop()
        wakeups = 0
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counting(*args: Any, **kwargs: Any) -> Any:  # the writer thread waking this loop
            nonlocal wakeups
            wakeups += 1
            return call_soon_threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        stored_when_answered: list[bool] = []

        async def device(i: int) -> SubmitOutcome:
            outcome: SubmitOutcome = await _report(any_store, i)
            # Read on another connection than the writer's: visible only if the COMMIT has happened.
            stored_when_answered.append(any_store.has_batch("c", f"r{i}"))
            return outcome

        outcomes = await asyncio.gather(*(device(i) for i in range(N_CALLERS)))
        return outcomes, wakeups, stored_when_answered

    commits_before = any_store.stats().commits
    outcomes, wakeups, stored_when_answered = asyncio.run(main())
    assert all(o.accepted == 1 and not o.duplicate for o in outcomes)
    assert stored_when_answered == [True] * N_CALLERS
    # One transaction and one wake-up of the loop for the 64 reports, not one (or a few) per report.
    assert any_store.stats().commits - commits_before == 1
    assert wakeups == 1
    assert any_store.accumulator("c").n == N_CALLERS
    assert sorted(any_store.raw_payloads("c")) == sorted(f"raw{i}".encode() for i in range(N_CALLERS))


def test_a_caller_cancelled_before_its_report_was_taken_stores_nothing(any_store: CampaignStore) -> None:
    async def main() -> None:
        kept = asyncio.ensure_future(_report(any_store, 1))
        dropped = asyncio.ensure_future(_report(any_store, 2))
        await asyncio.sleep(0)  # both submitted, not yet handed to the writer
        dropped.cancel()
        assert (await kept).accepted == 1
        with pytest.raises(asyncio.CancelledError):
            await dropped

    asyncio.run(main())
    assert any_store.has_batch("c", "r1")
    assert not any_store.has_batch("c", "r2")
    assert any_store.accumulator("c").n == 1


def test_a_closed_store_answers_an_async_caller_at_once(any_store: CampaignStore) -> None:
    any_store.close()
    with pytest.raises(StoreUnavailableError, match="is closed"):
        asyncio.run(asyncio.wait_for(_report(any_store, 1), timeout=30))


def test_the_pacer_waits_only_after_a_group_of_concurrent_callers_and_never_past_its_window() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = CommitPacer(0.005, clock=lambda: now[0], sleep=sleep)
    pacer.wait_before_group()  # nothing committed yet
    pacer.group_started(1)
    now[0] += 0.001
    pacer.wait_before_group()  # a lone caller: committed at once
    pacer.group_started(3)
    now[0] += 0.001
    pacer.wait_before_group()  # concurrent callers: the rest of the window
    assert slept == [pytest.approx(0.004)]
    pacer.group_started(3)
    now[0] += 0.006
    pacer.wait_before_group()  # the window is over already
    assert len(slept) == 1
    off = CommitPacer(0.0, clock=lambda: now[0], sleep=sleep)
    off.group_started(50)
    off.wait_before_group()
    assert len(slept) == 1


def test_the_pacer_stops_waiting_once_every_concurrent_caller_has_come_back() -> None:
    """Closed-loop callers (each sends again once answered): as soon as as many submissions are queued as
    the previous group held, waiting longer would only idle the disk (4 callers paced every 2 ms made at
    most 2,000 reports/s); it waits, returning early on each new submission, until then."""
    now = [100.0]
    queued = [0]
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # Condition.wait: back early when a caller queues a submission
        waits.append(seconds)
        now[0] += 0.0002
        queued[0] += 1
        return True

    pacer = CommitPacer(0.005, clock=lambda: now[0])
    pacer.group_started(4)
    queued[0] = 1
    pacer.wait_before_group(lambda: queued[0], wait)
    assert queued[0] == 4 and len(waits) == 3  # back as soon as the 4 callers are, not after 5 ms
    assert now[0] == pytest.approx(100.0006)
    pacer.group_started(4)
    queued[0] = 4
    pacer.wait_before_group(lambda: queued[0], wait)  # already all back: no wait at all
    assert len(waits) == 3


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_concurrent_callers_one_report_at_a_time_fill_paced_groups(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """16 callers, each sending 8 reports one after another (waiting for each answer), their arrivals
    spread out as over a network (caller d pauses d ms before each report).

    Committing as soon as anything waits gives groups of one or two such reports (over gRPC: 2.7 per
    commit); with a window the writer gathers the callers' next reports (until as many are queued as the
    previous group held, see CommitPacer), so commits stay about 20 (65-74 unpaced, measured).
    """
    options: dict[str, Any] = {
        "decode_accumulator": decode_accumulator,
        "zero_accumulator": zero_accumulator,
        "commit_window_s": 0.05,
    }
    store: CampaignStore
    if kind == "sqlite":
        store = Store.open(tmp_path / "ldp.sqlite3", **options)
    else:
        store = PostgresStore.open(request.getfixturevalue("pg_url"), **options)
    with store:
        msg = wire.campaign_to_proto(campaign_id="c", params=PARAMS)
        store.create_campaign(
            CampaignRecord(
                campaign_id="c", mechanism=PARAMS.name, params_blob=msg.SerializeToString(), created_unix_ms=1
            )
        )

        async def device(d: int) -> None:
            for i in range(8):
                await asyncio.sleep(d / 1000)
                await store.submit_async("c", f"d{d}-{i}", 1, batch_delta(PARAMS, np.array([i])), None)

        async def main() -> None:
            await asyncio.gather(*(device(d) for d in range(16)))

        asyncio.run(main())
        assert store.accumulator("c").n == 128
        assert store.stats().commits <= 32  # about 20 (the previous group's size each time); 41-49 unpaced
