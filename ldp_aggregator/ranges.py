"""Range queries, quantiles and the CDF from a hierarchy of frequency-oracle levels (issue 18).

Input: a :class:`ldp_client.layouts.RangeLevels` (a spec's ``range_levels``: ``hio``; a
:class:`ldp_client.layouts.HaarLevels` goes to :mod:`ldp_aggregator.haar_ranges` instead, same answers):
a tree of fan-out B over the D ordered values padded to B^h leaves; level l (1..h) has B^l nodes; n_l of
the n reports belong to level l (their users a uniformly random subset, independent of the values) and
C_{l,v} of them support node v, with the level oracle's rates p*, q* (GRR at small levels, local hashing
below, as the spec says).

1. Per-level estimates (Wang, Blocki, Li, Jha, USENIX Security 2017, §4): the share of level-l users in node
   v, x_{l,v} = (C_{l,v}/n_l - q*) / (p* - q*), unbiased for the population share f_v (the level's users
   are a random subset). Its variance has two parts: the oracle's given the subset,
   [q*(1-q*) + f (p*-q*)(1-p*-q*)] / (n_l (p*-q*)^2), and the subset's sampling (below).
2. Consistency (Hay, Rastogi, Miklau, Suciu, VLDB 2010, §4; with per-level variances as in Cormode,
   Kulkarni, Srivastava, VLDB 2019, §4.3): the root's share is known (1). Bottom-up weighted averaging,
   z_h = x_h and for l < h: z_l = a_l x_l + (1 - a_l) S(z_{l+1}) with S the sum over a node's B children and
   a_l = V(S z_{l+1}) / (s_l^2 + V(S z_{l+1})), the inverse-variance weight, s_l^2 = q*(1-q*)/(n_l
   (p*-q*)^2) the level's variance at f = 0 (the same for every node of a level, as those papers assume),
   V(z_l) = a_l s_l^2 and V(S z_{l+1}) = B V(z_{l+1}). Top-down mean consistency, y_0 = 1 and
   y_l = z_l + R(y_{l-1} - S z_l) / B with R repeating a parent's value over its B children. The leaves
   y_h are then consistent (every node is the sum of its children) and, the operator being linear and the
   identity on consistent trees, unbiased.
3. A range [lo, hi] is the sum of the consistent leaves in it, the same as the sum over its minimal
   decomposition into tree nodes (at most 2 (B-1) per level). As a linear function of the per-level
   estimates, answer = sum_{l,v} w_{l,v} x_{l,v} + w_0, with the weights w computed exactly by the adjoint
   of the two passes above (no matrix is formed: O(B^h) per range).
4. Its variance: sum_{l,v} w_{l,v}^2 V_oracle(x_{l,v}) (nodes of one level have uncorrelated support
   indicators under local hashing, and levels have disjoint users), plus the sampling variance of the
   level subsets: with g_l(x) = w_{l, node of x at level l} and sigma_lm the population covariance of g_l
   and g_m, Var = N/(N-1) sum_l sigma_ll / n_l - Var_pop(sum_l g_l) / (N-1) (disjoint simple random
   subsets of sizes n_l; Cochran, "Sampling Techniques", 1977, §2.8 and the covariance of two subsample
   means). The unknown f are plugged in: f_v from the consistent leaves, clipped to [0, 1] for the
   sampling part. Count scale: N times the share, N = n; standard error and a normal interval.
5. CDF(t) = range [0, t]; the q-quantile is the first t with CDF(t) >= q (the consistent leaves'
   cumulative sum; it need not be monotone where leaves are negative, so the first crossing is taken).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator._range_common import EmptyLevelError, sampling_variance
from ldp_aggregator.estimation import normal_quantile
from ldp_aggregator.haar_ranges import HaarTree, fit_haar
from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.layouts import HaarLevels, RangeLevels

__all__ = [
    "EmptyLevelError",
    "QuantileAnswer",
    "RangeAnswer",
    "RangeTree",
    "add_to_proto",
    "answer_quantiles",
    "answer_ranges",
    "campaign_ranges",
    "cdf",
    "fit_tree",
    "parse_range",
    "range_answer_dict",
    "ranges_to_dict",
    "sampling_variance",
]


@dataclass(frozen=True)
class RangeAnswer:
    """The estimate of one range [lo, hi] (positions, inclusive): count, share, standard error, interval."""

    lo: int
    hi: int
    lo_label: str
    hi_label: str
    count: float
    frequency: float
    std_error: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class QuantileAnswer:
    """The first position whose estimated CDF reaches q."""

    q: float
    position: int
    label: str


@dataclass(frozen=True)
class RangeTree:
    """The fitted hierarchy: per-level estimates x_l and their oracle variances, consistency weights a_l,
    the consistent leaves (shares), and what the answers need (module docstring)."""

    labels: tuple[str, ...]
    branching: int
    n: int
    reports: tuple[int, ...]
    x: tuple[NDArray[np.float64], ...]
    oracle_var: tuple[NDArray[np.float64], ...]
    weights: tuple[float, ...]
    leaves: NDArray[np.float64]

    @property
    def levels(self) -> int:
        return len(self.x)

    def variance(self, r: NDArray[np.float64]) -> float:
        """Var of r . leaves on the share scale (steps 3 and 4)."""
        return _range_variance(self, _adjoint(self, r))


def _childsum(v: NDArray[np.float64], b: int) -> NDArray[np.float64]:
    out: NDArray[np.float64] = v.reshape(-1, b).sum(axis=1)
    return out


def fit_tree(levels: RangeLevels) -> RangeTree:
    """Per-level estimates, variances and the consistent leaves (steps 1 and 2 of the module docstring).

    Raises:
        NoReportsError: a level has no report yet (its nodes cannot be estimated).
    """
    b = levels.branching
    h = len(levels.counts)
    xs: list[NDArray[np.float64]] = []
    ovar: list[NDArray[np.float64]] = []
    base: list[float] = []
    for level, (counts, n_l) in enumerate(zip(levels.counts, levels.reports, strict=True), start=1):
        p, q = float(levels.p_star[level - 1]), float(levels.q_star[level - 1])
        delta = p - q
        if n_l <= 0:
            raise EmptyLevelError(level)
        c = np.asarray(counts, dtype=np.float64)
        x = (c / n_l - q) / delta
        xs.append(x)
        # The oracle variance at the unclipped estimate: linear in f, so unbiased (as estimators.py argues).
        ovar.append(np.maximum((q * (1 - q) + x * delta * (1 - p - q)) / (n_l * delta * delta), 0.0))
        base.append(q * (1 - q) / (n_l * delta * delta))
    # Bottom-up weighted averaging.
    a = [1.0] * h
    var_z = base[h - 1]
    z: list[NDArray[np.float64]] = [np.empty(0)] * h
    z[h - 1] = xs[h - 1]
    for i in range(h - 2, -1, -1):
        var_s = b * var_z
        a[i] = var_s / (base[i] + var_s)
        z[i] = a[i] * xs[i] + (1 - a[i]) * _childsum(z[i + 1], b)
        var_z = a[i] * base[i]
    # Top-down mean consistency from the known root share 1.
    y = np.ones(1)
    for i in range(h):
        y = z[i] + np.repeat(y - _childsum(z[i], b), b) / b
    return RangeTree(
        labels=levels.labels,
        branching=b,
        n=int(levels.n),
        reports=tuple(int(r) for r in levels.reports),
        x=tuple(xs),
        oracle_var=tuple(ovar),
        weights=tuple(a),
        leaves=y,
    )


def _adjoint(tree: RangeTree, r: NDArray[np.float64]) -> list[NDArray[np.float64]]:
    """w_l = d(r . y_h) / d x_l for every level: the adjoint of the two consistency passes."""
    b, h = tree.branching, tree.levels
    zbar: list[NDArray[np.float64]] = [np.empty(0)] * h
    ybar = r
    for i in range(h - 1, -1, -1):  # reverse of the top-down pass
        u = _childsum(ybar, b) / b
        zbar[i] = ybar - np.repeat(u, b)
        ybar = u
    w: list[NDArray[np.float64]] = [np.empty(0)] * h
    for i in range(h - 1):  # reverse of the bottom-up pass
        w[i] = tree.weights[i] * zbar[i]
        zbar[i + 1] = zbar[i + 1] + (1 - tree.weights[i]) * np.repeat(zbar[i], b)
    w[h - 1] = zbar[h - 1]
    return w


def _range_variance(tree: RangeTree, w: list[NDArray[np.float64]]) -> float:
    """Step 4: oracle part plus the sampling part of the random level subsets (share scale)."""
    b, h = tree.branching, tree.levels
    oracle = sum(float(np.dot(wl * wl, vl)) for wl, vl in zip(w, tree.oracle_var, strict=True))
    # g_l over the leaves: each leaf takes the weight of its level-l ancestor.
    g = np.stack([np.repeat(wl, b ** (h - 1 - i)) for i, wl in enumerate(w)])
    return oracle + sampling_variance(g, tree.leaves, tree.reports, tree.n)


def parse_range(text: str, labels: Sequence[str]) -> tuple[int, int]:
    """``LO:HI`` (positions, or labels of the domain) as checked positions lo <= hi.

    Raises:
        InvalidParameterError: one line naming the range and what is allowed.
    """
    parts = text.split(":")
    if len(parts) != 2:
        raise InvalidParameterError("range", text[:80], "LO:HI, two positions or labels of the domain")
    index = {label: i for i, label in enumerate(labels)}
    ends = []
    for part in parts:
        s = part.strip()
        if s in index:
            ends.append(index[s])
        elif s.isdigit():
            ends.append(int(s))
        else:
            where = f" in [0, {len(labels) - 1}] or labels" if labels else " (non-negative integers)"
            raise InvalidParameterError("range", text[:80], f"LO:HI with positions{where}")
    return ends[0], ends[1]


def _check_range(lo: int, hi: int, d: int) -> None:
    if not (0 <= lo <= hi < d):
        raise InvalidParameterError("range", f"{lo}:{hi}", f"positions 0 <= lo <= hi <= {d - 1}")


def answer_ranges(
    tree: RangeTree | HaarTree, ranges: Sequence[tuple[int, int]], confidence: float = 0.95
) -> tuple[RangeAnswer, ...]:
    """The estimate of each range (steps 3 and 4 of the module docstring), on the count scale N = n.

    Raises:
        InvalidParameterError: a range outside the domain or with lo > hi (the first one, named).
    """
    d = len(tree.labels)
    for lo, hi in ranges:
        _check_range(lo, hi, d)
    z = normal_quantile(confidence)
    out = []
    for lo, hi in ranges:
        r = np.zeros(tree.leaves.shape[0])
        r[lo : hi + 1] = 1.0
        share = float(tree.leaves[lo : hi + 1].sum())
        se = float(np.sqrt(tree.variance(r))) * tree.n
        count = share * tree.n
        out.append(
            RangeAnswer(
                lo=lo,
                hi=hi,
                lo_label=tree.labels[lo],
                hi_label=tree.labels[hi],
                count=count,
                frequency=share,
                std_error=se,
                ci_low=count - z * se,
                ci_high=count + z * se,
            )
        )
    return tuple(out)


def answer_quantiles(tree: RangeTree | HaarTree, qs: Sequence[float]) -> tuple[QuantileAnswer, ...]:
    """The first position whose estimated CDF (cumulative consistent leaves over the D values) reaches q.

    Raises:
        InvalidParameterError: q not in (0, 1).
    """
    d = len(tree.labels)
    cdf = np.cumsum(tree.leaves[:d])
    out = []
    for q in qs:
        if not 0.0 < q < 1.0:
            raise InvalidParameterError("quantile", q, "a number in (0, 1)")
    for q in qs:
        hit = np.flatnonzero(cdf >= q)
        pos = int(hit[0]) if hit.size else d - 1
        out.append(QuantileAnswer(q=float(q), position=pos, label=tree.labels[pos]))
    return tuple(out)


def cdf(tree: RangeTree | HaarTree) -> NDArray[np.float64]:
    """The estimated CDF at each of the D values (shares): the cumulative consistent leaves."""
    out: NDArray[np.float64] = np.cumsum(tree.leaves[: len(tree.labels)])
    return out


_RANGE_FIELDS = ("lo", "hi", "lo_label", "hi_label", "count", "frequency", "std_error", "ci_low", "ci_high")


def range_answer_dict(a: Any) -> dict[str, Any]:
    """The JSON form of one range answer (a :class:`RangeAnswer` or a ``RangeEstimate`` message)."""
    return {name: getattr(a, name) for name in _RANGE_FIELDS}


def campaign_ranges(
    params: Any,
    acc: Any,
    ranges: Sequence[tuple[int, int]],
    quantiles: Sequence[float] = (),
    confidence: float = 0.95,
) -> tuple[tuple[RangeAnswer, ...], tuple[QuantileAnswer, ...]]:
    """A campaign's answers to range and quantile queries, through its spec's ``range_levels``.

    Raises:
        InvalidParameterError: the mechanism answers no range queries, or a range or quantile is bad
            (checked before the data, so the same answer with or without reports).
        EmptyLevelError: a level of the tree has no report yet.
    """
    spec = registry.spec_for(params)
    levels = spec.range_levels(params, acc)
    if levels is None:
        what = "ranges" if ranges else "quantiles"
        raise InvalidParameterError(what, params.name, "a campaign of a range mechanism (hio, haar)")
    d = len(levels.labels)
    for lo, hi in ranges:
        _check_range(lo, hi, d)
    for q in quantiles:
        if not 0.0 < q < 1.0:
            raise InvalidParameterError("quantile", q, "a number in (0, 1)")
    normal_quantile(confidence)
    # The two level structures a spec may give (a hierarchy of oracles, or Haar coefficients).
    tree = fit_haar(levels) if isinstance(levels, HaarLevels) else fit_tree(levels)
    return answer_ranges(tree, ranges, confidence), answer_quantiles(tree, quantiles)


def add_to_proto(msg: Any, answers: Sequence[RangeAnswer], quantiles: Sequence[QuantileAnswer] = ()) -> None:
    """Fill ``EstimateResponse.ranges`` and ``.quantiles`` (issue 18)."""
    for a in answers:
        msg.ranges.add(**range_answer_dict(a))
    for qa in quantiles:
        msg.quantiles.add(q=qa.q, position=qa.position, label=qa.label)


def ranges_to_dict(msg: Any) -> dict[str, Any]:
    """The JSON form of an EstimateResponse's ranges and quantiles (empty when it has none)."""
    out: dict[str, Any] = {}
    if msg.ranges:
        out["ranges"] = [range_answer_dict(r) for r in msg.ranges]
    if msg.quantiles:
        out["quantiles"] = [{"q": q.q, "position": q.position, "label": q.label} for q in msg.quantiles]
    return out
