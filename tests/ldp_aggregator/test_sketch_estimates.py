"""The sketches (cms, hcms) on the server side: support counts of candidates from the accumulator (cms: a
gather per row; hcms: a fast Walsh-Hadamard transform per row) against a direct count of the reports, the
hash-collision term of the variance (calibrated over campaigns, and needed), and the service's note when a
campaign has no candidate strings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ldp_aggregator.accumulators import accumulator_for, accumulator_from_sums, add_columns
from ldp_aggregator.estimators import estimate_frequencies
from ldp_aggregator.service import estimate_note
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.sketch import CMSParams, HCMSParams, hashing
from ldp_client.mechanisms.sketch.hcms import fwht_rows, hadamard_plus
from ldp_client.registry import spec_for, spec_named

CAMPAIGN = "sketch-estimates"
LABELS = tuple(f"s{i}" for i in range(300))


def _reports(params: Any, seed: int, n: int = 3000) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, len(LABELS), size=n)
    columns = spec_for(params).encode_batch(params, values, rng, campaign_id=CAMPAIGN, labels=LABELS)
    return columns, values


def test_cms_support_counts_are_the_reports_supporting_each_candidate() -> None:
    params = CMSParams(k=5, m=24, flip_probability=0.3)
    columns, _ = _reports(params, 1)
    acc = accumulator_for(params)
    add_columns(acc, params, columns)
    cands = [*LABELS[:50], "not held by anyone"]
    counts = spec_named("cms").candidate_counts(params, acc, cands, CAMPAIGN)  # type: ignore[attr-defined]
    rows, bits = columns
    table = hashing.candidate_buckets(CAMPAIGN, params.k, params.m, cands)
    for i in range(len(cands)):
        b = table[i, rows]  # each report's bucket of candidate i in the report's row
        direct = int(np.sum((bits[np.arange(len(rows)), b >> 3] >> (b & 7)) & 1))
        assert counts[i] == direct


def test_hcms_support_counts_by_the_transform_are_the_direct_ones() -> None:
    params = HCMSParams(k=4, m=32, flip_probability=0.2)
    columns, _ = _reports(params, 2)
    acc = accumulator_for(params)
    add_columns(acc, params, columns)
    cands = [*LABELS[:40], "\U0001f600 nobody"]
    counts = spec_named("hcms").candidate_counts(params, acc, cands, CAMPAIGN)  # type: ignore[attr-defined]
    rows, cols, plus = columns
    table = hashing.candidate_buckets(CAMPAIGN, params.k, params.m, cands)
    for i in range(len(cands)):
        sign = np.array([hadamard_plus(int(table[i, j]), int(c)) for j, c in zip(rows, cols, strict=True)])
        assert counts[i] == int(np.sum(sign == plus))  # the report's sign agrees with H[bucket, column]


def test_fwht_is_the_sylvester_hadamard_product() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(-50, 50, size=(3, 16))
    h = np.array([[1 if hadamard_plus(r, c) else -1 for c in range(16)] for r in range(16)])
    np.testing.assert_array_equal(fwht_rows(y), y @ h.T)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_the_collision_term_calibrates_the_variance_over_campaigns(name: str) -> None:
    # Ten strings hold 60% of 20,000 users, so at width 32 their collisions dominate the error of every
    # candidate. Over R campaigns (fresh hash keys each: the random-hash model), MSE / mean variance is 1
    # with the collision term. Tolerance from theory, conservatively: if a repeat's 40 errors were one
    # error, the ratio would be a mean of R chi-square(1) / R, SD sqrt(2/R); the bound is 4 SD. Without
    # the term the ratio is far above (measured 17 for cms, 2.4 for hcms at these parameters).
    spec = spec_named(name)
    params = spec.make(epsilon=6.0, domain=None, fields={"k": 16, "m": 32})
    sampler = spec.sum_sampler(params)
    assert sampler is not None
    d, n, repeats = 2000, 20_000, 120
    labels = tuple(f"s{i}" for i in range(d))
    probs = np.r_[np.full(10, 0.06), np.full(d - 10, 0.4 / (d - 10))]
    cands = list(labels[:40])
    err2, var, var_without = [], [], []
    for r in range(repeats):
        rng = np.random.default_rng([14, r, len(name)])
        counts = rng.multinomial(n, probs)
        campaign = f"calibration-{name}-{r}"
        acc = accumulator_from_sums(params, sampler(counts, rng, campaign_id=campaign, labels=labels))
        support = spec.candidate_support(params, acc, cands, campaign_id=campaign)
        est = estimate_frequencies(params, acc, candidates=cands, campaign_id=campaign)
        se = np.array([it.std_error for it in est.items])
        err2.append((np.array([it.count for it in est.items]) - counts[:40]) ** 2)
        var.append(se**2)
        var_without.append(se**2 - np.asarray(support.extra_variance))
    mse = float(np.mean(err2))
    bound = 4 * math.sqrt(2 / repeats)
    assert abs(mse / float(np.mean(var)) - 1) <= bound
    assert mse / float(np.mean(var_without)) > 1 + bound


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_candidates_are_required_and_checked(name: str) -> None:
    params = spec_named(name).make(epsilon=2.0, domain=None, fields={"k": 4, "m": 16})
    columns, _ = _reports(params, 4, n=200)
    acc = accumulator_for(params)
    add_columns(acc, params, columns)
    for bad, allowed in (([], "at least one candidate"), (["a", "a"], "distinct")):
        with pytest.raises(InvalidParameterError) as info:
            estimate_frequencies(params, acc, candidates=bad, campaign_id=CAMPAIGN)
        assert info.value.field == "candidates" and allowed in info.value.allowed
    info_ = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    assert "candidate strings" in estimate_note(info_, [])
    assert estimate_note(info_, ["a"]) == ""
    with_cands = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params, candidates=("a",))
    assert estimate_note(with_cands, []) == ""
