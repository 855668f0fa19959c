"""The device's privacy ledger (ldp_client.reporter.ledger) and the budget policies a Reporter enforces.

The ledger's own rules are checked on :class:`DeviceLedger` with a test clock (rolling window, memoization,
caps, durability, torn tails); the Reporter's use of it against the in-process fake Collector of
test_reporter; and the fault rule (spend durable before the report is journaled) by SIGKILL-ing a real
child process at that point, and at random points in a loop.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ldp_client.reporter.policy as policy_module
from ldp_client import _journal_rows, registry, wire
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.errors import (
    BudgetExceededError,
    DomainError,
    InvalidParameterError,
    LdpError,
    StateFileError,
)
from ldp_client.mechanisms.paired import PairedParams
from ldp_client.mechanisms.rappor.encoding import BasicRapporEncoder
from ldp_client.params import BasicRapporParams, BooleanRapporParams, Domain
from ldp_client.reporter import Discard, Reporter, _parse_segment_header, _read_records
from ldp_client.reporter.ledger import (
    LEDGER_DIR,
    LEDGER_LOG,
    PAUSE_AFTER_SPEND_ENV,
    ChargePlan,
    DeviceLedger,
    FreshToken,
    memo_key,
    memo_scope,
)
from ldp_client.reporter.policy import BudgetPolicy, ReportCost, Term, compose_basic
from ldp_client.secret import ClientSecret
from tests.ldp_client.test_reporter import FAST, GRR, RAPPOR, SECRET, FakeServer, campaign, wait_for

ROOT = Path(__file__).resolve().parents[2]
EPS_GRR = math.log(3.0)
FRESH = ReportCost(epsilon=0.25, delta=0.0, epsilon_inf=math.inf, fingerprint="f" * 16)
MEMO = ReportCost(epsilon=0.5, delta=0.0, epsilon_inf=2.0, fingerprint="m" * 16)


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def open_ledger(tmp_path: Path) -> Iterator[Callable[..., DeviceLedger]]:
    opened: list[DeviceLedger] = []

    def make(**kwargs: Any) -> DeviceLedger:
        ledger = DeviceLedger.acquire(tmp_path / "state", **kwargs)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        with contextlib.suppress(Exception):
            ledger.release()


class Caps:
    """A policy on a ledger, charging as a Reporter does (a plan per campaign and cost)."""

    def __init__(self, ledger: DeviceLedger, **policy: Any) -> None:
        self.ledger = ledger
        self.policy = BudgetPolicy(**policy)

    def plan(self, cid: str, cost: ReportCost = FRESH) -> ChargePlan:
        return self.ledger.plan(cid, cost, self.policy)

    def fresh(self, cid: str, cost: ReportCost = FRESH) -> FreshToken:
        return self.ledger.charge_fresh(self.plan(cid, cost))

    def memo(self, cid: str, key: bytes | None, cost: ReportCost = MEMO) -> None:
        self.ledger.charge_memo(self.plan(cid, cost), key)


# ------------------------------------------------------------------------------------ the rules


def test_rolling_window_refuses_until_the_old_charges_leave_it(open_ledger: Any) -> None:
    clock = Clock()
    ledger = open_ledger(clock=clock)
    c = Caps(ledger, window_epsilon=0.5, window_seconds=100.0)
    c.fresh("a")
    clock.t += 30
    c.fresh("b")  # the window is per device: both campaigns count
    with pytest.raises(BudgetExceededError) as info:
        c.fresh("a")
    err = info.value
    assert (err.cap, err.limit, err.spent, err.requested) == ("window_epsilon", 0.5, 0.5, 0.25)
    assert "window_epsilon" in str(err) and "nothing was encoded or sent" in str(err)
    clock.t += 71  # the first charge is now 101 s old: out of the window, the second is not
    c.fresh("a")
    with pytest.raises(BudgetExceededError):
        c.fresh("a")
    spend = ledger.snapshot(c.policy)
    assert spend.window.epsilon == 0.5 and spend.lifetime.epsilon == 0.75
    assert spend.campaigns["a"].fresh_reports == 2 and spend.campaigns["b"].fresh_reports == 1


def test_a_repeated_memoized_value_costs_nothing_and_a_new_one_adds_epsilon_inf(open_ledger: Any) -> None:
    ledger = open_ledger(clock=Clock())
    c = Caps(ledger, lifetime_epsilon=4.0)
    for _ in range(5):
        c.memo("r", b"A" * 32)
    assert ledger.snapshot(c.policy).lifetime.epsilon == 2.0  # epsilon_inf once, not 5 * epsilon
    c.memo("r", b"B" * 32)
    spend = ledger.snapshot(c.policy)
    assert spend.lifetime.epsilon == 4.0
    assert (spend.campaigns["r"].memo_values, spend.campaigns["r"].memo_reports) == (2, 6)
    with pytest.raises(BudgetExceededError) as info:
        c.memo("r", b"C" * 32)
    assert (info.value.cap, info.value.requested) == ("lifetime_epsilon", 2.0)
    c.memo("r", b"A" * 32)  # a known value still reports: it costs nothing
    # Without a memo identity every report is a new value (over-counted, never under-counted).
    ledger2 = ledger.snapshot(BudgetPolicy()).lifetime.epsilon
    Caps(ledger).memo("s", None)
    Caps(ledger).memo("s", None)
    assert ledger.snapshot(BudgetPolicy()).lifetime.epsilon == ledger2 + 4.0


def test_the_campaign_cap_is_per_campaign_and_deltas_add(open_ledger: Any) -> None:
    ledger = open_ledger(clock=Clock())
    gauss = ReportCost(epsilon=0.5, delta=1e-6, epsilon_inf=math.inf, fingerprint="g" * 16)
    c = Caps(ledger, campaign_epsilon=1.0, lifetime_delta=3.5e-6)
    c.fresh("a", gauss)
    c.fresh("a", gauss)
    with pytest.raises(BudgetExceededError) as info:
        c.fresh("a", gauss)
    assert info.value.cap == "campaign_epsilon" and "campaign_id='a'" in str(info.value)
    c.fresh("b", gauss)  # another campaign has its own cap
    with pytest.raises(BudgetExceededError) as info:
        c.fresh("b", gauss)  # but the device has 3e-6 of its 3.5e-6 delta spent
    assert info.value.cap == "lifetime_delta"
    spend = ledger.snapshot(c.policy)
    assert spend.lifetime.epsilon == 1.5 and spend.lifetime.delta == pytest.approx(3e-6, rel=1e-12)
    assert spend.lifetime.delta >= 3e-6  # charges round up
    assert spend.campaigns["a"].spend.epsilon == 1.0


def test_caps_are_exact_in_units_never_crossed_by_rounding(open_ledger: Any) -> None:
    ledger = open_ledger(clock=Clock())
    tenth = ReportCost(epsilon=0.1, delta=0.0, epsilon_inf=math.inf, fingerprint="t" * 16)
    c = Caps(ledger, lifetime_epsilon=1.0)
    n = 0
    with pytest.raises(BudgetExceededError):
        while True:
            c.fresh("a", tenth)
            n += 1
    # The float 0.1 is just above 1/10: ten of them are above 1.0, so only nine fit.
    assert n == 9
    assert compose_basic([(0.1, 0.0, 10)])[0] > 1.0
    # A delta below the unit (2**-64) still counts: charges round up, never to nothing.
    tiny = ReportCost(epsilon=0.0, delta=1e-21, epsilon_inf=math.inf, fingerprint="d" * 16)
    Caps(ledger).fresh("b", tiny)
    assert ledger.snapshot(BudgetPolicy()).campaigns["b"].spend.delta >= 1e-21


def test_cancel_undoes_a_charge_not_yet_persisted(open_ledger: Any) -> None:
    ledger = open_ledger(clock=Clock())
    c = Caps(ledger, lifetime_epsilon=0.25)
    charge = c.fresh("a")
    ledger.cancel(c.plan("a"), charge)
    again = c.fresh("a")  # the cap is free again
    ledger.persist()
    ledger.cancel(c.plan("a"), again)  # durable: it stays
    assert ledger.snapshot(c.policy).lifetime.epsilon == 0.25
    assert ledger.snapshot(c.policy).window.epsilon == 0.25


def test_another_composer_is_used_for_totals_and_caps(
    open_ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[Term]] = []

    def doubled(terms: Any) -> tuple[float, float]:
        terms = list(terms)
        calls.append(terms)
        eps, delta = compose_basic(terms)
        return 2 * eps, 2 * delta

    # The seam: the module-level rule is what every ledger a Reporter opens uses.
    monkeypatch.setattr(policy_module, "DEVICE_COMPOSER", doubled)
    ledger = open_ledger(clock=Clock())
    c = Caps(ledger, lifetime_epsilon=1.0)
    c.fresh("a")
    c.fresh("a")  # 2 * 0.5 = 1.0
    with pytest.raises(BudgetExceededError):
        c.fresh("a")
    assert ledger.snapshot(c.policy).lifetime.epsilon == 1.0
    assert [(0.25, 0.0, 2)] in calls


# ------------------------------------------------------------------------------------ durability


def test_the_spend_survives_a_restart_and_a_known_value_stays_free(tmp_path: Path, open_ledger: Any) -> None:
    clock = Clock()
    ledger = open_ledger(clock=clock)
    c = Caps(ledger, window_epsilon=2.4, window_seconds=60.0)
    c.fresh("a")
    c.memo("r", b"A" * 32)
    c.memo("r", b"A" * 32)
    ledger.release()
    again = DeviceLedger.acquire(tmp_path / "state", clock=clock)
    try:
        c2 = Caps(again, window_epsilon=2.4, window_seconds=60.0)
        spend = again.snapshot(c2.policy)
        assert (spend.lifetime.epsilon, spend.window.epsilon) == (2.25, 2.25)
        assert (spend.campaigns["r"].memo_values, spend.campaigns["r"].memo_reports) == (1, 2)
        c2.memo("r", b"A" * 32)  # known across the restart: free
        assert again.snapshot(c2.policy).lifetime.epsilon == 2.25
        with pytest.raises(BudgetExceededError):
            c2.fresh("a")  # 2.4 is the window cap and 2.25 is spent
        clock.t += 61
        c2.fresh("a")  # the window rolled, after the restart too
    finally:
        again.release()


def test_a_torn_tail_is_cut_so_later_charges_stay_readable(tmp_path: Path) -> None:
    ledger = DeviceLedger.acquire(tmp_path / "state", clock=Clock())
    Caps(ledger).fresh("a")
    ledger.persist()
    Caps(ledger).fresh("a")
    ledger.release()
    log = tmp_path / "state" / LEDGER_DIR / LEDGER_LOG
    data = log.read_bytes()
    log.write_bytes(data[:-3])  # a crash in the middle of the second append
    ledger = DeviceLedger.acquire(tmp_path / "state", clock=Clock())
    Caps(ledger).fresh("a")
    ledger.release()
    ledger = DeviceLedger.acquire(tmp_path / "state", clock=Clock())
    try:
        assert ledger.snapshot(BudgetPolicy()).lifetime.epsilon == 0.5  # the first and the third
    finally:
        ledger.release()


def test_a_corrupt_record_in_the_middle_is_refused_not_guessed(tmp_path: Path) -> None:
    log = tmp_path / "state" / LEDGER_DIR / LEDGER_LOG
    log.parent.mkdir(parents=True)
    from ldp_client.reporter.outbox import record

    log.write_bytes(record(b'{"k":"f","c":"a"}'))  # a checksummed record this library never writes
    with pytest.raises(StateFileError, match="unreadable record"):
        DeviceLedger.acquire(tmp_path / "state")


def test_one_process_holds_the_ledger(tmp_path: Path) -> None:
    ledger = DeviceLedger.acquire(tmp_path / "state")
    code = (
        "import sys\nfrom pathlib import Path\nfrom ldp_client.errors import StateFileError\n"
        "from ldp_client.reporter.ledger import DeviceLedger\n"
        "try:\n    DeviceLedger.acquire(Path(sys.argv[1]))\nexcept StateFileError as e:\n"
        "    print(e)\n    sys.exit(7)\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "state")],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    finally:
        ledger.release()
    assert proc.returncode == 7 and "in use by another process" in proc.stdout


def test_bad_policies_name_the_field() -> None:
    with pytest.raises(InvalidParameterError, match=r"budget\.window_seconds=0"):
        BudgetPolicy(window_seconds=0)
    with pytest.raises(InvalidParameterError, match=r"budget\.lifetime_delta=2"):
        BudgetPolicy(lifetime_delta=2)
    with pytest.raises(InvalidParameterError, match=r"budget\.campaign_epsilon=nan"):
        BudgetPolicy(campaign_epsilon=float("nan"))


# ------------------------------------------------------------------------------------ the Reporter


@pytest.fixture
def server() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(params: Any = GRR, cid: str = "c1") -> FakeServer:
        s = FakeServer(campaign(params, cid=cid))
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def reporter(target: str, state: Path, cid: str = "c1", params: Any = GRR, **kwargs: Any) -> Reporter:
    info = wire.campaign_from_proto(campaign(params, cid=cid))
    kwargs.setdefault("max_batch_age_s", 3600.0)
    return Reporter(target, cid, max_epsilon=10.0, state_dir=state, campaign=info, **FAST, **kwargs)


def test_the_reporter_refuses_before_encoding_and_keeps_running(server: Any, tmp_path: Path) -> None:
    s = server()
    r = reporter(s.target, tmp_path, budget=BudgetPolicy(campaign_epsilon=2.5 * EPS_GRR))
    try:
        r.report("a")
        r.report("b")
        with pytest.raises(BudgetExceededError) as info:
            r.report("c")
        assert info.value.cap == "campaign_epsilon"
        assert info.value.spent == pytest.approx(2 * EPS_GRR)
        assert r.stats().encoded == 2 and r.stats().state != "stopped"
        with pytest.raises(LdpError):
            r.report("not in the domain")  # a DomainError: charged nothing
        spend = r.privacy_spend()
        assert spend.campaigns["c1"].fresh_reports == 2
        assert spend.lifetime.epsilon == pytest.approx(2 * EPS_GRR)
        assert r.flush(timeout=10)
    finally:
        r.close()
    assert s.servicer.counts() == [2]


def test_rappor_through_the_reporter_charges_epsilon_inf_once_per_value(server: Any, tmp_path: Path) -> None:
    s = server(RAPPOR)
    secret = ClientSecret.from_bytes(SECRET)
    eps_inf = RAPPOR.epsilon_inf
    policy = BudgetPolicy(lifetime_epsilon=2 * eps_inf)
    with reporter(s.target, tmp_path, params=RAPPOR, secret=secret, budget=policy) as r:
        for _ in range(20):
            r.report("settings-page")
        r.report("home")
        with pytest.raises(BudgetExceededError) as info:
            r.report("third value")
        assert info.value.cap == "lifetime_epsilon"
        r.report("home")  # known: free
        spend = r.privacy_spend().campaigns["c1"]
        assert (spend.memo_values, spend.memo_reports, spend.fresh_reports) == (2, 22, 0)
        assert spend.spend.epsilon == pytest.approx(2 * eps_inf)
        assert r.flush(timeout=10)
    log = (tmp_path / LEDGER_DIR / LEDGER_LOG).read_bytes()
    for value in (b"settings-page", b"home", b"third value"):
        assert value not in log  # memo keys are HMACs, never values
    # After a restart the known values are still free and the cap still holds.
    with reporter(s.target, tmp_path, params=RAPPOR, secret=secret, budget=policy) as r:
        r.report("settings-page")
        with pytest.raises(BudgetExceededError):
            r.report("fourth value")
        assert r.privacy_spend().lifetime.epsilon == pytest.approx(2 * eps_inf)
        assert r.flush(timeout=10)
    # Another secret memoizes other permanent responses: the same value is new again.
    other = ClientSecret.from_bytes(bytes(32))
    with (
        reporter(s.target, tmp_path, params=RAPPOR, secret=other, budget=policy) as r,
        pytest.raises(BudgetExceededError),
    ):
        r.report("settings-page")


def test_an_uncapped_fresh_reporter_is_charged_by_its_thread(server: Any, tmp_path: Path) -> None:
    s = server()
    with reporter(s.target, tmp_path) as r:
        for v in ("a", "b", "c", "a"):
            r.report(v)
        assert r.flush(timeout=10)
        spend = r.privacy_spend()
    assert spend.campaigns["c1"].fresh_reports == 4
    assert spend.lifetime.epsilon == pytest.approx(4 * EPS_GRR)
    # ... and durably: a capped reporter started later sees it.
    with reporter(s.target, tmp_path, budget=BudgetPolicy(lifetime_epsilon=4.5 * EPS_GRR)) as r:
        with pytest.raises(BudgetExceededError) as info:
            r.report("a")
        assert info.value.spent == pytest.approx(4 * EPS_GRR)


def test_reporters_of_one_state_dir_share_the_device_total(server: Any, tmp_path: Path) -> None:
    a, b = server(cid="a"), server(cid="b")
    policy = BudgetPolicy(lifetime_epsilon=3.5 * EPS_GRR)
    ra = reporter(a.target, tmp_path, cid="a", budget=policy)
    rb = reporter(b.target, tmp_path, cid="b", budget=policy)
    try:
        ra.report("a")
        ra.report("b")
        rb.report("c")
        with pytest.raises(BudgetExceededError):
            rb.report("d")
        spend = rb.privacy_spend()
        assert set(spend.campaigns) == {"a", "b"}
        assert ra.privacy_spend().lifetime == spend.lifetime
    finally:
        ra.close()
        rb.close()


def test_values_waiting_for_the_campaign_are_refused_as_a_counted_loss(server: Any, tmp_path: Path) -> None:
    s = server()
    s.servicer.get_gate.clear()  # hold GetCampaign: the values wait raw in memory
    losses: list[Discard] = []
    r = Reporter(
        s.target,
        "c1",
        max_epsilon=10.0,
        state_dir=tmp_path,
        budget=BudgetPolicy(lifetime_epsilon=2.5 * EPS_GRR),
        on_discard=losses.append,
        **FAST,
    )
    try:
        for v in ("a", "b", "c", "d"):
            r.report(v)
        s.servicer.get_gate.set()
        assert r.flush(timeout=10)
        st = r.stats()
        assert (st.encoded, st.dropped_budget, st.lost_reports) == (2, 2, 2)
        assert [(d.reason, d.count) for d in losses] == [("budget", 2)]
    finally:
        r.close()
    assert s.servicer.counts() == [2]


# ------------------------------------------------------------------------------------ faults

CHILD = r"""
import sys
from ldp_client import wire
from ldp_client.errors import BudgetExceededError
from ldp_client.params import Domain, GRRParams
from ldp_client.reporter import Reporter
from ldp_client.reporter.policy import BudgetPolicy
import time
state, cap, n, pause = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
params = GRRParams(domain=Domain.of(("a", "b", "c", "d")), truth_probability=0.5)
info = wire.CampaignInfo(campaign_id="c1", params=params)
# A collector that never answers: everything stays in the outbox.
r = Reporter("127.0.0.1:9", "c1", max_epsilon=10.0, state_dir=state, campaign=info,
             budget=BudgetPolicy(lifetime_epsilon=cap) if cap > 0 else None,  # 0: no cap
             batch_size=7, max_batch_age_s=3600.0)
print("started", flush=True)
made = 0
try:
    for i in range(n):
        r.report("abcd"[i % 4])
        made += 1
        time.sleep(pause)  # spread the reports so that the kills land between every step
except BudgetExceededError:
    pass
print("made", made, flush=True)
time.sleep(120)
"""


def _reports_on_disk(state: Path) -> int:
    """Every report the outbox holds (sealed batches and the journal's rows): what could ever be sent."""
    total = 0
    if not (state / "outbox").exists():
        return 0  # killed before the reporter opened its outbox
    for outbox in (state / "outbox").iterdir():
        sealed = set()
        for path in outbox.glob("*.batch"):
            batch = reports_pb2.ReportBatch.FromString(path.read_bytes())
            sealed.add(batch.batch_id)
            total += batch.count
        journal = outbox / "journal"
        if journal.exists():
            records, _torn = _read_records(journal.read_bytes())
            # A journal whose batch is already sealed (killed before it was removed) is dropped on recovery.
            if records and _parse_segment_header(records[0])[0] not in sealed:
                _bid, info = _parse_segment_header(records[0])
                rows = sum(len(rec) - 1 for rec in records[1:])
                total += rows // _journal_rows.row_bytes(info.params)
    return total


def _spent(state: Path) -> float:
    ledger = DeviceLedger.acquire(state)
    try:
        return ledger.snapshot(BudgetPolicy()).lifetime.epsilon
    finally:
        ledger.release()


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.mark.parametrize("capped", [True, False], ids=["capped", "uncapped"])
def test_sigkill_between_spend_recorded_and_report_journaled(tmp_path: Path, capped: bool) -> None:
    # Capped, each report is charged on the app thread; uncapped (grr), by the reporter's thread for the
    # group it is about to journal: either way the spend is on disk before the journal is written.
    state = tmp_path / "device"
    marker = tmp_path / "spent"
    env = dict(os.environ, **{PAUSE_AFTER_SPEND_ENV: str(marker)})
    cap = 5.5 * EPS_GRR
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state), repr(cap if capped else 0.0), "5", "0"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
        env=env,
    )
    try:
        wait_for(marker.exists, timeout=60)  # the spend of the first drained reports is on disk
    finally:
        _kill(proc)  # ... and they are not journaled yet
    on_disk = _reports_on_disk(state)
    spent = _spent(state)
    assert on_disk == 0  # killed before the journal was written
    assert spent >= EPS_GRR * (1 - 1e-12)  # the spend of what was drained is not lost
    assert spent <= cap
    # The restarted device counts that spend: it can never make more than cap / epsilon reports in all.
    made = 0
    r = reporter("127.0.0.1:9", state, budget=BudgetPolicy(lifetime_epsilon=cap))
    try:
        with contextlib.suppress(BudgetExceededError):
            for _ in range(10):
                r.report("a")
                made += 1
    finally:
        r.close(timeout=0)
    assert made == math.floor((cap - spent) / EPS_GRR)
    assert _spent(state) <= cap


@pytest.mark.slow
def test_sigkill_at_random_points_never_exceeds_the_cap_nor_loses_a_spend(tmp_path: Path) -> None:
    state = tmp_path / "device"
    cap = 40.5 * EPS_GRR
    rng = random.Random(17)
    for _ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(state), repr(cap), "1000", "0.002"],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "started"
            # Anywhere while reporting: charging, persisting, journaling, sealing (batches of 7).
            time.sleep(rng.uniform(0.0, 0.08))
        finally:
            _kill(proc)
        spent = _spent(state)
        on_disk = _reports_on_disk(state)
        # Every report that could ever be sent was charged durably, and the charges never pass the cap.
        assert on_disk * EPS_GRR <= spent * (1 + 1e-12)
        assert spent <= cap
    # The device goes on to its cap: exactly 40 reports in all, however many the killed runs made.
    r = reporter("127.0.0.1:9", state, budget=BudgetPolicy(lifetime_epsilon=cap))
    try:
        with contextlib.suppress(BudgetExceededError):
            for _ in range(50):
                r.report("a")
    finally:
        r.close(timeout=0)
    assert _spent(state) == pytest.approx(40 * EPS_GRR)
    assert _reports_on_disk(state) <= 40


# ------------------------------------------------------------------------------------ the spec hooks


def test_every_memoized_mechanism_gives_distinct_values_distinct_memo_identities() -> None:
    checked = set()
    for spec in registry.SPECS:
        for params in spec.examples():
            delta = wire.delta(params)
            assert isinstance(delta, float) and 0.0 <= delta < 1.0, spec.name
            if not math.isfinite(wire.epsilon_inf(params)):
                continue  # fresh noise per report: charged per report, no identity needed
            inputs = list(spec.campaign_inputs(params, "c"))[:8]
            ids = [spec.memo_identity(params, v) for v in inputs]
            # None would charge epsilon_inf on every report: a memoized mechanism must say what it memoizes.
            assert all(isinstance(i, bytes) for i in ids), spec.name
            assert len(set(ids)) == len(inputs), spec.name
            checked.add(spec.name)
    assert {"rappor", "basic-rappor", "boolean-rappor", "paired"} <= checked
    assert {"dbitflip", "onebitmean", "lgrr", "losue"} <= checked


def test_memo_identities_follow_the_permanent_response() -> None:
    secret = ClientSecret.from_bytes(SECRET)
    basic = BasicRapporParams(domain=Domain.of(("a", "b", "c")), f=0.5, p=0.5, q=0.75)
    spec = registry.spec_for(basic)
    # The identity is what the permanent response is derived from: label "b" and index 1 of an unlabelled
    # domain of the same size have one identity and one permanent response.
    indexed = BasicRapporParams(domain=Domain.of(3), f=0.5, p=0.5, q=0.75)
    assert spec.memo_identity(basic, "b") == spec.memo_identity(indexed, 1)
    prr = BasicRapporEncoder(basic, campaign_id="c", secret=secret).permanent_response("b")
    assert prr == BasicRapporEncoder(indexed, campaign_id="c", secret=secret).permanent_response(1)
    with pytest.raises(DomainError):
        spec.memo_identity(basic, "z")
    rappor = registry.spec_for(RAPPOR)
    assert rappor.memo_identity(RAPPOR, "x") != rappor.memo_identity(RAPPOR, "y")
    with pytest.raises(DomainError):
        rappor.memo_identity(RAPPOR, 3)
    boolean = BooleanRapporParams(f=0.5, p=0.5, q=0.75)
    with pytest.raises(DomainError):
        registry.spec_for(boolean).memo_identity(boolean, 1)
    paired = PairedParams(first=basic, second=RAPPOR)
    pspec = registry.spec_for(paired)
    assert pspec.memo_identity(paired, ("b", "x")) != pspec.memo_identity(paired, ("b", "y"))
    with pytest.raises(DomainError, match="second"):
        pspec.memo_identity(paired, ("b", 7))
    # Keys differ per secret, campaign and parameters, never contain the identity, and have a fixed size.
    scope = memo_scope(secret, "c", "f" * 16)
    key = memo_key(scope, b"news.example")
    assert len(key) == 32 and b"news" not in key and key == memo_key(scope, b"news.example")
    assert key != memo_key(memo_scope(secret, "d", "f" * 16), b"news.example")
    assert key != memo_key(memo_scope(secret, "c", "e" * 16), b"news.example")
    other = ClientSecret.from_bytes(bytes(32))
    assert key != memo_key(memo_scope(other, "c", "f" * 16), b"news.example")


def test_an_advanced_composer_admits_more_small_reports_under_the_same_cap(open_ledger: Any) -> None:
    """compose_advanced (Dwork-Rothblum-Vadhan, heterogeneous) is a ledger rule: under a lifetime cap of
    epsilon 3, small fresh reports fit where basic composition would refuse them."""
    from ldp_client.reporter.policy import compose_advanced

    ledger = open_ledger(clock=Clock(), compose=compose_advanced(1e-9))
    c = Caps(ledger, lifetime_epsilon=3.0, lifetime_delta=1e-6)
    small = ReportCost(epsilon=0.01, delta=0.0, epsilon_inf=math.inf, fingerprint="s" * 16)
    fitted = 0
    with pytest.raises(BudgetExceededError):
        for _ in range(10_000):
            c.fresh("a", small)
            fitted += 1
    assert fitted > 300  # basic composition stops at 300 reports of 0.01
    spend = ledger.snapshot(c.policy).lifetime
    assert spend.epsilon <= 3.0 and spend.delta == pytest.approx(1e-9, rel=1e-6)


def test_a_discovery_campaign_takes_one_report_per_device_also_after_a_restart(
    tmp_path: Path, open_ledger: Any
) -> None:
    """pem's spec says reports_per_device = 1 (user-level epsilon); the ledger refuses a second report to
    that campaign before anything is encoded, also after a restart, and other campaigns stay open."""
    from ldp_client.mechanisms.pem import SPEC as PEM_SPEC

    assert PEM_SPEC.reports_per_device == 1
    once = ReportCost(epsilon=4.0, delta=0.0, epsilon_inf=math.inf, fingerprint="p" * 16, max_reports=1)
    ledger = open_ledger(clock=Clock())
    c = Caps(ledger)
    c.fresh("words", once)
    with pytest.raises(BudgetExceededError) as info:
        c.fresh("words", once)
    assert info.value.cap == "campaign_reports" and info.value.limit == 1.0
    c.fresh("other", once)  # one report per campaign, not per device
    ledger.persist()
    ledger.release()
    again = open_ledger(clock=Clock())
    with pytest.raises(BudgetExceededError):
        Caps(again).fresh("words", once)


def test_the_reporter_sends_one_report_per_device_to_a_discovery_campaign(
    server: Any, tmp_path: Path
) -> None:
    from ldp_client.mechanisms.pem import PEMParams

    pem = PEMParams.from_epsilon(4.0, max_length=8, top_k=8, step_bits=4)
    s = server(pem)
    with reporter(s.target, tmp_path, params=pem, secret=ClientSecret.from_bytes(SECRET)) as r:
        r.report("apple")
        with pytest.raises(BudgetExceededError) as info:
            r.report("banana")
        assert info.value.cap == "campaign_reports" and r.stats().encoded == 1
        assert r.flush(timeout=10)
    assert s.servicer.counts() == [1]


def test_a_numerical_composer_admits_more_small_reports_and_is_never_looser_than_basic(
    open_ledger: Any,
) -> None:
    """compose_numerical (privacy loss distributions): under a lifetime cap of epsilon 2 at delta 1e-9,
    more reports of epsilon 0.05 fit than the 40 of basic composition; few large ones get the basic total."""
    from ldp_client.accounting.composition import optimal_composition_epsilon
    from ldp_client.reporter.policy import compose_numerical

    composer = compose_numerical(1e-9)
    eps, delta = composer([(0.05, 0.0, 400)])
    assert eps == pytest.approx(optimal_composition_epsilon(0.05, 400, 1e-9), abs=400 * 1e-3)
    assert eps < 20.0 and delta == pytest.approx(1e-9)
    # One report off the 1e-3 grid: its loss is rounded up there, so the basic total is the tighter one.
    assert composer([(1 / 30, 0.0, 1)]) == compose_basic([(1 / 30, 0.0, 1)])
    assert composer([(3.0, 0.0, 2)])[0] <= 6.0
    ledger = open_ledger(clock=Clock(), compose=composer)
    c = Caps(ledger, lifetime_epsilon=2.0, lifetime_delta=1e-6)
    small = ReportCost(epsilon=0.05, delta=0.0, epsilon_inf=math.inf, fingerprint="s" * 16)
    fitted = 0
    with pytest.raises(BudgetExceededError):
        for _ in range(1_000):
            c.fresh("a", small)
            fitted += 1
    assert fitted > 40
