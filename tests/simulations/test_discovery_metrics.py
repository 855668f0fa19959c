"""simulations.discovery.discovery_metrics: the top-K precision, recall and NCR of a discovery result."""

from __future__ import annotations

import math

import pytest

from ldp_aggregator.discovery import DiscoveredItem
from simulations.discovery import discovery_metrics


def _items(labels: list[str]) -> list[DiscoveredItem]:
    return [
        DiscoveredItem(label=w, count=100.0 - i, std_error=1.0, ci_low=90.0 - i, ci_high=110.0 - i)
        for i, w in enumerate(labels)
    ]


def _truth(n_heavy: int, n_tail: int) -> dict[str, int]:
    """n_heavy values of 1,000 users each over n_tail values of 1 to 5 users (distinct counts)."""
    truth = {f"h{i:02d}": 1000 for i in range(n_heavy)}
    truth.update({f"t{i:03d}": 1 + i % 5 for i in range(n_tail)})
    return truth


def test_a_shorter_list_scores_its_empty_places_as_misses() -> None:
    """Two results with the same 20 hits: one lists 12 further guesses, the other stops at 20. Their top-32
    precision is the same (20/32), not 20/20 for the shorter list."""
    truth = _truth(20, 200)
    heavy = [f"h{i:02d}" for i in range(20)]
    long = discovery_metrics(_items(heavy + [f"t{i:03d}" for i in range(0, 60, 5)]), truth)
    short = discovery_metrics(_items(heavy), truth)
    assert short["precision_top32"] == long["precision_top32"] == pytest.approx(20 / 32)
    assert short["listed_top32"] == 20 and long["listed_top32"] == 32
    assert short["recall_top32"] == long["recall_top32"] == pytest.approx(20 / 32)
    assert short["precision_top16"] == long["precision_top16"] == 1.0


def test_a_label_listed_twice_takes_one_place() -> None:
    truth = _truth(20, 200)
    heavy = [f"h{i:02d}" for i in range(20)]
    twice = discovery_metrics(_items(heavy[:10] + heavy[:10] + heavy[10:]), truth)
    assert twice["listed_top32"] == 20
    assert twice["precision_top16"] == 1.0 and twice["precision_top32"] == pytest.approx(20 / 32)


def test_precision_is_tie_aware_and_over_the_values_users_hold_when_fewer_than_k() -> None:
    # Ten values only: finding all ten is precision 1 at 16 and 32 (there is no 11th value to find).
    truth = {f"v{i}": 10 + i for i in range(10)}
    m = discovery_metrics(_items(sorted(truth)), truth)
    assert m["precision_top16"] == m["precision_top32"] == m["recall_top16"] == 1.0
    assert m["ncr_top16"] == pytest.approx(1.0)
    # 20 values tied at the top: any 16 of them are 16 hits in the top 16.
    truth = _truth(20, 50)
    picked = [f"h{i:02d}" for i in (19, 3, 7, 11, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14)]
    assert discovery_metrics(_items(picked), truth)["precision_top16"] == 1.0


def test_misses_and_unknown_labels_lower_precision_and_ncr() -> None:
    truth = {f"v{i:02d}": 100 - i for i in range(40)}
    # The true 2nd..16th, then a label users do not hold: 15 hits of 16.
    m = discovery_metrics(_items([f"v{i:02d}" for i in range(1, 16)] + ["nobody"]), truth)
    assert m["precision_top16"] == pytest.approx(15 / 16)
    assert m["recall_top16"] == pytest.approx(15 / 16)
    assert m["ncr_top16"] == pytest.approx((sum(range(1, 17)) - 16) / (16 * 17 / 2))
    # Counts are scored only for labels users hold: "nobody" is left out.
    assert m["count_mae"] == pytest.approx(sum(abs((100.0 - i) - (100 - (i + 1))) for i in range(15)) / 15)
    assert not math.isnan(m["coverage"])
