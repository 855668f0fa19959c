"""Server side of the issue-6 frequency oracles: accumulators, ingest, FWHT, estimators, end to end.

Exact tests feed expected support counts and get the truth back; seeded tests check unbiasedness, the
variance (with the item's own frequency term) and interval coverage with tolerances from chi-square and
binomial bounds at alpha = 1e-6 (Bonferroni over items and mechanisms), so they never flake.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_aggregator.accumulators import (
    CountAccumulator,
    accumulator_for,
    accumulator_from_bytes,
    add_columns,
    check_matches,
)
from ldp_aggregator.analysis import estimate_campaign, estimate_to_dict, estimate_to_proto
from ldp_aggregator.estimators import NoReportsError, estimate_frequencies, pure_oracle_arrays
from ldp_aggregator.support import (
    CorruptSupportAccumulatorError,
    SupportCountAccumulator,
    bit_column_counts,
    local_hash_support,
)
from ldp_client import wire
from ldp_client.errors import InvalidReportError
from ldp_client.mechanisms.hr import fwht, hadamard_support, in_support
from ldp_client.mechanisms.olh import LocalHashEncoder, bucket_of
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.params import (
    HadamardParams,
    OLHParams,
    OUEParams,
    SetValuedParams,
    SubsetSelectionParams,
    make_params,
)
from tests.ldp_aggregator.conftest import Running

ALPHA = 1e-6
NAMES = ["oue", "sue", "olh", "blh", "ss", "hr"]


# ------------------------------------------------------------------------------------------ accumulator


def test_support_accumulator_sum_merge_and_bytes() -> None:
    a = SupportCountAccumulator.zero(4)
    a.add_support(3, np.array([1, 0, 3, 2]))
    b = SupportCountAccumulator(2, [2, 2, 0, 1])
    c = a + b
    assert (c.n, c.support.tolist()) == (5, [3, 2, 3, 3])
    assert (a.n, b.n) == (3, 2)  # operands unchanged
    a += b
    assert a == c
    assert SupportCountAccumulator.from_bytes(c.to_bytes()) == c
    assert accumulator_from_bytes(c.to_bytes()) == c
    assert c.copy() == c and c.copy() is not c
    with pytest.raises(InvalidReportError, match="support"):
        a.add_support(1, np.array([2, 0, 0, 0]))  # a batch of 1 cannot support an item twice
    with pytest.raises(InvalidReportError, match="size"):
        a + SupportCountAccumulator.zero(5)
    with pytest.raises(InvalidReportError, match="reports"):
        SupportCountAccumulator(-1, [0])


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:10], "length"),
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "crc32"),
        (lambda b: b[:4] + bytes([2]) + b[5:], "version"),
    ],
)
def test_corrupt_support_bytes_are_refused(mutate: object, match: str) -> None:
    data = SupportCountAccumulator(3, [1, 2, 3]).to_bytes()
    with pytest.raises(CorruptSupportAccumulatorError, match=match):
        SupportCountAccumulator.from_bytes(mutate(data))  # type: ignore[operator]


def test_counts_above_n_are_refused_when_decoding() -> None:
    import struct
    import zlib

    body = struct.pack("<4sBBHQq", b"LDPS", 1, 0, 0, 2, 3) + np.array([1, 4], dtype="<i8").tobytes()
    with pytest.raises(CorruptSupportAccumulatorError, match="support"):
        SupportCountAccumulator.from_bytes(body + struct.pack("<I", zlib.crc32(body)))


@pytest.mark.parametrize("name", [*NAMES, "set-valued"])
def test_accumulator_kinds_and_shapes(name: str) -> None:
    if name == "set-valued":
        params = make_params(name, epsilon=1.0, domain=10, fields={"max_items": 3, "inner": "hr"})
    else:
        params = make_params(name, epsilon=1.0, domain=10)
    acc = accumulator_for(params)
    if name in ("hr", "set-valued"):
        assert isinstance(acc, CountAccumulator) and acc.size == 16  # K for d = 10 and for d + L = 13
    else:
        assert isinstance(acc, SupportCountAccumulator) and acc.size == 10
    check_matches(acc, params)
    other = make_params("oue" if name != "oue" else "sue", epsilon=1.0, domain=11)
    with pytest.raises(InvalidReportError, match="accumulator"):
        check_matches(acc, other)


def test_add_columns_refuses_bad_batches() -> None:
    ss = SubsetSelectionParams.from_epsilon(10, 1.0, k=2)
    acc = accumulator_for(ss)
    with pytest.raises(InvalidReportError, match="k=2"):
        add_columns(acc, ss, np.array([[7, 0]], dtype=np.uint8))
    with pytest.raises(InvalidReportError, match="padding"):
        add_columns(acc, ss, np.array([[1, 0b1000_0010]], dtype=np.uint8))
    with pytest.raises(InvalidReportError, match="uint8"):
        add_columns(acc, ss, np.array([[3, 0]], dtype=np.int64))
    olh = OLHParams.from_epsilon(10, 2.0, g=4)
    acc2 = accumulator_for(olh)
    u = np.zeros(2, dtype=np.uint64)
    with pytest.raises(InvalidReportError, match="buckets"):
        add_columns(acc2, olh, (u, u, np.array([0, 4])))
    with pytest.raises(InvalidReportError, match="tuple"):
        add_columns(acc2, olh, u)
    hr = HadamardParams.from_epsilon(10, 1.0)
    acc3 = accumulator_for(hr)
    with pytest.raises(InvalidReportError, match="values"):
        add_columns(acc3, hr, np.array([16]))
    with pytest.raises(InvalidReportError, match="indices"):
        add_columns(acc3, hr, np.array([1.0]))
    assert acc.n == acc2.n == acc3.n == 0  # nothing counted


# ---------------------------------------------------------------------------------------------- ingest


def test_bit_column_counts_match_unpacking() -> None:
    rng = np.random.default_rng(0)
    for d in (1, 7, 8, 13, 100):
        bits = np.packbits(rng.random((500, d)) < 0.3, axis=1, bitorder="little")
        expected = np.unpackbits(bits, axis=1, count=d, bitorder="little").sum(axis=0)
        np.testing.assert_array_equal(bit_column_counts(bits, d), expected)


@pytest.mark.parametrize("g", [2, 3, 9])
def test_local_hash_support_matches_brute_force(g: int) -> None:
    params = OLHParams.from_epsilon(37, 2.0, g=g)
    rng = np.random.default_rng(g)
    a, b, y = LocalHashEncoder(params).encode_batch(rng.integers(0, 37, size=700), rng)
    expected = [
        sum(bucket_of(int(a[i]), int(b[i]), v, g) == int(y[i]) for i in range(700)) for v in range(37)
    ]
    assert local_hash_support(a, b, y, params).tolist() == expected


def test_fwht_and_hadamard_support() -> None:
    rng = np.random.default_rng(1)
    for k in (1, 2, 8, 64):
        x = rng.integers(0, 100, size=k)
        H = np.array([[(-1) ** bin(r & j).count("1") for j in range(k)] for r in range(k)])
        np.testing.assert_array_equal(fwht(x), H @ x)
    params = HadamardParams.from_epsilon(11, 1.0)  # K = 16
    counts = rng.integers(0, 50, size=16)
    expected = [sum(int(counts[j]) for j in range(16) if in_support(v, j)) for v in range(11)]
    assert hadamard_support(params, counts).tolist() == expected
    with pytest.raises(InvalidReportError, match="power of two"):
        fwht(np.zeros(6, dtype=np.int64))


# ------------------------------------------------------------------------------------------ estimators


@pytest.mark.parametrize("name", [*NAMES, "set-valued"])
def test_expected_support_gives_the_truth(name: str) -> None:
    if name == "set-valued":
        params = make_params(name, epsilon=1.0, domain=6, fields={"max_items": 3, "inner": "olh"})
    else:
        params = make_params(name, epsilon=1.0, domain=6)
    truth = np.array([500.0, 300, 120, 60, 20, 0])
    n = 1000
    ps, qs = params.p_star, params.q_star  # type: ignore[union-attr]
    expected = truth * ps + (n - truth) * qs
    res = pure_oracle_arrays(expected, n, ps, qs)
    np.testing.assert_allclose(res.count, truth, atol=1e-9)
    var = (n * qs * (1 - qs) + truth * (ps - qs) * (1 - ps - qs)) / (ps - qs) ** 2
    np.testing.assert_allclose(res.std_error**2, var, rtol=1e-12)


def test_set_valued_rates_are_l_times_inner() -> None:
    params = SetValuedParams.from_epsilon(6, 1.0, max_items=4, inner="oue")
    inner = params.inner
    assert isinstance(inner, OUEParams)
    assert params.q_star == inner.q_star
    assert params.p_star == pytest.approx(inner.q_star + (inner.p_star - inner.q_star) / 4)
    # Estimator = 4 x inner estimator on the same support counts.
    n, support = 1000, np.array([300.0, 280, 270, 265, 262, 260])
    outer = pure_oracle_arrays(support, n, params.p_star, params.q_star).count
    inner_est = pure_oracle_arrays(support, n, inner.p_star, inner.q_star).count
    np.testing.assert_allclose(outer, 4 * inner_est, rtol=1e-12)


def _truth_counts(d: int, n: int) -> np.ndarray:
    w = 1.0 / np.arange(1, d + 1) ** 1.1
    c = np.floor(w / w.sum() * n).astype(np.int64)
    c[0] += n - c.sum()
    return c


@pytest.mark.statistical
@pytest.mark.parametrize("name", [*NAMES, "set-valued"])
def test_unbiased_variance_and_coverage(name: str) -> None:
    # R repetitions of n users with fixed true counts; per item: mean error within 5.3 SE, the sample
    # variance within chi-square bounds of the formula (own frequency term included), coverage within
    # binomial bounds. Bonferroni over items, checks and mechanisms at alpha = 1e-6.
    d, n, reps = 8, 3000, 300
    if name == "set-valued":
        params = make_params(name, epsilon=1.0, domain=d, fields={"max_items": 2, "inner": "oue"})
    else:
        params = make_params(name, epsilon=1.0, domain=d)
    truth = _truth_counts(d, n)
    values = np.repeat(np.arange(d), truth)
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # fixed per mechanism (str hash is salted)
    est = np.empty((reps, d))
    cover = np.zeros(d)
    if name == "set-valued":
        enc = SetValuedEncoder(params)  # type: ignore[arg-type]
        sets = np.stack([values, np.where(values + 1 < d, values + 1, -1)], axis=1)
        truth = truth + np.bincount(values[values + 1 < d] + 1, minlength=d)
    else:
        enc = oracle_encoder(params)  # type: ignore[assignment, arg-type]
    for r in range(reps):
        acc = accumulator_for(params)
        cols = enc.encode_batch(sets if name == "set-valued" else values, rng)  # type: ignore[arg-type]
        add_columns(acc, params, cols)
        fe = estimate_frequencies(params, acc)
        est[r] = [it.count for it in fe.items]
        cover += [it.ci_low <= t <= it.ci_high for it, t in zip(fe.items, truth, strict=True)]
    ps, qs = params.p_star, params.q_star  # type: ignore[union-attr]
    var = (n * qs * (1 - qs) + truth * (ps - qs) * (1 - ps - qs)) / (ps - qs) ** 2
    tests = 3 * d * 7
    z = stats.norm.isf(ALPHA / (2 * tests))
    assert np.all(np.abs(est.mean(axis=0) - truth) <= z * np.sqrt(var / reps))
    lo, hi = stats.chi2.ppf([ALPHA / (2 * tests), 1 - ALPHA / (2 * tests)], reps - 1) / (reps - 1)
    ratio = est.var(axis=0, ddof=1) / var
    assert np.all((ratio >= lo) & (ratio <= hi)), ratio
    cov_lo = stats.binom.ppf(ALPHA / (2 * tests), reps, 0.95) / reps
    assert np.all(cover / reps >= cov_lo), cover / reps


def test_estimate_refuses_empty_and_mismatched() -> None:
    params = OUEParams.from_epsilon(5, 1.0)
    with pytest.raises(NoReportsError):
        estimate_frequencies(params, accumulator_for(params))
    with pytest.raises(InvalidReportError, match="accumulator"):
        estimate_frequencies(params, CountAccumulator.zero(5))


def test_estimate_campaign_has_labelled_postprocessing() -> None:
    params = OUEParams.from_epsilon(["a", "b", "c", "d"], 1.0)
    acc = accumulator_for(params)
    rng = np.random.default_rng(3)
    add_columns(
        acc, params, oracle_encoder(params).encode_batch(rng.choice(4, size=500, p=[0.7, 0.3, 0, 0]), rng)
    )
    info = wire.CampaignInfo(campaign_id="c", params=params)
    est = estimate_campaign(info, acc)
    assert est.frequencies is not None
    assert [pp.method for pp in est.postprocessed] == ["norm-sub", "clip"]
    norm = np.array(est.postprocessed[0].counts)
    assert norm.min() >= 0 and norm.sum() == pytest.approx(500)
    msg = estimate_to_proto(est)
    assert [it.count for it in msg.items] == [it.count for it in est.frequencies.items]  # unchanged
    assert list(msg.postprocessed[0].counts) == list(est.postprocessed[0].counts)
    assert estimate_to_dict(msg)["postprocessed"][1]["method"] == "clip"


# ------------------------------------------------------------------------------------------ end to end


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["olh", "ss", "hr", "set-valued"])
def test_grpc_campaign_submit_estimate(running: Running, name: str, tmp_path: Path) -> None:
    d = 16
    if name == "set-valued":
        params = make_params(name, epsilon=2.0, domain=d, fields={"max_items": 2, "inner": "olh"})
    else:
        params = make_params(name, epsilon=2.0, domain=d)
    msg = wire.campaign_to_proto(campaign_id="fo", params=params)
    running.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg))
    rng = np.random.default_rng(7)
    truth = _truth_counts(d, 20_000)
    values = np.repeat(np.arange(d), truth)
    if name == "set-valued":
        cols = SetValuedEncoder(params).encode_batch(np.stack([values, np.full_like(values, -1)], 1), rng)  # type: ignore[arg-type]
    else:
        cols = oracle_encoder(params).encode_batch(values, rng)  # type: ignore[arg-type]
    batch = wire.batch_to_proto(campaign_id="fo", batch_id="b0", params=params, columns=cols)
    assert running.collector.Submit(batch).accepted == 20_000
    from ldp_aggregator._proto.ldp.v1 import estimates_pb2

    resp = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="fo"))
    assert resp.mechanism == params.name and resp.n_reports == 20_000
    z = np.array([(it.count - t) / it.std_error for it, t in zip(resp.items, truth, strict=True)])
    assert np.all(np.abs(z) < stats.norm.isf(ALPHA / (2 * d)))
    assert [pp.method for pp in resp.postprocessed] == ["norm-sub", "clip"]


def test_cli_campaign_options_resolve_auto_and_set_valued() -> None:
    from ldp_aggregator.cli_campaigns import _campaign_from_options

    msg = _campaign_from_options("c", "auto", 2.0, 128, None, [], None, "", None)
    assert msg.WhichOneof("mechanism") == "ss"  # stored as the concrete mechanism, never "auto"
    msg = _campaign_from_options("c", "auto", 2.0, 1024, None, ["max_report_bits=140"], None, "", None)
    assert msg.WhichOneof("mechanism") == "olh"
    msg = _campaign_from_options(
        "c", "set-valued", 1.0, 20, None, ["max_items=3", "inner=hr"], None, "", None
    )
    assert msg.WhichOneof("mechanism") == "set_valued" and msg.set_valued.WhichOneof("inner") == "hr"
    msg = _campaign_from_options("c", "oue", 1.0, None, "a,b,c", [], None, "", None)
    assert list(msg.oue.domain.labels) == ["a", "b", "c"]
