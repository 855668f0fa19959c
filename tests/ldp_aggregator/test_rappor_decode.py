"""RAPPOR decoding (issue 5): exact inputs, seeded decodes against known truth, calibration, bad input,
and the Analyst.DecodeRappor / ``ldp-aggregator decode`` / ``ldp-sim run --candidates`` surfaces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import grpc
import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, decode_pb2
from ldp_aggregator.accumulators import BitCountAccumulator, accumulator_for, add_columns
from ldp_aggregator.cli import app
from ldp_aggregator.estimators import NoReportsError
from ldp_aggregator.rappor_decode import (
    decode,
    decode_direct,
    decode_rappor,
    decode_rappor_counts,
    detect,
    detection_threshold,
    selective_interval,
)
from ldp_aggregator.rappor_estimates import rappor_design
from ldp_aggregator.service import Aggregator, open_store
from ldp_client import wire
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.rappor import bloom_positions, encode_batch_basic, encode_batch_rappor
from ldp_client.params import BasicRapporParams, BinaryRRParams, BooleanRapporParams, RapporParams
from simulations.runners import SimulationConfig, simulate
from simulations.sampling import rappor_set_counts, sample_rappor_counts, split_by_cohort
from tests.ldp_aggregator.conftest import Running

CANDS = ("apple", "banana", "cherry", "durian", "elder", "fig", "grape", "honeydew")


def _expected_ones(
    params: RapporParams, campaign_id: str, labels: tuple[str, ...], counts_by_cohort: np.ndarray
):
    """Expected bit counts E[c_ij] = p* N_j + (q* - p*) S_ij, as floats (no sampling)."""
    s = rappor_set_counts(params, campaign_id=campaign_id, labels=labels, counts_by_cohort=counts_by_cohort)
    n = counts_by_cohort.sum(axis=1).astype(float)
    return n, params.prob_one_if_clear * n[:, None] + (params.prob_one_if_set - params.prob_one_if_clear) * s


# ------------------------------------------------------------------------------------------ exact inputs


def test_exact_expected_counts_give_the_true_distribution() -> None:
    params = RapporParams(k=32, h=2, m=8)
    truth = np.array([4000, 3000, 2000, 1000, 0, 0, 0, 0])  # per cohort: 10,000 reports
    by_cohort = np.tile(truth, (params.m, 1))
    n, ones = _expected_ones(params, "fruit", CANDS, by_cohort)
    res = decode_rappor_counts(params, campaign_id="fruit", candidates=CANDS, cohort_reports=n, ones=ones)
    assert res.n == 80_000
    np.testing.assert_allclose(res.proportion, truth / 10_000, atol=1e-9)
    np.testing.assert_allclose(res.count, truth * params.m, atol=1e-4)
    assert res.unexplained_mass == pytest.approx(0.0, abs=1e-9)
    assert res.detected.tolist() == [True, True, True, True, False, False, False, False]
    assert res.residuals is not None and res.residuals.chi2 == pytest.approx(0.0, abs=1e-12)
    assert res.allocated_mass == pytest.approx(1.0)
    # Standard errors are the model's (not the zero residuals'): positive, and intervals cover the truth.
    assert np.all(res.std_error > 0)
    assert np.all((res.ci_low <= truth * params.m) & (truth * params.m <= res.ci_high))


def test_exact_counts_with_more_candidates_than_rows() -> None:
    """M > R (not all identifiable): said in the warnings, decoded by selection, exact support found."""
    params = RapporParams(k=16, h=2, m=4)  # R = 64 cohort-bit rows
    cands = tuple(f"s{i}" for i in range(120))
    truth = np.zeros(len(cands), dtype=np.int64)
    truth[[3, 40, 77]] = [5000, 3000, 2000]
    n, ones = _expected_ones(params, "many", cands, np.tile(truth, (params.m, 1)))
    res = decode_rappor_counts(params, campaign_id="many", candidates=cands, cohort_reports=n, ones=ones)
    assert any("exceed the 64 cohort-bit rows" in w for w in res.warnings)
    np.testing.assert_allclose(res.proportion[[3, 40, 77]], [0.5, 0.3, 0.2], atol=1e-6)
    assert res.proportion.sum() == pytest.approx(1.0, abs=1e-6)
    assert set(np.flatnonzero(res.detected).tolist()) == {3, 40, 77}


def test_default_selection_penalty_admits_five_absent_candidates_on_average() -> None:
    """lambda = sigma z_{1-5/M}; sigma = 1 when the dictionary explains the counts exactly, and plain
    NNLS (lambda = 0) when 5/M >= 1/2."""
    params = RapporParams(k=64, h=2, m=16)
    for M, expected in ((8, 0.0), (100, float(stats.norm.isf(0.05))), (1000, float(stats.norm.isf(0.005)))):
        cands = tuple(f"s{i}" for i in range(M))
        truth = np.zeros(M, dtype=np.int64)
        truth[:3] = [5000, 3000, 2000]
        n, ones = _expected_ones(params, f"pen{M}", cands, np.tile(truth, (params.m, 1)))
        res = decode_rappor_counts(
            params, campaign_id=f"pen{M}", candidates=cands, cohort_reports=n, ones=ones
        )
        assert res.selection_lambda == pytest.approx(expected, rel=1e-9, abs=1e-12), M
        np.testing.assert_allclose(res.proportion[:3], [0.5, 0.3, 0.2], atol=1e-6)
        assert np.count_nonzero(res.proportion[3:] > 1e-9) == 0


def test_exact_basic_and_boolean_rappor_decode_directly() -> None:
    basic = BasicRapporParams(domain=["a", "b", "c", "d"], f=0.25, p=0.25, q=0.75)
    truth = np.array([500.0, 300.0, 200.0, 0.0])
    n = int(truth.sum())
    # Integer expected counts: scale the population so p* n + (q* - p*) truth is integral.
    scale = 64
    ones_i = (basic.prob_one_if_clear * n + (basic.prob_one_if_set - basic.prob_one_if_clear) * truth) * scale
    assert np.allclose(ones_i, np.rint(ones_i))
    acc = BitCountAccumulator([n * scale], np.rint(ones_i).astype(np.int64)[None, :])
    res = decode_direct(basic, acc)
    assert res.method == "direct" and res.labels == ("a", "b", "c", "d")
    np.testing.assert_allclose(res.count, truth * scale, atol=1e-6)
    assert res.detected.tolist() == [True, True, True, False]
    assert res.residuals is None
    boolean = BooleanRapporParams(f=0.25, p=0.25, q=0.75)
    true_count = 300
    ones_b = (
        boolean.prob_one_if_clear * 1000 + (boolean.prob_one_if_set - boolean.prob_one_if_clear) * true_count
    ) * scale
    acc_b = BitCountAccumulator([1000 * scale], [[round(ones_b)]])
    res_b = decode(boolean, acc_b, campaign_id="flag")
    assert res_b.labels == ("false", "true")
    np.testing.assert_allclose(res_b.count, [700 * scale, 300 * scale], atol=1e-6)


def test_detection_threshold_formula() -> None:
    params = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
    z, prop, count = detection_threshold(params, 10**6, alpha=0.05, n_candidates=100)
    assert z == pytest.approx(stats.norm.isf(0.05 / 100))
    h_eff = 128 * (1 - (1 - 1 / 128) ** 2)
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    assert prop == pytest.approx(z * math.sqrt(ps * (1 - ps)) / ((qs - ps) * math.sqrt(h_eff * 10**6)))
    assert count == pytest.approx(prop * 10**6)


def test_detect_bonferroni_and_benjamini_hochberg() -> None:
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    bonf, cut_b = detect(p, 0.05, "bonferroni")
    assert cut_b == pytest.approx(0.005) and bonf.tolist() == [True] + [False] * 9
    bh, cut_h = detect(p, 0.05, "bh")  # 0.008 <= 2 * 0.005; 0.039 > 3 * 0.005 and nothing later qualifies
    assert bh.tolist() == [True, True] + [False] * 8 and cut_h == pytest.approx(0.01)
    only_second, _ = detect(p, 0.05, "bh", eligible=[False] + [True] * 9)
    assert only_second.tolist() == [False, True] + [False] * 8


# ---------------------------------------------------------------------------------- seeded, vs truth


@pytest.mark.statistical
def test_seeded_decode_of_encoded_reports_matches_truth() -> None:
    """Reports from the client's batch encoder: present strings detected, absent ones not (alpha 1e-6),
    every estimate within z = 5 of its standard error."""
    params = RapporParams(k=32, h=2, m=16, f=0.25, p=0.25, q=0.75)
    rng = np.random.default_rng(20261121)
    n = 100_000
    values = rng.choice(8, size=n, p=[0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0])
    cohorts, bits = encode_batch_rappor(params, campaign_id="fruit", values=values, labels=CANDS, rng=rng)
    acc = accumulator_for(params)
    add_columns(acc, params, (cohorts, bits))
    assert isinstance(acc, BitCountAccumulator)
    res = decode_rappor(params, acc, campaign_id="fruit", candidates=CANDS, alpha=1e-6)
    truth = np.bincount(values, minlength=8)
    assert res.detected.tolist() == [True, True, True, True, False, False, False, False]
    assert np.all(np.abs(res.count - truth) <= 5 * res.std_error)
    assert abs(res.unexplained_mass) <= 5 * res.unexplained_mass_se + 1e-9


@pytest.mark.statistical
def test_interval_coverage_of_reported_strings_is_calibrated() -> None:
    """Over seeded repetitions (fresh hashing each time), the 95% intervals of detected strings cover the
    truth at a rate inside the binomial band at alpha 1e-6 around 95% (DESIGN.md, calibration)."""
    params = RapporParams(k=16, h=2, m=32, f=0.5, p=0.5, q=0.75)
    labels = tuple(f"v{i}" for i in range(30))
    probs = 1.0 / np.arange(1, 31) ** 1.2
    probs /= probs.sum()
    cands = labels[:27] + tuple(f"x{i}" for i in range(6))  # 3 strings missing, 6 false candidates
    rng = np.random.default_rng(7)
    covered = total = 0
    for r in range(30):
        cid = f"calib-{r}"
        counts = rng.multinomial(200_000, probs)
        ones, reports = sample_rappor_counts(
            params, campaign_id=cid, labels=labels, true_counts=counts, rng=rng
        )
        res = decode_rappor_counts(
            params, campaign_id=cid, candidates=cands, cohort_reports=reports, ones=ones
        )
        truth = np.array([counts[labels.index(c)] if c in labels else 0 for c in cands])
        hit = (res.ci_low <= truth) & (truth <= res.ci_high)
        covered += int(hit[res.detected].sum())
        total += int(res.detected.sum())
    assert total > 100
    lo = stats.binom.ppf(1e-6, total, 0.95)
    assert covered >= lo, (covered, total)


@pytest.mark.statistical
def test_selective_interval_has_conditional_coverage() -> None:
    """X ~ N(mu, 1) observed only when X > a: the conditional interval covers mu at 95% given selection."""
    rng = np.random.default_rng(11)
    mu, a = 2.5, 3.0
    x = rng.normal(mu, 1.0, size=200_000)
    x = x[x > a][:4000]
    lo, hi = selective_interval(x, np.ones_like(x), np.full_like(x, a), 0.95)
    cover = int(((lo <= mu) & (mu <= hi)).sum())
    band = stats.binom.ppf([1e-6, 1 - 1e-6], x.size, 0.95)
    assert band[0] <= cover <= band[1]
    # Far above the threshold it is the ordinary interval.
    lo2, hi2 = selective_interval([20.0], [1.0], [3.0], 0.95)
    assert lo2[0] == pytest.approx(20 - 1.959964, abs=1e-4) and hi2[0] == pytest.approx(
        20 + 1.959964, abs=1e-4
    )


# ------------------------------------------------------------------------------------------- bad input


def test_bad_candidates_and_options_are_refused_clearly() -> None:
    params = RapporParams(k=16, h=2, m=2)
    acc = BitCountAccumulator([10, 10], np.zeros((2, 16), dtype=np.int64) + 5)
    with pytest.raises(InvalidParameterError, match="at least one candidate"):
        decode_rappor(params, acc, campaign_id="c", candidates=())
    with pytest.raises(InvalidParameterError, match="repeated") as info:
        decode_rappor(params, acc, campaign_id="c", candidates=("a", "b", "a"))
    assert info.value.field == "candidates" and info.value.value == "a"
    with pytest.raises(InvalidParameterError, match="alpha"):
        decode_rappor(params, acc, campaign_id="c", candidates=("a",), alpha=1.5)
    with pytest.raises(InvalidParameterError, match="correction"):
        decode_rappor(params, acc, campaign_id="c", candidates=("a",), correction="holm")  # type: ignore[arg-type]
    with pytest.raises(NoReportsError):
        decode_rappor(params, BitCountAccumulator.zero(2, 16), campaign_id="c", candidates=("a",))
    with pytest.raises(InvalidParameterError, match="none for basic-rappor"):
        decode(
            BasicRapporParams(domain=3), BitCountAccumulator.zero(1, 3), campaign_id="c", candidates=("a",)
        )
    with pytest.raises(InvalidParameterError, match="mechanism"):
        decode(
            BinaryRRParams.from_epsilon(1.0),
            accumulator_for(BinaryRRParams.from_epsilon(1.0)),
            campaign_id="c",
        )


def test_identical_bloom_filters_are_reported_not_fatal() -> None:
    params = RapporParams(k=4, h=1, m=1)  # 4 possible filters: among 12 candidates, collisions are certain
    cands = tuple(f"c{i}" for i in range(12))
    acc = BitCountAccumulator([1000], [[600, 500, 500, 500]])
    res = decode_rappor(params, acc, campaign_id="c", candidates=cands)
    assert any("identical Bloom filters" in w for w in res.warnings)
    assert res.count.shape == (12,)
    assert np.all(np.isfinite(res.std_error))


def test_design_matrix_uses_the_client_hashing() -> None:
    params = RapporParams(k=64, h=3, m=5)
    cands = ("", "x", "日本語 ✓", "google.com")
    pos = rappor_design(params, "homepage", cands)
    for v, c in enumerate(cands):
        for j in range(params.m):
            assert tuple(pos[v, j]) == bloom_positions("homepage", j, c, params.k, params.h)


# ------------------------------------------------------------------------------------ scale (quick)


def test_many_candidates_decode_quickly_without_densifying() -> None:
    params = RapporParams(k=32, h=2, m=8)  # R = 256 rows, M = 3000 candidates
    rng = np.random.default_rng(3)
    labels = tuple(f"s{i}" for i in range(20))
    counts = rng.multinomial(500_000, np.r_[0.5, np.full(19, 0.5 / 19)])
    ones, reports = sample_rappor_counts(
        params, campaign_id="big", labels=labels, true_counts=counts, rng=rng
    )
    cands = labels + tuple(f"x{i}" for i in range(2980))
    res = decode_rappor_counts(params, campaign_id="big", candidates=cands, cohort_reports=reports, ones=ones)
    assert res.detected[0]
    assert int(res.detected[20:].sum()) <= 2


# ------------------------------------------------------------------------------ service, CLI, ldp-sim


def _rappor_campaign(
    r: Running, cid: str, params: RapporParams, cands: tuple[str, ...], n: int, seed: int
) -> np.ndarray:
    r.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(
            campaign=wire.campaign_to_proto(campaign_id=cid, params=params, candidates=cands)
        )
    )
    rng = np.random.default_rng(seed)
    values = rng.choice(len(cands), size=n, p=np.r_[0.6, 0.4, np.zeros(len(cands) - 2)])
    cohorts, bits = encode_batch_rappor(params, campaign_id=cid, values=values, labels=cands, rng=rng)
    r.collector.Submit(
        wire.batch_to_proto(campaign_id=cid, batch_id="b", params=params, columns=(cohorts, bits))
    )
    return np.bincount(values, minlength=len(cands))


@pytest.mark.statistical
def test_decode_rappor_rpc_and_cli(running: Running, tmp_path: Path) -> None:
    params = RapporParams(k=32, h=2, m=8, f=0.25, p=0.25, q=0.75)
    cands = ("alpha", "beta", "gamma", "delta")
    truth = _rappor_campaign(running, "words", params, cands, 30_000, 5)
    resp = running.analyst.DecodeRappor(decode_pb2.DecodeRapporRequest(campaign_id="words", alpha=1e-6))
    assert [c.label for c in resp.candidates] == list(cands)
    assert [c.detected for c in resp.candidates] == [True, True, False, False]
    for c, t in zip(resp.candidates, truth, strict=True):
        assert abs(c.count - t) <= 5 * c.std_error
    assert resp.threshold_count > 0 and resp.method == "lasso+nnls" and resp.HasField("residuals")
    # Request candidates override the campaign's; BH is accepted.
    resp2 = running.analyst.DecodeRappor(
        decode_pb2.DecodeRapporRequest(
            campaign_id="words",
            candidates=["alpha", "zeta"],
            correction=decode_pb2.MULTIPLE_TESTING_BENJAMINI_HOCHBERG,
        )
    )
    assert [c.label for c in resp2.candidates] == ["alpha", "zeta"] and resp2.correction == 2
    cfile = tmp_path / "cands.txt"
    cfile.write_text("alpha\nbeta\nzeta\n", encoding="utf-8")
    out = CliRunner().invoke(
        app, ["decode", "words", "--candidates", str(cfile), "--json", "--server", running.server.target]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [c["label"] for c in doc["candidates"]] == ["alpha", "beta", "zeta"]
    assert doc["threshold"]["count"] > 0
    table = CliRunner().invoke(app, ["decode", "words", "--server", running.server.target])
    assert table.exit_code == 0 and "detection threshold" in table.output


def test_decode_rpc_errors(running: Running) -> None:
    def code(req: decode_pb2.DecodeRapporRequest) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as info:
            running.analyst.DecodeRappor(req)
        return info.value.code()  # type: ignore[no-any-return]

    assert code(decode_pb2.DecodeRapporRequest(campaign_id="nope")) == grpc.StatusCode.NOT_FOUND
    rr = BinaryRRParams.from_epsilon(1.0)
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="yn", params=rr))
    )
    assert code(decode_pb2.DecodeRapporRequest(campaign_id="yn")) == grpc.StatusCode.INVALID_ARGUMENT
    params = RapporParams(k=16, h=2, m=2)
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(
            campaign=wire.campaign_to_proto(campaign_id="empty", params=params, candidates=("a",))
        )
    )
    assert code(decode_pb2.DecodeRapporRequest(campaign_id="empty")) == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        code(decode_pb2.DecodeRapporRequest(campaign_id="empty", candidates=["a", "a"]))
        == grpc.StatusCode.INVALID_ARGUMENT
    )


def test_decode_cli_reads_a_database_file(tmp_path: Path) -> None:
    db = tmp_path / "ldp.sqlite3"
    params = BasicRapporParams(domain=["x", "y", "z"])
    store = open_store(str(db))
    try:
        agg = Aggregator(store)
        agg.create_campaign(wire.campaign_to_proto(campaign_id="os", params=params))
        rng = np.random.default_rng(1)
        bits = encode_batch_basic(params, rng.choice(3, size=5000, p=[0.7, 0.3, 0.0]), rng)
        delta = accumulator_for(params)
        add_columns(delta, params, bits)
        store.submit("os", "b1", 5000, delta, None).result(timeout=30)
    finally:
        store.close()
    out = CliRunner().invoke(app, ["decode", "os", "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["method"] == "direct" and [c["label"] for c in doc["candidates"]] == ["x", "y", "z"]
    assert doc["n_reports"] == 5000
    bad = CliRunner().invoke(app, ["decode", "os", "--db", str(db), "--correction", "holm"])
    assert bad.exit_code == 2


@pytest.mark.statistical
def test_ldp_sim_with_candidates_uses_the_full_decoder(tmp_path: Path) -> None:
    """A dictionary larger than the cohort-bit rows: the old WLS refused it; the decoder selects."""
    csv = tmp_path / "pop.csv"
    csv.write_text("value,count\napple,600\nbanana,400\n", encoding="utf-8")
    cands = ("apple", "banana", *(f"x{i}" for i in range(40)))  # 42 candidates > 32 rows
    result = simulate(
        SimulationConfig(
            mechanism="rappor",
            population=f"empirical:{csv}",
            n_users=200_000,
            params={"k": 16, "h": 2, "m": 2, "f": 0.25, "p": 0.25, "q": 0.75},
            candidates=cands,
            detection_alpha=1e-6,
            seed=9,
        )
    )
    assert result.detected is not None
    assert result.detected[0, :2].tolist() == [True, True]
    assert not result.detected[0, 2:].any()
    assert np.all(np.abs(result.estimates[0, :2] - result.truth[0, :2]) <= 5 * result.std_errors[0, :2])


def test_split_by_cohort_helper_is_consistent() -> None:  # the helper the exact tests rely on
    counts = split_by_cohort(np.array([10, 0, 5]), 1, np.random.default_rng(0))
    assert counts.tolist() == [[10, 0, 5]]


@pytest.mark.slow
def test_ten_thousand_candidates_in_under_ten_seconds() -> None:
    """The scale target (k=128, h=2, m=64): 10,000 candidates decoded, design hashing included, < 10 s."""
    import time

    params = RapporParams(k=128, h=2, m=64)
    rng = np.random.default_rng(1)
    labels = tuple(f"s{i}" for i in range(1000))
    w = 1.0 / np.arange(1, 1001) ** 1.1
    counts = rng.multinomial(10**6, w / w.sum())
    ones, reports = sample_rappor_counts(
        params, campaign_id="slow", labels=labels, true_counts=counts, rng=rng
    )
    cands = labels + tuple(f"x{i}" for i in range(9000))
    t0 = time.perf_counter()
    res = decode_rappor_counts(
        params, campaign_id="slow", candidates=cands, cohort_reports=reports, ones=ones
    )
    assert time.perf_counter() - t0 < 10.0
    assert int(res.detected[1000:].sum()) <= 2
