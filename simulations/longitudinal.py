"""A device's privacy over days of reports, and the accuracy of each day's estimate (issue 17).

After D days of one report per day to each campaign, what has a device spent? For one campaign, by
sequential composition of what it revealed:

* a mechanism with fresh noise per report (``epsilon_inf`` = +inf: rr, grr, the frequency oracles, the
  numeric mechanisms) spends ``D epsilon``;
* a memoized mechanism (``spec.epsilon_inf(params)`` finite: RAPPOR, dbitflip, onebitmean, lgrr, losue)
  reveals at most the memoized parts of the distinct values the device reported, each worth epsilon_inf,
  and at most its D reports: ``min(D epsilon, V epsilon_inf)`` with V the number of distinct values so far
  (its fresh round is post-processing of the memoized part: Erlingsson et al., CCS 2014, §3; Arcolezi et
  al. 2022, §4).

The device's total is the sum over campaigns (basic composition); for a device whose values never change it
is also given as a tight (epsilon, delta) at ``delta`` by privacy loss distributions
(:func:`ldp_client.reporter.policy.compose_numerical`, the device ledger's numerical composer: every
report's dominating pair composed by FFT; never above the basic total).

Next to it, what the device ledger *charges* (:mod:`simulations.device_ledger`: the device whose values
never change runs through the real ``DeviceLedger``): epsilon_inf for each new memoized value at its
first report, before it knows how many reports follow, so ``V epsilon_inf`` where the bound above is
``min(D epsilon, V epsilon_inf)``; the same once ``D epsilon >= V epsilon_inf``. Over the simulated
devices the ledger's charge is that rule, ``V epsilon_inf`` (fresh noise: ``D epsilon``).

Values change with probability ``change_probability`` per day, to a uniform value of the campaign's domain (a
numeric campaign: to a new value, always distinct); ``devices`` simulated devices give the distribution of the
spend (mean, 95th percentile, maximum) per day.

Accuracy: the standard error of one day's estimate from ``users`` reports, from the mechanism's variance
(a frequency: sqrt(Var*/n) of ``spec.variance`` at a frequency near 0, Wang et al., USENIX Security 2017;
a mean: (hi - lo) sqrt(max Var(s_hat)/n), the worst case over positions).

Seeded (``seed``): the same configuration gives the same figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.params import make_params
from ldp_client.spec import Kind
from simulations.device_ledger import LedgerDays, device_values, ledger_days, tight_total

__all__ = ["DaysCampaign", "DaysConfig", "DaysResult", "parse_campaign", "simulate_days"]

_MAX_DAYS = 100_000
_MAX_DEVICES = 1_000_000


@dataclass(frozen=True)
class DaysCampaign:
    """One campaign a device reports to daily: a label and the mechanism's parameters."""

    label: str
    params: Any


@dataclass(frozen=True)
class DaysConfig:
    """What :func:`simulate_days` simulates (module docstring); checked on construction."""

    campaigns: tuple[DaysCampaign, ...]
    days: int = 30
    change_probability: float = 0.0
    devices: int = 10_000
    users: int = 100_000
    seed: int = 0
    delta: float = 1e-9

    def __post_init__(self) -> None:
        if not self.campaigns:
            raise InvalidParameterError("campaign", None, "at least one campaign (NAME:field=value,...)")
        for name, value, hi in (("days", self.days, _MAX_DAYS), ("devices", self.devices, _MAX_DEVICES)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
                raise InvalidParameterError(name, value, f"an integer in [1, {hi}]")
        if isinstance(self.users, bool) or not isinstance(self.users, int) or self.users < 1:
            raise InvalidParameterError("users", self.users, "an integer >= 1")
        if isinstance(self.delta, bool) or not isinstance(self.delta, int | float) or not 0 < self.delta < 1:
            raise InvalidParameterError("delta", self.delta, "a number in (0, 1)")
        if not 0.0 <= self.change_probability <= 1.0:
            raise InvalidParameterError(
                "change_probability", self.change_probability, "a probability in [0, 1]"
            )


@dataclass(frozen=True)
class CampaignDays:
    """One campaign's figures: privacy per report and over time, the spend per day, the daily accuracy."""

    label: str
    mechanism: str
    epsilon: float
    epsilon_inf: float
    accuracy_name: str
    daily_std_error: float
    spend_fixed: NDArray[np.float64]  # per day, a device whose value never changes
    spend_mean: NDArray[np.float64]  # per day, over the simulated devices
    spend_p95: NDArray[np.float64]
    spend_max: NDArray[np.float64]
    ledger_fixed: NDArray[np.float64]  # per day, what the device ledger charged a fixed value (real ledger)
    ledger_mean: NDArray[np.float64]  # per day, the ledger's charge over the simulated devices


@dataclass(frozen=True)
class DaysResult:
    """Every campaign's figures and the device's totals (sums over campaigns) per day."""

    config: DaysConfig
    campaigns: tuple[CampaignDays, ...]
    total_mean: NDArray[np.float64] = field(repr=False)
    total_p95: NDArray[np.float64] = field(repr=False)
    total_fixed: NDArray[np.float64] = field(repr=False)
    tight_fixed: tuple[float, float] = (math.nan, math.nan)  # (epsilon, delta) on the last day, value fixed
    ledger: LedgerDays | None = field(default=None, repr=False)  # the real ledger's charges, value fixed

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (the last day's figures and the per-day curves)."""
        cfg = self.config
        return {
            "days": cfg.days,
            "change_probability": cfg.change_probability,
            "devices": cfg.devices,
            "users": cfg.users,
            "seed": cfg.seed,
            "campaigns": [
                {
                    "label": c.label,
                    "mechanism": c.mechanism,
                    "epsilon": c.epsilon,
                    "epsilon_inf": None if math.isinf(c.epsilon_inf) else c.epsilon_inf,
                    "spent_value_fixed": float(c.spend_fixed[-1]),
                    "spent_mean": float(c.spend_mean[-1]),
                    "spent_p95": float(c.spend_p95[-1]),
                    "spent_max": float(c.spend_max[-1]),
                    "ledger_value_fixed": float(c.ledger_fixed[-1]),
                    "ledger_mean": float(c.ledger_mean[-1]),
                    "daily_std_error": c.daily_std_error,
                    "accuracy": c.accuracy_name,
                    "spend_mean_by_day": c.spend_mean.tolist(),
                }
                for c in self.campaigns
            ],
            "total": {
                "spent_value_fixed": float(self.total_fixed[-1]),
                "tight_value_fixed": {"epsilon": self.tight_fixed[0], "delta": self.tight_fixed[1]},
                "spent_mean": float(self.total_mean[-1]),
                "spent_p95": float(self.total_p95[-1]),
                "spend_mean_by_day": self.total_mean.tolist(),
                "ledger_value_fixed": None if self.ledger is None else float(self.ledger.total[-1]),
                "ledger_tight_value_fixed": None
                if self.ledger is None
                else {"epsilon": self.ledger.tight[0], "delta": self.ledger.tight[1]},
                "ledger_mean": float(np.sum([c.ledger_mean[-1] for c in self.campaigns])),
            },
        }


def parse_campaign(text: str) -> DaysCampaign:
    """``NAME:field=value,field=value`` (``epsilon`` and ``domain``, a size or labels joined by ``|``, are
    the parameters' own; any other is a mechanism field), e.g. ``lgrr:domain=10,epsilon=1,epsilon_inf=3``.

    Raises:
        InvalidParameterError: a malformed item, an unknown mechanism or field (named).
    """
    name, _, rest = text.partition(":")
    fields: dict[str, object] = {}
    epsilon: float | None = None
    domain: int | tuple[str, ...] | None = None
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise InvalidParameterError("campaign", text[:80], "NAME:field=value,field=value,...")
        if key == "epsilon":
            try:
                epsilon = float(value)
            except ValueError:
                raise InvalidParameterError("epsilon", value, "a number") from None
        elif key == "domain":
            domain = int(value) if value.isdigit() else tuple(value.split("|"))
        else:
            fields[key] = value
    params = make_params(registry.spec_named(name).name, epsilon=epsilon, domain=domain, fields=fields)
    return DaysCampaign(label=text, params=params)


def _distinct_values(
    days: int, devices: int, change: float, size: int | None, rng: np.random.Generator
) -> NDArray[np.int64]:
    """(devices, days): how many distinct values each device has reported by each day. A value changes w.p.
    ``change`` per day to a uniform one of ``size`` (None: always to a new one)."""
    changes = rng.random((devices, days)) < change
    changes[:, 0] = False
    if size is None:
        return np.cumsum(changes, axis=1) + 1
    seen = np.zeros((devices, size), dtype=np.bool_)
    current = rng.integers(0, size, size=devices)
    rows = np.arange(devices)
    out = np.empty((devices, days), dtype=np.int64)
    for day in range(days):  # a loop over days, vectorised over devices
        moved = changes[:, day]
        current = np.where(moved, rng.integers(0, size, size=devices), current)
        seen[rows, current] = True
        out[:, day] = seen.sum(axis=1)
    return out


def _accuracy(spec: Any, params: Any, users: int) -> tuple[str, float]:
    """(what, the standard error of one day's estimate from ``users`` reports)."""
    if spec.kind is Kind.MEAN:
        design = spec.mean_design(params)
        lo, hi = design.ranges[0]
        scale = float(design.scale)
        return "mean", (hi - lo) * scale * math.sqrt(design.max_variance_s() / users)
    if spec.kind is Kind.SUPPORT:
        return "frequency", math.sqrt(spec.variance(params, 0.0) / users)
    return "none", math.nan


def simulate_days(cfg: DaysConfig) -> DaysResult:
    """The spend of every campaign per day and in total, and the daily accuracy (module docstring)."""
    rng = np.random.default_rng(cfg.seed)
    out: list[CampaignDays] = []
    terms: list[tuple[float, float, int]] = []  # a fixed value's reports, for the tight total
    day_numbers = np.arange(1, cfg.days + 1, dtype=np.float64)
    # The fixed-value device through the real device ledger (simulations.device_ledger).
    ledger = ledger_days(
        [c.params for c in cfg.campaigns],
        [device_values(c.params, f"c{i}", 1) * cfg.days for i, c in enumerate(cfg.campaigns)],
        cfg.delta,
    )
    for campaign in cfg.campaigns:
        params = campaign.params
        spec = registry.spec_for(params)
        eps = float(params.epsilon)
        eps_inf = float(spec.epsilon_inf(params))
        per_report = day_numbers * eps
        domain = getattr(params, "domain", None)
        size = domain.size if domain is not None else None
        distinct = _distinct_values(cfg.days, cfg.devices, cfg.change_probability, size, rng)
        spent = (
            np.broadcast_to(per_report, distinct.shape)
            if math.isinf(eps_inf)
            else np.minimum(per_report[None, :], distinct * eps_inf)
        )
        fixed = per_report if math.isinf(eps_inf) else np.minimum(per_report, eps_inf)
        # The ledger's rule over the simulated devices: epsilon_inf per new value, paid at its first report.
        charged = np.broadcast_to(per_report, distinct.shape) if math.isinf(eps_inf) else distinct * eps_inf
        delta = float(spec.delta(params))
        if math.isinf(eps_inf) or cfg.days * eps < eps_inf:
            terms.append((eps, delta, cfg.days))
        else:  # one memoized value: its epsilon_inf covers every report of it
            terms.append((eps_inf, delta, 1))
        what, se = _accuracy(spec, params, cfg.users)
        out.append(
            CampaignDays(
                label=campaign.label,
                mechanism=spec.name,
                epsilon=eps,
                epsilon_inf=eps_inf,
                accuracy_name=what,
                daily_std_error=se,
                spend_fixed=np.asarray(fixed, dtype=np.float64),
                spend_mean=spent.mean(axis=0),
                spend_p95=np.percentile(spent, 95, axis=0),
                spend_max=spent.max(axis=0),
                ledger_fixed=ledger.per_campaign[len(out)],
                ledger_mean=np.asarray(charged, dtype=np.float64).mean(axis=0),
            )
        )
    # A device's total: its campaigns' spends added; the 95th percentile of the total over devices would
    # need the devices' joint draws, so the sum of the campaigns' 95th percentiles bounds it from above.
    return DaysResult(
        config=cfg,
        campaigns=tuple(out),
        total_mean=np.sum([c.spend_mean for c in out], axis=0),
        total_p95=np.sum([c.spend_p95 for c in out], axis=0),
        total_fixed=np.sum([c.spend_fixed for c in out], axis=0),
        tight_fixed=tight_total(tuple(terms), cfg.delta),  # the ledger's numerical composer
        ledger=ledger,
    )


def plot_days(result: DaysResult, path: str) -> None:
    """A PNG: each campaign's mean spend per day (the 95th percentile dashed) and the device's total."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    days = np.arange(1, result.config.days + 1)
    for c in result.campaigns:
        (line,) = ax.plot(days, c.spend_mean, label=f"{c.mechanism} (eps {c.epsilon:.3g})")
        ax.plot(days, c.spend_p95, linestyle="--", color=line.get_color(), linewidth=0.8)
    if len(result.campaigns) > 1:
        ax.plot(days, result.total_mean, color="black", linewidth=2, label="device total (mean)")
    if result.ledger is not None:
        ax.plot(
            days,
            result.ledger.total,
            color="grey",
            linestyle=":",
            linewidth=2,
            label="ledger's charge, value fixed",
        )
    ax.set_xlabel("day")
    ax.set_ylabel("epsilon spent (basic composition)")
    ax.set_title(
        f"daily reports, value changes w.p. {result.config.change_probability:g} a day (dashed: 95%)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=110)
