"""SVIM on the server (issue 18): set sizes, the paper's correction, rankings and candidate itemsets.

Wang, Li, Jha, "Locally Differentially Private Frequent Itemset Mining", IEEE S&P 2018 (SVSM, SVIM;
docs/itemsets.md). A campaign is one stage (:mod:`ldp_client.mechanisms.svim`): its values (items or
candidate itemsets) are estimated by the one pure-oracle estimator of :mod:`ldp_aggregator.estimators`
from the spec's :class:`~ldp_client.spec.Support` (PSFO's rates times the PS group's share), unbiased for
the number of the stage's users holding each value when no user has more than L elements. This module adds
what the paper builds around it:

* the **size distribution** psi_s (s = 0..size_cap, the last bin "size_cap or more") from the size group's
  GRR reports: psi_hat_s = (C_s - n_s q)/(n_s (p - q)), clipped at 0 and normalised;
* the **correction** for users with more than L elements, each of whose elements is reported w.p. 1/s
  instead of 1/L: a value held by users of size s is under-counted by min(1, L/s) in expectation; holders
  of a value are size-biased (a user of size s holds s values), so the expected factor over values is
  sum_s psi_s min(s, L) / sum_s s psi_s, and the corrected estimate multiplies by its inverse
  u(L) = sum_s s psi_s / sum_s min(s, L) psi_s >= 1 (the paper multiplies its PSFO estimates by such a
  factor from the estimated length distribution); u = 1 when no user exceeds L. It is one scalar per
  stage: it rescales estimates (and, taken as known, their standard errors) but never changes a ranking;
* the **suggested L**: the smallest L with at least 90% of the users at most L elements (the paper's
  choice of L), for the next campaign;
* the **candidate itemsets** of a follow-up from an items stage's estimates (SVIM step 2): the top
  items, then every subset of them of size >= 2 scored by its guessed frequency
  prod_{v in x} 0.9 f_v / f_max (the paper guesses an itemset's frequency from its items' relative
  frequencies; the 0.9 is our constant: it damps each added item, so a subset ranks before its
  supersets), the ``n_candidates`` best.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_aggregator.estimators import FrequencyEstimate, estimate_support
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.svim.core import ITEMS, MAX_ITEMSET_SIZE, SVIMParams
from ldp_client.mechanisms.svim.spec import SPEC

__all__ = [
    "GUESS_DAMPING",
    "SUGGESTED_QUANTILE",
    "ItemsetMining",
    "add_to_proto",
    "candidate_itemsets",
    "follow_up_params",
    "is_svim",
    "mine",
    "mining_to_dict",
    "size_distribution",
]

SUGGESTED_QUANTILE = 0.9
GUESS_DAMPING = 0.9
MAX_TOP_ITEMS = 20
"""Top items a follow-up combines: 2^20 subsets at most."""


def is_svim(params: object) -> bool:
    """Whether a campaign's parameters are an SVIM stage (answered with :func:`mine`)."""
    return isinstance(params, SVIMParams)


@dataclass(frozen=True, kw_only=True)
class ItemsetMining:
    """One stage's answer beside its estimate table (module docstring).

    Attributes:
        stage: ``items`` or ``itemsets``.
        size_reports, ps_reports: reports of the size group and of the PS group.
        size_shares: psi_hat_s for s = 0..size_cap (clipped, normalised; all 0 without size reports).
        correction: u(L) >= 1 (1 without size reports).
        suggested_max_items: the 90% quantile of the estimated sizes (at least 1).
        ranking: indices of the estimate's items by decreasing estimate (ties: the first item first).
    """

    stage: str
    size_reports: int
    ps_reports: int
    size_shares: tuple[float, ...]
    correction: float
    suggested_max_items: int
    ranking: tuple[int, ...]


def size_distribution(params: SVIMParams, acc: Any) -> tuple[tuple[float, ...], int, int]:
    """(psi_hat, size reports, PS reports) of a stage's accumulator (module docstring)."""
    m, cap = params.values, params.size_cap
    support = np.asarray(acc.support, dtype=np.float64)
    counts = support[m : m + cap + 1]
    n_size, n_ps = int(support[m + cap + 1]), int(support[m + cap + 2])
    if n_size == 0:
        return tuple(0.0 for _ in range(cap + 1)), 0, n_ps
    p, q = params.size_oracle.p, params.size_oracle.q
    psi = np.clip((counts - n_size * q) / (n_size * (p - q)), 0.0, None)
    total = psi.sum()
    shares = psi / total if total > 0 else psi
    return tuple(float(x) for x in shares), n_size, n_ps


def correction_factor(shares: Sequence[float], max_items: int) -> float:
    """u(L) = sum_s s psi_s / sum_s min(s, L) psi_s (1 when the sizes are all 0 or unknown)."""
    s = np.arange(len(shares), dtype=np.float64)
    psi = np.asarray(shares, dtype=np.float64)
    den = float((np.minimum(s, max_items) * psi).sum())
    return float((s * psi).sum()) / den if den > 0 else 1.0


def suggested_max_items(shares: Sequence[float]) -> int:
    """The smallest L >= 1 with sum_{s <= L} psi_s >= 0.9 (the last size when the shares are all 0)."""
    cum = np.cumsum(np.asarray(shares, dtype=np.float64))
    if len(cum) == 0 or cum[-1] <= 0:
        return max(1, len(shares) - 1)
    return max(1, int(np.argmax(cum >= SUGGESTED_QUANTILE * cum[-1] - 1e-12)))


def mine(params: SVIMParams, acc: Any, estimate: FrequencyEstimate | None = None) -> ItemsetMining:
    """The stage's sizes, correction and ranking (``estimate``: the campaign's frequency estimate, made
    here at 95% when not given)."""
    est = estimate or estimate_support(SPEC.support(params, acc), mechanism=SPEC.name, epsilon=params.epsilon)
    shares, n_size, n_ps = size_distribution(params, acc)
    counts = np.array([it.count for it in est.items], dtype=np.float64)
    ranking = tuple(int(i) for i in np.argsort(-counts, kind="stable"))
    return ItemsetMining(
        stage=params.stage,
        size_reports=n_size,
        ps_reports=n_ps,
        size_shares=shares,
        correction=correction_factor(shares, params.max_items),
        suggested_max_items=suggested_max_items(shares),
        ranking=ranking,
    )


def add_to_proto(msg: estimates_pb2.EstimateResponse, mining: ItemsetMining) -> None:
    """Set ``EstimateResponse.itemsets``."""
    out = msg.itemsets
    out.stage = 1 if mining.stage == ITEMS else 2
    out.size_reports, out.ps_reports = mining.size_reports, mining.ps_reports
    out.size_shares[:] = list(mining.size_shares)
    out.correction = mining.correction
    out.suggested_max_items = mining.suggested_max_items
    out.ranking[:] = list(mining.ranking)


def mining_to_dict(msg: estimates_pb2.EstimateResponse) -> dict[str, Any]:
    """The ``itemsets`` part of an estimate's JSON: the ranked values (label, estimate, std_error, ci_low,
    ci_high, corrected), sizes and correction; empty for a campaign that is not an SVIM stage."""
    if not msg.HasField("itemsets"):
        return {}
    m = msg.itemsets
    u = m.correction
    ranked = [msg.items[i] for i in m.ranking]
    return {
        "itemsets": {
            "stage": "items" if m.stage == 1 else "itemsets",
            "size_reports": m.size_reports,
            "ps_reports": m.ps_reports,
            "size_shares": list(m.size_shares),
            "correction": u,
            "suggested_max_items": m.suggested_max_items,
            "ranked": [
                {
                    "rank": r + 1,
                    "label": it.label,
                    "estimate": it.count,
                    "std_error": it.std_error,
                    "ci_low": it.ci_low,
                    "ci_high": it.ci_high,
                    "corrected": it.count * u,
                    "corrected_std_error": it.std_error * u,
                }
                for r, it in enumerate(ranked)
            ],
        }
    }


def candidate_itemsets(
    counts: Sequence[float], *, top_items: int, n_candidates: int, max_size: int = 4
) -> tuple[tuple[int, ...], ...]:
    """SVIM's candidate itemsets from an items stage's estimated counts (module docstring).

    Args:
        counts: the estimated count of each item (index order).
        top_items: how many of the best items to combine (those with a positive estimate), 2..20.
        n_candidates: how many itemsets to keep (the paper keeps 2k for a top-k query).
        max_size: the largest itemset considered, 2..16.

    Raises:
        InvalidParameterError: a bound out of range, or fewer than two items with a positive estimate.
    """
    if not 2 <= top_items <= MAX_TOP_ITEMS:
        raise InvalidParameterError("top_items", top_items, f"an integer in [2, {MAX_TOP_ITEMS}]")
    if n_candidates < 1:
        raise InvalidParameterError("n_candidates", n_candidates, "an integer >= 1")
    if not 2 <= max_size <= MAX_ITEMSET_SIZE:
        raise InvalidParameterError("max_size", max_size, f"an integer in [2, {MAX_ITEMSET_SIZE}]")
    c = np.asarray(counts, dtype=np.float64)
    order = [int(i) for i in np.argsort(-c, kind="stable") if c[i] > 0][:top_items]
    if len(order) < 2:
        raise InvalidParameterError(
            "items", len(order), "at least two items with a positive estimated count to combine"
        )
    f_max = float(c[order[0]])
    weight = {i: GUESS_DAMPING * float(c[i]) / f_max for i in order}
    scored = [
        (math.prod(weight[i] for i in x), tuple(sorted(x)))
        for r in range(2, min(max_size, len(order)) + 1)
        for x in itertools.combinations(order, r)
    ]
    scored.sort(key=lambda t: (-t[0], len(t[1]), t[1]))
    return tuple(x for _, x in scored[:n_candidates])


def follow_up_params(
    items: SVIMParams,
    counts: Sequence[float],
    *,
    source_id: str,
    epsilon: float,
    top_items: int = 10,
    n_candidates: int = 20,
    max_size: int = 4,
    max_items: int | None = None,
    size_share: int | None = None,
    inner: str = "auto",
) -> SVIMParams:
    """The itemsets stage following an items stage (SVIM step 2): its candidates from the items'
    estimated ``counts`` (:func:`candidate_itemsets`), the same items and group key (the items campaign's,
    or its id ``source_id``), the slots after the items stage's, L' = ``max_items`` (default: the items
    stage's L).

    Raises:
        InvalidParameterError: ``items`` is not an items stage, it takes the slots up to 1000 (none is left
            for itemsets), or a bound of :func:`candidate_itemsets`.
    """
    if items.stage != ITEMS:
        raise InvalidParameterError("stage", items.stage, "an svim campaign of stage items to follow")
    if items.stage_hi >= 1000:
        raise InvalidParameterError(
            "stage_hi", items.stage_hi, "below 1000 in the items campaign (its devices took every slot)"
        )
    candidates = candidate_itemsets(counts, top_items=top_items, n_candidates=n_candidates, max_size=max_size)
    return SVIMParams.from_epsilon(
        items.domain,
        epsilon,
        stage="itemsets",
        candidates=candidates,
        max_items=max_items if max_items is not None else items.max_items,
        inner=inner,
        group_key=items.group_key or source_id,
        stage_lo=items.stage_hi,
        stage_hi=1000,
        size_share=size_share if size_share is not None else min(items.size_share, 999 - items.stage_hi),
    )
