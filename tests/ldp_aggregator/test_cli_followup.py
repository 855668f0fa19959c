"""``ldp-aggregator campaign follow-up``: a frequency campaign over the values a discovery campaign found."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc
from ldp_client.mechanisms.pem import SPEC, PEMParams

runner = CliRunner()
HEAVY = ["apple", "banana", "kiwi", "fig"]


@pytest.fixture(scope="module")
def discovered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server holding discovery campaign ``words`` (pem) whose reports find HEAVY, and an empty one."""
    db = tmp_path_factory.mktemp("followup") / "ldp.sqlite3"
    p = PEMParams.from_epsilon(4.0, max_length=6, top_k=6, step_bits=4)
    rng = np.random.default_rng(11)
    labels = HEAVY + [f"t{i:03d}" for i in range(200)]
    probs = np.array([0.25, 0.2, 0.15, 0.1] + [0.3 / 200] * 200)
    values = rng.choice(len(labels), size=60_000, p=probs)
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        with grpc.insecure_channel(server.target) as channel:
            analyst = analyst_pb2_grpc.AnalystStub(channel)
            for cid in ("words", "empty"):
                msg = wire.campaign_to_proto(campaign_id=cid, params=p)
                analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg))
            cols = SPEC.encode_batch(p, values, rng, campaign_id="words", labels=labels)
            collector_pb2_grpc.CollectorStub(channel).Submit(
                wire.batch_to_proto(campaign_id="words", batch_id="b0", params=p, columns=cols)
            )
        yield server.target


def _campaigns(target: str) -> list[str]:
    with grpc.insecure_channel(target) as channel:
        listed = analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest())
    return [c.id for c in listed.campaigns]


def _follow(target: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["campaign", "follow-up", *args, "--server", target])
    return result.exit_code, result.output


def test_a_domain_campaign_gets_the_discovered_values_and_an_other_label(discovered: str) -> None:
    code, output = _follow(
        discovered, "words", "words-count", "--mechanism", "olh", "--epsilon", "2", "--top", "3", "--json"
    )
    assert code == 0, output
    doc = json.loads(output[output.index("{") :])
    assert doc["id"] == "words-count" and doc["mechanism"] == "olh"
    assert doc["olh"]["domain"]["labels"] == ["apple", "banana", "kiwi", "(other)"]
    assert "words" in doc["description"]


def test_a_candidate_campaign_gets_them_as_candidates(discovered: str) -> None:
    code, output = _follow(
        discovered, "words", "words-cms", "--mechanism", "cms", "--epsilon", "4", "--param", "k=16",
        "--param", "m=256", "--json",
    )  # fmt: skip
    assert code == 0, output
    doc = json.loads(output[output.index("{") :])
    assert doc["mechanism"] == "cms"
    assert doc["candidates"][:4] == HEAVY


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["words", "x1", "--mechanism", "laplace", "--epsilon", "1"], "over a domain or over candidate"),
        (["words", "x2", "--mechanism", "olh", "--epsilon", "1", "--top", "0"], "--top=0"),
        (["words-count", "x3", "--mechanism", "olh", "--epsilon", "1"], "not a discovery campaign"),
        (["empty", "x4", "--mechanism", "olh", "--epsilon", "1"], "discovered no value yet"),
        (["words", "x5", "--mechanism", "olh", "--epsilon", "1", "--other-label", "apple"], "--other-label"),
        (["words", "x6", "--mechanism", "olh", "--epsilon", "-1"], "epsilon"),
    ],
)
def test_bad_follow_ups_are_refused_in_one_line_and_create_nothing(
    discovered: str, args: list[str], message: str
) -> None:
    if "words-count" not in _campaigns(discovered):
        assert _follow(discovered, "words", "words-count", "--mechanism", "olh", "--epsilon", "2")[0] == 0
    before = _campaigns(discovered)
    code, output = _follow(discovered, *args)
    assert code == 2, output
    assert message in output and len(output.strip().splitlines()) == 1, output
    assert _campaigns(discovered) == before
