"""The aggregator end to end over gRPC: campaigns, ingestion, estimates, errors that change nothing."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.rappor import RapporEncoder, encode_batch_rappor
from ldp_client.params import BinaryRRParams, GRRParams, MechanismParams, RapporParams
from tests.ldp_aggregator.conftest import Running

LABELS = ["red", "green", "blue", "black"]


def _create(r: Running, campaign_id: str, params: MechanismParams, candidates: tuple[str, ...] = ()) -> None:
    msg = wire.campaign_to_proto(campaign_id=campaign_id, params=params, candidates=candidates)
    r.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg))


def _estimate(r: Running, campaign_id: str, **kw: object) -> estimates_pb2.EstimateResponse:
    return r.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id=campaign_id, **kw))  # type: ignore[arg-type]


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[no-any-return]


def test_campaign_create_get_list(running: Running) -> None:
    params = GRRParams.from_epsilon(LABELS, 2.0)
    _create(running, "color", params)
    got = running.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="color"))
    assert wire.params_from_proto(got) == params
    assert got.epsilon == pytest.approx(params.epsilon)
    assert got.created_unix_ms > 0
    listed = running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest())
    assert [c.id for c in listed.campaigns] == ["color"]


@pytest.mark.statistical
def test_grr_batches_estimate_within_interval_and_duplicates_ignored(running: Running) -> None:
    params = GRRParams.from_epsilon(LABELS, 2.0)
    _create(running, "color", params)
    rng = np.random.default_rng(20261121)
    truth = rng.choice(len(LABELS), size=40_000, p=[0.5, 0.3, 0.15, 0.05])
    reports = GRREncoder(params).encode_batch(truth, rng)
    for i in range(4):
        chunk = reports[i * 10_000 : (i + 1) * 10_000]
        b = wire.batch_to_proto(campaign_id="color", batch_id=f"b{i}", params=params, columns=chunk)
        first = running.collector.Submit(b)
        again = running.collector.Submit(b)  # a retry: acknowledged, not counted
        assert (first.accepted, first.duplicate) == (10_000, False)
        assert (again.accepted, again.duplicate) == (0, True)
    est = _estimate(running, "color")
    assert est.n_reports == 40_000
    for it in est.items:
        true_count = int((truth == LABELS.index(it.label)).sum())
        # z = 5 from the analytic standard error: fails with probability < 1e-6 per item.
        assert abs(it.count - true_count) < 5 * it.std_error
        assert it.ci_low < it.count < it.ci_high


def test_submit_report_is_idempotent_by_report_id(running: Running) -> None:
    params = BinaryRRParams.from_epsilon(1.0)
    _create(running, "yesno", params)
    msg = wire.report_to_proto(campaign_id="yesno", report_id="dev-1-0001", params=params, report=True)
    assert running.collector.SubmitReport(msg).accepted == 1
    assert running.collector.SubmitReport(msg).duplicate
    assert _estimate(running, "yesno").n_reports == 1


def test_submit_stream_counts_batches(running: Running) -> None:
    params = BinaryRRParams.from_epsilon(1.0)
    _create(running, "yesno", params)
    batches = [
        wire.batch_to_proto(campaign_id="yesno", batch_id=f"s{i}", params=params, columns=np.ones(10, bool))
        for i in range(5)
    ]
    out = running.collector.SubmitStream(iter([*batches, batches[0]]))
    assert (out.batches, out.accepted, out.duplicates) == (6, 50, 1)


def test_rappor_bits_and_candidates(running: Running) -> None:
    params = RapporParams(k=32, h=2, m=4)
    cands = ("alpha", "beta", "gamma", "delta")
    _create(running, "words", params, candidates=cands)
    rng = np.random.default_rng(7)
    values = rng.choice(4, size=20_000, p=[0.5, 0.3, 0.2, 0.0])
    cohorts, bits = encode_batch_rappor(params, campaign_id="words", values=values, labels=cands, rng=rng)
    b = wire.batch_to_proto(campaign_id="words", batch_id="w", params=params, columns=(cohorts, bits))
    running.collector.Submit(b)
    # one per-report encoded report through the single-report path too
    rep = RapporEncoder(params, campaign_id="words", secret=bytes(32)).encode("alpha")
    running.collector.SubmitReport(
        wire.report_to_proto(campaign_id="words", report_id="one", params=params, report=rep)
    )
    est = _estimate(running, "words")
    assert est.n_reports == 20_001
    assert (est.rappor_bits.m, est.rappor_bits.k) == (4, 32)
    assert len(est.rappor_bits.counts) == 4 * 32
    by_label = {it.label: it for it in est.items}
    assert set(by_label) == set(cands)
    assert by_label["alpha"].count > by_label["gamma"].count > by_label["delta"].ci_low
    # candidates given in the request override the campaign's
    est2 = _estimate(running, "words", candidates=["alpha", "beta"])
    assert [it.label for it in est2.items] == ["alpha", "beta"]


def _state(r: Running, campaign_id: str) -> tuple[int, list[float]]:
    est = _estimate(r, campaign_id)
    return est.n_reports, [it.count for it in est.items]


def test_bad_input_gets_status_and_changes_nothing(running: Running) -> None:
    params = GRRParams.from_epsilon(LABELS, 1.0)
    _create(running, "color", params)
    good = wire.batch_to_proto(campaign_id="color", batch_id="ok", params=params, columns=np.arange(4))
    running.collector.Submit(good)
    before = _state(running, "color")

    def submit(**changes: object):  # type: ignore[no-untyped-def]
        b = type(good)()
        b.CopyFrom(good)
        for k, v in changes.items():
            setattr(b, k, v)
        return lambda: running.collector.Submit(b)

    unknown = submit(campaign_id="nope", batch_id="x1")
    assert _code(unknown) == grpc.StatusCode.NOT_FOUND
    bad_index = submit(batch_id="x2", grr_indices=np.array([0, 1, 9, 2], "<u4").tobytes())
    assert _code(bad_index) == grpc.StatusCode.INVALID_ARGUMENT
    short = submit(batch_id="x3", grr_indices=b"\x00" * 7)
    assert _code(short) == grpc.StatusCode.INVALID_ARGUMENT
    empty = submit(batch_id="x4", count=0, grr_indices=b"")
    assert _code(empty) == grpc.StatusCode.INVALID_ARGUMENT
    wrong_kind = submit(batch_id="x5", rr_answers=b"\x01")
    assert _code(wrong_kind) == grpc.StatusCode.INVALID_ARGUMENT
    huge = submit(batch_id="x6", count=300_000, grr_indices=bytes(1_200_000))
    assert _code(huge) == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as info:
        bad_index()
    assert "grr_indices[2]=9" in (info.value.details() or "")
    assert _state(running, "color") == before
    taken = wire.campaign_to_proto(campaign_id="color", params=BinaryRRParams.from_epsilon(1.0))
    create = running.analyst.CreateCampaign
    assert _code(lambda: create(analyst_pb2.CreateCampaignRequest(campaign=taken))) == (
        grpc.StatusCode.ALREADY_EXISTS
    )
    got = running.analyst.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="color"))
    assert got.WhichOneof("mechanism") == "grr"
    broken = wire.campaign_to_proto(campaign_id="bad", params=RapporParams())
    broken.rappor.k = 0
    assert _code(lambda: create(analyst_pb2.CreateCampaignRequest(campaign=broken))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert [c.id for c in running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest()).campaigns] == [
        "color"
    ]
    assert _code(lambda: _estimate(running, "nope")) == grpc.StatusCode.NOT_FOUND


def test_restart_keeps_campaigns_and_reports(tmp_path: Path) -> None:
    config = ServerConfig(db=tmp_path / "db.sqlite3", listen="127.0.0.1:0")
    params = GRRParams.from_epsilon(LABELS, 1.0)
    with BackgroundServer(config) as server:
        r = Running(server)
        _create(r, "color", params)
        b = wire.batch_to_proto(
            campaign_id="color", batch_id="b", params=params, columns=np.arange(4).repeat(5)
        )
        r.collector.Submit(b)
        before = _state(r, "color")
        r.channel.close()
    with BackgroundServer(config) as server:
        r = Running(server)
        assert _state(r, "color") == before
        assert r.collector.Submit(b).duplicate  # the batch id is remembered across restarts
        r.channel.close()


def test_analyst_stub_type() -> None:
    # Guard against an accidental rename of the generated service (the CLI and reporter depend on it).
    assert hasattr(analyst_pb2_grpc, "AnalystStub") and hasattr(collector_pb2_grpc, "CollectorStub")
