"""SVIM through the service (issue 18): the Analyst ranks a stage, follow-up creates the itemsets stage."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, estimates_pb2
from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.mechanisms.pem import PEMParams
from ldp_client.mechanisms.svim.core import SVIMParams, encode_sets

runner = CliRunner()
LABELS = ("milk", "bread", "eggs", "jam", "tea", "soap")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Campaign ``basket`` (svim items stage) with reports: milk+bread frequent together; and a pem one."""
    db = tmp_path_factory.mktemp("svim") / "ldp.sqlite3"
    p = SVIMParams.from_epsilon(LABELS, 3.0, max_items=3, inner="grr")
    rng = np.random.default_rng(2)
    n = 40_000
    sets = np.full((n, 3), -1, dtype=np.int64)
    both = rng.random(n) < 0.5
    sets[both, 0], sets[both, 1] = 0, 1
    sets[~both, 0] = rng.integers(2, 6, size=int((~both).sum()))
    sets[both, 2] = rng.integers(2, 6, size=int(both.sum()))
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as running:
        with grpc.insecure_channel(running.target) as channel:
            analyst = analyst_pb2_grpc.AnalystStub(channel)
            analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(
                    campaign=wire.campaign_to_proto(campaign_id="basket", params=p)
                )
            )
            pem = PEMParams.from_epsilon(4.0, max_length=4, top_k=4, step_bits=4)
            analyst.CreateCampaign(
                analyst_pb2.CreateCampaignRequest(
                    campaign=wire.campaign_to_proto(campaign_id="words", params=pem)
                )
            )
            cols = encode_sets(p, sets, rng)
            collector_pb2_grpc.CollectorStub(channel).Submit(
                wire.batch_to_proto(campaign_id="basket", batch_id="b0", params=p, columns=cols)
            )
        yield running.target


def test_the_analyst_ranks_the_items_with_sizes_and_correction(server: str) -> None:
    with grpc.insecure_channel(server) as channel:
        resp = analyst_pb2_grpc.AnalystStub(channel).GetEstimate(
            estimates_pb2.EstimateRequest(campaign_id="basket")
        )
    assert resp.HasField("itemsets") and resp.itemsets.stage == 1
    ranked = [resp.items[i].label for i in resp.itemsets.ranking]
    assert set(ranked[:2]) == {"milk", "bread"}
    assert resp.itemsets.size_reports + resp.itemsets.ps_reports == resp.n_reports
    assert resp.itemsets.correction == pytest.approx(1.0, abs=0.05)  # no set exceeds L = 3
    result = runner.invoke(app, ["estimate", "basket", "--server", server, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["itemsets"]
    assert {r["label"] for r in doc["ranked"][:2]} == {"milk", "bread"}
    assert {"estimate", "std_error", "ci_low", "ci_high", "corrected"} <= set(doc["ranked"][0])
    table = runner.invoke(app, ["estimate", "basket", "--server", server])
    assert table.exit_code == 0 and "svim items: ranked" in table.output


def test_follow_up_creates_the_itemsets_stage_on_the_other_slots(server: str) -> None:
    result = runner.invoke(
        app,
        ["campaign", "follow-up", "basket", "basket-sets", "--mechanism", "svim", "--top", "3",
         "--param", "n_candidates=4", "--server", server, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with grpc.insecure_channel(server) as channel:
        listed = analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest())
    (created,) = [c for c in listed.campaigns if c.id == "basket-sets"]
    params = wire.campaign_from_proto(created).params
    assert isinstance(params, SVIMParams) and params.stage == "itemsets"
    assert params.group_key == "basket" and (params.stage_lo, params.stage_hi) == (500, 1000)
    assert params.labels()[0] == "milk+bread" and len(params.candidates) == 4


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["words", "x1", "--mechanism", "svim"], "svim campaign of stage items"),
        (["basket-sets", "x2", "--mechanism", "svim"], "stage itemsets"),
        (["basket", "x3", "--mechanism", "svim", "--param", "colour=red"], "--param colour"),
        (["basket", "x4", "--mechanism", "svim", "--param", "max_size=1"], "max_size"),
    ],
)
def test_bad_svim_follow_ups_are_refused_in_one_line(server: str, args: list[str], words: str) -> None:
    runner.invoke(
        app, ["campaign", "follow-up", "basket", "basket-sets", "--mechanism", "svim", "--server", server]
    )  # makes sure basket-sets exists whatever the test order
    result = runner.invoke(app, ["campaign", "follow-up", *args, "--server", server])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.output


def test_an_itemsets_campaign_over_items_outside_the_domain_is_refused(server: str) -> None:
    result = runner.invoke(
        app,
        ["campaign", "create", "bad", "--mechanism", "svim", "--labels", ",".join(LABELS), "--epsilon", "1",
         "--param", "stage=itemsets", "--param", "candidates=milk+beer", "--param", "max_items=2",
         "--server", server],
    )  # fmt: skip
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "candidates[0]" in lines[0] and "beer" in lines[0], result.output
