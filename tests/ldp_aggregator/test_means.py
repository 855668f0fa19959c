"""Mean estimation: the exact mergeable accumulator, the estimator, calibration, and the service/CLI path."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.accumulators import accumulator_for, accumulator_from_bytes, add_columns, check_matches
from ldp_aggregator.analysis import estimate_campaign, estimate_to_dict, estimate_to_proto
from ldp_aggregator.cli import app
from ldp_aggregator.estimators import NoReportsError, estimate_frequencies
from ldp_aggregator.means import (
    CorruptMeanAccumulatorError,
    MeanAccumulator,
    estimate_means,
    mean_accumulator_for,
    plugin_std_error,
)
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.numeric import exact_distribution, numeric_encoder
from ldp_client.numeric_params import (
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    NumericParams,
    PiecewiseParams,
    SRParams,
)
from ldp_client.params import GRRParams, make_params
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()


def _decoded(params: NumericParams, codes: np.ndarray) -> np.ndarray:
    """x_hat of each code, in float64 (an independent path from the accumulator's exact sums)."""
    assert not isinstance(params, MultidimParams)
    layout = params.layout
    s = float(layout.offset) + float(layout.scale) * codes.astype(np.float64)
    for c, v in layout.specials:
        s[codes == c] = float(v)
    return params.lo + (params.hi - params.lo) * s


# ---------------------------------------------------------------------------------------- accumulator


def test_exact_sums_against_python_and_large_codes() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 2**32 - 1, size=(1 << 20) + 123, dtype=np.uint64)
    acc = MeanAccumulator.zero(attributes=1, num_codes=(1 << 32) - 1)
    acc.add_codes(codes)
    ints = [int(c) for c in codes.tolist()]
    assert acc.s1[0] == sum(ints)
    assert acc.s2[0] == sum(c * c for c in ints)
    assert acc.users == acc.counts[0] == len(ints)


def test_multi_attribute_sums_and_specials() -> None:
    acc = MeanAccumulator.zero(attributes=3, num_codes=10, special_codes=(0, 9))
    attrs = np.array([0, 2, 1, 2, 0, 1, 2, 2])
    codes = np.array([0, 5, 9, 3, 4, 9, 9, 8])
    acc.add_codes(codes, attrs, users=4)
    assert acc.users == 4
    assert acc.counts == [1, 0, 3]
    assert acc.s1 == [4, 0, 16]
    assert acc.s2 == [16, 0, 98]
    assert acc.special_counts == [[1, 0], [0, 2], [0, 1]]
    assert [acc.reports(a) for a in range(3)] == [2, 2, 4]


def test_merge_is_exact_and_order_free() -> None:
    params = HybridParams.from_epsilon(0.0, 1.0, 2.0, cells=1000)
    rng = np.random.default_rng(2)
    enc = numeric_encoder(params)
    parts = []
    for _ in range(5):
        acc = mean_accumulator_for(params)
        add_columns(acc, params, enc.encode_batch(rng.random(2000), rng))  # type: ignore[union-attr]
        parts.append(acc)
    forward = parts[0] + parts[1] + parts[2] + parts[3] + parts[4]
    backward = parts[4] + (parts[3] + (parts[2] + (parts[1] + parts[0])))
    assert forward == backward
    assert forward.users == 10_000
    inplace = parts[2].copy()
    inplace += parts[0]
    assert inplace == parts[0] + parts[2]
    assert parts[2].users == 2000  # + never changes its operands


def test_serialization_round_trip_and_corruption() -> None:
    params = MultidimParams.from_epsilon(((0.0, 1.0), (0.0, 5.0)), 1.0, base="hybrid", cells=64)
    acc = mean_accumulator_for(params)
    rng = np.random.default_rng(3)
    add_columns(acc, params, numeric_encoder(params).encode_batch(rng.random((500, 2)), rng))  # type: ignore[arg-type]
    data = acc.to_bytes()
    assert data[:4] == b"LDPM"
    back = accumulator_from_bytes(data)
    assert isinstance(back, MeanAccumulator) and back == acc
    check_matches(back, params)
    with pytest.raises(CorruptMeanAccumulatorError, match="crc32"):
        MeanAccumulator.from_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    with pytest.raises(CorruptMeanAccumulatorError):
        MeanAccumulator.from_bytes(data[:20])
    with pytest.raises(CorruptMeanAccumulatorError, match="magic"):
        MeanAccumulator.from_bytes(b"LDPX" + data[4:])
    with pytest.raises(CorruptMeanAccumulatorError, match="version"):
        MeanAccumulator.from_bytes(data[:4] + b"\x09" + data[5:])
    # A well-formed frame whose sums no codes in range can produce (sum c^2 too large) is refused.
    bad = MeanAccumulator(attributes=1, num_codes=4, users=1, counts=[1], s1=[3], s2=[9])
    body = bad.to_bytes()[:-4]
    forged = body.replace(bytes([1, 0, 9]), bytes([1, 0, 10]))
    import struct
    import zlib

    with pytest.raises(CorruptMeanAccumulatorError):
        MeanAccumulator.from_bytes(forged + struct.pack("<I", zlib.crc32(forged)))


def test_bad_batches_change_nothing() -> None:
    acc = MeanAccumulator.zero(attributes=2, num_codes=5)
    before = acc.copy()
    with pytest.raises(InvalidReportError, match="codes"):
        acc.add_codes(np.array([1, 5]), np.array([0, 1]), users=2)
    with pytest.raises(InvalidReportError, match="codes"):
        acc.add_codes(np.array([1.0, 2.0]), np.array([0, 1]), users=2)
    with pytest.raises(InvalidReportError, match="attributes"):
        acc.add_codes(np.array([1, 2]), np.array([0, 2]), users=2)
    with pytest.raises(InvalidReportError, match="attributes"):
        acc.add_codes(np.array([1, 2]), None)
    with pytest.raises(InvalidReportError, match="one report per user"):
        acc.add_codes(np.array([1, 2, 3]), np.array([0, 0, 0]), users=2)
    assert acc == before
    params = MultidimParams.from_epsilon(((0.0, 1.0),) * 3, 5.0, base="duchi")
    acc2 = mean_accumulator_for(params)
    with pytest.raises(InvalidReportError, match="attribute"):
        add_columns(acc2, params, (np.array([[1, 1]], np.uint32), np.array([[0, 1]], np.uint32)))
    with pytest.raises(InvalidReportError):
        add_columns(acc2, PiecewiseParams.from_epsilon(0.0, 1.0, 1.0), np.array([0], np.uint32))
    with pytest.raises(InvalidReportError):
        check_matches(acc2, GRRParams.from_epsilon(4, 1.0))


# ------------------------------------------------------------------------------------------ estimator


@pytest.mark.parametrize(
    "params",
    [
        LaplaceParams.from_epsilon(-5.0, 5.0, 0.5, grid=32),
        DuchiParams.from_epsilon(0.0, 10.0, 1.0),
        SRParams.from_epsilon(100.0, 101.0, 2.0),
        PiecewiseParams.from_epsilon(-1.0, 1.0, 4.0),
        HybridParams.from_epsilon(0.0, 1e6, 2.0),
    ],
    ids=lambda p: p.name,
)
def test_estimate_equals_direct_computation(params: NumericParams) -> None:
    rng = np.random.default_rng(4)
    assert not isinstance(params, MultidimParams)
    x = rng.uniform(params.lo, params.hi, 5000)
    codes = numeric_encoder(params).encode_batch(x, rng)  # type: ignore[union-attr]
    acc = mean_accumulator_for(params)
    add_columns(acc, params, codes)
    est = estimate_means(params, acc, confidence=0.9, population_size=10**6).mean("value")
    y = _decoded(params, codes)
    assert est.mean == pytest.approx(y.mean(), rel=1e-12, abs=1e-12 * (params.hi - params.lo))
    se = y.std(ddof=1) / math.sqrt(y.size)
    assert est.std_error == pytest.approx(se, rel=1e-9)
    z = 1.6448536269514722
    assert est.ci_low == pytest.approx(est.mean - z * se, rel=1e-9)
    assert est.sum == pytest.approx(1e6 * est.mean, rel=1e-12)
    assert est.sum_std_error == pytest.approx(1e6 * se, rel=1e-9)
    assert est.n == 5000


@pytest.mark.parametrize(
    "params",
    [
        DuchiParams.from_epsilon(0.0, 10.0, 1.0),
        SRParams.from_epsilon(-2.0, 2.0, 0.5),
        PiecewiseParams.from_epsilon(0.0, 1.0, 1.0, cells=9),
        HybridParams.from_epsilon(0.0, 4.0, 2.0, cells=8),
        LaplaceParams.from_epsilon(0.0, 1.0, 2.0, grid=4),
    ],
    ids=lambda p: p.name,
)
def test_expected_counts_give_the_truth_exactly(params: NumericParams) -> None:
    # Feed the accumulator the EXPECTED code counts of N users at position s (N the common denominator
    # of the exact probabilities, so every count is an integer): the mean estimate is the truth.
    assert not isinstance(params, MultidimParams)
    s = 0.3125
    dist = exact_distribution(params, s)
    big_n = math.lcm(*(p.denominator for p in dist.values()))
    counts = {c: p * big_n for c, p in dist.items()}
    assert all(v.denominator == 1 for v in counts.values())
    layout = params.layout
    specials = dict(layout.specials)
    acc = mean_accumulator_for(params)
    acc.users = big_n
    for c, v in counts.items():
        k = int(v)
        if c in specials:
            acc.special_counts[0][layout.special_codes.index(c)] += k
        else:
            acc.counts[0] += k
            acc.s1[0] += k * c
            acc.s2[0] += k * c * c
    est = estimate_means(params, acc).mean()
    truth = params.lo + s * (params.hi - params.lo)
    assert est.mean == pytest.approx(truth, abs=1e-12 * (params.hi - params.lo))
    # and the standard error is that of the exact per-user variance
    var = float(params.variance_s(s)) * (params.hi - params.lo) ** 2
    assert est.std_error == pytest.approx(math.sqrt(var / big_n), rel=1e-6)


def test_multidim_estimate_and_scaling() -> None:
    params = MultidimParams.from_epsilon(((0.0, 1.0), (-10.0, 10.0), (5.0, 6.0)), 1.0, base="piecewise")
    assert params.k == 1
    rng = np.random.default_rng(5)
    n = 60_000
    x = np.column_stack([rng.uniform(0, 1, n), rng.uniform(-10, 10, n), rng.uniform(5, 6, n)])
    attrs, codes = numeric_encoder(params).encode_batch(x, rng)  # type: ignore[misc]
    acc = mean_accumulator_for(params)
    add_columns(acc, params, (attrs, codes))
    est = estimate_means(params, acc)
    assert [m.label for m in est.means] == ["0", "1", "2"]
    assert sum(m.n for m in est.means) == n  # k = 1 report per user
    # Direct computation of z = (D/k) x_hat 1{reported}.
    base = params.base
    s_hat = float(base.layout.offset) + float(base.layout.scale) * codes[:, 0].astype(np.float64)
    for a, (lo, hi) in enumerate(params.ranges):
        z = np.where(attrs[:, 0] == a, 3.0 * (lo + (hi - lo) * s_hat), 0.0)
        m = est.means[a]
        assert m.mean == pytest.approx(z.mean(), rel=1e-9, abs=1e-12)
        assert m.std_error == pytest.approx(z.std(ddof=1) / math.sqrt(n), rel=1e-9)
        assert abs(m.mean - x[:, a].mean()) < 5 * m.std_error


def test_estimator_errors() -> None:
    params = DuchiParams.from_epsilon(0.0, 1.0, 1.0)
    acc = mean_accumulator_for(params)
    with pytest.raises(NoReportsError):
        estimate_means(params, acc)
    acc.add_codes(np.array([0, 1, 1]))
    with pytest.raises(InvalidParameterError, match="population_size"):
        estimate_means(params, acc, population_size=2)
    with pytest.raises(InvalidParameterError, match="confidence"):
        estimate_means(params, acc, confidence=1.5)
    with pytest.raises(InvalidParameterError, match="frequency"):
        estimate_frequencies(params, acc)
    one = mean_accumulator_for(params)
    one.add_codes(np.array([1]))
    single = estimate_means(params, one).mean()
    assert math.isfinite(single.std_error) and single.std_error > 0  # a variance bound when n = 1


# -------------------------------------------------------------------------------------- calibration


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["laplace", "duchi", "piecewise", "hybrid", "sr"])
@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_interval_coverage_and_mse_are_calibrated(name: str, eps: float) -> None:
    # R = 400 repetitions of n = 2000 users from a skewed population on [0, 10]: coverage of the 95%
    # interval of the population mean within 5 binomial standard deviations of 0.95, and MSE / mean SE^2
    # within 5 standard deviations (sqrt(2/R)) of 1.
    params = make_params(name, epsilon=eps, fields={"lo": 0, "hi": 10})
    assert not isinstance(params, MultidimParams)
    enc = numeric_encoder(params)
    rng = np.random.default_rng(20260601)
    reps, n = 400, 2000
    mu = 10 * 2 / 7  # Beta(2, 5) on [0, 10]
    covered = 0
    sq, var = 0.0, 0.0
    for _ in range(reps):
        x = 10 * rng.beta(2, 5, n)
        acc = mean_accumulator_for(params)  # type: ignore[arg-type]
        add_columns(acc, params, enc.encode_batch(x, rng))  # type: ignore[union-attr]
        m = estimate_means(params, acc).mean()  # type: ignore[arg-type]
        covered += m.ci_low <= mu <= m.ci_high
        sq += (m.mean - mu) ** 2
        var += m.std_error**2
    sd = math.sqrt(0.95 * 0.05 / reps)
    assert abs(covered / reps - 0.95) <= 5 * sd
    assert abs(sq / var - 1.0) <= 5 * math.sqrt(2 / reps)


def test_plugin_std_error_ignores_the_data_spread() -> None:
    # The documented reason the estimator reports s/sqrt(n): with spread-out data, the analytic plug-in
    # of piecewise is far too small (it only knows the mechanism's variance at the mean).
    params = PiecewiseParams.from_epsilon(0.0, 1.0, 4.0)
    rng = np.random.default_rng(6)
    x = rng.choice([0.0, 1.0], 50_000)
    acc = mean_accumulator_for(params)
    add_columns(acc, params, numeric_encoder(params).encode_batch(x, rng))
    est = estimate_means(params, acc)
    (plugin,) = plugin_std_error(params, est)
    assert plugin < 0.8 * est.means[0].std_error


# ------------------------------------------------------------------------------- analysis, service


def test_estimate_campaign_and_views() -> None:
    params = SRParams.from_epsilon(0.0, 100.0, 1.0)
    info = wire.CampaignInfo(campaign_id="c", params=params)
    acc = accumulator_for(params)
    rng = np.random.default_rng(7)
    add_columns(acc, params, numeric_encoder(params).encode_batch(rng.uniform(0, 100, 1000), rng))  # type: ignore[union-attr]
    est = estimate_campaign(info, acc, population_size=5000)
    assert est.means is not None and est.frequencies is None
    msg = estimate_to_proto(est)
    assert msg.population_size == 5000 and len(msg.means) == 1 and not msg.items
    doc = estimate_to_dict(msg)
    assert doc["means"][0]["label"] == "value" and doc["means"][0]["n"] == 1000
    assert doc["means"][0]["sum"] == pytest.approx(5000 * doc["means"][0]["mean"])
    json.dumps(doc, allow_nan=False)
    with pytest.raises(InvalidParameterError, match="candidates"):
        estimate_campaign(info, acc, candidates=["a"])
    grr = GRRParams.from_epsilon(3, 1.0)
    with pytest.raises(InvalidParameterError, match="population_size"):
        estimate_campaign(
            wire.CampaignInfo(campaign_id="g", params=grr), accumulator_for(grr), population_size=9
        )
    empty = estimate_campaign(info, accumulator_for(params))
    assert empty.means is None and empty.n_reports == 0


@pytest.mark.statistical
def test_numeric_campaigns_over_grpc_and_cli(running: Running, tmp_path: Path) -> None:
    server = running.server.target
    result = runner.invoke(
        app,
        ["campaign", "create", "temp", "--mechanism", "piecewise", "--epsilon", "2",
         "--param", "lo=-20", "--param", "hi=50", "--server", server],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    md = MultidimParams.from_epsilon(((0.0, 1.0), (0.0, 100.0)), 1.0, base="hybrid")
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="vec", params=md))
    )
    got = running.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="temp"))
    params = wire.params_from_proto(got)
    assert isinstance(params, PiecewiseParams)
    rng = np.random.default_rng(8)
    x = rng.normal(21.0, 5.0, 30_000).clip(-20, 50)
    codes = numeric_encoder(params).encode_batch(x, rng)
    for i in range(3):
        b = wire.batch_to_proto(
            campaign_id="temp", batch_id=f"b{i}", params=params, columns=codes[i * 10_000 : (i + 1) * 10_000]
        )
        assert running.collector.Submit(b).accepted == 10_000
        assert running.collector.Submit(b).duplicate
    one = numeric_encoder(params).encode(21.0)
    rep = wire.report_to_proto(campaign_id="temp", report_id="r1", params=params, report=one)
    assert running.collector.SubmitReport(rep).accepted == 1
    xs = np.column_stack([rng.uniform(0, 1, 20_000), rng.uniform(0, 100, 20_000)])
    cols = numeric_encoder(md).encode_batch(xs, rng)
    running.collector.Submit(wire.batch_to_proto(campaign_id="vec", batch_id="v", params=md, columns=cols))

    est = running.analyst.GetEstimate(
        estimates_pb2.EstimateRequest(campaign_id="temp", population_size=10**6)
    )
    assert est.n_reports == 30_001 and est.population_size == 10**6 and len(est.means) == 1
    m = est.means[0]
    assert abs(m.mean - x.mean()) < 5 * m.std_error  # z = 5
    assert m.sum == pytest.approx(1e6 * m.mean)
    vec = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="vec"))
    assert [mm.label for mm in vec.means] == ["0", "1"] and vec.population_size == 20_000
    for mm, truth in zip(vec.means, xs.mean(axis=0), strict=True):
        assert abs(mm.mean - truth) < 5 * mm.std_error

    result = runner.invoke(
        app, ["estimate", "temp", "--json", "--population-size", "1000000", "--server", server]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["means"][0]["mean"] == pytest.approx(m.mean) and doc["population_size"] == 10**6
    result = runner.invoke(app, ["estimate", "vec", "--server", server])
    assert result.exit_code == 0 and "std error" in result.output and "sum" in result.output
    result = runner.invoke(app, ["estimate", "temp", "--json", "--db", str(running.server.config.db)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["means"][0]["mean"] == pytest.approx(m.mean)
    result = runner.invoke(app, ["estimate", "temp", "--population-size", "0", "--server", server])
    assert result.exit_code == 2

    bad = wire.batch_to_proto(campaign_id="temp", batch_id="bad", params=params, columns=codes[:3])
    bad.piecewise_codes = np.array([0, 1, params.cells], dtype="<u4").tobytes()
    import grpc

    with pytest.raises(grpc.RpcError) as info:
        running.collector.Submit(bad)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="temp"))
    assert after.n_reports == 30_001  # nothing changed


def test_fraction_layouts_are_exact() -> None:
    p = DuchiParams.from_epsilon(0.0, 1.0, 1.0)
    layout = p.layout
    assert isinstance(layout.offset, Fraction) and layout.s_hat(1) - layout.s_hat(0) == p.c


@pytest.mark.statistical
def test_reporter_sends_numeric_reports(running: Running, tmp_path: Path) -> None:
    # The on-device path: CSPRNG encoder, journal rows (u32 codes; multidim u32 pairs), sealed batches.
    from ldp_client.reporter import Reporter

    sr = SRParams.from_epsilon(0.0, 10.0, 2.0)
    md = MultidimParams.from_epsilon(((0.0, 1.0), (-1.0, 1.0), (0.0, 100.0)), 6.0, base="duchi")
    for cid, params in (("sr", sr), ("md", md)):
        running.analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id=cid, params=params))
        )
    rng = np.random.default_rng(9)
    xs = rng.uniform(2.0, 9.0, 3000)
    vecs = np.column_stack([rng.uniform(0, 1, 3000), rng.uniform(-1, 1, 3000), rng.uniform(0, 100, 3000)])
    with Reporter(
        running.server.target, "sr", max_epsilon=2.0, state_dir=tmp_path / "a", batch_size=500
    ) as r:
        for v in xs.tolist():
            r.report(v)
        assert r.flush(timeout=60)
        with pytest.raises(DomainError):  # the campaign is known now: refused synchronously
            r.report(math.nan)
    with Reporter(
        running.server.target, "md", max_epsilon=6.0, state_dir=tmp_path / "b", batch_size=700
    ) as r:
        for row in vecs.tolist():
            r.report(row)
        assert r.flush(timeout=60)
    est = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="sr"))
    assert est.n_reports == 3000
    assert abs(est.means[0].mean - xs.mean()) < 5 * est.means[0].std_error
    vec = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="md"))
    assert vec.n_reports == 3000 and sum(m.n for m in vec.means) == 2 * 3000
    for m, truth in zip(vec.means, vecs.mean(axis=0), strict=True):
        assert abs(m.mean - truth) < 5 * m.std_error


def test_a_mean_beyond_the_float_range_is_infinite_not_an_error() -> None:
    # Issue 13 (legal maxima): at the widest legal range the exact estimate, or its variance, can exceed
    # the float range; GetEstimate answered INTERNAL (OverflowError). Now the value is +/-inf.
    wide = 8.0e307
    params = make_params("piecewise", epsilon=0.1, fields={"lo": -wide, "hi": wide})
    acc = accumulator_for(params)
    top = np.array([params.layout.num_codes - 1, params.layout.num_codes - 1], dtype=np.uint32)
    add_columns(acc, params, top)
    est = estimate_means(params, acc)
    mean = est.means[0]
    assert mean.mean == math.inf or mean.std_error == math.inf
    assert estimate_to_dict(
        estimate_to_proto(estimate_campaign(wire.CampaignInfo(campaign_id="w", params=params), acc))
    )["means"][0]["mean"] in ("inf", mean.mean)


# ------------------------------------------------------------------------------------ moments layout


@pytest.mark.parametrize(
    "params",
    [
        LaplaceParams.from_epsilon(0.0, 1.0, 2.0, grid=4),
        DuchiParams.from_epsilon(0.0, 1.0, 1.0),
        HybridParams.from_epsilon(0.0, 1.0, 2.0, cells=8),
        MultidimParams.from_epsilon(((0.0, 1.0),) * 5, 6.0, base="hybrid", cells=16),
    ],
    ids=lambda p: p.name,
)
def test_the_moments_layout_is_the_mean_accumulator(params: NumericParams) -> None:
    # Numeric campaigns reach their accumulator through their spec's layout (ldp_client.spec.Layout), whose
    # size bound is the one the service always applied to them: 256 + 64 * attributes * (3 + specials).
    from ldp_aggregator.accumulators import LAYOUT_ACCUMULATORS, accumulator_from_sums, accumulator_nbytes
    from ldp_client.registry import spec_for

    layout = spec_for(params).layout(params)
    assert layout.kind == "moments" and LAYOUT_ACCUMULATORS["moments"] is MeanAccumulator
    attributes = getattr(params, "d", 1)
    specials = params.layout.special_codes
    assert layout.shape == (attributes, params.layout.num_codes, *specials)
    assert accumulator_nbytes(params) == layout.nbytes == 256 + 64 * attributes * (3 + len(specials))
    acc = accumulator_for(params)
    assert isinstance(acc, MeanAccumulator) and acc.layout_shape == layout.shape
    rng = np.random.default_rng(9)
    values = rng.random((300, attributes)) if isinstance(params, MultidimParams) else rng.random(300)
    add_columns(acc, params, numeric_encoder(params).encode_batch(values, rng))  # type: ignore[arg-type]
    sums = (layout.shape, acc.users, acc.counts, acc.s1, acc.s2, acc.special_counts)
    assert accumulator_from_sums(params, sums) == acc
    assert MeanAccumulator.of_shape(layout.shape) == accumulator_for(params)
