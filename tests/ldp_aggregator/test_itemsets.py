"""SVIM on the server (issue 18): calibration of both stages, sizes and correction, candidates."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ldp_aggregator.estimators import estimate_support
from ldp_aggregator.itemsets import (
    candidate_itemsets,
    correction_factor,
    follow_up_params,
    mine,
    size_distribution,
    suggested_max_items,
)
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.svim.core import SVIMParams, element_matrix, encode_sets
from ldp_client.mechanisms.svim.spec import SPEC


def _population(n: int, rng: np.random.Generator, width: int = 4) -> np.ndarray:
    """Sets of 1..width of 12 items: items 0 and 1 together w.p. 0.4, 2+3+4 w.p. 0.25, else Zipf noise."""
    out = np.full((n, width), -1, dtype=np.int64)
    pair = rng.random(n) < 0.4
    triple = (rng.random(n) < 0.25) & ~pair
    out[pair, 0], out[pair, 1] = 0, 1
    out[triple, 0], out[triple, 1], out[triple, 2] = 2, 3, 4
    noise = rng.choice(np.arange(5, 12), size=n, p=np.arange(7, 0, -1) / 28)
    col = np.where(pair, 2, np.where(triple, 3, 0))
    out[np.arange(n), col] = noise
    return out


def _estimate(params: SVIMParams, sets: np.ndarray, rng: np.random.Generator) -> tuple[object, object]:
    cols = encode_sets(params, sets, rng)
    n, support = SPEC.layout_batch(params, cols)
    acc = SimpleNamespace(n=n, support=support)
    return estimate_support(SPEC.support(params, acc), mechanism="svim", epsilon=params.epsilon), acc


@pytest.mark.statistical
@pytest.mark.parametrize("stage", ["items", "itemsets"])
@pytest.mark.parametrize("inner", ["grr", "olh"])
def test_both_stages_are_calibrated(stage: str, inner: str) -> None:
    """Seeded repeats through the real batch encoder and ingest, sets of at most L elements (where PSFO's
    estimator is unbiased; the itemsets stage over fixed candidates): MSE / mean variance in [0.9, 1.1] and
    95% coverage in [0.93, 0.97], pooled over the values. With R repeats and V values the pooled ratio's
    standard deviation is about sqrt(2 / (R V)) (0.02 at R V = 5000)."""
    cands = ((0, 1), (2, 3), (3, 4), (2, 3, 4), (0, 5), (5, 6))
    params = SVIMParams.from_epsilon(
        12, 2.0, max_items=4, inner=inner, stage="itemsets" if stage == "itemsets" else "items",
        candidates=cands if stage == "itemsets" else (), stage_lo=0, stage_hi=1000, size_share=100,
    )  # fmt: skip
    rng = np.random.default_rng(1818 + len(inner) + len(stage))
    n, repeats = 3000, 400 if inner == "grr" else 150
    err, var, hit = [], [], []
    for _ in range(repeats):
        sets = _population(n, rng)
        truth = element_matrix(params, sets).sum(axis=0)
        assert element_matrix(params, sets).sum(axis=1).max() <= params.max_items
        est, _ = _estimate(params, sets, rng)
        for it, t in zip(est.items, truth, strict=True):
            err.append((it.count - t) ** 2)
            var.append(it.std_error**2)
            hit.append(it.ci_low <= t <= it.ci_high)
    ratio = float(np.mean(err) / np.mean(var))
    coverage = float(np.mean(hit))
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


def test_sizes_and_correction_at_the_expected_sums() -> None:
    params = SVIMParams.from_epsilon(
        8, 2.0, max_items=2, size_cap=4, inner="grr", stage_hi=1000, size_share=500
    )
    # 600 users of size 1, 300 of size 3, 100 of size 4: their expected size reports.
    p, q = params.size_oracle.p, params.size_oracle.q
    users = np.array([0, 600, 0, 300, 100], dtype=np.float64)
    n_size = users.sum()
    counts = users * p + (n_size - users) * q
    support = np.concatenate([np.zeros(8), counts, [n_size, 1000.0]])
    shares, ns, nps = size_distribution(params, SimpleNamespace(n=2000, support=support))
    np.testing.assert_allclose(shares, users / n_size, atol=1e-12)
    assert (ns, nps) == (1000, 1000)
    # u(L) = sum s psi / sum min(s, L) psi = (0.6 + 0.9 + 0.4) / (0.6 + 0.6 + 0.2)
    assert correction_factor(shares, 2) == pytest.approx(1.9 / 1.4)
    assert correction_factor(shares, 4) == pytest.approx(1.0)
    assert suggested_max_items(shares) == 3


def test_the_correction_removes_most_of_the_bias_of_long_sets() -> None:
    # Sets of 4 items at L = 2: PSFO counts each holder 1/2 on average; u(L) = 2 restores it.
    params = SVIMParams.from_epsilon(
        12, 4.0, max_items=2, size_cap=6, inner="grr", stage_hi=1000, size_share=200
    )
    rng = np.random.default_rng(4)
    sets = np.array([rng.permutation(12)[:4] for _ in range(40_000)])
    est, acc = _estimate(params, sets, rng)
    truth = element_matrix(params, sets).sum(axis=0)
    result = mine(params, acc, est)
    counts = np.array([it.count for it in est.items])
    assert result.correction == pytest.approx(2.0, rel=0.05)
    assert abs(np.sum(counts) / np.sum(truth) - 0.5) < 0.03
    assert abs(np.sum(counts * result.correction) / np.sum(truth) - 1.0) < 0.05
    assert list(result.ranking) == list(np.argsort(-counts, kind="stable"))


def test_candidates_rank_subsets_before_their_supersets() -> None:
    counts = [100.0, 90.0, 80.0, 5.0, -3.0]
    cands = candidate_itemsets(counts, top_items=3, n_candidates=10)
    assert cands[:3] == ((0, 1), (0, 2), (1, 2)) and cands[3] == (0, 1, 2) and len(cands) == 4
    assert all(4 not in c for c in candidate_itemsets(counts, top_items=5, n_candidates=50))  # negative
    with pytest.raises(InvalidParameterError):
        candidate_itemsets([1.0, -1.0], top_items=2, n_candidates=3)


def test_a_follow_up_takes_the_other_slots_and_refuses_what_it_cannot_follow() -> None:
    items = SVIMParams.from_epsilon(("a", "b", "c", "d"), 2.0, max_items=3)
    follow = follow_up_params(
        items, [50, 40, 30, 1], source_id="shop", epsilon=2.0, top_items=3, n_candidates=3
    )
    assert follow.stage == "itemsets" and follow.group_key == "shop"
    assert (follow.stage_lo, follow.stage_hi) == (items.stage_hi, 1000)
    assert follow.labels() == ("a+b", "a+c", "b+c")
    with pytest.raises(InvalidParameterError) as info:
        follow_up_params(follow, [1, 2, 3], source_id="x", epsilon=2.0)
    assert info.value.field == "stage"
    full = SVIMParams.from_epsilon(("a", "b", "c"), 2.0, max_items=3, stage_hi=1000)
    with pytest.raises(InvalidParameterError) as info:
        follow_up_params(full, [1, 2, 3], source_id="x", epsilon=2.0)
    assert info.value.field == "stage_hi"
