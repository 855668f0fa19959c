"""Adaptive multi-round discovery (issue 16): a pem campaign collected round by round over gRPC, devices
encoding against the published candidates, a closed round's reports refused and counted nowhere, the
round state in both stores."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.cli import app
from ldp_aggregator.discovery_rounds import RoundWithoutReportsError
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import Aggregator, open_store
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2, collector_pb2_grpc
from ldp_client.errors import CampaignClosedError, InvalidParameterError, RoundNotOpenError
from ldp_client.mechanisms.pem import PEMParams, group_of
from ldp_client.mechanisms.pem.rounds import encode_round_batch, round_plan
from ldp_client.reporter import Reporter
from ldp_client.reporter.campaign import encoder_for
from ldp_client.reporter.stats import ReportsLostError
from ldp_client.secret import ClientSecret

runner = CliRunner()
HEAVY = ["kiwi", "fig", "plum"]
SHARES = [0.3, 0.2, 0.15]
CREATE = ["--mechanism", "pem", "--epsilon", "4", "--param", "max_length=4", "--param", "top_k=5"]
CREATE += ["--param", "step_bits=8", "--param", "rounds=adaptive"]


def _params() -> PEMParams:
    return PEMParams.from_epsilon(4.0, max_length=4, top_k=5, step_bits=8, adaptive=True)


def _devices(n: int, seed: int) -> list[tuple[ClientSecret, str]]:
    rng = np.random.default_rng(seed)
    tail = [f"t{i:03d}" for i in range(300)]
    labels = HEAVY + tail
    probs = np.array(SHARES + [(1 - sum(SHARES)) / len(tail)] * len(tail))
    values = rng.choice(len(labels), size=n, p=probs)
    # Fixed secrets (the test is seeded); a device's round is the group its secret gives.
    return [(ClientSecret.from_bytes(rng.bytes(32)), labels[v]) for v in values]


def _cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _submit(collector: Any, params: PEMParams, cid: str, batch_id: str, reports: list[Any]) -> Any:
    cols = wire.batch_from_reports(params, reports)
    return collector.Submit(
        wire.batch_to_proto(campaign_id=cid, batch_id=batch_id, params=params, columns=cols)
    )


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An adaptive campaign ``words`` collected round by round over gRPC: per round, the devices of that
    round fetch the campaign, encode against its published candidates and submit; the operator's
    ``campaign next-round`` closes it. What each step answered is recorded for the tests."""
    db = tmp_path_factory.mktemp("rounds") / "ldp.sqlite3"
    params = _params()
    devices = _devices(6000, seed=5)
    seen: dict[str, Any] = {"rounds": [], "late": [], "wrong_device": [], "dup": []}
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        created = _cli("campaign", "create", "words", *CREATE, "--server", server.target)
        assert created.exit_code == 0, created.output
        with grpc.insecure_channel(server.target) as channel:
            collector = collector_pb2_grpc.CollectorStub(channel)
            analyst = analyst_pb2_grpc.AnalystStub(channel)
            for r in range(params.levels):
                msg = collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="words"))
                info = wire.campaign_from_proto(msg)
                assert info.discovery_round == r
                mine = [(s, v) for s, v in devices if group_of(params, "words", s) == r]
                others = [(s, v) for s, v in devices if group_of(params, "words", s) != r]
                # A device of another round cannot encode for this one (nothing is charged or sent).
                with pytest.raises(RoundNotOpenError) as refused:
                    encoder_for(params, campaign_id="words", secret=others[0][0], info=info)
                seen["wrong_device"].append(str(refused.value))
                # The last 20 devices of the round arrive late, after it closed.
                on_time, late = mine[:-20], mine[-20:]
                reports = [
                    encoder_for(params, campaign_id="words", secret=s, info=info)(v) for s, v in on_time
                ]
                _submit(collector, params, "words", f"r{r}", reports)
                late_reports = [
                    encoder_for(params, campaign_id="words", secret=s, info=info)(v) for s, v in late
                ]
                out = _cli("campaign", "next-round", "words", "--server", server.target)
                assert out.exit_code == 0, out.output
                seen["rounds"].append((len(on_time), out.output))
                with pytest.raises(grpc.RpcError) as late_refusal:
                    _submit(collector, params, "words", f"late{r}", late_reports)
                seen["late"].append((late_refusal.value.code(), late_refusal.value.details()))
                # A retry of a batch stored before the close answers "duplicate" and adds nothing.
                seen["dup"].append(_submit(collector, params, "words", f"r{r}", reports).duplicate)
                if r == 0:  # the operator repeats the step for round 0: refused, nothing changes
                    again = _cli("campaign", "next-round", "words", "--round", "0", "--server", server.target)
                    seen["again"] = (again.exit_code, again.output)
                    msg = collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="words"))
                    seen["after_again"] = (msg.discovery_round, len(msg.discovery_rounds))
            seen["estimate"] = analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="words"))
            seen["campaign"] = analyst.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="words"))
        shown = _cli("estimate", "words", "--json", "--server", server.target)
        seen["estimate_json"] = json.loads(shown.stdout)
    seen["truth"] = {v: sum(1 for _, x in devices if x == v) for v in HEAVY}
    seen["params"] = params
    yield seen


def test_the_rounds_discover_the_heavy_values(collected: dict[str, Any]) -> None:
    est = collected["estimate"]
    labels = [it.label for it in est.items]
    assert labels[:3] == HEAVY
    for it in est.items[:3]:
        truth = collected["truth"][it.label]
        assert abs(it.count - truth) < 4 * it.std_error
    # Every round appears with what it tested and kept (top_k = 5), and its reports.
    levels = est.discovery_levels
    params = collected["params"]
    assert [lv.level for lv in levels] == list(range(params.levels))
    assert [lv.kept for lv in levels] == [5] * params.levels
    assert levels[0].tested == 4 * 256 and all(lv.tested <= 5 * 256 for lv in levels[1:])
    assert [lv.reports for lv in levels] == [n for n, _ in collected["rounds"]]
    doc = collected["estimate_json"]
    assert [it["label"] for it in doc["items"][:3]] == HEAVY
    assert all({"count", "std_error", "ci_low", "ci_high"} <= set(it) for it in doc["items"])


def test_each_round_is_published_and_the_last_one_closes_the_campaign(collected: dict[str, Any]) -> None:
    params = collected["params"]
    msg = collected["campaign"]
    assert msg.closed and msg.discovery_round == params.levels
    info = wire.campaign_from_proto(msg)
    assert [r.round for r in info.discovery_rounds] == list(range(params.levels))
    assert all(len(r.kept) == 5 for r in info.discovery_rounds)
    # The values the last round kept are the discovered ones, in the estimate's order.
    last = [bytes(p.bits).ljust(4, b"\0")[: p.length] for p in msg.discovery_rounds[-1].kept]
    assert [x.decode("utf-8", "backslashreplace") for x in last] == [
        it.label for it in collected["estimate"].items
    ]
    for r, (_, output) in enumerate(collected["rounds"][:-1]):
        assert f"collecting round {r + 1} of 0..{params.levels - 1}" in output
    assert "[closed]" in collected["rounds"][-1][1] and "all 4 rounds closed" in collected["rounds"][-1][1]


def test_a_closed_rounds_reports_are_refused_and_counted_nowhere(collected: dict[str, Any]) -> None:
    params = collected["params"]
    for r, (code, details) in enumerate(collected["late"]):
        if r + 1 < params.levels:
            assert code == grpc.StatusCode.FAILED_PRECONDITION
            assert f"round {r} of campaign_id='words' is closed" in details
            assert f"collects round {r + 1}" in details and "counted nowhere" in details
        else:  # the last round closed the campaign
            assert code == grpc.StatusCode.FAILED_PRECONDITION and "is closed" in details
    assert collected["dup"] == [True] * params.levels
    on_time = sum(n for n, _ in collected["rounds"])
    assert collected["estimate"].n_reports == on_time  # no late report, no retry counted


def test_a_device_of_another_round_is_told_which_round_it_answers(collected: dict[str, Any]) -> None:
    for r, message in enumerate(collected["wrong_device"]):
        assert "is not open yet" in message or "is closed" in message
        assert f"round {r} of rounds" in message


def test_closing_a_round_twice_changes_nothing(collected: dict[str, Any]) -> None:
    code, output = collected["again"]
    assert code == 3 and "FAILED_PRECONDITION" in output
    assert "round 0 of campaign_id='words' is closed" in output and "collects round 1" in output
    assert collected["after_again"] == (1, 1)


# ------------------------------------------------------------------------------------------- stores


def _store_location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(tmp_path / "ldp.sqlite3") if kind == "sqlite" else request.getfixturevalue("pg_url")


def _batch(
    params: PEMParams, info: wire.CampaignInfo, round_: int, n: int, seed: int, bid: str, as_round: int = -1
) -> Any:
    """n reports of ``round_`` encoded against ``info``'s published candidates (relabelled ``as_round``)."""
    rng = np.random.default_rng(seed)
    published = [r.kept for r in info.discovery_rounds]
    plan = round_plan(params, round_, published[round_ - 1] if round_ else ())
    labels = ["kiwi", "fig", "t1", "t2"]
    groups, a, b, y = encode_round_batch(plan, rng.integers(0, 4, size=n), labels, rng)
    if as_round >= 0:
        groups = np.full_like(groups, as_round)
    return wire.batch_to_proto(campaign_id="w", batch_id=bid, params=params, columns=(groups, a, b, y))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_round_state_is_shared_by_two_stores_and_survives_a_restart(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = _store_location(kind, tmp_path, request)
    params = _params()
    first = Aggregator(open_store(location))
    try:
        first.create_campaign(wire.campaign_to_proto(campaign_id="w", params=params))
        info0 = first._campaign("w").info
        assert asyncio.run(first.submit_batch(_batch(params, info0, 0, 400, 1, "a"))).accepted == 400
        with pytest.raises(RoundNotOpenError, match="round 1 of campaign_id='w' is not open yet"):
            asyncio.run(first.submit_batch(_batch(params, info0, 0, 10, 2, "early", as_round=1)))
        # A second store on the same database (another replica; for SQLite a reader of the file after
        # the writer closed) sees what the first published.
        first.next_round("w", 0)
        assert first.get_campaign("w").discovery_round == 1
    finally:
        first.store.close()
    second = Aggregator(open_store(location))
    try:
        msg = second.get_campaign("w")
        assert msg.discovery_round == 1 and len(msg.discovery_rounds) == 1
        info1 = wire.campaign_from_proto(msg)
        with pytest.raises(RoundNotOpenError, match="round 0 of campaign_id='w' is closed"):
            asyncio.run(second.submit_batch(_batch(params, info0, 0, 10, 3, "late")))
        assert asyncio.run(second.submit_batch(_batch(params, info1, 1, 300, 4, "b"))).accepted == 300
        with pytest.raises(RoundNotOpenError):
            second.next_round("w", 0)  # a repeated step for round 0: nothing changes
        assert second.get_campaign("w").discovery_round == 1
        second.next_round("w", 1)
        assert second.store.accumulator("w").n == 700  # nothing refused was counted
        est = second.estimate("w")
        assert est.discovery is not None and [lv.reports for lv in est.discovery.levels] == [400, 300]
        note = second.estimate_message("w").note
        assert "rounds 0..1 of 0..3 closed (round 2 collecting)" in note and "prefixes round 1 kept" in note
    finally:
        second.store.close()


def test_two_replicas_on_postgresql_see_each_others_rounds(request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url")
    params = _params()
    a, b = Aggregator(open_store(url)), Aggregator(open_store(url))
    try:
        a.create_campaign(wire.campaign_to_proto(campaign_id="w", params=params))
        info0 = b._campaign("w").info
        asyncio.run(b.submit_batch(_batch(params, info0, 0, 200, 5, "x")))
        a.next_round("w", 0)
        # Replica b's cached campaign still says round 0; its commit checks the stored round.
        with pytest.raises(RoundNotOpenError, match="round 0 of campaign_id='w' is closed"):
            asyncio.run(b.store.submit_async("w", "y", 0, _empty_delta(b, "w"), None, round_=0))
        assert b.store.accumulator("w").n == 200
    finally:
        a.store.close()
        b.store.close()


def _empty_delta(agg: Aggregator, cid: str) -> Any:
    from ldp_aggregator.accumulators import accumulator_for

    return accumulator_for(agg._campaign(cid).info.params)


def test_a_round_without_reports_and_a_one_round_campaign_are_refused(tmp_path: Path) -> None:
    agg = Aggregator(open_store(str(tmp_path / "db.sqlite3")))
    try:
        agg.create_campaign(wire.campaign_to_proto(campaign_id="w", params=_params()))
        with pytest.raises(RoundWithoutReportsError, match="round 0 of campaign_id='w' has no reports yet"):
            agg.next_round("w", 0)
        assert "no round closed yet" in agg.estimate_message("w").note
        assert agg.get_campaign("w").discovery_round == 0
        one = PEMParams.from_epsilon(4.0, max_length=4, top_k=5, step_bits=8)
        agg.create_campaign(wire.campaign_to_proto(campaign_id="one", params=one))
        with pytest.raises(InvalidParameterError, match="an adaptive discovery campaign"):
            agg.next_round("one", 0)
        agg.close_campaign("w")
        with pytest.raises(CampaignClosedError):
            agg.next_round("w", 0)
    finally:
        agg.store.close()


def test_a_reporter_sends_in_its_round_and_refuses_outside_it(tmp_path: Path) -> None:
    params = _params()
    secrets = [ClientSecret.from_bytes(bytes([i]) * 32) for i in range(40)]
    in_round = next(s for s in secrets if group_of(params, "w", s) == 0)
    out_of_round = next(s for s in secrets if group_of(params, "w", s) != 0)
    with BackgroundServer(ServerConfig(db=tmp_path / "db.sqlite3", listen="127.0.0.1:0")) as server:
        assert _cli("campaign", "create", "w", *CREATE, "--server", server.target).exit_code == 0
        ok = Reporter(server.target, "w", max_epsilon=5.0, state_dir=tmp_path / "d1", secret=in_round)
        try:
            ok.report("kiwi")
            ok.flush(timeout=10.0)
        finally:
            ok.close()
        other = Reporter(server.target, "w", max_epsilon=5.0, state_dir=tmp_path / "d2", secret=out_of_round)
        with pytest.raises(RoundNotOpenError, match="is not open yet"):
            for _ in range(500):  # until the campaign is fetched and the reporter stops
                other.report("kiwi")
                time.sleep(0.01)
        # The value that waited for the campaign is lost loudly: the device's round is not open.
        with pytest.raises(ReportsLostError, match="is not open yet"):
            other.close()
        with grpc.insecure_channel(server.target) as channel:
            est = analyst_pb2_grpc.AnalystStub(channel).GetEstimate(
                estimates_pb2.EstimateRequest(campaign_id="w")
            )
    assert est.n_reports == 1


def test_pinning_is_not_used_for_encoding_rounds() -> None:
    params = _params()
    with pytest.raises(InvalidParameterError, match="round state"):
        encoder_for(params, campaign_id="w", secret=ClientSecret.generate())
    assert analyst_pb2.NextRoundRequest(campaign_id="w", round=1).round == 1
