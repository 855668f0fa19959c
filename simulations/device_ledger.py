"""``ldp-sim days``'s simulated device charged by the real device ledger (issue 17).

:mod:`simulations.longitudinal` counts what a campaign *reveals* after D daily reports: ``D epsilon`` with
fresh noise, ``min(D epsilon, V epsilon_inf)`` for a memoized mechanism (V distinct values so far). The
device ledger (:mod:`ldp_client.reporter.ledger`) *charges* before each report is encoded, when it cannot
know how many more reports will follow: epsilon_inf for each new memoized value at its first report, so
that every later report of it is covered (Erlingsson, Pihur, Korolova, CCS 2014, Theorem 1; Ding, Kulkarni,
Yekhanin, NeurIPS 2017, §3; Arcolezi et al. 2022, §4), and nothing for a repeat. The two agree once
``D epsilon >= V epsilon_inf``; before that the ledger's figure is the larger (by at most
``V epsilon_inf - D epsilon``): it pre-pays the longitudinal bound.

Here a device's reports go through the ledger's own code, so the figure shown cannot drift from what a
Reporter would charge: :func:`ldp_client.reporter.ledger.report_cost` of the campaign's parameters (as
the Reporter computes it), the memo key of each value (``spec.memo_identity`` under a fixed simulation
secret), ``DeviceLedger.plan`` / ``charge_fresh`` / ``charge_memo`` on a ledger in a temporary directory
with a simulated clock (one day per report), ``snapshot`` per day (basic composition, the ledger's
default). The ledger's tight total is its recorded charges composed by the composer an app chooses with
``BudgetPolicy(composition="numerical")`` (privacy loss distributions at ``delta``).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_client import registry
from ldp_client.reporter.ledger import DeviceLedger, memo_key, memo_scope, report_cost
from ldp_client.reporter.policy import BudgetPolicy, compose_basic, composer_named
from ldp_client.secret import ClientSecret

__all__ = ["LedgerDays", "device_values", "ledger_days", "tight_total"]

_DAY = 86_400.0
_SECRET = ClientSecret.from_bytes(bytes(range(32)))  # a simulated device's secret (never a real one)


@dataclass(frozen=True)
class LedgerDays:
    """What the device ledger charged a simulated device.

    Attributes:
        per_campaign: (campaigns, days) epsilon charged to each campaign by the end of each day (basic
            composition, the ledger's default).
        total: per day, the device's lifetime epsilon (basic composition).
        tight: (epsilon, delta) of the device's lifetime charges on the last day by the ledger's numerical
            composer (``BudgetPolicy(composition="numerical", composition_delta=delta).composer()``).
    """

    per_campaign: NDArray[np.float64]
    total: NDArray[np.float64]
    tight: tuple[float, float]


@functools.lru_cache(maxsize=8)
def tight_total(terms: tuple[tuple[float, float, int], ...], delta: float) -> tuple[float, float]:
    """The device ledger's numerical composer (``BudgetPolicy(composition="numerical",
    composition_delta=delta)``) on ``terms``; cached, because a fixed value's bound and the ledger's charges
    are often the same terms and each composition is an FFT over the device's whole history."""
    return composer_named("numerical", delta)(list(terms))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def device_values(params: Any, campaign_id: str, count: int) -> tuple[Any, ...]:
    """``count`` values a device of the campaign may hold, distinct while the campaign has that many: its
    domain's values, else numbers spread over its declared range, else its spec's inputs (string
    RAPPOR's strings), for the ledger's memo keys. One value: the spec's first input."""
    spec = registry.spec_for(params)
    inputs = spec.campaign_inputs(params, campaign_id)
    domain = getattr(params, "domain", None)
    if count == 1:
        return (inputs[0],)
    if domain is not None:
        pool: tuple[Any, ...] = (
            tuple(domain.labels) if domain.labels is not None else tuple(range(domain.size))
        )
    elif hasattr(params, "lo") and hasattr(params, "hi"):
        pool = tuple(params.lo + (params.hi - params.lo) * i / (count - 1) for i in range(count))
    else:
        pool = tuple(inputs)
    return tuple(pool[i % len(pool)] for i in range(count))


def ledger_days(campaigns: Sequence[Any], values: Sequence[Sequence[Any]], delta: float) -> LedgerDays:
    """Charge one simulated device's daily reports through a real device ledger (module docstring).

    Args:
        campaigns: the parameters of each campaign.
        values: per campaign, the value the device reports on each day (all of one length, D).
        delta: the target delta of the numerical composer.
    """
    days = len(values[0]) if values else 0
    per_campaign = np.zeros((len(campaigns), days), dtype=np.float64)
    total = np.zeros(days, dtype=np.float64)
    policy = BudgetPolicy()
    clock = _Clock()
    with tempfile.TemporaryDirectory(prefix="ldp-sim-ledger-") as tmp:
        ledger = DeviceLedger.acquire(Path(tmp), compose=compose_basic, clock=clock)
        try:
            charges = [_charger(ledger, f"c{i}", p, policy) for i, p in enumerate(campaigns)]
            for day in range(days):
                clock.now = (day + 1) * _DAY
                for charge, seq in zip(charges, values, strict=True):
                    charge(seq[day])
                snap = ledger.snapshot(policy)
                total[day] = snap.lifetime.epsilon
                for i in range(len(campaigns)):
                    per_campaign[i, day] = snap.campaigns[f"c{i}"].spend.epsilon
        finally:
            ledger.release()
    # The ledger's terms: each campaign's charge (epsilon_inf per new memoized value, epsilon per fresh
    # report) times the counts the ledger recorded, composed by the composer a policy with
    # composition="numerical" gives the ledger (one composition of the device's lifetime only: a second
    # ledger's snapshot would also compose every campaign and the window, each an FFT).
    terms = []
    for i, params in enumerate(campaigns):
        state = snap.campaigns[f"c{i}"] if days else None
        if state is not None:
            eps, delta_i = report_cost(params).charge
            terms.append((eps, delta_i, state.fresh_reports + state.memo_values))
    tight = tight_total(tuple(terms), delta)
    return LedgerDays(per_campaign=per_campaign, total=total, tight=tight)


def _charger(ledger: DeviceLedger, cid: str, params: Any, policy: BudgetPolicy) -> Any:
    """A function charging one report of ``value`` to campaign ``cid``, as a Reporter's ``_charging`` does
    (a fresh charge, or a memo key per value)."""
    cost = report_cost(params)
    plan = ledger.plan(cid, cost, policy)
    if not cost.memoized:

        def fresh(value: Any) -> None:
            ledger.charge_fresh(plan)

        return fresh
    spec = registry.spec_for(params)
    scope = memo_scope(_SECRET, cid, cost.fingerprint)

    def memoized(value: Any) -> None:
        identity = spec.memo_identity(params, value)
        ledger.charge_memo(plan, None if identity is None else memo_key(scope, identity))

    return memoized
