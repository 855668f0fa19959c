"""The device's privacy ledger: what this device has spent, per campaign, per memoized value and over time.

One ledger per device, in ``<state_dir>/ledger/spend.log`` beside the client secret (``state_dir/secret``),
shared by every :class:`~ldp_client.reporter.Reporter` of the process on that ``state_dir`` (one object,
reference-counted) and held by one process at a time (an exclusive ``flock``, like the outbox's lock).

What it records (never a value):

* per campaign, fresh reports: the per-report (epsilon, delta), how many, and when (per second);
* per memoized value: a *memo key*, a keyed hash of the value's memo identity (the bytes the mechanism
  derives its permanent response from) under a key derived from the client secret, the campaign and
  the parameters' fingerprint (:func:`memo_scope`, :func:`memo_key`), with its (epsilon_inf, delta), when it
  was first reported, and how many reports of it were made. The key cannot be inverted without the
  secret, which never leaves the device.

The composition rules and the caps are in :mod:`ldp_client.reporter.policy`. Ordering (the fault rule):
:meth:`DeviceLedger.charge_fresh` / :meth:`DeviceLedger.charge_memo` reserve a report's cost in memory on
the app thread, before the value is encoded (a report over a cap is refused there; the totals are
settled from the reserved counts lazily, when a cap is checked, a snapshot taken or the charges
persisted); the reporter's thread calls :meth:`DeviceLedger.persist` (after
:meth:`DeviceLedger.charge_bulk` for an uncapped fresh mechanism, which nothing can refuse), which
appends the reserved charges to the log and ``fsync``-s it, BEFORE it journals those reports in the
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
import hashlib
import json
import math
import os
import struct
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, NoReturn

import ldp_client.reporter.policy as policy_module
from ldp_client import registry, wire
from ldp_client.errors import BudgetExceededError, StateFileError
from ldp_client.params import MechanismParams
from ldp_client.reporter.outbox import fsync_dir, params_fingerprint, read_records, record, write_all
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


def report_cost(params: MechanismParams) -> ReportCost:
    """What one report of a campaign with ``params`` costs the device (recomputed from the parameters, with
    the code the encoders use): the Reporter's charge, and ``ldp-sim days``'s simulated device's."""
    return ReportCost(
        epsilon=float(params.epsilon),
        delta=float(wire.delta(params)),
        epsilon_inf=float(wire.epsilon_inf(params)),
        fingerprint=params_fingerprint(params),
        max_reports=registry.spec_for(params).reports_per_device,
    )


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def memo_scope(secret: ClientSecret, campaign_id: str, fingerprint: str) -> bytes:
    """The memo keys' key for one campaign and parameter set: HMAC-SHA256(secret, label || campaign ||
    parameters' fingerprint), length-prefixed (computed once per reporter; as secret as the secret)."""
    return secret.prf(MEMO_KEY_LABEL + _lp(campaign_id.encode("utf-8")) + _lp(fingerprint.encode("ascii")))


def memo_key(scope: bytes, identity: bytes) -> bytes:
    """Keyed BLAKE2b-256 of a value's memo identity under :func:`memo_scope`: the ledger's key of it.

    Equal exactly when the mechanism memoizes one permanent response for both values (same campaign, same
    parameters, same identity), so a repeat is recognised without storing the value. Keyed BLAKE2b is a
    PRF (RFC 7693, section 2.9: its keyed mode is a MAC) and costs one compression for a short identity,
    a fraction of an HMAC: a new value is charged on the app thread.
    """
    return hashlib.blake2b(identity, key=scope, digest_size=32).digest()


Term = tuple[float, float]  # a charge's (epsilon, delta)


class _Tally:
    """A scope's total: exact unit sums (basic composition), and its terms if another composer needs them."""

    __slots__ = ("delta_u", "eps_u", "terms")

    def __init__(self, track_terms: bool) -> None:
        self.eps_u = 0
        self.delta_u = 0
        self.terms: Counter[Term] | None = Counter() if track_terms else None

    def add(self, eps_u: int, delta_u: int, term: Term, n: int) -> None:
        self.eps_u += eps_u * n
        self.delta_u += delta_u * n
        if self.terms is not None:
            self.terms[term] += n

    def spend(self, compose: Composer) -> Spend:
        if self.terms is None:
            return Spend(from_units(self.eps_u), from_units(self.delta_u))
        eps, delta = compose([(e, d, k) for (e, d), k in self.terms.items() if k > 0])
        return Spend(eps, delta)


class _Window:
    """Charges of the last ``seconds``: entries ``[second, eps_u, delta_u, term, n]``, oldest first, one per
    second and cost (charges are timed to the second, rounded up: they leave no earlier than they should)."""

    __slots__ = ("entries", "seconds", "tally")

    def __init__(self, seconds: float, track_terms: bool) -> None:
        self.seconds = seconds
        self.tally = _Tally(track_terms)
        self.entries: deque[list[Any]] = deque()

    def add(self, sec: int, eps_u: int, delta_u: int, term: Term, n: int) -> None:
        entries = self.entries
        if entries:
            last = entries[-1]
            if last[0] == sec and last[3] == term:
                last[4] += n
                self.tally.add(eps_u, delta_u, term, n)
                return
            if entries[0][0] <= sec - self.seconds:
                self.prune(sec)
        entries.append([sec, eps_u, delta_u, term, n])
        self.tally.add(eps_u, delta_u, term, n)

    def prune(self, now: int) -> None:
        entries = self.entries
        while entries and entries[0][0] <= now - self.seconds:
            _sec, eps_u, delta_u, term, n = entries.popleft()
            self.tally.add(eps_u, delta_u, term, -n)

    def take_back(self, sec: int, term: Term) -> None:
        """Remove one charge of ``term`` at ``sec`` if it is still in the window (cancel)."""
        for entry in reversed(self.entries):
            if entry[0] < sec:
                return
            if entry[0] == sec and entry[3] == term and entry[4] > 0:
                entry[4] -= 1
                self.tally.add(entry[1], entry[2], term, -1)
                return


@dataclass(slots=True)
class _CampaignState:
    tally: _Tally
    first_at: int
    last_at: int
    fresh_reports: int = 0
    memo_values: int = 0
    memo_reports: int = 0


@dataclass(frozen=True, slots=True)
class ChargePlan:
    """One reporter's charge, precomputed (:meth:`DeviceLedger.plan`): its cost in units and its caps."""

    campaign_id: str
    policy: BudgetPolicy
    term: Term  # (epsilon, delta) charged: per fresh report, or per new memoized value (epsilon_inf)
    eps_u: int
    delta_u: int
    memoized: bool
    what: str
    # (scope, unit, cap in units) of each cap set; empty: nothing to check
    checks: tuple[tuple[str, str, int], ...]
    key: tuple[str, float, float]  # (campaign_id, epsilon, delta) of its pending charges


FreshToken = tuple[tuple[str, float, float, int], int]
"""A reserved fresh charge: (its pending key, the persist generation), for :meth:`DeviceLedger.cancel`."""


class DeviceLedger:
    """The device's durable spend record and cap checks (module docstring); get it with :meth:`acquire`.

    Args (of :meth:`acquire`):
        state_dir: the app's state directory (the ledger is ``state_dir/ledger/spend.log``).
        compose: the composition rule of the totals; default
            :data:`~ldp_client.reporter.policy.DEVICE_COMPOSER` (basic composition; the seam for an
            accountant: with another composer the caps are checked against its totals). The first
            acquirer of a state_dir in the process decides.
        clock: Unix time in seconds (tests pass their own).
    """

    _registry: ClassVar[dict[Path, DeviceLedger]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, directory: Path, fd: int, compose: Composer, clock: Callable[[], float]) -> None:
        self.directory = directory
        self._fd = fd
        self._compose = compose
        self._terms = compose is not compose_basic
        self._clock = clock
        self._refs = 0
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._lifetime = _Tally(self._terms)
        self._campaigns: dict[str, _CampaignState] = {}
        self._memo: dict[bytes, str] = {}  # memo key -> campaign id
        self._master = _Window(MAX_WINDOW_SECONDS, self._terms)  # every charge of the longest window
        self._windows: dict[float, _Window] = {MAX_WINDOW_SECONDS: self._master}
        self._last_sec = 0
        # Not yet persisted: fresh charges per (campaign, epsilon, delta, second), new memo keys per the
        # same, and repeat counts of known keys; _gen counts persists, so a cancel never takes back a
        # persisted charge.
        self._pending_fresh: Counter[tuple[str, float, float, int]] = Counter()
        self._pending_memo: dict[tuple[str, float, float, int], list[bytes]] = {}
        self._pending_repeats: Counter[bytes] = Counter()
        self._gen = 0
        # report() only counts a fresh charge in _pending_fresh; the totals are settled from it when a cap
        # is checked, a snapshot taken or the charges persisted: _settled is how much of each count is in
        # the totals already. Repeats of memoized values only count in _pending_repeats (their reports
        # are added to the campaign's count when persisted).
        self._settled: Counter[tuple[str, float, float, int]] = Counter()
        self._settled_memo: Counter[tuple[str, float, float, int]] = Counter()
        # The (memoized?, key) pairs counted since the last settle, so that settling touches only them.
        self._dirty: dict[tuple[bool, tuple[str, float, float, int]], None] = {}

    # ----------------------------------------------------------------------------------- open, close

    @classmethod
    def acquire(
        cls,
        state_dir: Path,
        *,
        compose: Composer | None = None,
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
                ledger = cls._open(directory, compose or policy_module.DEVICE_COMPOSER, clock)
                cls._registry[directory] = ledger
            ledger._refs += 1
            return ledger

    @property
    def compose(self) -> Composer:
        """The composition rule of this ledger's totals (chosen by its first acquirer in the process)."""
        return self._compose

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
                self._replay(json.loads(payload))
            except (ValueError, KeyError, TypeError) as exc:
                raise StateFileError(
                    f"privacy ledger {str(path)!r} has an unreadable record ({exc}): allowed records "
                    "written by this library (refusing to guess the spend; move the file away only if "
                    "the device may start its budget again)"
                ) from exc

    def _replay(self, rec: dict[str, Any]) -> None:
        """Apply one record: ``f`` fresh reports (n), ``m`` new memo keys (h: their hex), ``r`` repeats
        (h: hex -> n); each with its second t, ``f`` and ``m`` with campaign c and charge (e, d)."""
        kind = rec["k"]
        sec = int(rec["t"])
        self._last_sec = max(self._last_sec, sec)
        if kind == "r":
            for key, n in rec["h"].items():
                state = self._campaigns[self._memo[bytes.fromhex(key)]]
                state.memo_reports += int(n)
                state.last_at = max(state.last_at, sec)
            return
        if kind not in ("f", "m"):
            raise ValueError(f"record kind {kind!r}")
        cid = str(rec["c"])
        term = (float(rec["e"]), float(rec["d"]))
        keys = [bytes.fromhex(h) for h in rec["h"]] if kind == "m" else []
        n = int(rec["n"]) if kind == "f" else len(keys)
        state = self._add_locked(cid, term, to_units_up(term[0]), to_units_up(term[1]), n, sec)
        if kind == "f":
            state.fresh_reports += n
        for key in keys:
            self._memo[key] = cid
        state.memo_values += len(keys)
        state.memo_reports += len(keys)

    # ------------------------------------------------------------------------------------- charging

    def plan(self, campaign_id: str, cost: ReportCost, policy: BudgetPolicy) -> ChargePlan:
        """A reporter's charge, computed once: its cost in units and the caps to check."""
        term = cost.charge
        checks: list[tuple[str, str, int]] = []
        for scope in ("lifetime", "window", "campaign"):
            for unit in ("epsilon", "delta"):
                cap = getattr(policy, f"{scope}_{unit}")
                if cap is not None:
                    checks.append((scope, unit, to_units_down(cap)))
        if cost.max_reports is not None:  # a count, not units: e.g. discovery's one report per device
            checks.append(("campaign", "reports", cost.max_reports))
        with self._lock:
            self._window_locked(policy.window_seconds, self._now_locked())
        return ChargePlan(
            campaign_id=campaign_id,
            policy=policy,
            term=term,
            eps_u=to_units_up(term[0]),
            delta_u=to_units_up(term[1]),
            memoized=cost.memoized,
            what="a new value of a memoized mechanism: epsilon_inf" if cost.memoized else "fresh noise",
            checks=tuple(checks),
            key=(campaign_id, term[0], term[1]),
        )

    def _window_locked(self, seconds: float, now: int) -> _Window:
        window = self._windows.get(seconds)
        if window is None:
            self._master.prune(now)
            window = _Window(seconds, self._terms)
            for sec, eps_u, delta_u, term, n in self._master.entries:
                if sec > now - seconds:
                    window.add(sec, eps_u, delta_u, term, n)
            self._windows[seconds] = window
        window.prune(now)
        return window

    def _now_locked(self) -> int:
        # Whole seconds, rounded up and never decreasing, so entries stay in time order and a charge
        # leaves a window no earlier than its true time (a clock set back cannot shorten a window).
        self._last_sec = max(self._last_sec, math.ceil(self._clock()))
        return self._last_sec

    def _add_locked(self, cid: str, term: Term, eps_u: int, delta_u: int, n: int, sec: int) -> _CampaignState:
        self._lifetime.add(eps_u, delta_u, term, n)
        state = self._campaigns.get(cid)
        if state is None:
            state = self._campaigns[cid] = _CampaignState(_Tally(self._terms), sec, sec)
        state.tally.add(eps_u, delta_u, term, n)
        state.last_at = max(state.last_at, sec)
        for window in self._windows.values():
            window.add(sec, eps_u, delta_u, term, n)
        return state

    def _settle_locked(self) -> None:
        """Add the charges report() only counted to the totals (in time order: windows stay sorted)."""
        if not self._dirty:
            return
        todo = sorted(self._dirty, key=lambda item: item[1][3])
        self._dirty = {}
        for memoized, key in todo:
            settled = self._settled_memo if memoized else self._settled
            n = len(self._pending_memo[key]) if memoized else self._pending_fresh[key]
            new = n - settled[key]
            if new <= 0:
                continue
            settled[key] = n
            cid, eps, delta, sec = key
            state = self._add_locked(cid, (eps, delta), to_units_up(eps), to_units_up(delta), new, sec)
            if memoized:
                state.memo_values += new
                state.memo_reports += new
            else:
                state.fresh_reports += new

    def _check_locked(self, plan: ChargePlan, now: int) -> None:
        self._settle_locked()
        for scope, unit, cap_u in plan.checks:
            if unit == "reports":
                state = self._campaigns.get(plan.campaign_id)
                sent = 0 if state is None else state.fresh_reports + state.memo_reports
                if sent + 1 > cap_u:
                    self._refuse(plan, "campaign_reports", float(sent), 1.0, limit=float(cap_u))
                continue
            if scope == "lifetime":
                tally = self._lifetime
            elif scope == "window":
                tally = self._window_locked(plan.policy.window_seconds, now).tally
            else:
                state = self._campaigns.get(plan.campaign_id)
                tally = _Tally(self._terms) if state is None else state.tally
            i = 0 if unit == "epsilon" else 1
            if tally.terms is None:
                have_u = tally.eps_u if i == 0 else tally.delta_u
                over = have_u + (plan.eps_u if i == 0 else plan.delta_u) > cap_u
                spent = from_units(have_u)
            else:
                after = tally.terms + Counter({plan.term: 1})
                over = to_units_up(self._compose([(e, d, k) for (e, d), k in after.items()])[i]) > cap_u
                spent = tally.spend(self._compose).epsilon if i == 0 else tally.spend(self._compose).delta
            if over:
                self._refuse(plan, f"{scope}_{unit}", spent, plan.term[i])

    @staticmethod
    def _refuse(
        plan: ChargePlan, cap_name: str, spent: float, requested: float, limit: float | None = None
    ) -> NoReturn:
        if limit is None:
            limit = getattr(plan.policy, cap_name)
        scope = cap_name.partition("_")[0]
        where = {
            "lifetime": " (the device, every campaign)",
            "window": f" (the device, the last {plan.policy.window_seconds:g} s)",
            "campaign": f" (campaign_id={plan.campaign_id!r})",
        }[scope]
        unit = cap_name.partition("_")[2]
        raise BudgetExceededError(
            f"campaign_id={plan.campaign_id!r}: a report ({plan.what}) costs {unit}={requested!r}; the "
            f"{cap_name} cap{where} is {limit!r} and {spent!r} is spent: the reporter refuses it (nothing "
            "was encoded or sent)",
            cap=cap_name,
            limit=limit,
            spent=spent,
            requested=requested,
        )

    def charge_fresh(self, plan: ChargePlan) -> FreshToken:
        """Reserve one fresh report's (epsilon, delta), or raise BudgetExceededError naming the cap."""
        with self._lock:
            now = self._now_locked()
            key = (*plan.key, now)
            if plan.checks:
                # A cap needs the totals now: check them (settled first), and add this charge at once.
                self._check_locked(plan, now)
                state = self._add_locked(plan.campaign_id, plan.term, plan.eps_u, plan.delta_u, 1, now)
                state.fresh_reports += 1
                self._settled[key] += 1
            else:
                self._dirty[(False, key)] = None
            pending = self._pending_fresh
            pending[key] = pending.get(key, 0) + 1
            return key, self._gen

    def charge_bulk(self, plan: ChargePlan, count: int) -> None:
        """Charge ``count`` fresh reports of an uncapped plan at once (nothing to check: none is refused)."""
        if plan.checks or plan.memoized:
            raise ValueError("charge_bulk is for fresh reports without caps")
        with self._lock:
            key = (*plan.key, self._now_locked())
            pending = self._pending_fresh
            pending[key] = pending.get(key, 0) + count
            self._dirty[(False, key)] = None

    def cancel(self, plan: ChargePlan, token: FreshToken) -> None:
        """Undo a fresh charge whose report was not made (the value failed to encode). Once persisted it
        stays (over-counted, never under-counted)."""
        key, gen = token
        with self._lock:
            if gen != self._gen or self._pending_fresh[key] <= 0:
                return
            self._pending_fresh[key] -= 1
            if self._settled[key] <= self._pending_fresh[key]:
                return  # not in the totals yet
            self._settled[key] -= 1
            term, n = plan.term, -1
            self._lifetime.add(plan.eps_u, plan.delta_u, term, n)
            state = self._campaigns[plan.campaign_id]
            state.tally.add(plan.eps_u, plan.delta_u, term, n)
            state.fresh_reports -= 1
            for window in self._windows.values():
                window.take_back(key[3], term)

    def charge_memo(self, plan: ChargePlan, key: bytes | None) -> None:
        """Charge a memoized report: nothing for a known value (key), epsilon_inf for a new one (key None:
        the mechanism has no memo identity, so every report counts as a new value)."""
        with self._lock:
            if key is not None and key in self._memo:
                self._pending_repeats[key] += 1  # the common case: nothing to time, check or charge
                return
            now = self._now_locked()
            if plan.checks:
                self._check_locked(plan, now)
            if key is None:
                key = os.urandom(32)  # a unique placeholder: never matched, so never a free repeat
            self._memo[key] = plan.campaign_id
            slot = (*plan.key, now)
            self._pending_memo.setdefault(slot, []).append(key)
            self._dirty[(True, slot)] = None

    # -------------------------------------------------------------------------------------- durable

    def persist(self) -> None:
        """Append every reserved charge to the log and ``fsync`` it (call before journaling reports).

        Raises:
            OSError: the log cannot be written (the reporter then stops: its reports are not journaled).
        """
        with self._io_lock:
            with self._lock:
                self._settle_locked()
                fresh = +self._pending_fresh  # the positive counts (cancelled charges are gone)
                memo = self._pending_memo
                repeats = self._pending_repeats
                if not (fresh or memo or repeats):
                    return
                self._pending_fresh = Counter()
                self._settled = Counter()
                self._settled_memo = Counter()
                self._pending_memo = {}
                self._pending_repeats = Counter()
                self._gen += 1
                last = self._last_sec
                for key, n in repeats.items():
                    state = self._campaigns[self._memo[key]]
                    state.memo_reports += n
                    state.last_at = last
            recs: list[dict[str, Any]] = [
                {"k": "f", "c": cid, "e": e, "d": d, "n": n, "t": t} for (cid, e, d, t), n in fresh.items()
            ]
            recs += [
                {"k": "m", "c": c, "e": e, "d": d, "t": t, "h": [k.hex() for k in keys]}
                for (c, e, d, t), keys in memo.items()
            ]
            if repeats:
                recs.append({"k": "r", "t": last, "h": {key.hex(): n for key, n in repeats.items()}})
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
            self._settle_locked()
            window = self._window_locked(policy.window_seconds, self._now_locked())
            compose = self._compose
            repeats: Counter[str] = Counter()
            for key, n in self._pending_repeats.items():
                repeats[self._memo[key]] += n
            campaigns = {
                cid: CampaignSpend(
                    spend=s.tally.spend(compose),
                    fresh_reports=s.fresh_reports,
                    memo_values=s.memo_values,
                    memo_reports=s.memo_reports + repeats[cid],
                    first_at=float(s.first_at),
                    last_at=float(max(s.last_at, self._last_sec if repeats[cid] else 0)),
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
