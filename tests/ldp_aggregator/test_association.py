"""Association (issue 5): paired parameters, encoder, wire, accumulator, EM with standard errors and the
independence test, and Analyst.EstimateAssociation / ``ldp-aggregator associate``."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, decode_pb2
from ldp_aggregator.accumulators import (
    CorruptAccumulatorError,
    accumulator_for,
    accumulator_from_bytes,
    add_columns,
    check_matches,
)
from ldp_aggregator.association import (
    OTHER_LABEL,
    estimate_association,
    side_likelihood,
)
from ldp_aggregator.cli import app
from ldp_aggregator.paired_accumulator import PairedAccumulator
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc, reports_pb2
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.paired import PairedEncoder, PairedReport, encode_batch_paired, paired_side_id
from ldp_client.mechanisms.rappor import RapporReport
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    PairedParams,
    RapporParams,
    make_params,
)
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret
from tests.ldp_aggregator.conftest import Running

RR = BinaryRRParams.from_epsilon(1.0)
LABELS = ("alpha", "beta", "gamma")


def _rr_pair() -> PairedParams:
    return PairedParams(first=BinaryRRParams.from_epsilon(1.5), second=BinaryRRParams.two_coin(0.6, 0.5))


# --------------------------------------------------------------------------------------------- params


def test_paired_params_epsilon_and_factory() -> None:
    p = PairedParams(first=RapporParams(k=32, h=2, m=8), second=RR)
    assert p.epsilon == pytest.approx(p.first.epsilon + RR.epsilon)
    assert p.epsilon_inf == float("inf")  # rr has no longitudinal bound
    both = PairedParams(first=RapporParams(), second=BooleanRapporParams())
    assert both.epsilon_inf == pytest.approx(RapporParams().epsilon_inf + BooleanRapporParams().epsilon_inf)
    made = make_params(
        "paired",
        fields={
            "first": "rappor",
            "first.k": "32",
            "first.m": "8",
            "second": "grr",
            "second.epsilon": "2",
            "second.domain": "a,b,c",
        },
    )
    assert isinstance(made, PairedParams)
    assert made.first == RapporParams(k=32, m=8)
    assert made.second == GRRParams.from_epsilon(["a", "b", "c"], 2.0)
    with pytest.raises(InvalidParameterError, match="first"):
        make_params("paired", fields={"first": "oue", "second": "rr"})
    with pytest.raises(InvalidParameterError) as info:
        make_params("paired", fields={"first": "rappor", "first.k": "0", "second": "rr", "second.epsilon": 1})
    assert info.value.field == "first.k"
    with pytest.raises(InvalidParameterError, match="first"):
        PairedParams(first="rappor", second=RR)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- encoder, wire


def test_per_report_encoder_and_wire_round_trip() -> None:
    params = PairedParams(
        first=RapporParams(k=16, h=2, m=4), second=BasicRapporParams(domain=["x", "y", "z"])
    )
    enc = PairedEncoder(params, campaign_id="pair", secret=bytes(range(32)))
    reports = [enc.encode(("alpha", "y")) for _ in range(5)]
    assert all(isinstance(r.first, RapporReport) and 0 <= r.second < 8 for r in reports)
    # The two sides use independent permanent responses: another campaign id, same secret, same cohort.
    assert len({r.first.cohort for r in reports}) == 1
    msg = wire.report_to_proto(campaign_id="pair", report_id="r1", params=params, report=reports[0])
    assert msg.WhichOneof("value") == "paired"
    first, second = wire.report_from_proto(reports_pb2.Report.FromString(msg.SerializeToString()), params)
    assert first[0].tolist() == [reports[0].first.cohort]
    assert int(second[0, 0]) == reports[0].second
    cols = wire.batch_from_reports(params, reports)
    batch = wire.batch_to_proto(campaign_id="pair", batch_id="b1", params=params, columns=cols)
    back = wire.batch_from_proto(reports_pb2.ReportBatch.FromString(batch.SerializeToString()), params)
    assert np.array_equal(back[0][1], cols[0][1]) and np.array_equal(back[1], cols[1])
    # Errors name the side.
    broken = reports_pb2.ReportBatch.FromString(batch.SerializeToString())
    broken.paired.second.basic_bits = b"\xff" * batch.count
    with pytest.raises(InvalidReportError) as info:
        wire.batch_from_proto(broken, params)
    assert info.value.field.startswith("paired.second.")
    with pytest.raises(DomainError) as dom:
        enc.encode(("alpha", "nope"))
    assert dom.value.field.startswith("second.")
    # Campaign round trip.
    camp = wire.campaign_to_proto(campaign_id="pair", params=params, candidates=LABELS)
    assert wire.campaign_from_proto(camp).params == params
    assert camp.epsilon == pytest.approx(params.epsilon)


def test_encoder_needs_a_secret_only_for_rappor_sides() -> None:
    PairedEncoder(_rr_pair(), campaign_id="x").encode((True, False))
    with pytest.raises(InvalidParameterError, match="secret"):
        PairedEncoder(PairedParams(first=RR, second=BooleanRapporParams()), campaign_id="x")
    assert paired_side_id("x", "first") == "x/paired/first"
    # Issue 14: through the registry too, a secret is asked for (and read) only for a RAPPOR side.
    assert encoder_for(_rr_pair(), campaign_id="x")((True, False)).first in (False, True)
    with pytest.raises(InvalidParameterError, match="secret"):
        encoder_for(PairedParams(first=RR, second=BooleanRapporParams()), campaign_id="x")
    read: list[int] = []

    def secret() -> ClientSecret:
        read.append(1)
        return ClientSecret.from_bytes(bytes(32))

    encoder_for(_rr_pair(), campaign_id="x", secret=secret)
    assert read == []
    encoder_for(PairedParams(first=RR, second=BooleanRapporParams()), campaign_id="x", secret=secret)
    assert read == [1]


# --------------------------------------------------------------------------------------- accumulator


def test_paired_accumulator_sums_serializes_and_rejects_whole_batches() -> None:
    params = _rr_pair()
    acc = accumulator_for(params)
    assert isinstance(acc, PairedAccumulator) and acc.joint is not None and acc.joint.shape == (2, 2)
    a = np.array([True, True, False, False, True])
    b = np.array([True, False, False, True, True])
    add_columns(acc, params, (a, b))
    assert acc.n == 5 and acc.joint.tolist() == [[1, 1], [1, 2]]
    again = accumulator_from_bytes(acc.to_bytes())
    assert again == acc
    check_matches(again, params)
    assert (acc + acc).joint.tolist() == [[2, 2], [2, 4]]  # type: ignore[union-attr]
    with pytest.raises(InvalidReportError):
        add_columns(acc, params, (a, b[:3]))  # rows differ between sides
    assert acc.n == 5  # nothing was added
    blob = bytearray(acc.to_bytes())
    blob[10] ^= 1
    with pytest.raises(CorruptAccumulatorError):
        accumulator_from_bytes(bytes(blob))
    big = accumulator_for(PairedParams(first=RapporParams(k=16, h=2, m=4), second=RR))
    assert isinstance(big, PairedAccumulator) and big.joint is None


# ---------------------------------------------------------------------------------------------- EM


def _exact_rr(theta: np.ndarray) -> tuple[PairedParams, np.ndarray, np.ndarray, np.ndarray]:
    """Every joint report pattern of an rr x rr campaign with its expected count (no sampling)."""
    params = _rr_pair()
    chans = []
    for side in params.sides:
        assert isinstance(side, BinaryRRParams)
        py, pn = side.p_yes_given_yes, side.p_yes_given_no
        chans.append(np.array([[1 - pn, pn], [1 - py, py]]))  # rows: value no/yes; cols: report no/yes
    expected = chans[0].T @ theta @ chans[1] * 1e6  # (report a, report b)
    ya, yb = np.meshgrid([False, True], [False, True], indexing="ij")
    return params, ya.ravel(), yb.ravel(), expected.ravel()


def test_em_recovers_the_truth_from_expected_counts() -> None:
    theta = np.array([[0.5, 0.1], [0.1, 0.3]])
    params, ya, yb, w = _exact_rr(theta)
    a = side_likelihood(params.first, ya, campaign_id="x")
    b = side_likelihood(params.second, yb, campaign_id="x")
    res = estimate_association(params, a, b, weights=w, tolerance=1e-14, max_iterations=20_000)
    np.testing.assert_allclose(res.joint, theta, atol=1e-6)
    np.testing.assert_allclose(res.first, [0.6, 0.4], atol=1e-6)
    assert res.lr_statistic > 1000 and res.p_value < 1e-100 and res.df == 1
    indep = np.outer([0.6, 0.4], [0.7, 0.3])
    params, ya, yb, w = _exact_rr(indep)
    res0 = estimate_association(
        params,
        side_likelihood(params.first, ya, campaign_id="x"),
        side_likelihood(params.second, yb, campaign_id="x"),
        weights=w,
        tolerance=1e-14,
        max_iterations=20_000,
    )
    np.testing.assert_allclose(res0.joint, indep, atol=1e-6)
    assert res0.lr_statistic == pytest.approx(0.0, abs=1e-4)


@pytest.mark.statistical
def test_em_standard_errors_are_calibrated() -> None:
    """rr x rr, 200 seeded repeats: each cell's z-scores have variance within the chi-square band
    (alpha 1e-6, Bonferroni over 4 cells) of 1, and the mean within z = 5 of 0."""
    params = _rr_pair()
    theta = np.array([[0.4, 0.2], [0.1, 0.3]])
    rng = np.random.default_rng(42)
    zs = []
    for _ in range(200):
        flat = rng.choice(4, size=20_000, p=theta.ravel())
        ca, cb = encode_batch_paired(
            params, campaign_id="x", first_values=flat // 2 == 1, second_values=flat % 2 == 1, rng=rng
        )
        acc = accumulator_for(params)
        add_columns(acc, params, (ca, cb))
        assert isinstance(acc, PairedAccumulator) and acc.joint is not None
        rows, cols = np.nonzero(acc.joint)
        res = estimate_association(
            params,
            side_likelihood(params.first, rows == 1, campaign_id="x"),
            side_likelihood(params.second, cols == 1, campaign_id="x"),
            weights=acc.joint[rows, cols].astype(float),
        )
        truth = np.bincount(flat, minlength=4).reshape(2, 2) / flat.size
        zs.append(((res.joint - truth) / res.joint_se).ravel())
    z = np.array(zs)
    R = z.shape[0]
    lo, hi = stats.chi2.ppf([1e-6 / 8, 1 - 1e-6 / 8], R - 1) / (R - 1)
    for j in range(4):
        assert lo <= z[:, j].var(ddof=1) <= hi, (j, z[:, j].var(ddof=1))
        assert abs(z[:, j].mean()) <= 5 / np.sqrt(R)


@pytest.mark.statistical
def test_rappor_by_rr_association_and_independence_test() -> None:
    params = PairedParams(first=RapporParams(k=32, h=2, m=16, f=0.25, p=0.25, q=0.75), second=RR)
    rng = np.random.default_rng(2026)
    n = 100_000
    theta = np.array([[0.35, 0.05], [0.1, 0.2], [0.05, 0.25]])  # strongly dependent
    for joint, dependent in ((theta, True), (np.outer(theta.sum(1), theta.sum(0)), False)):
        flat = rng.choice(6, size=n, p=joint.ravel())
        ca, cb = encode_batch_paired(
            params,
            campaign_id="p",
            first_values=flat // 2,
            second_values=flat % 2 == 1,
            rng=rng,
            first_labels=LABELS,
        )
        a = side_likelihood(params.first, ca, campaign_id=paired_side_id("p", "first"), candidates=LABELS)
        b = side_likelihood(params.second, cb, campaign_id=paired_side_id("p", "second"))
        res = estimate_association(params, a, b)
        assert res.row_labels == (*LABELS, OTHER_LABEL) and res.col_labels == ("no", "yes")
        truth = np.vstack([np.bincount(flat, minlength=6).reshape(3, 2) / n, [[0.0, 0.0]]])
        assert np.all(np.abs(res.joint - truth) <= 5 * res.joint_se + 1e-9), (res.joint, truth)
        if dependent:
            assert res.p_value < 1e-6
        else:
            assert res.p_value > 1e-6  # P(p < 1e-6) = 1e-6 under independence


# ------------------------------------------------------------------------------ service, CLI, errors


def _create(r: Running, cid: str, params: PairedParams, cands: tuple[str, ...] = ()) -> None:
    r.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(
            campaign=wire.campaign_to_proto(campaign_id=cid, params=params, candidates=cands)
        )
    )


@pytest.mark.statistical
def test_estimate_association_rpc_and_cli(running: Running, tmp_path: Path) -> None:
    params = PairedParams(first=RapporParams(k=32, h=2, m=8, f=0.25, p=0.25, q=0.75), second=RR)
    _create(running, "pair", params, LABELS)
    rng = np.random.default_rng(8)
    theta = np.array([[0.4, 0.1], [0.1, 0.3], [0.05, 0.05]])
    flat = rng.choice(6, size=40_000, p=theta.ravel())
    ca, cb = encode_batch_paired(
        params,
        campaign_id="pair",
        first_values=flat // 2,
        second_values=flat % 2 == 1,
        rng=rng,
        first_labels=LABELS,
    )
    batch = wire.batch_to_proto(campaign_id="pair", batch_id="b1", params=params, columns=(ca, cb))
    assert running.collector.Submit(batch).accepted == 40_000
    # One device through the per-report path too.
    enc = PairedEncoder(params, campaign_id="pair", secret=bytes(32))
    report = wire.report_to_proto(
        campaign_id="pair", report_id="one", params=params, report=enc.encode(("beta", True))
    )
    assert running.collector.SubmitReport(report).accepted == 1
    resp = running.analyst.EstimateAssociation(decode_pb2.AssociationRequest(campaign_id="pair"))
    assert resp.n_reports == 40_001
    assert list(resp.col_labels) == ["no", "yes"] and resp.row_labels[-1] == OTHER_LABEL
    assert resp.p_value < 1e-6 and resp.df >= 1
    truth = np.bincount(flat, minlength=6).reshape(3, 2) / 40_000
    ncol = len(resp.col_labels)
    for i, lab in enumerate(resp.row_labels[:-1]):
        for j in range(2):
            cell = resp.cells[i * ncol + j]
            assert abs(cell.proportion - truth[LABELS.index(lab), j]) <= 5 * cell.std_error + 1e-3
    out = CliRunner().invoke(app, ["associate", "pair", "--json", "--server", running.server.target])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["independence"]["p_value"] < 1e-6 and len(doc["joint"]) == len(resp.row_labels)
    table = CliRunner().invoke(app, ["associate", "pair", "--server", running.server.target])
    assert table.exit_code == 0 and "independence" in table.output
    # The same from the database file, read directly (read-only, beside the running server).
    local = CliRunner().invoke(app, ["associate", "pair", "--json", "--db", str(tmp_path / "ldp.sqlite3")])
    assert local.exit_code == 0, local.output
    assert json.loads(local.output)["joint"] == doc["joint"]
    missing = CliRunner().invoke(app, ["associate", "nope", "--db", str(tmp_path / "ldp.sqlite3")])
    assert missing.exit_code != 0 and "nope" in missing.output
    # GetEstimate of a paired campaign answers with the report count only.
    from ldp_aggregator._proto.ldp.v1 import estimates_pb2

    est = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="pair"))
    assert est.n_reports == 40_001 and not est.items


def test_association_errors(running: Running) -> None:
    def code(req: decode_pb2.AssociationRequest) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as info:
            running.analyst.EstimateAssociation(req)
        return info.value.code()  # type: ignore[no-any-return]

    assert code(decode_pb2.AssociationRequest(campaign_id="nope")) == grpc.StatusCode.NOT_FOUND
    _create(running, "rr2", _rr_pair())
    assert (
        code(decode_pb2.AssociationRequest(campaign_id="rr2")) == grpc.StatusCode.INVALID_ARGUMENT
    )  # no reports
    ca, cb = encode_batch_paired(
        _rr_pair(),
        campaign_id="rr2",
        first_values=np.ones(50, bool),
        second_values=np.zeros(50, bool),
        rng=np.random.default_rng(0),
    )
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="rr2", batch_id="b", params=_rr_pair(), columns=(ca, cb))
    )
    ok = running.analyst.EstimateAssociation(decode_pb2.AssociationRequest(campaign_id="rr2"))
    assert ok.n_reports == 50
    assert (
        code(decode_pb2.AssociationRequest(campaign_id="rr2", first_candidates=["a"]))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="single", params=RR))
    )
    assert code(decode_pb2.AssociationRequest(campaign_id="single")) == grpc.StatusCode.INVALID_ARGUMENT


def test_string_rappor_association_needs_retained_reports(tmp_path: Path) -> None:
    config = ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0", retain_raw=False)
    params = PairedParams(first=RapporParams(k=16, h=2, m=2), second=RR)
    with BackgroundServer(config) as server:
        channel = grpc.insecure_channel(server.target)
        analyst = analyst_pb2_grpc.AnalystStub(channel)
        collector = collector_pb2_grpc.CollectorStub(channel)
        analyst.CreateCampaign(
            analyst_pb2.CreateCampaignRequest(
                campaign=wire.campaign_to_proto(campaign_id="p", params=params, candidates=LABELS)
            )
        )
        ca, cb = encode_batch_paired(
            params,
            campaign_id="p",
            first_values=np.zeros(100, np.int64),
            second_values=np.ones(100, bool),
            rng=np.random.default_rng(1),
            first_labels=LABELS,
        )
        collector.Submit(wire.batch_to_proto(campaign_id="p", batch_id="b", params=params, columns=(ca, cb)))
        with pytest.raises(grpc.RpcError) as info:
            analyst.EstimateAssociation(decode_pb2.AssociationRequest(campaign_id="p"))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "retained" in (info.value.details() or "")
        channel.close()


def test_paired_report_types() -> None:
    r = PairedReport(first=True, second=3)
    assert (r.first, r.second) == (True, 3)


def test_a_reporter_sends_paired_reports(running: Running, tmp_path: Path) -> None:
    from ldp_client.reporter import Reporter
    from ldp_client.secret import ClientSecret

    params = PairedParams(first=RapporParams(k=16, h=2, m=4), second=RR)
    _create(running, "dev", params, LABELS)
    with Reporter(
        running.server.target,
        "dev",
        max_epsilon=params.epsilon * 1.001,
        state_dir=tmp_path / "state",
        secret=ClientSecret.from_bytes(bytes(range(32))),
    ) as reporter:
        for value in (("alpha", True), ("beta", False), ("alpha", False)):
            reporter.report(value)
        assert reporter.flush(timeout=60)
    resp = running.analyst.EstimateAssociation(decode_pb2.AssociationRequest(campaign_id="dev"))
    assert resp.n_reports == 3


def test_paired_campaign_from_the_command_line(running: Running, tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("alpha\nbeta\n", encoding="utf-8")
    out = CliRunner().invoke(
        app,
        [
            "campaign",
            "create",
            "pair",
            "--mechanism",
            "paired",
            "--param",
            "first=rappor",
            "--param",
            "first.k=32",
            "--param",
            "second=rr",
            "--param",
            "second.epsilon=1",
            "--candidates",
            str(words),
            "--server",
            running.server.target,
        ],
    )
    assert out.exit_code == 0, out.output
    got = running.analyst.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="pair"))
    info = wire.campaign_from_proto(got)
    assert info.params == PairedParams(first=RapporParams(k=32), second=BinaryRRParams.from_epsilon(1.0))
    assert info.candidates == ("alpha", "beta")


@pytest.mark.statistical
def test_two_string_rappor_sides() -> None:
    """RAPPOR x RAPPOR (same m: the device's cohort is shared), strongly dependent: estimates within
    z = 5 of the truth and independence rejected."""
    side = RapporParams(k=32, h=2, m=8, f=0.25, p=0.25, q=0.75)
    params = PairedParams(first=side, second=side)
    rng = np.random.default_rng(99)
    n = 60_000
    theta = np.array([[0.4, 0.05], [0.05, 0.3], [0.1, 0.1]])
    flat = rng.choice(6, size=n, p=theta.ravel())
    second_labels = ("red", "blue")
    ca, cb = encode_batch_paired(
        params,
        campaign_id="rr2",
        first_values=flat // 2,
        second_values=flat % 2,
        rng=rng,
        first_labels=LABELS,
        second_labels=second_labels,
    )
    assert np.array_equal(ca[0], cb[0])  # one device, one cohort
    a = side_likelihood(side, ca, campaign_id=paired_side_id("rr2", "first"), candidates=LABELS)
    b = side_likelihood(side, cb, campaign_id=paired_side_id("rr2", "second"), candidates=second_labels)
    res = estimate_association(params, a, b)
    truth = np.zeros((4, 3))
    truth[:3, :2] = np.bincount(flat, minlength=6).reshape(3, 2) / n
    assert np.all(np.abs(res.joint - truth) <= 5 * res.joint_se + 1e-9)
    assert res.p_value < 1e-6
