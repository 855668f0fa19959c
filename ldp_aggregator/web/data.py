"""What the web view shows, as JSON documents made by the Analyst service's own functions.

Every number comes from the methods the gRPC ``ldp.v1.Analyst`` servicer calls
(:meth:`Aggregator.campaign_message`, :meth:`~Aggregator.estimate_message`,
:meth:`~Aggregator.decode_message`, :meth:`~Aggregator.association_message`) and is turned into JSON by the
functions ``ldp-aggregator ... --json`` uses (``campaign_to_dict``, ``estimate_to_dict``,
``decode_response_to_dict``, ``association_response_to_dict``): a page and the Analyst service cannot
disagree, because there is no second implementation. A refusal is shown as the service would answer it:
its status code name and message.

:class:`WebReader` only reads: it calls no method of the aggregator or the store that writes.

Long computations (decoding 10,000 RAPPOR candidates takes seconds) run once per campaign state and
options on the view's own threads (:data:`WEB_WORKERS`, never the gRPC servicers'); the result is kept
(:class:`ResultCache`) until the campaign's state changes, and concurrent requests for the same result
share one computation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from ldp_aggregator.analysis import estimate_to_dict
from ldp_aggregator.association import association_response_to_dict
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.rappor_decode import decode_response_to_dict, decodes
from ldp_aggregator.service import Aggregator, info_from_record, status_for, status_message
from ldp_client import registry
from ldp_client.errors import LdpError
from ldp_client.spec import Kind

__all__ = ["DEVICE_SPEND", "RATE_WINDOW_S", "CampaignQuery", "RateTracker", "ResultCache", "WebReader"]

#: Where a device's privacy spend is known (the server cannot know it: reports carry no device id).
DEVICE_SPEND: Final = (
    "A device's spend is on the device, not here: reports carry no device identifier, so the server "
    "cannot add up what one device sent. The app's Reporter checks every campaign's per-report epsilon "
    "(and epsilon_inf) against its own max_epsilon / max_epsilon_inf before encoding anything, and refuses "
    "a campaign over it (docs/client.md)."
)
WEB_WORKERS: Final = 2
"""Threads of the web view (reads and analyses); more requests wait for them."""
RATE_WINDOW_S: Final = 300.0
"""The recent rate is measured over at most this many seconds of the view's own samples."""
_MIN_SAMPLE_GAP_S: Final = 1.0
_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True)
class CampaignQuery:
    """The options of a campaign page (checked by the query parser, ``ldp_aggregator.web.app``).

    ``None`` leaves the Analyst service's default (what an empty request field means there).
    """

    confidence: float | None = None
    alpha: float | None = None
    correction: str | None = None
    population_size: int | None = None

    def estimate_options(self) -> dict[str, Any]:
        """The options of ``Analyst.GetEstimate`` with the servicer's defaults for unset fields."""
        return {"confidence": self.confidence or 0.95, "population_size": self.population_size or None}

    def decode_options(self) -> dict[str, Any]:
        """The options of ``Analyst.DecodeRappor`` with the servicer's defaults for unset fields."""
        return {
            "confidence": self.confidence or 0.95,
            "alpha": self.alpha or 0.05,
            "correction": self.correction or "bonferroni",
        }

    def association_options(self) -> dict[str, Any]:
        """The options of ``Analyst.EstimateAssociation`` with the servicer's defaults."""
        return {"confidence": self.confidence or 0.95}


class RateTracker:
    """Reports per second per campaign, from the counts this view saw at each page load.

    The store keeps no arrival times, so the recent rate is (n_now - n_then) / (t_now - t_then) over the
    oldest sample this view took within :data:`RATE_WINDOW_S` (None until two samples at least
    a second apart exist); the average since creation is n / (now - created).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()  # pages are read in worker threads

    def observe(self, campaign_id: str, n: int) -> tuple[float | None, float | None]:
        """Record ``n`` now; returns (recent reports per second, the window it covers in seconds)."""
        with self._lock:
            now = self._clock()
            samples = self._samples.setdefault(campaign_id, deque(maxlen=64))
            while samples and now - samples[0][0] > RATE_WINDOW_S:
                samples.popleft()
            if not samples or now - samples[-1][0] >= _MIN_SAMPLE_GAP_S:
                samples.append((now, n))
            t0, n0 = samples[0]
        if now - t0 < _MIN_SAMPLE_GAP_S:
            return None, None
        return (n - n0) / (now - t0), now - t0


@dataclass(eq=False)
class _Entry:
    future: asyncio.Future[dict[str, Any]]
    started: float = field(default_factory=time.monotonic)


class ResultCache:
    """Results of long computations by key (campaign state and options), the newest ``size`` kept, run
    on ``executor``."""

    def __init__(self, executor: Executor, size: int = 32) -> None:
        self._size = size
        self._executor = executor
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], dict[str, Any]]) -> _Entry:
        """The entry of ``key``, started in a worker thread if new; an entry that failed unexpectedly is
        dropped so that the next request tries again."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        future = asyncio.get_running_loop().run_in_executor(self._executor, compute)
        entry = _Entry(future)
        self._entries[key] = entry

        def _forget_failure(fut: asyncio.Future[dict[str, Any]]) -> None:
            if (fut.cancelled() or fut.exception() is not None) and self._entries.get(key) is entry:
                del self._entries[key]

        future.add_done_callback(_forget_failure)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return entry


def _answer(call: Callable[[], Any], to_dict: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """``{"answer": ...}`` or, for a refusal, ``{"error": {"code", "message"}}`` as the service sends it."""
    try:
        return {"answer": to_dict(call())}
    except LdpError as exc:
        return {"error": {"code": status_for(exc).name, "message": status_message(exc)}}


class WebReader:
    """Read-only documents of the campaigns list and of one campaign (module docstring)."""

    def __init__(
        self,
        aggregator: Aggregator,
        *,
        wall_clock: Callable[[], float] = time.time,
        rates: RateTracker | None = None,
        workers: int = WEB_WORKERS,
    ) -> None:
        self._agg = aggregator
        self._wall = wall_clock
        self._rates = rates or RateTracker()
        # Threads of the view's own: its reads and analyses never take the threads the gRPC servicers
        # run estimates and commits on (asyncio's default executor), however many pages are open.
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ldp-web")
        self.cache = ResultCache(self.executor)

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on the view's threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: fn(*args))

    def close(self) -> None:
        """Stop the view's threads (analyses still running finish in the background)."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _reports(self, campaign_id: str) -> tuple[dict[str, Any], Any, tuple[int, int, bool]]:
        """(campaign JSON with counts and rates, its info, the state's version) from one snapshot."""
        record, acc, n_batches = self._agg.store.snapshot(campaign_id)
        info = info_from_record(record)
        doc = campaign_to_dict(self._agg.campaign_message(info))
        recent, window = self._rates.observe(campaign_id, acc.n)
        age_s = max(self._wall() - record.created_unix_ms / 1000.0, 1e-3)
        doc.update(
            n_reports=acc.n,
            n_batches=n_batches,
            rate={
                "reports_per_s_recent": recent,
                "recent_window_s": window,
                "reports_per_s_since_created": acc.n / age_s,
            },
        )
        return doc, info, (n_batches, acc.n, record.closed)

    def campaigns(self) -> dict[str, Any]:
        """``{"campaigns": [...]}``: every campaign as ``Analyst.ListCampaigns`` gives it (JSON of
        ``campaign_to_dict``), with its reports received, batches and rates."""
        return {"campaigns": [self._reports(r.campaign_id)[0] for r in self._agg.store.list_campaigns()]}

    def campaign_state(self, campaign_id: str) -> tuple[dict[str, Any], Any, tuple[int, int, bool]]:
        """The campaign's document without analyses (reports, rates, privacy), its info and a version of
        its state (batches, reports, closed). Reads the store: call it off the event loop.

        Raises:
            CampaignNotFoundError: No such campaign.
        """
        doc, info, version = self._reports(campaign_id)
        doc["privacy"] = {
            "epsilon": doc["epsilon"],
            "epsilon_inf": doc["epsilon_inf"],
            "device_spend": DEVICE_SPEND,
        }
        return doc, info, version

    def analyses(
        self, doc: dict[str, Any], info: Any, version: Hashable, query: CampaignQuery
    ) -> list[_Entry]:
        """Start (or find cached) the campaign's analyses: the estimate, and the decode or association
        where the mechanism has one; on the event loop. Await them with :func:`complete`."""
        agg, campaign_id = self._agg, info.campaign_id
        jobs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            (
                "estimate",
                lambda: _answer(
                    lambda: agg.estimate_message(campaign_id, **query.estimate_options()), estimate_to_dict
                ),
            )
        ]
        if decodes(info.params):
            jobs.append(
                (
                    "decode",
                    lambda: _answer(
                        lambda: agg.decode_message(campaign_id, **query.decode_options()),
                        decode_response_to_dict,
                    ),
                )
            )
        if registry.spec_for(info.params).kind is Kind.PAIRED:
            jobs.append(
                (
                    "association",
                    lambda: _answer(
                        lambda: agg.association_message(campaign_id, **query.association_options()),
                        association_response_to_dict,
                    ),
                )
            )
        entries = []
        for name, compute in jobs:
            entries.append(self.cache.get((name, campaign_id, version, query), compute))
            doc[name] = None  # filled by complete()
        doc["analyses"] = [name for name, _ in jobs]
        return entries


async def complete(doc: dict[str, Any], entries: list[_Entry], *, wait_s: float | None) -> list[str]:
    """Fill ``doc``'s analyses with the results ready within ``wait_s`` seconds (None: wait for all);
    returns the names of those still being computed (their value stays None)."""
    pending: list[str] = []
    futures = [e.future for e in entries]
    if futures:
        await asyncio.wait(futures, timeout=wait_s)  # a timeout leaves them running (and cached)
    for name, entry in zip(doc["analyses"], entries, strict=True):
        if entry.future.done():
            doc[name] = entry.future.result()  # an unexpected exception propagates: a 500, logged
        else:
            pending.append(name)
    return pending
