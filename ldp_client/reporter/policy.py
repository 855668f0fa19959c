"""The device's privacy budget: the caps an app sets (:class:`BudgetPolicy`), the cost of one report
(:class:`ReportCost`), the composition rule, and the spend snapshot (:class:`PrivacySpend`).

The ledger (:mod:`ldp_client.reporter.ledger`) keeps the spend; this module holds what it is measured in.

Composition (``docs/client.md``, "The privacy ledger"):

* a *fresh* report (a mechanism that draws new noise per report: rr, grr, ...; ``epsilon_inf`` is +inf)
  costs its per-report (epsilon, delta);
* a *memoized* report (RAPPOR's permanent randomized response; ``epsilon_inf`` finite) of a value this
  device has not reported to this campaign with these parameters costs (epsilon_inf, delta): the
  longitudinal bound covers every later report of that value (Erlingsson, Pihur, Korolova, CCS 2014,
  Theorem 1), so a repeat costs nothing more;
* costs add up: basic sequential composition (Dwork and Roth, "The Algorithmic Foundations of
  Differential Privacy", 2014, Theorem 3.16: k mechanisms of (eps_i, delta_i) together are
  (sum eps_i, sum delta_i)-DP). Distinct values of a memoized mechanism have independent permanent
  responses (different HMAC inputs), so they compose like separate mechanisms.

:func:`compose_basic` is that rule over *terms* ``(epsilon, delta, k)``: k reports of one (epsilon, delta).
It is the seam where a tighter accountant (advanced composition, Dwork-Rothblum-Vadhan 2010) can replace
the total: the ledger calls whatever composer it is given with the terms of a scope. With the basic rule
(the default) the ledger keeps exact integer sums instead (:data:`UNITS_PER_EPSILON`), which equal
:func:`compose_basic` rounded up, so that a cap is never crossed by a float rounding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from ldp_client.accounting.composition import (
    advanced_composition_counts,
    basic_composition_counts,
    check_delta,
)
from ldp_client.errors import InvalidParameterError

#: Epsilon and delta are kept as integers of 2**-64: a float times 2**64 is exact, so a charge rounded up
#: and a cap rounded down to units compare exactly (never crossed by accumulated float rounding).
UNITS_PER_EPSILON: Final = 2.0**64
#: The longest rolling window a policy may set (a year): the ledger keeps each second's charges that long.
MAX_WINDOW_SECONDS: Final = 366 * 86400.0

Term = tuple[float, float, int]
"""``(epsilon, delta, k)``: k reports (or new memoized values) of one per-report (epsilon, delta)."""

Composer = Callable[[Iterable[Term]], tuple[float, float]]
"""Total (epsilon, delta) of a scope's terms: :func:`compose_basic`, or an accountant's tighter rule."""


def compose_basic(terms: Iterable[Term]) -> tuple[float, float]:
    """Basic sequential composition: ``(sum k * epsilon, sum k * delta)`` (Dwork-Roth 2014, Thm 3.16).

    Computed exactly and rounded up (:func:`ldp_client.accounting.composition.basic_composition_counts`),
    so the total is never below the true sum. This is the rule the ledger applies; an accountant's composer
    can replace it (module docstring).
    """
    total = basic_composition_counts(terms)
    return total.epsilon, total.delta


def compose_advanced(delta_prime: float) -> Composer:
    """A composer by heterogeneous advanced composition at ``delta_prime`` (Dwork-Rothblum-Vadhan 2010),
    never looser than :func:`compose_basic`: for devices that make many small reports, whose cap is then
    an (epsilon, delta) guarantee with delta' added (``DeviceLedger.acquire(compose=...)``).
    """
    check_delta("delta_prime", delta_prime, allow_zero=False)

    def compose(terms: Iterable[Term]) -> tuple[float, float]:
        total = advanced_composition_counts(terms, delta_prime)
        return total.epsilon, total.delta

    return compose


def compose_numerical(delta: float, *, step: float = 1e-3) -> Composer:
    """A composer by privacy loss distributions (:func:`ldp_client.accounting.pld.compose_guarantees`), never
    looser than :func:`compose_basic`: the epsilon of the device's reports at ``delta`` (plus the mass their
    own deltas put at infinite loss), from the dominating pair of every term, composed by FFT.

    Tight, and costly: numpy is needed (imported when called) and one FFT composition per call (a few ms
    to 0.5 s with thousands of reports): for the spend snapshot, or a device's caps where reports are few
    (``DeviceLedger.acquire(..., compose=compose_numerical(1e-9))``).
    """
    target = check_delta("delta", delta, allow_zero=False)

    def compose(terms: Iterable[Term]) -> tuple[float, float]:
        listed = [t for t in terms if t[2] > 0]
        basic = basic_composition_counts(listed)
        if not listed or basic.epsilon == 0.0 or math.isinf(basic.epsilon):
            return basic.epsilon, basic.delta
        from ldp_client.accounting.pld import compose_guarantees

        pld = compose_guarantees(listed, step=step)
        total_delta = min(1.0, pld.infinity_mass + target)
        eps = pld.epsilon_for_delta(total_delta)
        if eps >= basic.epsilon:
            return basic.epsilon, basic.delta
        return eps, math.nextafter(total_delta, math.inf)

    return compose


#: THE SEAM: the composition rule of a device ledger opened without one (``DeviceLedger.acquire``'s
#: default, and a Reporter's whose ``BudgetPolicy.composition`` is ``"basic"``). An app chooses another
#: rule with ``BudgetPolicy(composition="advanced" | "numerical")``; the ledger then checks the caps
#: against that rule's totals.
DEVICE_COMPOSER: Composer = compose_basic

Composition = Literal["basic", "advanced", "numerical"]
COMPOSITIONS: Final = ("basic", "advanced", "numerical")
#: ``BudgetPolicy.composition_delta``'s default: the delta the tight accountants add to a device's total.
DEFAULT_COMPOSITION_DELTA: Final = 1e-9


def composer_named(composition: Composition, delta: float = DEFAULT_COMPOSITION_DELTA) -> Composer:
    """The composer of a ``BudgetPolicy.composition``: :data:`DEVICE_COMPOSER` for ``"basic"``,
    :func:`compose_advanced` (``delta`` as its delta') or :func:`compose_numerical` (``delta`` as its
    target). The same choice gives the same object (cached), so that a ledger shared by two reporters can
    compare them by identity."""
    if composition == "basic":
        return DEVICE_COMPOSER  # read when called: the seam can be replaced
    return _tight_composer(composition, delta)


@functools.lru_cache(maxsize=64)
def _tight_composer(composition: Composition, delta: float) -> Composer:
    if composition == "advanced":
        return compose_advanced(delta)
    if composition == "numerical":
        return compose_numerical(delta)
    raise InvalidParameterError("budget.composition", composition, f"one of {', '.join(COMPOSITIONS)}")


def to_units_up(x: float) -> int:
    """``x`` in units of 2**-64, rounded up (a charge: never under-counted)."""
    return math.ceil(x * UNITS_PER_EPSILON)


def to_units_down(x: float) -> int:
    """``x`` in units of 2**-64, rounded down (a cap: never loosened)."""
    return math.floor(x * UNITS_PER_EPSILON)


def from_units(u: int) -> float:
    return u / UNITS_PER_EPSILON


def _cap(name: str, value: object, *, upper: float = math.inf) -> float | None:
    if value is None:
        return None
    # bool is an int, but not a budget; anything that is not a number compares as NaN (refused).
    number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if math.isfinite(number) and 0 <= number <= upper:
        return number
    bound = f"<= {upper}" if math.isfinite(upper) else "finite"
    raise InvalidParameterError(name, value, f"a number >= 0 and {bound}, or None (no cap)")


@dataclass(frozen=True, slots=True)
class BudgetPolicy:
    """The caps an app sets on what this device may spend (``Reporter(budget=...)``); None: no cap.

    Every cap is checked before a report is encoded: a report whose cost would take a scope's total
    above its cap is refused with :class:`~ldp_client.errors.BudgetExceededError`.

    Attributes:
        lifetime_epsilon, lifetime_delta: the device's total over every campaign and all time.
        window_epsilon, window_delta: the device's total over every campaign in the last
            ``window_seconds`` (a rolling window, e.g. a day as Apple publishes its budgets).
        window_seconds: the window's length (default one day; at most a year).
        campaign_epsilon, campaign_delta: the total of the reporter's own campaign, all time.
        composition: how the device's charges add up before they are compared with the caps (and in
            ``Reporter.privacy_spend()``): ``"basic"`` (default; sums, Dwork-Roth Theorem 3.16),
            ``"advanced"`` (Dwork-Rothblum-Vadhan at delta' = ``composition_delta``) or ``"numerical"``
            (the tight accountant: privacy loss distributions, the epsilon at ``composition_delta``; needs
            numpy). Each is never looser than basic composition. One ledger per ``state_dir``: every
            reporter of a process on it must choose the same.
        composition_delta: the delta the advanced or numerical rule adds to the device's total (default
            1e-9); a delta cap set with them must be at least this (their totals carry it).
    """

    lifetime_epsilon: float | None = None
    lifetime_delta: float | None = None
    window_epsilon: float | None = None
    window_delta: float | None = None
    window_seconds: float = 86400.0
    campaign_epsilon: float | None = None
    campaign_delta: float | None = None
    composition: Composition = "basic"
    composition_delta: float = DEFAULT_COMPOSITION_DELTA

    def __post_init__(self) -> None:
        for name in ("lifetime_epsilon", "window_epsilon", "campaign_epsilon"):
            _cap(f"budget.{name}", getattr(self, name))
        for name in ("lifetime_delta", "window_delta", "campaign_delta"):
            _cap(f"budget.{name}", getattr(self, name), upper=1.0)
        w = self.window_seconds
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w <= MAX_WINDOW_SECONDS:
            raise InvalidParameterError(
                "budget.window_seconds", w, f"a number of seconds in (0, {MAX_WINDOW_SECONDS:.0f}]"
            )
        if self.composition not in COMPOSITIONS:
            raise InvalidParameterError(
                "budget.composition", self.composition, f"one of {', '.join(COMPOSITIONS)}"
            )
        d = self.composition_delta
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0 < d < 1:
            raise InvalidParameterError(
                "budget.composition_delta", d, "a number in (0, 1) (the delta the accountant adds)"
            )
        if self.composition != "basic":
            for name in ("lifetime_delta", "window_delta", "campaign_delta"):
                cap = getattr(self, name)
                if cap is not None and cap < d:
                    raise InvalidParameterError(
                        f"budget.{name}",
                        cap,
                        f"None or at least budget.composition_delta = {d:g} (the {self.composition} "
                        "accountant's totals carry that delta)",
                    )

    def composer(self) -> Composer:
        """The composition rule of :attr:`composition` (:func:`composer_named`)."""
        return composer_named(self.composition, float(self.composition_delta))


@dataclass(frozen=True, slots=True)
class ReportCost:
    """What one report of a campaign costs (from its parameters, recomputed on the device).

    Attributes:
        epsilon: the per-report epsilon (``params.epsilon``).
        delta: the per-report delta (``wire.delta(params)``; 0 for pure epsilon-LDP mechanisms).
        epsilon_inf: the longitudinal bound of a memoized mechanism, or +inf for fresh noise per report.
        fingerprint: the parameters' fingerprint (a memoized value is new again under new parameters).
        max_reports: the most reports the device may send to the campaign (the spec's
            ``reports_per_device``: 1 for discovery), or None.
    """

    epsilon: float
    delta: float
    epsilon_inf: float
    fingerprint: str
    max_reports: int | None = None

    @property
    def memoized(self) -> bool:
        """True when repeated reports of one value are bounded by ``epsilon_inf`` (RAPPOR's PRR)."""
        return math.isfinite(self.epsilon_inf)

    @property
    def charge(self) -> tuple[float, float]:
        """(epsilon, delta) charged per fresh report, or per new value of a memoized mechanism."""
        return (self.epsilon_inf if self.memoized else self.epsilon), self.delta


@dataclass(frozen=True, slots=True)
class Spend:
    """A total (epsilon, delta), composed by the ledger's rule (:func:`compose_basic` by default)."""

    epsilon: float = 0.0
    delta: float = 0.0


@dataclass(frozen=True, slots=True)
class CampaignSpend:
    """One campaign's spend on this device.

    Attributes:
        spend: its total (epsilon, delta).
        fresh_reports: reports charged their per-report cost.
        memo_values: distinct memoized values charged their epsilon_inf.
        memo_reports: reports of memoized values, repeats included (repeats cost nothing more).
        first_at, last_at: Unix times (seconds) of its first and last recorded report.
    """

    spend: Spend
    fresh_reports: int
    memo_values: int
    memo_reports: int
    first_at: float
    last_at: float


@dataclass(frozen=True, slots=True)
class PrivacySpend:
    """A snapshot of the device's ledger (``Reporter.privacy_spend()``).

    Attributes:
        lifetime: every campaign, all time.
        window: every campaign, the last ``window_seconds``.
        window_seconds: the window of ``window`` (the reporter's policy's).
        campaigns: per campaign id.
        policy: the caps of the reporter that took the snapshot.
    """

    lifetime: Spend
    window: Spend
    window_seconds: float
    campaigns: Mapping[str, CampaignSpend] = field(default_factory=dict)
    policy: BudgetPolicy = field(default_factory=BudgetPolicy)
