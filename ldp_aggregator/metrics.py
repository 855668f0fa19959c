"""Prometheus metrics of one aggregator, served over HTTP on a loopback port of their own.

Every server has its own :class:`prometheus_client.CollectorRegistry` (several servers in one process, as
in the tests, never share counters). Metric names (``ldp_`` prefix; counters end in ``_total``):

=====================================  =====================================================================
``ldp_reports_accepted_total``         reports newly stored (duplicates of stored batches not included)
``ldp_reports_rejected_total{reason}``  reports of refused submissions, by reason: ``unauthenticated``,
                                        ``permission_denied``, ``rate_limited``, ``too_large``,
                                        ``malformed``, ``invalid_argument``, ``not_found``,
                                        ``campaign_closed``, ``unavailable``, ``internal``, ...
``ldp_batches_total{duplicate}``        committed submissions, ``duplicate="true"`` for a retried batch id
``ldp_commit_latency_seconds``          histogram: from handing a batch to the store to its commit (queue
                                        wait + transaction + fsync), i.e. what durability costs a request
``ldp_batch_size``                      histogram: reports per accepted batch
``ldp_rpcs_total{method,code}``         every ``ldp.v1`` call by method name and final status code
``ldp_store_pending``                   submissions waiting for the store's writer
``ldp_store_commits_total``             store transactions committed / failed (``..._failed_...``)
``ldp_raw_reports_purged_total``        raw report rows deleted by the retention purge
``ldp_auth_required``                   1 if calls need a token
=====================================  =====================================================================

Nothing here is labelled with a client address, token or campaign content.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from ldp_aggregator.store import CampaignStore

__all__ = ["COMMIT_LATENCY_BUCKETS", "Metrics"]

#: Commit latency buckets (seconds): a group commit with fsync takes ~0.2-5 ms here; tails to 10 s.
COMMIT_LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)
_BATCH_SIZE_BUCKETS: Final = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)


class Metrics:
    """The aggregator's counters and histograms, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reports_accepted = Counter(
            "ldp_reports_accepted", "Reports newly stored (committed).", registry=r
        )
        self.reports_rejected = Counter(
            "ldp_reports_rejected", "Reports of refused submissions, by reason.", ["reason"], registry=r
        )
        self.batches = Counter(
            "ldp_batches",
            "Committed submissions; duplicate=true for a retried batch id.",
            ["duplicate"],
            registry=r,
        )
        self.commit_latency = Histogram(
            "ldp_commit_latency_seconds",
            "Time from handing a batch to the store until its transaction committed (queue + fsync).",
            buckets=COMMIT_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "ldp_batch_size", "Reports per accepted batch.", buckets=_BATCH_SIZE_BUCKETS, registry=r
        )
        self.rpcs = Counter(
            "ldp_rpcs", "ldp.v1 calls by method and status code.", ["method", "code"], registry=r
        )
        self.raw_purged = Counter(
            "ldp_raw_reports_purged", "Raw report rows deleted by the retention purge.", registry=r
        )
        self.auth_required = Gauge("ldp_auth_required", "1 if calls need an access token.", registry=r)
        self._store_gauges: list[Gauge] = []
        # Labelled children used on every call, looked up once (see observe_rpc).
        self._batches_new = self.batches.labels(duplicate="false")
        self._batches_duplicate = self.batches.labels(duplicate="true")
        self._rpc_children: dict[tuple[str, str], Any] = {}
        self._http: tuple[object, threading.Thread] | None = None
        self.port: int | None = None

    def bind_store(self, store: CampaignStore) -> None:
        """Export the store's queue length and commit counters (read at scrape time)."""
        r = self.registry
        pending = Gauge("ldp_store_pending", "Submissions waiting for the store writer.", registry=r)
        pending.set_function(lambda: float(store.stats().pending))
        commits = Gauge("ldp_store_commits_total", "Store transactions committed.", registry=r)
        commits.set_function(lambda: float(store.stats().commits))
        failed = Gauge("ldp_store_failed_commits_total", "Store transactions that failed.", registry=r)
        failed.set_function(lambda: float(store.stats().failed_commits))
        self._store_gauges = [pending, commits, failed]

    def observe_commit(self, *, n_reports: int, duplicate: bool, seconds: float) -> None:
        """One committed submission."""
        self.commit_latency.observe(seconds)
        if duplicate:
            self._batches_duplicate.inc()
        else:
            self._batches_new.inc()
            self.reports_accepted.inc(n_reports)
            self.batch_size.observe(n_reports)

    def observe_rejected(self, reason: str, n_reports: int) -> None:
        """Reports of one refused submission (``n_reports`` may be 0 when the message was unreadable)."""
        self.reports_rejected.labels(reason=reason).inc(max(0, n_reports))

    def observe_rpc(self, method: str, code: str) -> None:
        """One finished ``ldp.v1`` call."""
        # The labelled child, looked up once per (method, code): labels() builds a key and takes the
        # metric's lock on every call, a cost paid per single report otherwise.
        child = self._rpc_children.get((method, code))
        if child is None:
            child = self._rpc_children[(method, code)] = self.rpcs.labels(method=method, code=code)
        child.inc()

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (0: a free port); returns the port."""
        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        self._http = (server, thread)
        self.port = int(server.server_address[1])
        return self.port

    def stop(self) -> None:
        """Stop the HTTP server (idempotent)."""
        if self._http is not None:
            server, thread = self._http
            self._http = None
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            thread.join(timeout=5)
