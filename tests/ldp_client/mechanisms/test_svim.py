"""SVIM (issue 18): the device's group from its secret, PSFO's sampling, bad input, exact privacy."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.svim.core import (
    PS_GROUP,
    SIZE_GROUP,
    SVIMEncoder,
    SVIMParams,
    device_slot,
    encode_sets,
)
from ldp_client.mechanisms.svim.spec import SPEC
from ldp_client.params import make_params
from ldp_client.secret import ClientSecret

LABELS = ("a", "b", "c", "d", "e")


def _itemsets(**kw: object) -> SVIMParams:
    return SVIMParams.from_epsilon(
        LABELS, 2.0, stage="itemsets", candidates=((0, 1), (1, 2), (0, 1, 2)), max_items=2, **kw
    )


def test_devices_split_into_disjoint_stages_and_groups_by_their_secret() -> None:
    items = SVIMParams.from_epsilon(LABELS, 2.0, max_items=2)
    follow = _itemsets(group_key="shop")
    assert (items.stage_lo, items.stage_hi) == (0, 500) and (follow.stage_lo, follow.stage_hi) == (500, 1000)
    stages = {"items": 0, "itemsets": 0, "size": 0}
    for i in range(400):
        secret = ClientSecret.from_bytes(i.to_bytes(32, "big"))
        slot = device_slot(items, "shop", secret)
        assert slot == device_slot(follow, "other-campaign-id", secret)  # the shared group key
        mine_items, mine_sets = items.group_of_slot(slot), follow.group_of_slot(slot)
        assert (mine_items is None) != (mine_sets is None)  # exactly one stage
        stages["items" if mine_sets is None else "itemsets"] += 1
        stages["size"] += SIZE_GROUP in (mine_items, mine_sets)
        encode = None
        try:
            encode = SPEC.encoder(items, campaign_id="shop", secret=secret)
        except InvalidParameterError as exc:
            assert mine_items is None and "other stage" in str(exc)
        if encode is not None:
            assert encode(["a", "c"]).group == mine_items
    assert 150 < stages["items"] < 250 and 5 < stages["size"] < 40


@pytest.mark.parametrize(
    ("value", "field"),
    [(["a", "zz"], "values"), ([], "values"), (["a", "a"], "values"), ("ab", "values")],
)
def test_bad_sets_are_refused_in_one_line(value: object, field: str) -> None:
    enc = SVIMEncoder(SVIMParams.from_epsilon(LABELS, 2.0, max_items=2), group=PS_GROUP)
    with pytest.raises(DomainError) as info:
        enc.encode(value)  # type: ignore[arg-type]
    assert info.value.field == field and "\n" not in str(info.value)


def test_bad_batches_are_refused() -> None:
    p = SVIMParams.from_epsilon(LABELS, 2.0, max_items=2)
    rng = np.random.default_rng(0)
    for sets in ([[0, 7]], [[-1, -1]], [[1, 1]]):
        with pytest.raises(DomainError):
            encode_sets(p, np.array(sets), rng)


@pytest.mark.parametrize(
    ("candidates", "field"),
    [(((0, 9),), "candidates[0]"), (((0,),), "candidates[0]"), (((0, 1), (1, 0)), "candidates[1]")],
)
def test_candidates_must_be_itemsets_of_the_item_domain(candidates: object, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SVIMParams.from_epsilon(LABELS, 1.0, stage="itemsets", candidates=candidates, max_items=2)  # type: ignore[arg-type]
    assert info.value.field == field and "\n" not in str(info.value)


def test_candidates_by_name_take_labels_or_indices_and_refuse_other_items() -> None:
    p = make_params(
        "svim",
        epsilon=1.0,
        domain=LABELS,
        fields={"stage": "itemsets", "candidates": "a+b,2+e", "max_items": "2"},
    )
    assert p.candidates == ((0, 1), (2, 4)) and p.labels() == ("a+b", "c+e")
    with pytest.raises(InvalidParameterError) as info:
        make_params(
            "svim",
            epsilon=1.0,
            domain=LABELS,
            fields={"stage": "itemsets", "candidates": "a+q", "max_items": "2"},
        )
    assert info.value.field == "candidates[0]"
    with pytest.raises(InvalidParameterError):  # an items stage has no candidates
        make_params("svim", epsilon=1.0, domain=LABELS, fields={"candidates": "a+b", "max_items": "2"})


def test_psfo_reports_each_element_of_a_long_set_with_probability_one_over_its_size() -> None:
    # L = 1 and a set of 3 items: the paper samples one of the 3 (no dummy), each w.p. 1/3.
    p = SVIMParams.from_epsilon(LABELS, 3.0, max_items=1, inner="grr", stage_hi=1000, size_share=0)
    dist = SPEC.exact_outputs(p, ("a", "c", "e"))
    grr_p, grr_q = Fraction(p.inner.truth_threshold, 2**32), None
    grr_q = (1 - grr_p) / (p.inner.domain.size - 1)
    expected_a = Fraction(1, 3) * grr_p + Fraction(2, 3) * grr_q
    assert dist[(PS_GROUP, 0, 0, 0)] == expected_a
    n = 300_000
    cols = encode_sets(p, np.tile([0, 2, 4], (n, 1)), np.random.default_rng(5))
    observed = np.bincount(cols[3].astype(np.int64), minlength=p.inner.domain.size) / n
    for y in range(p.inner.domain.size):
        exact = float(dist[(PS_GROUP, 0, 0, y)])
        assert abs(observed[y] - exact) <= 5 * math.sqrt(exact * (1 - exact) / n)


def test_itemsets_stage_reports_the_contained_candidates() -> None:
    p = _itemsets(stage_lo=0, stage_hi=1000, size_share=500, inner="grr")
    assert p.elements([0, 1, 2, 4]) == [0, 1, 2] and p.elements([0, 2]) == []
    n = 200_000
    rng = np.random.default_rng(3)
    cols = encode_sets(p, np.tile([0, 1, 2, 4], (n, 1)), rng)
    dist = SPEC.exact_outputs(p, ("a", "b", "c", "e"))
    keys = list(zip(cols[0].tolist(), cols[3].tolist(), strict=True))
    for group, bound in ((SIZE_GROUP, p.size_cap + 1), (PS_GROUP, p.inner.domain.size)):
        for y in range(bound):
            exact = float(dist.get((group, 0, 0, y), Fraction(0)))
            seen = sum(1 for k in keys if k == (group, y)) / n
            assert abs(seen - exact) <= 5 * math.sqrt(max(exact * (1 - exact), 1e-12) / n) + 1e-9


def test_epsilon_bounds_every_pair_of_sets_of_any_size() -> None:
    # Multi-item sets at L = 2 (the conformance test's one-item inputs attain epsilon; these must not exceed
    # it): exact distributions over every non-empty subset of four items.
    p = SVIMParams.from_epsilon(4, 1.0, max_items=2, inner="grr", size_cap=3, stage_hi=1000, size_share=300)
    sets = [s for r in range(1, 5) for s in itertools.combinations(range(4), r)]
    dists = [SPEC.exact_outputs(p, s) for s in sets]
    outputs = set().union(*dists)
    worst = max(max(d.get(y, 0) for d in dists) / min(d.get(y, 0) for d in dists) for y in outputs)
    assert math.log(worst) <= p.epsilon * (1 + 1e-12)


def test_a_stage_without_room_for_the_size_oracle_is_refused() -> None:
    with pytest.raises(InvalidParameterError) as info:
        SVIMParams.from_epsilon(LABELS, 1.0, max_items=2, stage_lo=0, stage_hi=10, size_share=10)
    assert info.value.field == "size_share"
