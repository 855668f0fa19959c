"""Discovery of frequent values over an unknown domain (issue 16): the server's level-by-level loop.

A mechanism of kind DISCOVERY (:class:`ldp_client.spec.Kind`) splits its users into groups, one per level;
the reports of level j's group estimate how many users hold each candidate of that level through the
spec's :class:`~ldp_client.spec.Support` (the one pure-oracle estimator,
:func:`ldp_aggregator.estimators.pure_oracle_arrays`). The loop knows nothing else of the mechanism:

1. level 0 tests the candidates the parameters fix (``spec.discovery_candidates(params, 0, ())``);
2. at each level the ``top_k`` candidates of highest estimated count are kept (ties broken by candidate
   order, so the result is deterministic) and extended into the next level's candidates;
3. the candidates kept at the last level are the discovered values, ranked by estimated count.

Scaling to the whole population. Group j holds n_j of the N reporting users, a random subset (the group is
drawn from each device's secret, independently of its value). With c_hat_j the group's unbiased estimate of
the c_j users of the group holding a value, the population estimate is c_hat = (N / n_j) c_hat_j, unbiased
for c, with

    Var[c_hat] = (N / n_j)^2 Var[c_hat_j | c_j] + N^2 f (1 - f) (1/n_j - 1/N),     f = c / N,

the second term being the sampling of the group out of the N users it is a random part of (without
replacement: the finite-population factor), f estimated by clip(c_hat / N, 0, 1). The interval is
c_hat +- z SE (normal).

Pooling. A candidate that already holds complete values (a short string whose prefix is whole) is also
estimated by the groups of the earlier levels where it was complete (``spec.discovery_same_value``); their
estimates are pooled with weights n_j (:func:`_pooled`), which lowers the variance of short values and
ranks them on more reports. Without a verification level, the estimates of the discovered values come
from the last level's reports, which also chose among the last level's candidates: for a value near the
threshold the estimate given its discovery is biased upwards (winner's curse); values well above the
threshold are not affected measurably. A mechanism with a verification level (treehist; pem with a
verification_share) tests the values kept at the last level once more against a group of its own, with no
pooling (``discovery_same_value`` gives nothing there): those estimates are unbiased given the discovery.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_aggregator.estimation import NoReportsError, normal_quantile
from ldp_aggregator.estimators import pure_oracle_arrays
from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.spec import Kind, MechanismSpec, Support

__all__ = [
    "DiscoveredItem",
    "DiscoveryLevel",
    "DiscoveryResult",
    "discover",
    "discover_columns",
    "discovery_columns",
    "discovery_to_dict",
]


@dataclass(frozen=True, kw_only=True)
class DiscoveredItem:
    """One discovered value: its label, estimated count in the population, standard error and interval."""

    label: str
    count: float
    std_error: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, kw_only=True)
class DiscoveryLevel:
    """What one level did: how many users reported on it, how many candidates it tested, how many it kept
    and the threshold used (the estimated population count of the last candidate kept; -inf if none)."""

    level: int
    reports: int
    tested: int
    kept: int
    threshold: float


@dataclass(frozen=True, kw_only=True)
class DiscoveryResult:
    """Discovered values ranked by estimated count (highest first), with each level's summary."""

    mechanism: str
    n: int
    epsilon: float
    confidence: float
    top_k: int
    items: tuple[DiscoveredItem, ...]
    levels: tuple[DiscoveryLevel, ...]
    kept: tuple[Hashable, ...] = ()
    """The last level's kept candidates, in ``items``' order (what an adaptive round publishes)."""

    def item(self, label: str) -> DiscoveredItem:
        """The discovered value ``label``; raises KeyError if it was not discovered."""
        for it in self.items:
            if it.label == label:
                return it
        raise KeyError(label)


SupportOf = Callable[[int, Sequence[Hashable]], Support]
"""``support_of(level, candidates)``: the Support of the candidates among that level's reports."""


def _spec(params: Any) -> MechanismSpec[Any]:
    spec = registry.spec_for(params)
    if spec.kind is not Kind.DISCOVERY:
        raise InvalidParameterError("mechanism", params.name, "a discovery mechanism (kind discovery)")
    return spec


def discover(
    params: Any,
    support_of: SupportOf,
    n: int,
    *,
    confidence: float = 0.95,
    top_k: int | None = None,
    levels: int | None = None,
    published: Sequence[Sequence[Hashable]] = (),
) -> DiscoveryResult:
    """Run the level loop (module docstring) with the supports ``support_of`` gives.

    Args:
        params: parameters of a registered mechanism of kind DISCOVERY.
        support_of: the Support of a level's candidates (from reports: :func:`discover_columns`; from
            expected counts in exact tests).
        n: the number of reporting users N.
        confidence: two-sided level of the intervals.
        top_k: candidates kept per level; default the campaign's (``spec.discovery_top_k``). At most it.
        levels: run only the first ``levels`` levels (an adaptive campaign's closed rounds); default all.
        published: the candidates an adaptive campaign kept at its first levels, in order: those levels
            keep them (the first ``top_k``) instead of choosing again, so the candidates of each later
            level are the ones its devices were given (:mod:`ldp_aggregator.discovery_rounds`).

    Raises:
        NoReportsError: no reports, or a level without reports.
        InvalidParameterError: not a discovery mechanism, bad confidence or top_k.
    """
    spec = _spec(params)
    if n <= 0:
        raise NoReportsError(0)
    limit = spec.discovery_top_k(params)
    k = limit if top_k is None else top_k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limit:
        raise InvalidParameterError("top_k", top_k, f"an integer in [1, {limit}] (the campaign's top_k)")
    z = normal_quantile(confidence)
    summary: list[DiscoveryLevel] = []
    kept: tuple[Hashable, ...] = ()
    est = se = np.zeros(0)
    support_of = _SupportCache(support_of)
    for level in range(spec.discovery_levels(params) if levels is None else levels):
        candidates = spec.discovery_candidates(params, level, kept)
        support = support_of(level, candidates)
        n_j = support.n
        if n_j == 0:
            raise NoReportsError(0)
        counts, errors = _pooled(spec, params, support_of, level, candidates, support, n, confidence)
        if level < len(published):
            position = {c: i for i, c in enumerate(candidates)}
            order = np.array([position[c] for c in published[level][:k]], dtype=np.int64)
        else:
            # Highest estimates first; a stable sort keeps candidate order among equal estimates.
            order = np.argsort(-counts, kind="stable")[: min(k, len(candidates))]
        kept = tuple(candidates[i] for i in order)
        est, se = counts[order], errors[order]
        threshold = float(est[-1]) if len(order) else -math.inf
        summary.append(
            DiscoveryLevel(
                level=level, reports=n_j, tested=len(candidates), kept=len(kept), threshold=threshold
            )
        )
    items = tuple(
        DiscoveredItem(
            label=spec.discovery_label(params, cand),
            count=float(c),
            std_error=float(s),
            ci_low=float(c - z * s),
            ci_high=float(c + z * s),
        )
        for cand, c, s in zip(kept, est, se, strict=True)
    )
    return DiscoveryResult(
        mechanism=params.name,
        n=n,
        epsilon=params.epsilon,
        confidence=float(confidence),
        top_k=k,
        items=items,
        levels=tuple(summary),
        kept=kept,
    )


class _SupportCache:
    """``support_of`` remembering each (level, candidate)'s support count: pooling asks the earlier levels
    again for the complete values kept at every later level (a value found whole at level 3 of 21 is
    counted in level 3's reports up to 18 times), which was about a third of the server's time on long
    values. A level's reports never change during one discovery, so a count once computed stands. Supports
    that carry more than counts and rates (``extra_variance``, ``estimated``) are not remembered."""

    def __init__(self, support_of: SupportOf) -> None:
        self._support_of = support_of
        self._known: dict[int, tuple[int, dict[Hashable, tuple[Any, float, float]]]] = {}

    def __call__(self, level: int, candidates: Sequence[Hashable]) -> Support:
        n, got = self._known.get(level, (-1, {}))
        missing = [c for c in dict.fromkeys(candidates) if c not in got]
        if missing or n < 0:
            support = self._support_of(level, missing)
            if support.estimated or np.any(np.asarray(support.extra_variance) != 0):
                return self._support_of(level, candidates)
            p = np.broadcast_to(np.asarray(support.p_star, dtype=np.float64), (len(missing),))
            q = np.broadcast_to(np.asarray(support.q_star, dtype=np.float64), (len(missing),))
            got.update(zip(missing, zip(support.counts, p.tolist(), q.tolist(), strict=True), strict=True))
            n = support.n
            self._known[level] = (n, got)
        rows = [got[c] for c in candidates]
        counts = np.array([r[0] for r in rows])
        p_star = np.array([r[1] for r in rows], dtype=np.float64)
        q_star = np.array([r[2] for r in rows], dtype=np.float64)
        # One rate for the whole level (every mechanism so far) stays a scalar, as the spec gave it.
        same = p_star.size > 0 and bool(np.all(p_star == p_star[0]) and np.all(q_star == q_star[0]))
        return Support(
            labels=tuple(str(i) for i in range(len(candidates))),
            counts=counts,
            n=n,
            p_star=float(p_star[0]) if same else p_star,
            q_star=float(q_star[0]) if same else q_star,
        )


def _pooled(
    spec: MechanismSpec[Any],
    params: Any,
    support_of: SupportOf,
    level: int,
    candidates: Sequence[Hashable],
    support: Support,
    n: int,
    confidence: float,
) -> tuple[Any, Any]:
    """Population estimates and standard errors of a level's candidates, each pooled with the earlier
    levels whose candidate stands for the same values (``spec.discovery_same_value``; module docstring).

    Group j's estimate c_hat_j = (N / n_j) (C - n_j q*)/(p* - q*) is unbiased for c. Weighing each group
    by its size n_j (weights that do not depend on the reports keep it unbiased; the best combination when
    every group has the same oracle): c_hat = sum n_j c_hat_j / sum n_j = (N / n_S) sum c_hat'_j over the
    pooled groups S, c_hat'_j the group's own unbiased count, n_S = sum n_j. Its error is the oracles'
    noise, independent across groups, plus the sampling of the groups S out of the N users they
    partition (a random split, independent of the values, so without replacement):

        Var[c_hat] = N^2 sum_j n_j L_j(f) / n_S^2 + N^2 f (1 - f) (1/n_S - 1/N),
        L_j(f) = (q_j (1 - q_j) + f (p_j - q_j)(1 - p_j - q_j)) / (p_j - q_j)^2,

    f estimated by clip(c_hat / N, 0, 1). Each group has its own L_j (the rounds of an adaptive campaign
    may answer with different oracles, :mod:`ldp_aggregator.discovery_rounds`). The finite-population
    factor (1/n_S - 1/N) matters for a value pooled over many groups: pooled over all of them, its
    sampling error is zero.
    """
    arrays = pure_oracle_arrays(support.counts, support.n, support.p_star, support.q_star, confidence)
    weight = np.full(len(candidates), float(support.n))
    total = arrays.count * (n / support.n) * support.n
    # (candidate indexes, n_j, p*, q*) of every group pooled: an adaptive campaign's rounds may use
    # different oracles (ldp_aggregator.discovery_rounds), so each group's K(f) is its own.
    every = np.arange(len(candidates))
    parts: list[tuple[Any, float, Any, Any]] = [(every, float(support.n), support.p_star, support.q_star)]
    earlier: dict[int, list[tuple[int, Hashable]]] = {}
    for i, cand in enumerate(candidates):
        for lv, same in spec.discovery_same_value(params, level, cand):
            earlier.setdefault(lv, []).append((i, same))
    for lv, pairs in sorted(earlier.items()):
        sup = support_of(lv, [c for _, c in pairs])
        if sup.n == 0:
            continue
        arr = pure_oracle_arrays(sup.counts, sup.n, sup.p_star, sup.q_star, confidence)
        idx = np.array([i for i, _ in pairs], dtype=np.int64)
        np.add.at(total, idx, arr.count * (n / sup.n) * sup.n)
        np.add.at(weight, idx, float(sup.n))
        parts.append((idx, float(sup.n), sup.p_star, sup.q_star))
    counts = total / weight
    f = np.clip(counts / n, 0.0, 1.0)
    # The oracles' noise, independent across groups: N^2 sum_j n_j L_j(f) / (sum n_j)^2.
    spread = np.zeros(len(candidates))
    for idx, n_j, p_j, q_j in parts:
        p, q = np.asarray(p_j, dtype=np.float64), np.asarray(q_j, dtype=np.float64)
        f_j = f[idx]
        np.add.at(spread, idx, n_j * (q * (1 - q) + f_j * (p - q) * (1 - p - q)) / (p - q) ** 2)
    # The sampling of the pooled groups out of the N users they partition (finite population):
    # N^2 f (1 - f) (1 / sum n_j - 1 / N); zero when the pooled groups hold every user.
    sampling = np.clip(1.0 / weight - 1.0 / n, 0.0, None) * f * (1 - f)
    return counts, n * np.sqrt(spread / weight**2 + sampling)


def discover_columns(
    params: Any, columns: Any, n: int, *, confidence: float = 0.95, top_k: int | None = None
) -> DiscoveryResult:
    """:func:`discover` over decoded batch columns of every report of a campaign (numpy)."""
    spec = _spec(params)
    return discover(
        params,
        lambda level, cands: spec.discovery_support(params, columns, level, cands),
        n,
        confidence=confidence,
        top_k=top_k,
    )


def discovery_columns(params: Any, campaign_id: str, payloads: Iterable[bytes]) -> tuple[Any, int]:
    """The batch columns of a campaign's raw payloads (ReportBatch or, for a single report, Report bytes),
    concatenated, and the number of reports. Each payload is validated again by :mod:`ldp_client.wire`."""
    from ldp_client import wire
    from ldp_client._proto.ldp.v1 import reports_pb2

    parts: list[Any] = []
    n = 0
    for raw in payloads:
        batch = reports_pb2.ReportBatch.FromString(raw)
        if batch.count:
            parts.append(wire.batch_from_proto(batch, params, campaign_id=campaign_id))
            n += batch.count
        else:  # a single report (Collector.SubmitReport) is stored as its Report message
            report = reports_pb2.Report.FromString(raw)
            parts.append(wire.report_from_proto(report, params, campaign_id=campaign_id))
            n += 1
    if n == 0:
        return None, 0
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))), n
    return np.concatenate(parts), n


def discovery_to_dict(result: DiscoveryResult, truth: dict[str, int] | None = None) -> dict[str, Any]:
    """The result as plain JSON values: ``items`` (label, estimate, std_error, ci_low, ci_high, and
    true_count when ``truth`` is given) and ``levels``."""

    def item(it: DiscoveredItem) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": it.label,
            "estimate": it.count,
            "std_error": it.std_error,
            "ci_low": it.ci_low,
            "ci_high": it.ci_high,
        }
        if truth is not None:
            out["true_count"] = truth.get(it.label, 0)
        return out

    return {
        "mechanism": result.mechanism,
        "n_reports": result.n,
        "epsilon": result.epsilon,
        "confidence": result.confidence,
        "top_k": result.top_k,
        "items": [item(it) for it in result.items],
        "levels": [
            {
                "level": lv.level,
                "reports": lv.reports,
                "tested": lv.tested,
                "kept": lv.kept,
                "threshold": lv.threshold if math.isfinite(lv.threshold) else "-inf",
            }
            for lv in result.levels
        ],
    }
