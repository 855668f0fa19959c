"""Tests of ldp_client.reporter against an in-process fake Collector server.

The fake server records every Submit attempt and every committed batch (deduplicated by batch id, like the
real store), and can be told to fail with UNAVAILABLE n times, to commit and then answer UNAVAILABLE (so
the retry is a duplicate), to answer a fixed status code, to hang, or to hold GetCampaign.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import (
    AccessDeniedError,
    BudgetExceededError,
    CampaignClosedError,
    CampaignMismatchError,
    CampaignNotFoundError,
    DomainError,
    InvalidParameterError,
    LdpError,
    StateFileError,
)
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    MechanismParams,
    RapporParams,
)
from ldp_client.reporter import (
    Discard,
    Reporter,
    ReporterClosedError,
    ReportsLostError,
    _parse_batch_name,
    _parse_segment_header,
    _read_records,
    _record,
    _row_packer,
    _segment_header,
)
from ldp_client.secret import ClientSecret

ROOT = Path(__file__).resolve().parents[2]
CID = "campaign-1"
LABELS = ("a", "b", "c", "d")
GRR = GRRParams(domain=Domain.of(LABELS), truth_probability=0.5)  # epsilon = ln 3
RR = BinaryRRParams(truth_probability=0.5)  # two fair coins: epsilon = ln 3
RAPPOR = RapporParams(k=128, h=2, m=8, f=0.5, p=0.5, q=0.75)  # eps_inf = 4 ln 3
BASIC = BasicRapporParams(domain=Domain.of(LABELS), f=0.5, p=0.5, q=0.75)
BOOLEAN = BooleanRapporParams(f=0.5, p=0.5, q=0.75)
SECRET = bytes(range(32))
FAST: dict[str, Any] = {"initial_retry_delay_s": 0.01, "max_retry_delay_s": 0.05}


class FakeCollector(collector_pb2_grpc.CollectorServicer):
    def __init__(self, campaign: campaign_pb2.Campaign) -> None:
        self.campaign = campaign
        self.params = wire.params_from_proto(campaign)
        self.lock = threading.Lock()
        self.batches: dict[str, reports_pb2.ReportBatch] = {}
        self.attempts: list[str] = []
        self.fail_unavailable = 0
        self.commit_then_unavailable = 0
        self.submit_code: grpc.StatusCode | None = None
        self.hang_submit = False
        self.release = threading.Event()
        self.get_gate = threading.Event()
        self.get_gate.set()
        self.metadata: list[tuple[str, str]] = []
        self.get_code: grpc.StatusCode | None = None
        self.get_attempts = 0

    def GetCampaign(self, request: Any, context: Any) -> campaign_pb2.Campaign:
        with self.lock:
            self.metadata.extend((m.key, m.value) for m in context.invocation_metadata())
            self.get_attempts += 1
            get_code = self.get_code
        self.get_gate.wait(30)
        if get_code is not None:
            context.abort(get_code, "told to fail")
        if request.campaign_id != self.campaign.id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no campaign {request.campaign_id!r}")
        return self.campaign

    def Submit(self, request: reports_pb2.ReportBatch, context: Any) -> reports_pb2.SubmitResponse:
        with self.lock:
            self.attempts.append(request.batch_id)
            hang = self.hang_submit
        if hang:
            self.release.wait(30)
            context.abort(grpc.StatusCode.UNAVAILABLE, "was hanging")
        with self.lock:
            if self.fail_unavailable > 0:
                self.fail_unavailable -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "storage busy")
            if self.submit_code is not None:
                context.abort(self.submit_code, "told to fail")
        try:
            wire.batch_from_proto(request, self.params, campaign_id=self.campaign.id)
        except Exception as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        with self.lock:
            if request.batch_id in self.batches:
                return reports_pb2.SubmitResponse(batch_id=request.batch_id, duplicate=True, accepted=0)
            self.batches[request.batch_id] = request
            if self.commit_then_unavailable > 0:
                self.commit_then_unavailable -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "committed, then the connection dropped")
        return reports_pb2.SubmitResponse(batch_id=request.batch_id, accepted=request.count)

    def SubmitStream(self, request_iterator: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not used")

    def SubmitReport(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not used")

    def counts(self) -> list[int]:
        with self.lock:
            return sorted(b.count for b in self.batches.values())


class FakeServer:
    def __init__(
        self,
        campaign: campaign_pb2.Campaign,
        options: list[tuple[str, Any]] | None = None,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self.servicer = FakeCollector(campaign)
        self.server = grpc.server(ThreadPoolExecutor(max_workers=8), options=options or [])
        collector_pb2_grpc.add_CollectorServicer_to_server(self.servicer, self.server)
        if credentials is None:
            port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            port = self.server.add_secure_port("127.0.0.1:0", credentials)
        self.server.start()
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.servicer.release.set()
        self.servicer.get_gate.set()
        self.server.stop(None).wait()


def campaign(params: MechanismParams = GRR, *, cid: str = CID, closed: bool = False) -> campaign_pb2.Campaign:
    return wire.campaign_to_proto(campaign_id=cid, params=params, closed=closed)


def wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


@pytest.fixture
def make_server() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(params: MechanismParams = GRR, **kwargs: Any) -> FakeServer:
        options = kwargs.pop("options", None)
        credentials = kwargs.pop("credentials", None)
        s = FakeServer(campaign(params, **kwargs), options, credentials)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def make_reporter(tmp_path: Path) -> Iterator[Callable[..., Reporter]]:
    reporters: list[Reporter] = []

    def make(target: str, **kwargs: Any) -> Reporter:
        kwargs.setdefault("max_epsilon", 2.0)
        kwargs.setdefault("state_dir", tmp_path / "state")
        kwargs.setdefault("max_batch_age_s", 3600.0)
        for k, v in FAST.items():
            kwargs.setdefault(k, v)
        r = Reporter(target, kwargs.pop("campaign_id", CID), **kwargs)
        reporters.append(r)
        return r

    yield make
    for r in reporters:
        # A reporter that lost values or stopped raises on close (tests check that where it matters).
        with contextlib.suppress(LdpError):
            r.close(timeout=0)


def running(r: Reporter) -> Reporter:
    wait_for(lambda: r.stats().state == "running")
    return r


def batch_files(r: Reporter) -> list[Path]:
    return sorted(r.outbox_dir.glob("*.batch"))


def batch_id_of(path: Path) -> str:
    return _parse_batch_name(path.name)[0]


# ------------------------------------------------------------------------------------------ batching


def test_batches_by_size(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    r = running(make_reporter(server.target, batch_size=10))
    for i in range(25):
        r.report(LABELS[i % 4])
    # Two full batches are sealed and sent without a flush; the remainder waits for one.
    wait_for(lambda: server.servicer.counts() == [10, 10])
    time.sleep(0.1)
    assert server.servicer.counts() == [10, 10]
    assert r.flush(timeout=10)
    assert server.servicer.counts() == [5, 10, 10]
    for msg in server.servicer.batches.values():
        indices = wire.batch_from_proto(msg, GRR, campaign_id=CID)
        assert not isinstance(indices, tuple)
        assert set(indices.tolist()) <= {0, 1, 2, 3}
    s = r.stats()
    assert (s.reported, s.encoded, s.journaled, s.sealed_batches, s.sent_batches) == (25, 25, 25, 3, 3)
    assert (s.sent_reports, s.pending_reports, s.pending_batches) == (25, 0, 0)
    assert batch_files(r) == []
    assert not (r.outbox_dir / "journal").exists()


def test_batches_by_age(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    r = running(make_reporter(server.target, batch_size=1000, max_batch_age_s=0.2))
    for label in "abc":
        r.report(label)
    wait_for(lambda: server.servicer.counts() == [3], timeout=5)
    r.report("d")
    wait_for(lambda: server.servicer.counts() == [1, 3], timeout=5)


def test_oversized_batches_are_split_with_new_ids(make_server: Any, make_reporter: Any) -> None:
    # 1000 grr reports are ~4 kB; the server accepts messages of at most 1500 bytes (RESOURCE_EXHAUSTED).
    server = make_server(options=[("grpc.max_receive_message_length", 1500)])
    r = running(make_reporter(server.target, batch_size=1000))
    for i in range(1000):
        r.report(LABELS[i % 4])
    assert r.flush(timeout=20)
    # gRPC refuses the oversized messages before the handler runs: only the halves that fit arrive.
    assert server.servicer.counts() == [250] * 4
    assert len(set(server.servicer.attempts)) == 4
    assert r.stats().rejected_batches == 0 and batch_files(r) == []


def test_many_threads_report_concurrently(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    r = running(make_reporter(server.target, batch_size=300))

    def work() -> None:
        for i in range(500):
            r.report(LABELS[i % 4])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.flush(timeout=10)
    assert sum(server.servicer.counts()) == 2000
    assert r.stats().reported == 2000


# ---------------------------------------------------------------------------------- sending, retries


def test_retries_on_unavailable_keep_the_batch_id(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.fail_unavailable = 3
    r = running(make_reporter(server.target))
    for label in LABELS:
        r.report(label)
    assert r.flush(timeout=10)
    attempts = server.servicer.attempts
    assert len(attempts) == 4 and len(set(attempts)) == 1
    assert list(server.servicer.batches) == attempts[:1]
    s = r.stats()
    assert (s.retries, s.sent_batches, s.sent_reports, s.duplicate_batches) == (3, 1, 4, 0)


def test_committed_but_unacknowledged_batch_is_counted_once(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.commit_then_unavailable = 1
    r = running(make_reporter(server.target))
    for label in LABELS:
        r.report(label)
    assert r.flush(timeout=10)
    assert server.servicer.counts() == [4]
    assert len(server.servicer.attempts) == 2 and len(set(server.servicer.attempts)) == 1
    s = r.stats()
    assert (s.duplicate_batches, s.sent_batches, s.sent_reports, s.retries) == (1, 1, 0, 1)


def test_permanent_error_moves_the_batch_to_rejected(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.submit_code = grpc.StatusCode.INVALID_ARGUMENT
    r = running(make_reporter(server.target))
    r.report("a")
    assert r.flush(timeout=10)  # settled: rejected for good, not retried
    assert len(server.servicer.attempts) == 1
    rejected = sorted(p.name for p in (r.outbox_dir / "rejected").iterdir())
    assert len(rejected) == 2 and rejected[1] == rejected[0] + ".error"
    assert "INVALID_ARGUMENT" in (r.outbox_dir / "rejected" / rejected[1]).read_text()
    s = r.stats()
    assert (s.rejected_batches, s.retries, s.state) == (1, 0, "running")
    # The reporter keeps working after a rejected batch.
    server.servicer.submit_code = None
    r.report("b")
    assert r.flush(timeout=10) and server.servicer.counts() == [1]


def test_closed_campaign_on_submit_stops_the_reporter(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.submit_code = grpc.StatusCode.FAILED_PRECONDITION
    r = running(make_reporter(server.target))
    r.report("a")
    assert not r.flush(timeout=10)
    with pytest.raises(CampaignClosedError):
        r.report("a")
    assert len(server.servicer.attempts) == 1
    wait_for(lambda: r.stats().rejected_batches == 1)  # the stop is recorded first, then the batch moved
    assert r.stats().state == "stopped"


# ------------------------------------------------------------------------------------ campaign check


def test_epsilon_above_max_is_refused_and_nothing_is_sent(make_server: Any, make_reporter: Any) -> None:
    server = make_server(RR)  # epsilon = ln 3 = 1.0986
    server.servicer.get_gate.clear()
    r = make_reporter(server.target, max_epsilon=1.0)
    for v in (True, False, True):
        r.report(v)  # queued in memory until the campaign is known
    server.servicer.get_gate.set()
    wait_for(lambda: r.stats().state == "stopped")
    with pytest.raises(BudgetExceededError, match=r"max_epsilon=1\.0"):
        r.report(True)
    with pytest.raises(BudgetExceededError):
        r.report(True)
    s = r.stats()
    assert (s.discarded, s.encoded, s.pending_reports) == (3, 0, 0)
    assert not r.flush(timeout=1)
    assert server.servicer.attempts == []
    assert sorted(p.name for p in r.outbox_dir.iterdir()) == ["lock", "rejected"]
    assert r.campaign is None


@pytest.mark.parametrize(
    ("params", "max_epsilon_inf", "refused"),
    [(RR, 5.0, True), (GRR, 1e6, True), (RAPPOR, 5.0, False), (RAPPOR, 4.0, True)],
)
def test_longitudinal_epsilon_rule(
    make_server: Any, make_reporter: Any, params: MechanismParams, max_epsilon_inf: float, refused: bool
) -> None:
    server = make_server(params)
    r = make_reporter(
        server.target,
        max_epsilon=10.0,
        max_epsilon_inf=max_epsilon_inf,
        secret=ClientSecret.from_bytes(SECRET),
    )
    wait_for(lambda: r.stats().state != "starting")
    assert r.stats().state == ("stopped" if refused else "running")
    if refused:
        assert "epsilon_inf" in str(r.stats().last_error)


def test_closed_or_unknown_campaign_stops_the_reporter(make_server: Any, make_reporter: Any) -> None:
    closed = make_server(closed=True)
    r = make_reporter(closed.target)
    wait_for(lambda: r.stats().state == "stopped")
    with pytest.raises(CampaignClosedError):
        r.report("a")
    other = make_server()
    r2 = make_reporter(other.target, campaign_id="nope")
    wait_for(lambda: r2.stats().state == "stopped")
    with pytest.raises(CampaignNotFoundError):
        r2.report("a")


def test_invalid_values_before_and_after_the_campaign(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.get_gate.clear()
    r = make_reporter(server.target)
    r.report("z")  # unknown yet whether it is valid: queued, later dropped and counted
    r.report("a")
    time.sleep(0.05)
    # Raw values are never written to disk: no journal, no batch.
    assert sorted(p.name for p in r.outbox_dir.iterdir()) == ["lock", "rejected"]
    assert r.stats().state == "starting"
    server.servicer.get_gate.set()
    assert r.flush(timeout=10)
    assert server.servicer.counts() == [1]
    assert r.stats().dropped_invalid == 1
    with pytest.raises(DomainError):
        r.report("z")
    assert r.stats().reported == 2


def test_close_before_the_campaign_is_known_discards_raw_values(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.get_gate.clear()
    r = make_reporter(server.target)
    for label in "abc":
        r.report(label)
    with pytest.raises(ReportsLostError, match="lost 3 values or reports \\(3 stopped\\)") as info:
        r.close(timeout=0.2)
    assert info.value.counts["stopped"] == 3
    s = r.stats()
    assert (s.state, s.reported, s.discarded, s.encoded, s.journaled) == ("closed", 3, 3, 0, 0)
    assert s.lost_reports == 3
    assert sorted(p.name for p in r.outbox_dir.iterdir()) == ["lock", "rejected"]


# ------------------------------------------------------------------------------------ durable outbox


def test_outbox_survives_close_while_the_server_is_down(
    make_server: Any, make_reporter: Any, tmp_path: Path
) -> None:
    server = make_server()
    r = running(make_reporter(server.target, batch_size=10))
    server.servicer.fail_unavailable = 10**9
    for i in range(25):
        r.report(LABELS[i % 4])
    t0 = time.monotonic()
    assert r.close(timeout=0.5) is False
    assert time.monotonic() - t0 < 5
    files = batch_files(r)
    ids = {batch_id_of(p) for p in files}
    assert len(files) == 3 and not (r.outbox_dir / "journal").exists()
    assert set(server.servicer.attempts) <= ids and server.servicer.batches == {}
    assert r.close() is False  # idempotent

    server.servicer.fail_unavailable = 0
    r2 = make_reporter(server.target)
    assert r2.flush(timeout=10)
    assert set(server.servicer.batches) == ids
    assert server.servicer.counts() == [5, 10, 10]
    s = r2.stats()
    assert (s.recovered_batches, s.recovered_reports, s.sent_reports) == (3, 25, 25)
    assert batch_files(r2) == []


CHILD = r"""
import sys, time
from ldp_client.reporter import Reporter
target, state_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = Reporter(target, "campaign-1", max_epsilon=2.0, state_dir=state_dir, batch_size=100000,
             max_batch_age_s=3600.0)
deadline = time.monotonic() + 60
for part in range(2):  # two groups, so two journal records at least
    for i in range(n // 2):
        r.report("abcd"[i % 4])
    while r.stats().journaled < (part + 1) * (n // 2):
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.005)
print("ready", flush=True)
time.sleep(120)
"""


def test_journal_survives_sigkill_and_a_torn_tail_is_ignored(
    make_server: Any, make_reporter: Any, tmp_path: Path
) -> None:
    server = make_server()
    state = tmp_path / "state"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, server.target, str(state), "50"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert server.servicer.attempts == []
    outbox = next((state / "outbox").iterdir())
    journal = outbox / "journal"
    data = journal.read_bytes()
    records, torn = _read_records(data)
    assert torn == 0 and len(records) >= 3  # the segment header and groups of reports
    assert sum(len(rec) - 1 for rec in records[1:]) == 50 * 4  # 50 grr rows of 4 bytes
    batch_id, info = _parse_segment_header(records[0])
    assert info.params == GRR
    # Tear the last record, as a crash in the middle of a write would: that group is lost, no more.
    journal.write_bytes(data[:-2])
    expected = 50 - (len(records[-1]) - 1) // 4
    assert expected >= 25

    r = make_reporter(server.target, state_dir=state)
    assert r.flush(timeout=10)
    assert list(server.servicer.batches) == [batch_id]
    assert server.servicer.counts() == [expected]
    s = r.stats()
    assert (s.recovered_batches, s.recovered_reports) == (1, expected)
    assert not journal.exists() and batch_files(r) == []


def write_journal(outbox: Path, batch_id: str, values: list[int]) -> None:
    pack = _row_packer(GRR)
    # One record per report (the reporter writes one per drained group; any grouping is valid).
    data = _record(_segment_header(CID, batch_id, GRR)) + b"".join(_record(b"\x02" + pack(v)) for v in values)
    (outbox / "journal").write_bytes(data)


def test_a_journal_is_never_counted_twice(make_server: Any, make_reporter: Any, tmp_path: Path) -> None:
    server = make_server()
    server.servicer.fail_unavailable = 10**9
    r = running(make_reporter(server.target))
    for label in "abcda":
        r.report(label)
    assert r.close(timeout=0.2) is False
    (sealed,) = batch_files(r)
    batch_id = batch_id_of(sealed)
    # A crash between sealing and removing the journal leaves both: the journal must be dropped.
    write_journal(r.outbox_dir, batch_id, [0, 1, 2, 3, 0])
    server.servicer.fail_unavailable = 0
    r2 = make_reporter(server.target)
    assert r2.flush(timeout=10) and r2.close() is True
    assert list(server.servicer.batches) == [batch_id] and server.servicer.counts() == [5]
    # After a power loss the journal of an already-sent batch may reappear: it is resent with the same
    # id and acknowledged as a duplicate.
    write_journal(r.outbox_dir, batch_id, [0, 1, 2])
    r3 = make_reporter(server.target)
    assert r3.flush(timeout=10)
    assert server.servicer.counts() == [5]
    s = r3.stats()
    assert (s.recovered_batches, s.duplicate_batches, s.sent_reports) == (1, 1, 0)


def test_report_never_blocks_while_the_server_hangs(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.hang_submit = True
    r = running(make_reporter(server.target, batch_size=1000))
    t0 = time.perf_counter()
    for i in range(10_000):
        r.report(LABELS[i % 4])
    elapsed = time.perf_counter() - t0
    # Typically a few tens of ms; a report() that waited for the hung Submit would take its 10 s deadline
    # (rpc_timeout_s), so 8 s still tells the two apart on a machine loaded by parallel test workers.
    assert elapsed < 8.0, elapsed
    wait_for(lambda: len(server.servicer.attempts) >= 1)
    assert r.flush(timeout=0.2) is False
    t0 = time.monotonic()
    assert r.close(timeout=0.3) is False
    assert time.monotonic() - t0 < 10
    # Nothing is lost: every report is in a sealed batch for the next reporter.
    total = sum(reports_pb2.ReportBatch.FromString(p.read_bytes()).count for p in batch_files(r))
    assert total == 10_000


# ------------------------------------------------------------------------------------ mechanisms


@pytest.mark.parametrize(
    ("params", "values"),
    [
        (RR, [True, False] * 10),
        (GRR, list(LABELS) * 5),
        (RAPPOR, ["alpha", "beta", "gamma", "delta"] * 5),
        (BASIC, list(LABELS) * 5),
        (BOOLEAN, [True, False] * 10),
    ],
    ids=["rr", "grr", "rappor", "basic-rappor", "boolean-rappor"],
)
def test_each_mechanism_end_to_end(
    make_server: Any, make_reporter: Any, params: MechanismParams, values: list[Any]
) -> None:
    server = make_server(params)
    secret = ClientSecret.from_bytes(SECRET)
    r = running(make_reporter(server.target, max_epsilon=10.0, secret=secret, batch_size=8))
    for v in values:
        r.report(v)
    assert r.flush(timeout=10)
    assert sum(server.servicer.counts()) == len(values)
    for msg in server.servicer.batches.values():
        columns = wire.batch_from_proto(msg, params, campaign_id=CID)
        if isinstance(params, RapporParams):
            assert isinstance(columns, tuple)
            assert set(columns[0].tolist()) == {secret.cohort(params.m)}
            assert columns[1].shape == (msg.count, 16)
    assert r.campaign is not None and r.campaign.params == params


def test_secret_file_is_created_only_for_rappor(make_server: Any, make_reporter: Any, tmp_path: Path) -> None:
    rr_server = make_server(RR)
    r = running(make_reporter(rr_server.target, state_dir=tmp_path / "rr"))
    r.report(True)
    assert r.flush(timeout=10)
    assert not (tmp_path / "rr" / "secret").exists()
    rappor_server = make_server(RAPPOR)
    r2 = running(make_reporter(rappor_server.target, state_dir=tmp_path / "rappor", max_epsilon=10.0))
    r2.report("x")
    assert r2.flush(timeout=10)
    secret = ClientSecret.load_or_create(tmp_path / "rappor" / "secret")
    (msg,) = rappor_server.servicer.batches.values()
    cohorts, _ = wire.batch_from_proto(msg, RAPPOR)
    assert cohorts.tolist() == [secret.cohort(RAPPOR.m)]


# ------------------------------------------------------------------------------ flush, close, misc


def test_flush_and_close_semantics(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    r = running(make_reporter(server.target))
    assert r.flush(timeout=5)  # nothing to do
    server.servicer.fail_unavailable = 10**9
    r.report("a")
    t0 = time.monotonic()
    assert r.flush(timeout=0.3) is False
    assert 0.25 <= time.monotonic() - t0 < 5
    server.servicer.fail_unavailable = 0
    assert r.flush(timeout=10)
    assert r.close() is True
    assert r.close() is True
    assert r.stats().state == "closed"
    with pytest.raises(ReporterClosedError):
        r.report("a")


def test_context_manager_and_exclusive_outbox(make_server: Any, tmp_path: Path) -> None:
    server = make_server()
    state = tmp_path / "state"
    with Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST) as r:
        with pytest.raises(StateFileError, match="in use"):
            Reporter(server.target, CID, max_epsilon=2.0, state_dir=state)
        r.report("a")
    assert server.servicer.counts() == [1]
    with pytest.raises(ReporterClosedError):
        r.report("a")
    # The lock is released on close: a new reporter may use the outbox.
    Reporter(server.target, CID, max_epsilon=2.0, state_dir=state).close(timeout=1)


def test_channel_credentials_hook(make_server: Any, make_reporter: Any) -> None:
    local = grpc.LocalConnectionType.LOCAL_TCP
    server = make_server(credentials=grpc.local_server_credentials(local))
    r = running(make_reporter(server.target, channel_credentials=grpc.local_channel_credentials(local)))
    r.report("a")
    assert r.flush(timeout=10) and server.servicer.counts() == [1]


def test_metadata_reaches_the_server(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    running(make_reporter(server.target, metadata=[("authorization", "Bearer t0ken")]))
    assert ("authorization", "Bearer t0ken") in server.servicer.metadata


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_epsilon": 0}, "max_epsilon"),
        ({"max_epsilon": float("inf")}, "max_epsilon"),
        ({"max_epsilon_inf": -1.0}, "max_epsilon_inf"),
        ({"batch_size": 0}, "batch_size"),
        ({"max_batch_age_s": 0}, "max_batch_age_s"),
        ({"initial_retry_delay_s": 5.0, "max_retry_delay_s": 1.0}, "initial_retry_delay_s"),
        ({"metadata": [("Authorization", "x")]}, "metadata[0]"),
        ({"campaign_id": ""}, "campaign_id"),
    ],
)
def test_invalid_arguments(tmp_path: Path, kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"max_epsilon": 1.0, "state_dir": tmp_path}
    args.update(kwargs)
    cid = args.pop("campaign_id", CID)
    with pytest.raises(InvalidParameterError) as info:
        Reporter("127.0.0.1:1", cid, **args)
    assert info.value.field == field


# ------------------------------------------------------- issue 13 item 10: pinning, losses, permanent errors


def _campaign_json(params: MechanismParams, path: Path, *, export: bool = False) -> Path:
    from google.protobuf.json_format import MessageToDict

    doc: Any = MessageToDict(campaign(params), preserving_proto_field_name=True)
    if export:  # the document of `ldp-aggregator campaign export ID --json`
        doc = {"format": "ldp-export/1", "campaign": doc, "n_reports": 0}
    import json

    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("source", ["info", "json", "export-json", "toml", "protobuf"])
def test_pinned_campaign_encodes_and_journals_before_the_server_answers(
    make_server: Any, make_reporter: Any, tmp_path: Path, source: str
) -> None:
    server = make_server()
    server.servicer.get_gate.clear()  # GetCampaign does not answer yet
    pin: Any
    if source == "info":
        pin = wire.CampaignInfo(campaign_id=CID, params=GRR)
    elif source in ("json", "export-json"):
        pin = _campaign_json(GRR, tmp_path / "c.json", export=source == "export-json")
    elif source == "toml":
        pin = tmp_path / "campaign.toml"
        pin.write_text(
            'mechanism = "grr"\ndomain = ["a", "b", "c", "d"]\n[params]\ntruth_probability = 0.5\n',
            encoding="utf-8",
        )
    else:
        pin = tmp_path / "c.pb"
        pin.write_bytes(campaign(GRR).SerializeToString())
    r = make_reporter(server.target, campaign=pin, batch_size=4)
    with pytest.raises(DomainError):
        r.report("z")  # known at once: refused synchronously, never queued raw
    for i in range(10):
        r.report(LABELS[i % 4])
    wait_for(lambda: r.stats().journaled == 10)
    s = r.stats()
    assert (s.state, s.parameters_from, s.encoded, s.sealed_batches) == ("starting", "pinned", 10, 2)
    assert server.servicer.attempts == []  # nothing is sent before the server confirms the campaign
    server.servicer.get_gate.set()
    assert r.flush(timeout=10)
    assert server.servicer.counts() == [2, 4, 4]
    assert r.stats().state == "running" and r.stats().lost_reports == 0
    assert r.close() is True


def test_pinned_values_survive_a_server_that_never_answers(make_server: Any, tmp_path: Path) -> None:
    """The README failure: values reported while the campaign is unknown were lost with exit 0."""
    server = make_server()
    server.servicer.get_gate.clear()
    state = tmp_path / "state"
    pin = wire.CampaignInfo(campaign_id=CID, params=GRR)
    r = Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, campaign=pin, **FAST)
    for i in range(25):
        r.report(LABELS[i % 4])
    assert r.close(timeout=0.3) is False  # nothing lost (no raise): sealed in the outbox
    assert r.stats().lost_reports == 0
    assert sum(reports_pb2.ReportBatch.FromString(p.read_bytes()).count for p in batch_files(r)) == 25
    server.servicer.get_gate.set()
    with Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST) as r2:
        assert r2.flush(timeout=10)
    assert server.servicer.counts() == [25]


def test_the_last_fetched_campaign_is_cached_and_used_at_once(make_server: Any, tmp_path: Path) -> None:
    server = make_server()
    state = tmp_path / "state"
    with Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST) as r:
        r.report("a")
        assert r.flush(timeout=10)
        assert r.stats().parameters_from == "server"
        cache = r.outbox_dir / "campaign.pb"
    assert wire.campaign_from_proto(campaign_pb2.Campaign.FromString(cache.read_bytes())).params == GRR
    server.servicer.get_gate.clear()
    r2 = Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST)
    r2.report("b")  # encoded at once with the cached parameters
    wait_for(lambda: r2.stats().journaled == 1)
    assert r2.stats().parameters_from == "cached"
    server.servicer.get_gate.set()
    assert r2.flush(timeout=10) and r2.close() is True
    assert server.servicer.counts() == [1, 1]
    # Opting out: values wait raw for the server, as before.
    server.servicer.get_gate.clear()
    r3 = Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, use_cached_campaign=False, **FAST)
    r3.report("c")
    assert r3.stats().encoded == 0 and r3.stats().parameters_from is None
    server.servicer.get_gate.set()
    assert r3.flush(timeout=10) and r3.close() is True


def test_a_pin_the_server_contradicts_is_never_sent(make_server: Any, tmp_path: Path) -> None:
    server = make_server()  # GRR with truth_probability 0.5
    server.servicer.get_gate.clear()
    other = GRRParams(domain=Domain.of(LABELS), truth_probability=0.6)  # same shape, other epsilon
    state = tmp_path / "state"
    pin = wire.CampaignInfo(campaign_id=CID, params=other)
    r = Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, campaign=pin, batch_size=4, **FAST)
    for i in range(6):
        r.report(LABELS[i % 4])
    wait_for(lambda: r.stats().journaled == 6)
    server.servicer.get_gate.set()
    wait_for(lambda: r.stats().state == "stopped")
    with pytest.raises(CampaignMismatchError):
        r.report("a")
    wait_for(lambda: r.stats().rejected_reports == 6)  # the stop is recorded first, then the batches moved
    s = r.stats()
    assert (s.rejected_reports, s.lost_reports, s.pending_reports) == (6, 6, 0)
    assert server.servicer.attempts == []
    with pytest.raises(ReportsLostError, match="6 mismatch") as info:
        r.close(timeout=1)
    assert isinstance(info.value.__cause__, CampaignMismatchError)
    # The cache now holds the server's campaign: the next start encodes with the right parameters.
    with Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST) as r2:
        assert r2.stats().parameters_from == "cached"
        r2.report("a")
        assert r2.flush(timeout=10)
    assert server.servicer.counts() == [1]


def test_a_pinned_campaign_over_budget_is_refused_at_once(tmp_path: Path) -> None:
    pin = wire.CampaignInfo(campaign_id=CID, params=RR)  # epsilon ln 3
    with pytest.raises(BudgetExceededError, match=r"max_epsilon=1\.0"):
        Reporter("127.0.0.1:1", CID, max_epsilon=1.0, state_dir=tmp_path, campaign=pin)
    with pytest.raises(InvalidParameterError, match="the campaign 'campaign-1'"):
        other = wire.CampaignInfo(campaign_id="other", params=RR)
        Reporter("127.0.0.1:1", CID, max_epsilon=2.0, state_dir=tmp_path, campaign=other)
    with pytest.raises(InvalidParameterError, match="readable campaign file"):
        Reporter("127.0.0.1:1", CID, max_epsilon=2.0, state_dir=tmp_path, campaign=tmp_path / "missing.json")
    # Nothing was left locked.
    Reporter("127.0.0.1:1", CID, max_epsilon=2.0, state_dir=tmp_path).close(timeout=0)


@pytest.mark.parametrize("code", [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED])
def test_refused_credentials_on_get_campaign_stop_at_once(
    make_server: Any, make_reporter: Any, code: grpc.StatusCode
) -> None:
    server = make_server()
    server.servicer.get_code = code
    server.servicer.get_gate.clear()
    r = make_reporter(server.target)
    for i in range(2000):
        r.report(LABELS[i % 4])
    server.servicer.get_gate.set()
    wait_for(lambda: r.stats().state == "stopped")
    time.sleep(0.2)  # several retry delays (FAST): no second attempt
    assert server.servicer.get_attempts == 1
    with pytest.raises(AccessDeniedError, match=code.name):
        r.report("a")
    assert code.name in str(r.stats().last_error)
    with pytest.raises(ReportsLostError, match="2000 stopped") as info:
        r.close(timeout=1)
    assert isinstance(info.value.__cause__, AccessDeniedError)


def test_refused_credentials_keep_pinned_reports_for_the_next_run(make_server: Any, tmp_path: Path) -> None:
    server = make_server()
    server.servicer.get_code = grpc.StatusCode.PERMISSION_DENIED
    state = tmp_path / "state"
    pin = wire.CampaignInfo(campaign_id=CID, params=GRR)
    r = Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, campaign=pin, **FAST)
    for i in range(30):
        r.report(LABELS[i % 4])
    wait_for(lambda: r.stats().state == "stopped")
    with pytest.raises(AccessDeniedError):  # nothing lost: the stop itself is raised
        r.close(timeout=1)
    assert r.stats().lost_reports == 0
    server.servicer.get_code = None  # a reporter with valid credentials sends them
    with Reporter(server.target, CID, max_epsilon=2.0, state_dir=state, **FAST) as r2:
        assert r2.flush(timeout=10)
    assert sum(server.servicer.counts()) == 30


def test_refused_credentials_on_submit_stop_and_keep_the_batch(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    r = running(make_reporter(server.target))
    server.servicer.submit_code = grpc.StatusCode.PERMISSION_DENIED
    r.report("a")
    assert not r.flush(timeout=10)
    assert r.stats().state == "stopped" and len(server.servicer.attempts) == 1
    with pytest.raises(AccessDeniedError):
        r.report("b")
    assert len(batch_files(r)) == 1 and r.stats().rejected_batches == 0  # kept, not rejected


def test_on_discard_receives_every_loss_and_close_does_not_raise(
    make_server: Any, make_reporter: Any
) -> None:
    server = make_server()
    server.servicer.get_gate.clear()
    events: list[Discard] = []
    r = make_reporter(server.target, max_pending=3, on_discard=events.append)
    for label in "abcde":
        r.report(label)  # 3 wait raw, 2 overflow
    assert r.close(timeout=0.2) is False  # the callback was given: no ReportsLostError
    assert [(e.reason, e.count) for e in events] == [("overflow", 1), ("overflow", 1), ("stopped", 3)]
    assert r.stats().lost_reports == 5


def test_rejected_batches_are_losses_too(make_server: Any, make_reporter: Any) -> None:
    server = make_server()
    server.servicer.submit_code = grpc.StatusCode.INVALID_ARGUMENT
    r = running(make_reporter(server.target))
    r.report("a")
    assert r.flush(timeout=10)
    with pytest.raises(ReportsLostError, match="1 rejected"):
        r.close()


APP = r"""
import sys
from ldp_client.reporter import Reporter
with Reporter(sys.argv[1], "campaign-1", max_epsilon=2.0, state_dir=sys.argv[2],
              initial_retry_delay_s=0.01, max_retry_delay_s=0.05) as r:
    for i in range(2000):
        r.report("abcd"[i % 4])
print("the app finished", flush=True)
"""


def test_an_app_with_a_wrong_role_token_exits_non_zero(make_server: Any, tmp_path: Path) -> None:
    """The README snippet with a token the server refuses no longer ends silently with exit 0."""
    server = make_server()
    server.servicer.get_code = grpc.StatusCode.PERMISSION_DENIED
    proc = subprocess.run(
        [sys.executable, "-c", APP, server.target, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode != 0
    assert "the app finished" not in proc.stdout
    assert "PERMISSION_DENIED" in proc.stderr
    # Usually the loop ends before the refusal arrives and close() says all 2000 values were lost; on a
    # loaded machine the refusal can come first, and report() raises AccessDeniedError mid-loop (the values
    # accepted until then are the ones said lost). Either way the app fails loudly.
    assert "lost 2000" in proc.stderr or ", in report\n" in proc.stderr, proc.stderr
    assert server.servicer.get_attempts == 1
