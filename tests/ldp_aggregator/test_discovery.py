"""ldp_aggregator.discovery: the level loop asks each level for a candidate's support once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

import ldp_aggregator.discovery as discovery
from ldp_client.mechanisms.pem import SPEC, PEMParams
from ldp_client.spec import Support


def _campaign() -> tuple[PEMParams, tuple[str, ...], int, tuple[np.ndarray, ...]]:
    # Short words complete at early levels (pooled at every later level they are kept) and longer ones.
    short = ("a", "b", "ab", "ba", "abc", "abd", "bcd", "abcd", "bcda", "dcba")
    labels = (*short, *(f"w{i:03d}" for i in range(60)))
    probs = np.array([8, 6, 6, 5, 5, 4, 4, 4, 3, 3] + [0.2] * 60, dtype=float)
    p = PEMParams.from_epsilon(4.0, max_length=4, top_k=6, start_bits=8, step_bits=4)
    rng = np.random.default_rng(11)
    n = 30_000
    values = rng.choice(len(labels), size=n, p=probs / probs.sum())
    return p, labels, n, SPEC.encode_batch(p, values, rng, campaign_id="c", labels=labels)


def test_each_candidates_support_is_computed_once_per_level_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p, _labels, n, columns = _campaign()
    asked: Counter[tuple[int, Hashable]] = Counter()

    def support_of(level: int, candidates: Sequence[Hashable]) -> Support:
        asked.update((level, c) for c in candidates)
        return SPEC.discovery_support(p, columns, level, candidates)

    cached = discovery.discover(p, support_of, n)
    pooled_levels = {lv for lv, _ in asked}
    assert asked and max(asked.values()) == 1, asked.most_common(3)
    assert len(pooled_levels) == p.levels
    # Without the cache every pooled value is asked again at each later level: the same result.
    monkeypatch.setattr(discovery, "_SupportCache", lambda of: of)
    asked.clear()
    plain = discovery.discover(p, support_of, n)
    assert max(asked.values()) > 1  # the case the cache is for does occur here
    assert plain.items == cached.items and plain.levels == cached.levels


def test_per_item_rates_are_kept_per_candidate() -> None:
    """A support whose rates differ per item (allowed by Support) keeps each candidate's own p*, q*; a
    candidate asked again is not computed again."""
    rate = {"x": 0.5, "y": 0.6, "z": 0.7}
    calls: list[list[Hashable]] = []

    def support_of(level: int, candidates: Sequence[Hashable]) -> Support:
        calls.append(list(candidates))
        return Support(
            labels=tuple(map(str, candidates)),
            counts=np.array([10.0 * rate[str(c)] for c in candidates]),
            n=100,
            p_star=np.array([rate[str(c)] for c in candidates]),
            q_star=np.full(len(candidates), 0.1),
        )

    cache = discovery._SupportCache(support_of)
    first = cache(0, ["x", "y"])
    again = cache(0, ["z", "x"])
    assert calls == [["x", "y"], ["z"]]
    assert again.n == 100
    assert list(again.counts) == [7.0, 5.0]
    assert list(np.asarray(again.p_star)) == [0.7, 0.5] and list(np.asarray(first.p_star)) == [0.5, 0.6]
    assert again.q_star == pytest.approx(0.1)
