"""Test helper (not a test module): a fake accumulator and a subprocess that submits until it is killed.

Run as ``python store_crash_worker.py DB_PATH RUN_TAG N_THREADS``. Each thread submits batches forever;
after a batch's future resolves it writes ``ack <batch_id> <dup>`` to stdout in ONE ``os.write`` (atomic
for short lines on a pipe), so every line the parent reads is a batch the store acknowledged. The parent
SIGKILLs the process and checks that every acknowledged batch survived exactly once.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Self

from ldp_aggregator.store import CampaignRecord, Store

CAMPAIGN = "crash-campaign"


@dataclass(frozen=True, slots=True)
class FakeAccumulator:
    """Sums (n, total, sq): with per-batch ``total = number`` and ``sq = number**2`` the sum identifies
    which batches were added, so a partial or doubled group is detectable."""

    n: int = 0
    total: int = 0
    sq: int = 0

    def __add__(self, other: Self) -> Self:
        if not isinstance(other, FakeAccumulator):
            return NotImplemented
        return type(self)(n=self.n + other.n, total=self.total + other.total, sq=self.sq + other.sq)

    def to_bytes(self) -> bytes:
        return f"{self.n},{self.total},{self.sq}".encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> FakeAccumulator:
        n, total, sq = (int(x) for x in data.decode().split(","))
        return cls(n=n, total=total, sq=sq)


def decode(record: CampaignRecord, data: bytes) -> FakeAccumulator:
    return FakeAccumulator.from_bytes(data)


def zero(record: CampaignRecord) -> FakeAccumulator:
    return FakeAccumulator()


def batch_number(batch_id: str) -> int:
    """Batch ids look like ``<run>-<thread>-<i>``; the number is unique per id."""
    run, thread, i = (int(x) for x in batch_id.split("-"))
    return run * 10**9 + thread * 10**6 + i


def delta_for(batch_id: str, n_reports: int) -> FakeAccumulator:
    k = batch_number(batch_id)
    return FakeAccumulator(n=n_reports, total=k, sq=k * k)


def n_reports_for(batch_id: str) -> int:
    return 1 + batch_number(batch_id) % 7


def open_store(path: str, **kwargs: Any) -> Store:
    kwargs.setdefault("decode_accumulator", decode)
    kwargs.setdefault("zero_accumulator", zero)
    return Store.open(path, **kwargs)


def _submitter(store: Store, run: int, thread: int, out_lock: threading.Lock) -> None:
    i = 0
    while True:
        # Every 5th submission retries an earlier id of this thread: must come back as a duplicate.
        j = i - 3 if i % 5 == 4 else i
        bid = f"{run}-{thread}-{j}"
        n = n_reports_for(bid)
        outcome = store.submit(CAMPAIGN, bid, n, delta_for(bid, n), raw_payload=bid.encode()).result()
        with out_lock:
            os.write(1, f"ack {bid} {int(outcome.duplicate)}\n".encode())
        i += 1


def main() -> None:
    path, run, n_threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = open_store(path, group_commit_max=64)
    out_lock = threading.Lock()
    threads = [
        threading.Thread(target=_submitter, args=(store, run, t, out_lock), daemon=True)
        for t in range(n_threads)
    ]
    for t in threads:
        t.start()
    os.write(1, b"ready\n")
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
