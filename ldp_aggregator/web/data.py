"""What the web view shows, as JSON documents made by the Analyst service's own functions.

Every number comes from the methods the gRPC ``ldp.v1.Analyst`` servicer calls
(:meth:`Aggregator.campaign_message`, :meth:`~Aggregator.estimate_message`,
:meth:`~Aggregator.decode_message`, :meth:`~Aggregator.association_message`) and is turned into JSON by the
functions ``ldp-aggregator ... --json`` uses (``campaign_to_dict``, ``estimate_to_dict``,
``decode_response_to_dict``, ``association_response_to_dict``): a page and the Analyst service cannot
disagree, because there is no second implementation. A refusal is shown as the service would answer it:
its status code name and message. A range mechanism's ranges and quantiles (``ranges``) are the
servicer's own calls too (``Aggregator.estimate_ranges``, ``ranges.add_to_proto``), and so are a marginal
campaign's marginals (``marginals``: ``Aggregator.estimate_marginals``, ``marginals.add_to_proto``). What
the view adds of its own is under ``view``, apart from the service's answers: the range and marginal
queries it asked (``view.range_query``, ``view.marginal_query``) and a discovery's "detected" flags
(``view.discovery_detected``).

:class:`WebReader` only reads: it calls no method of the aggregator or the store that writes.

Long computations (decoding 10,000 RAPPOR candidates takes seconds) run once per campaign state and
options on the view's own threads (:data:`WEB_WORKERS`, never the gRPC servicers'); the result is kept
(:class:`ResultCache`) until the campaign's state changes, and concurrent requests for the same result
share one computation.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_aggregator.analysis import estimate_to_dict
from ldp_aggregator.association import association_response_to_dict
from ldp_aggregator.export import campaign_to_dict
from ldp_aggregator.marginals import add_to_proto as add_marginals_to_proto
from ldp_aggregator.marginals import marginals_to_dict
from ldp_aggregator.ranges import add_to_proto, ranges_to_dict
from ldp_aggregator.rappor_decode import decode_response_to_dict, decodes
from ldp_aggregator.service import Aggregator, info_from_record
from ldp_aggregator.servicers import status_for, status_message
from ldp_client import registry
from ldp_client.errors import LdpError
from ldp_client.spec import Kind

__all__ = [
    "DEFAULT_CDF_POINTS",
    "DEFAULT_QUANTILES",
    "RATE_WINDOW_S",
    "CampaignQuery",
    "CampaignState",
    "RateTracker",
    "ResultCache",
    "WebReader",
    "default_cdf_ranges",
    "device_spend",
    "discovery_detected",
]

DEFAULT_QUANTILES: Final = (0.25, 0.5, 0.75)
"""A range campaign's page without ``quantile=``: the quartiles and the median."""
DEFAULT_CDF_POINTS: Final = 9
"""A range campaign's page without ``range=``: the CDF at this many points (ranges [0, t]), about the
domain's tenths."""
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
    ranges: tuple[tuple[int, int], ...] | None = None
    """Range mechanisms: positions [lo, hi] (checked against the domain); None: the CDF at
    :func:`default_cdf_ranges`."""
    quantiles: tuple[float, ...] | None = None
    """Range mechanisms: the quantiles to estimate; None: :data:`DEFAULT_QUANTILES`."""
    marginals: tuple[tuple[str, ...], ...] | None = None
    """Marginal mechanisms: the attribute names of each marginal asked (checked against the campaign's
    chosen marginals), in the order its cells are listed; None: every chosen marginal."""
    non_negative: bool = False
    """Marginal mechanisms: each marginal with its non-negative version beside (never instead of) it."""

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

    def range_options(self, domain_size: int) -> dict[str, Any]:
        """The ranges and quantiles of ``Analyst.GetEstimate`` (its ``ranges``, ``quantiles`` and
        ``confidence`` fields) this page asks for: the query's, or the defaults."""
        return {
            "ranges_": self.ranges if self.ranges is not None else default_cdf_ranges(domain_size),
            "quantiles": self.quantiles if self.quantiles is not None else DEFAULT_QUANTILES,
            "confidence": self.confidence or 0.95,
        }

    def marginal_options(self, chosen: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
        """The marginals of ``Analyst.GetEstimate`` (its ``marginals`` and ``confidence`` fields) this page
        asks for: the query's, or every one of the campaign's ``chosen`` marginals; the same
        ``non_negative`` flag on each (as ``ldp-aggregator estimate --marginal ... --non-negative``)."""
        queries = self.marginals if self.marginals is not None else chosen
        return {
            "queries": queries,
            "confidence": self.confidence or 0.95,
            "non_negative": (self.non_negative,) * len(queries),
        }


def default_cdf_ranges(domain_size: int) -> tuple[tuple[int, int], ...]:
    """Ranges [0, t] at about the tenths of a domain of ``domain_size`` ordered values: t = ceil(k D /
    10) - 1 for k = 1..9, distinct, without the last value (whose CDF is 1 by construction)."""
    points = sorted({max(0, -(-k * domain_size // 10) - 1) for k in range(1, DEFAULT_CDF_POINTS + 1)})
    return tuple((0, t) for t in points if t < domain_size - 1)


def device_spend(spec: Any, params: Any) -> str:
    """What the server knows of one device's privacy spend in this campaign, and where the rest is kept.

    From the mechanism's spec (:class:`ldp_client.spec.MechanismSpec`): the per-report epsilon and
    delta, the longitudinal bound epsilon_inf of a memoized mechanism and ``reports_per_device``; the
    device's own ledger (``ldp_client/reporter/ledger.py``, docs/client.md "The privacy ledger") charges
    every report with these rules and enforces the app's caps, which the server never sees.
    """
    eps, eps_inf, delta = params.epsilon, spec.epsilon_inf(params), spec.delta(params)
    cost = f"epsilon {eps:.4g}" + (f" and delta {delta:.3g}" if delta > 0 else "")
    if math.isfinite(eps_inf):
        charge = (
            f"Each report costs {cost}; the mechanism memoizes a permanent response per value, so any "
            f"number of reports of one value costs at most epsilon_inf {eps_inf:.4g}, and the device's "
            "ledger charges epsilon_inf once per distinct value reported."
        )
    else:
        charge = (
            f"Each report costs {cost} (fresh noise every time: reports add up, "
            "k reports of a device cost k times that)."
        )
    once = (
        f" A device may send at most {spec.reports_per_device} report"
        f"{'' if spec.reports_per_device == 1 else 's'} to this campaign (its epsilon is per user only "
        "then); the device's ledger refuses more."
        if spec.reports_per_device is not None
        else ""
    )
    return (
        f"{charge}{once} The server cannot add up one device's spend: reports carry no device identifier. "
        'Each device keeps its own privacy ledger (docs/client.md, "The privacy ledger"), which charges '
        "every report by these rules before encoding it and refuses any that would cross the app's caps "
        "(lifetime, rolling window, per campaign; epsilon and delta)."
    )


def discovery_detected(estimate: dict[str, Any]) -> list[bool] | None:
    """A discovery estimate's (issue 16) "detected" flag per item, in ``items`` order: the item's interval
    lies above zero (``ci_low > 0``; the level loop ranks, it does not test). None for other
    mechanisms. A view-level figure: ``Analyst.GetEstimate`` does not send it."""
    if "levels" not in estimate:
        return None
    return [isinstance(it["ci_low"], int | float) and it["ci_low"] > 0 for it in estimate["items"]]


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

    def _reports(self, campaign_id: str) -> tuple[dict[str, Any], Any, Any, tuple[int, int, bool]]:
        """(campaign JSON with counts and rates, its info, its accumulator, the state's version) from one
        snapshot."""
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
        return doc, info, acc, (n_batches, acc.n, record.closed)

    def campaigns(self) -> dict[str, Any]:
        """``{"campaigns": [...]}``: every campaign as ``Analyst.ListCampaigns`` gives it (JSON of
        ``campaign_to_dict``), with its reports received, batches and rates."""
        return {"campaigns": [self._reports(r.campaign_id)[0] for r in self._agg.store.list_campaigns()]}

    def campaign_state(self, campaign_id: str) -> CampaignState:
        """The campaign's document without analyses (reports, rates, privacy), its info, a version of its
        state (batches, reports, closed) and, for a range mechanism, its ordered domain. Reads the store:
        call it off the event loop.

        ``privacy`` holds the per-report ``epsilon``, ``delta`` (0 for a pure epsilon-LDP mechanism; the
        declared delta of an (epsilon, delta) one such as the Gaussian), ``epsilon_inf`` (the longitudinal
        bound, "inf" when there is none), ``memoized`` (a finite epsilon_inf: a permanent response per
        value), ``reports_per_device`` (null: no limit; discovery: 1) and ``device_spend``, the text of
        :func:`device_spend`; all from the mechanism's spec.

        Raises:
            CampaignNotFoundError: No such campaign.
        """
        doc, info, acc, version = self._reports(campaign_id)
        spec = registry.spec_for(info.params)
        doc["privacy"] = {
            "epsilon": doc["epsilon"],
            "delta": spec.delta(info.params),
            "epsilon_inf": doc["epsilon_inf"],
            "memoized": math.isfinite(spec.epsilon_inf(info.params)),
            "reports_per_device": spec.reports_per_device,
            "device_spend": device_spend(spec, info.params),
        }
        levels = spec.range_levels(info.params, acc)
        tables = spec.marginal_tables(info.params, acc)
        return CampaignState(
            doc=doc,
            info=info,
            version=version,
            range_labels=None if levels is None else levels.labels,
            marginal_attributes=None if tables is None else tables.attributes,
            chosen_marginals=None
            if tables is None
            else tuple(tuple(tables.attributes[a] for a in m) for m in tables.marginals),
        )

    def analyses(self, state: CampaignState, query: CampaignQuery) -> list[_Entry]:
        """Start (or find cached) the campaign's analyses: the estimate, the decode or association where
        the mechanism has one, the ranges and quantiles of a range mechanism and the marginals of a
        marginal mechanism; on the event loop. Await them with :func:`complete`.

        ``ranges`` is ``{"answer": {"ranges": [...], "quantiles": [...]}}``: exactly those fields of
        ``Analyst.GetEstimate``'s answer to a request with the page's ranges, quantiles and confidence
        (the servicer's own calls: ``Aggregator.estimate_ranges`` and ``ranges.add_to_proto``), or the
        service's refusal (a tree level without reports). The positions asked are in
        ``view.range_query``. Likewise ``marginals`` is ``{"answer": {"marginals": [...]}}``, that field of
        ``Analyst.GetEstimate``'s answer to a request with the page's marginals (by default every chosen
        marginal of the campaign), ``non_negative`` flags and confidence (``Aggregator.estimate_marginals``
        and ``marginals.add_to_proto``), or the service's refusal (a group without reports); the attributes
        asked are in ``view.marginal_query``."""
        agg, campaign_id, doc, info = self._agg, state.info.campaign_id, state.doc, state.info
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
        if state.range_labels is not None:
            options = query.range_options(len(state.range_labels))

            def ranges_answer() -> estimates_pb2.EstimateResponse:
                msg = estimates_pb2.EstimateResponse()
                add_to_proto(msg, *agg.estimate_ranges(campaign_id, **options))
                return msg

            jobs.append(("ranges", lambda: _answer(ranges_answer, _ranges_dict)))
            doc.setdefault("view", {})["range_query"] = {
                "ranges": [list(r) for r in options["ranges_"]],
                "quantiles": list(options["quantiles"]),
                "default_ranges": query.ranges is None,
                "default_quantiles": query.quantiles is None,
            }
        if state.chosen_marginals is not None:
            marginal_options = query.marginal_options(state.chosen_marginals)

            def marginals_answer() -> estimates_pb2.EstimateResponse:
                msg = estimates_pb2.EstimateResponse()
                add_marginals_to_proto(msg, agg.estimate_marginals(campaign_id, **marginal_options))
                return msg

            jobs.append(("marginals", lambda: _answer(marginals_answer, _marginals_dict)))
            doc.setdefault("view", {})["marginal_query"] = {
                "marginals": [list(q) for q in marginal_options["queries"]],
                "non_negative": query.non_negative,
                "default_marginals": query.marginals is None,
                "chosen_marginals": [list(m) for m in state.chosen_marginals],
            }
        entries = []
        for name, compute in jobs:
            entries.append(self.cache.get((name, campaign_id, state.version, query), compute))
            doc[name] = None  # filled by complete()
        doc["analyses"] = [name for name, _ in jobs]
        return entries


def _ranges_dict(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
    """The ``ranges`` and ``quantiles`` of an estimate's JSON (``estimate_to_dict``), both always present."""
    return {"ranges": [], "quantiles": [], **ranges_to_dict(msg)}


def _marginals_dict(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
    """The ``marginals`` of an estimate's JSON (``estimate_to_dict``), always present."""
    return {"marginals": [], **marginals_to_dict(msg)}


@dataclass(frozen=True, kw_only=True)
class CampaignState:
    """What :meth:`WebReader.campaign_state` read: the document, the campaign, the version of its state, a
    range mechanism's ordered domain and a marginal mechanism's attributes and chosen marginals (as
    attribute names; None for the other mechanisms)."""

    doc: dict[str, Any]
    info: Any
    version: tuple[int, int, bool]
    range_labels: tuple[str, ...] | None
    marginal_attributes: tuple[str, ...] | None = None
    chosen_marginals: tuple[tuple[str, ...], ...] | None = None


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
    if doc.get("estimate") and "answer" in doc["estimate"]:
        detected = discovery_detected(doc["estimate"]["answer"])
        if detected is not None:
            doc.setdefault("view", {})["discovery_detected"] = detected
    return pending
