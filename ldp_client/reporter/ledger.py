"""The device's privacy ledger: what this device has spent, per campaign, per memoized value and over time.

One ledger per device, in ``<state_dir>/ledger/spend.log`` beside the client secret (``state_dir/secret``),
shared by every :class:`~ldp_client.reporter.Reporter` of the process on that ``state_dir`` (one object,
reference-counted) and held by one process at a time (an exclusive ``flock``, like the outbox's lock).

What it records (never a value):

* per campaign, fresh reports: the per-report (epsilon, delta), how many, and when (per second);
* per memoized value: a *memo key*, HMAC-SHA256 under the client secret of (campaign, parameters'
  fingerprint, the mechanism's memo identity of the value) (:func:`memo_key`), with its (epsilon_inf,
  delta), when it was first reported, and how many reports of it were made. The key cannot be inverted
  without the secret, which never leaves the device.

The composition rules and the caps are in :mod:`ldp_client.reporter.policy`. Ordering (the fault rule):
:meth:`DeviceLedger.charge` reserves a report's cost in memory on the app thread, before the value is
encoded (a report over a cap is refused there); the reporter's thread calls :meth:`DeviceLedger.persist`,
which appends the reserved charges to the log and ``fsync``-s it, BEFORE it journals those reports in the
outbox. A crash before ``persist`` loses reports that were only in memory (never journaled, never sent)
together with their charges; a crash after it may leave charges without reports: over-counted, never
under-counted.

The log reuses the outbox's record framing (:func:`~ldp_client.reporter.outbox.record`: length, CRC-32,
payload; here the payload is one JSON object). On open a torn tail (a crash in the middle of an append,
whose reports were therefore never journaled) is cut off before anything is appended, so later records
stay readable.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from ldp_client.errors import BudgetExceededError, StateFileError
from ldp_client.reporter.outbox import fsync_dir, read_records, record, write_all
from ldp_client.reporter.policy import (
    MAX_WINDOW_SECONDS,
    BudgetPolicy,
    CampaignSpend,
    Composer,
    PrivacySpend,
    ReportCost,
    Spend,
    compose_basic,
    from_units,
    to_units_down,
    to_units_up,
)
from ldp_client.secret import ClientSecret

if sys.platform != "win32":
    import fcntl

LEDGER_DIR: Final = "ledger"
LEDGER_LOG: Final = "spend.log"
#: HMAC message prefix of a memo key (changing it makes every memoized value new again: a new version).
MEMO_KEY_LABEL: Final = b"ldp-client/ledger/memo-key/v1"
#: Test-only: the path of a file the reporter's thread creates once it has persisted a spend and before it
#: journals the reports, then waits there forever (the fault test kills the process at that point).
PAUSE_AFTER_SPEND_ENV: Final = "LDP_CLIENT_TEST_PAUSE_AFTER_SPEND"


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def memo_key(secret: ClientSecret, campaign_id: str, fingerprint: str, identity: bytes) -> bytes:
    """HMAC-SHA256(secret, label || campaign || parameters' fingerprint || memo identity), length-prefixed.

    Equal exactly when the mechanism memoizes one permanent response for both values (same campaign, same
    parameters, same identity), so a repeat is recognised without storing the value.
    """
    msg = MEMO_KEY_LABEL + _lp(campaign_id.encode("utf-8")) + _lp(fingerprint.encode("ascii")) + _lp(identity)
    return secret.prf(msg)


class _Tally:
    """A scope's total: exact unit sums (basic composition) and the terms, for another composer."""

    __slots__ = ("delta_u", "eps_u", "terms")

    def __init__(self) -> None:
        self.eps_u = 0
        self.delta_u = 0
        self.terms: Counter[tuple[float, float]] = Counter()

    def add(self, eps: float, delta: float, n: int) -> None:
        self.eps_u += to_units_up(eps) * n
        self.delta_u += to_units_up(delta) * n
        self.terms[(eps, delta)] += n

    def sub(self, eps: float, delta: float, n: int) -> None:
        self.eps_u -= to_units_up(eps) * n
        self.delta_u -= to_units_up(delta) * n
        self.terms[(eps, delta)] -= n
        if self.terms[(eps, delta)] <= 0:
            del self.terms[(eps, delta)]

    def spend(self, compose: Composer) -> Spend:
        if compose is compose_basic:
            return Spend(from_units(self.eps_u), from_units(self.delta_u))
        eps, delta = compose([(e, d, k) for (e, d), k in self.terms.items()])
        return Spend(eps, delta)


class _Window:
    """Charges of the last ``seconds``: per (second, epsilon, delta) entries, oldest first."""

    __slots__ = ("entries", "seconds", "tally")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.tally = _Tally()
        self.entries: deque[list[Any]] = deque()  # [second, eps, delta, n]

    def add(self, sec: int, eps: float, delta: float, n: int) -> list[Any]:
        last = self.entries[-1] if self.entries else None
        if last is not None and last[0] == sec and last[1] == eps and last[2] == delta:
            last[3] += n
        else:
            last = [sec, eps, delta, n]
            self.entries.append(last)
        self.tally.add(eps, delta, n)
        return last

    def prune(self, now: float) -> None:
        # An entry's second is the ceiling of its charges' times: it leaves the window no earlier than they.
        entries = self.entries
        while entries and entries[0][0] <= now - self.seconds:
            _sec, eps, delta, n = entries.popleft()
            self.tally.sub(eps, delta, n)


@dataclass(slots=True)
class _CampaignState:
    tally: _Tally = field(default_factory=_Tally)
    fresh_reports: int = 0
    memo_values: int = 0
    memo_reports: int = 0
    first_at: float = math.inf
    last_at: float = 0.0

    def seen(self, sec: float) -> None:
        self.first_at = min(self.first_at, sec)
        self.last_at = max(self.last_at, sec)


@dataclass(slots=True)
class FreshCharge:
    """A reserved fresh charge (:meth:`DeviceLedger.cancel` undoes it while it is not yet persisted)."""

    campaign_id: str
    epsilon: float
    delta: float
    sec: int
    windows: list[tuple[_Window, list[Any]]]
    persisted: bool = False
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class Caps:
    """A policy's caps in units (rounded down), computed once per reporter."""

    policy: BudgetPolicy
    lifetime: tuple[int | None, int | None]
    window: tuple[int | None, int | None]
    campaign: tuple[int | None, int | None]

    @classmethod
    def of(cls, policy: BudgetPolicy) -> Caps:
        def u(x: float | None) -> int | None:
            return None if x is None else to_units_down(x)

        return cls(
            policy=policy,
            lifetime=(u(policy.lifetime_epsilon), u(policy.lifetime_delta)),
            window=(u(policy.window_epsilon), u(policy.window_delta)),
            campaign=(u(policy.campaign_epsilon), u(policy.campaign_delta)),
        )


class DeviceLedger:
    """The device's durable spend record and cap checks (module docstring); get it with :meth:`acquire`.

    Args (of :meth:`acquire`):
        state_dir: the app's state directory (the ledger is ``state_dir/ledger/spend.log``).
        compose: the composition rule of the totals (:func:`~ldp_client.reporter.policy.compose_basic`;
            the seam for an accountant).
        clock: Unix time in seconds (tests pass their own).
    """

    _registry: ClassVar[dict[Path, DeviceLedger]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, directory: Path, fd: int, compose: Composer, clock: Callable[[], float]) -> None:
        self.directory = directory
        self._fd = fd
        self._compose = compose
        self._clock = clock
        self._refs = 0
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._lifetime = _Tally()
        self._campaigns: dict[str, _CampaignState] = {}
        self._memo: dict[bytes, str] = {}  # memo key -> campaign id
        self._master = _Window(MAX_WINDOW_SECONDS)
        self._windows: dict[float, _Window] = {MAX_WINDOW_SECONDS: self._master}
        self._last_sec = 0
        # Not yet persisted: fresh charges, new memo keys, and repeat counts of known keys.
        self._pending_fresh: list[FreshCharge] = []
        self._pending_memo: list[dict[str, Any]] = []
        self._pending_repeats: Counter[bytes] = Counter()

    # ----------------------------------------------------------------------------------- open, close

    @classmethod
    def acquire(
        cls,
        state_dir: Path,
        *,
        compose: Composer = compose_basic,
        clock: Callable[[], float] = time.time,
    ) -> DeviceLedger:
        """The process's ledger of ``state_dir`` (opened and locked on first use; :meth:`release` it).

        Raises:
            StateFileError: the ledger cannot be created or read, or another process holds it.
        """
        directory = (Path(state_dir) / LEDGER_DIR).resolve()
        with cls._registry_lock:
            ledger = cls._registry.get(directory)
            if ledger is None:
                ledger = cls._open(directory, compose, clock)
                cls._registry[directory] = ledger
            ledger._refs += 1
            return ledger

    def release(self) -> None:
        """Drop one reference; the last one persists what is pending and closes the log (lock released)."""
        with self._registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            del self._registry[self.directory]
        try:
            self.persist()
        finally:
            os.close(self._fd)

    @classmethod
    def _open(cls, directory: Path, compose: Composer, clock: Callable[[], float]) -> DeviceLedger:
        path = directory / LEDGER_LOG
        try:
            for d in (directory.parent, directory):
                d.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise StateFileError(
                f"privacy ledger {str(path)!r} cannot be opened ({exc}): allowed a writable directory"
            ) from exc
        try:
            if sys.platform != "win32":
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    raise StateFileError(
                        f"privacy ledger {str(path)!r} is in use by another process: allowed one process "
                        "per state_dir"
                    ) from exc
            ledger = cls(directory, fd, compose, clock)
            ledger._load(path)
        except BaseException:
            os.close(fd)
            raise
        fsync_dir(directory)
        return ledger

    def _load(self, path: Path) -> None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise StateFileError(f"privacy ledger {str(path)!r} is unreadable ({exc})") from exc
        records, torn = read_records(data)
        if torn:
            # A crash mid-append: those charges' reports were never journaled (persist comes first). Cut
            # the tail so that what is appended next stays readable.
            os.ftruncate(self._fd, len(data) - torn)
            os.fsync(self._fd)
        for payload in records:
            try:
                rec = json.loads(payload)
                self._replay(rec)
            except (ValueError, KeyError, TypeError) as exc:
                raise StateFileError(
                    f"privacy ledger {str(path)!r} has an unreadable record ({exc}): allowed records "
                    "written by this library (refusing to guess the spend; move the file away only if "
                    "the device may start its budget again)"
                ) from exc

    def _replay(self, rec: dict[str, Any]) -> None:
        kind = rec["k"]
        sec = int(rec["t"])
        self._last_sec = max(self._last_sec, sec)
        if kind == "r":
            cid = self._memo[bytes.fromhex(rec["h"])]
            state = self._campaigns[cid]
            state.memo_reports += int(rec["n"])
            state.seen(sec)
            return
        cid = str(rec["c"])
        eps, delta = float(rec["e"]), float(rec["d"])
        if kind == "f":
            self._apply(cid, eps, delta, int(rec["n"]), sec)
            self._campaigns[cid].fresh_reports += int(rec["n"])
        elif kind == "m":
            self._apply(cid, eps, delta, 1, sec)
            self._memo[bytes.fromhex(rec["h"])] = cid
            state = self._campaigns[cid]
            state.memo_values += 1
            state.memo_reports += 1
        else:
            raise ValueError(f"record kind {kind!r}")

    # ------------------------------------------------------------------------------------- charging

    def attach_window(self, seconds: float) -> None:
        """Keep a running total of the last ``seconds`` (a reporter's policy window; else on first use)."""
        with self._lock:
            self._window_locked(seconds, self._now_locked())

    def _window_locked(self, seconds: float, now: int) -> _Window:
        window = self._windows.get(seconds)
        if window is None:
            self._master.prune(now)
            window = _Window(seconds)
            for sec, eps, delta, n in self._master.entries:
                if sec > now - seconds:
                    window.add(sec, eps, delta, n)
            self._windows[seconds] = window
        window.prune(now)
        return window

    def _now_locked(self) -> int:
        # Whole seconds, rounded up and never decreasing, so entries stay in time order and a charge
        # leaves a window no earlier than its true time (a clock set back cannot shorten a window).
        self._last_sec = max(self._last_sec, math.ceil(self._clock()))
        return self._last_sec

    def _apply(self, cid: str, eps: float, delta: float, n: int, sec: int) -> list[tuple[_Window, list[Any]]]:
        self._lifetime.add(eps, delta, n)
        state = self._campaigns.get(cid)
        if state is None:
            state = self._campaigns[cid] = _CampaignState()
        state.tally.add(eps, delta, n)
        state.seen(sec)
        refs = []
        for window in self._windows.values():
            window.prune(sec)
            refs.append((window, window.add(sec, eps, delta, n)))
        return refs

    def _check_locked(self, cid: str, cost: ReportCost, caps: Caps, now: int, what: str) -> None:
        eps, delta = cost.charge
        window = self._window_locked(caps.policy.window_seconds, now)
        state = self._campaigns.get(cid)
        campaign_tally = state.tally if state is not None else _Tally()
        scopes = (
            ("lifetime", caps.lifetime, self._lifetime, ""),
            ("window", caps.window, window.tally, f" (the last {caps.policy.window_seconds:g} s)"),
            ("campaign", caps.campaign, campaign_tally, f" (campaign_id={cid!r})"),
        )
        for scope, (cap_e, cap_d), tally, where in scopes:
            for unit, cap_u, have_u, req in (
                ("epsilon", cap_e, tally.eps_u, eps),
                ("delta", cap_d, tally.delta_u, delta),
            ):
                if cap_u is None:
                    continue
                if self._compose is compose_basic:
                    over = have_u + to_units_up(req) > cap_u
                    spent = from_units(have_u)
                else:
                    total = self._compose(
                        [(e, d, k) for (e, d), k in (tally.terms + Counter({(eps, delta): 1})).items()]
                    )
                    over = to_units_up(total[0 if unit == "epsilon" else 1]) > cap_u
                    spent = getattr(tally.spend(self._compose), unit)
                if over:
                    cap_name = f"{scope}_{unit}"
                    limit = getattr(caps.policy, cap_name)
                    raise BudgetExceededError(
                        f"campaign_id={cid!r}: a report ({what}) costs {unit}={req!r}; the {cap_name} "
                        f"cap{where} is {limit!r} and {spent!r} is spent: the reporter refuses it "
                        "(nothing was encoded or sent)",
                        cap=cap_name,
                        limit=limit,
                        spent=spent,
                        requested=req,
                    )

    def charge_fresh(self, cid: str, cost: ReportCost, caps: Caps) -> FreshCharge:
        """Reserve one fresh report's (epsilon, delta), or raise BudgetExceededError naming the cap."""
        with self._lock:
            now = self._now_locked()
            self._check_locked(cid, cost, caps, now, "fresh noise per report")
            eps, delta = cost.charge
            refs = self._apply(cid, eps, delta, 1, now)
            self._campaigns[cid].fresh_reports += 1
            charge = FreshCharge(cid, eps, delta, now, refs)
            self._pending_fresh.append(charge)
            return charge

    def cancel(self, charge: FreshCharge) -> None:
        """Undo a fresh charge whose report was not made (the value failed to encode). Once persisted it
        stays (over-counted, never under-counted)."""
        with self._lock:
            if charge.persisted or charge.cancelled:
                return
            charge.cancelled = True
            eps, delta = charge.epsilon, charge.delta
            self._lifetime.sub(eps, delta, 1)
            state = self._campaigns[charge.campaign_id]
            state.tally.sub(eps, delta, 1)
            state.fresh_reports -= 1
            for window, entry in charge.windows:
                if entry[3] > 0 and window.entries and window.entries[0][0] <= entry[0]:
                    entry[3] -= 1
                    window.tally.sub(eps, delta, 1)

    def charge_memo(self, cid: str, cost: ReportCost, key: bytes | None, caps: Caps) -> None:
        """Charge a memoized report: nothing for a known value (key), epsilon_inf for a new one (key None:
        the mechanism has no memo identity, so every report counts as a new value)."""
        with self._lock:
            now = self._now_locked()
            if key is not None and key in self._memo:
                state = self._campaigns[cid]
                state.memo_reports += 1
                state.seen(now)
                self._pending_repeats[key] += 1
                return
            self._check_locked(cid, cost, caps, now, "a new value of a memoized mechanism: epsilon_inf")
            eps, delta = cost.charge
            self._apply(cid, eps, delta, 1, now)
            state = self._campaigns[cid]
            state.memo_values += 1
            state.memo_reports += 1
            if key is None:
                key = os.urandom(32)  # a unique placeholder: never matched, so never a free repeat
            self._memo[key] = cid
            self._pending_memo.append({"k": "m", "c": cid, "e": eps, "d": delta, "t": now, "h": key.hex()})

    # -------------------------------------------------------------------------------------- durable

    def persist(self) -> None:
        """Append every reserved charge to the log and ``fsync`` it (call before journaling reports).

        Raises:
            OSError: the log cannot be written (the reporter then stops: its reports are not journaled).
        """
        with self._io_lock:
            with self._lock:
                fresh = [c for c in self._pending_fresh if not c.cancelled]
                self._pending_fresh = []
                memo = self._pending_memo
                self._pending_memo = []
                repeats = self._pending_repeats
                self._pending_repeats = Counter()
                for c in fresh:
                    c.persisted = True
                last = self._last_sec
            groups: Counter[tuple[str, float, float, int]] = Counter()
            for c in fresh:
                groups[(c.campaign_id, c.epsilon, c.delta, c.sec)] += 1
            recs: list[dict[str, Any]] = [
                {"k": "f", "c": cid, "e": e, "d": d, "n": n, "t": t} for (cid, e, d, t), n in groups.items()
            ]
            recs += memo
            recs += [{"k": "r", "h": key.hex(), "n": n, "t": last} for key, n in repeats.items()]
            if not recs:
                return
            data = b"".join(record(json.dumps(r, separators=(",", ":")).encode("utf-8")) for r in recs)
            write_all(self._fd, data)
            if fresh or memo:
                # Charges must be on disk before their reports are journaled (module docstring); repeat
                # counts are bookkeeping only and ride along with the next charge's fsync.
                os.fsync(self._fd)

    # ------------------------------------------------------------------------------------- snapshot

    def snapshot(self, policy: BudgetPolicy) -> PrivacySpend:
        """The device's spend as :class:`PrivacySpend` (the window of ``policy``)."""
        with self._lock:
            now = self._now_locked()
            window = self._window_locked(policy.window_seconds, now)
            compose = self._compose
            campaigns = {
                cid: CampaignSpend(
                    spend=s.tally.spend(compose),
                    fresh_reports=s.fresh_reports,
                    memo_values=s.memo_values,
                    memo_reports=s.memo_reports,
                    first_at=s.first_at,
                    last_at=s.last_at,
                )
                for cid, s in sorted(self._campaigns.items())
            }
            return PrivacySpend(
                lifetime=self._lifetime.spend(compose),
                window=window.tally.spend(compose),
                window_seconds=policy.window_seconds,
                campaigns=campaigns,
                policy=policy,
            )


def pause_after_spend_for_tests() -> None:
    """The fault test's hook (:data:`PAUSE_AFTER_SPEND_ENV`): mark the point and wait to be killed."""
    marker = os.environ.get(PAUSE_AFTER_SPEND_ENV)
    if not marker:
        return
    with contextlib.suppress(FileExistsError):
        Path(marker).touch(exist_ok=False)
    while True:  # pragma: no cover - the test kills the process here
        time.sleep(3600)
