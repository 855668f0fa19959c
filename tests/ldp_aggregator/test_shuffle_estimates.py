"""A campaign that declares a shuffler (issue 17): set at creation (``--shuffler-batch``, a TOML
``[shuffler]`` table or the ``Campaign.shuffler`` message), stored, and the central (epsilon, delta) of one
shuffled batch reported with every estimate (``EstimateResponse.shuffle``, JSON and the table); bad
declarations refused in one line, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.cli import app
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2
from ldp_client.accounting import shuffle
from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.params import GRRParams
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _submit(running: Running, campaign_id: str, params: GRRParams) -> None:
    rng = np.random.default_rng(17)
    reports = GRREncoder(params).encode_batch(rng.integers(0, 3, 2000), rng)
    running.collector.Submit(
        wire.batch_to_proto(campaign_id=campaign_id, batch_id="b1", params=params, columns=reports)
    )


def test_declared_shuffler_is_stored_and_shown_with_every_estimate(running: Running) -> None:
    server = running.server.target
    code, out = _run(
        "campaign", "create", "s", "--mechanism", "grr", "--labels", "a,b,c", "--epsilon", "4",
        "--shuffler-batch", "1000000", "--server", server,
    )  # fmt: skip
    assert code == 0, out
    assert "shuffler: batches of 1,000,000 reports, delta 1e-06" in out
    stored = running.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="s"))
    assert stored.shuffler.batch_reports == 1_000_000 and stored.shuffler.delta == 1e-6
    info = wire.campaign_from_proto(stored)
    assert info.shuffler == shuffle.ShufflerDeclaration(batch_reports=1_000_000, delta=1e-6)

    eps0 = info.params.epsilon  # the quantised epsilon the campaign really has
    _submit(running, "s", info.params)
    code, out = _run("estimate", "s", "--json", "--server", server)
    assert code == 0, out
    doc = json.loads(out)["shuffle"]
    assert doc["batch_reports"] == 1_000_000 and doc["delta"] == 1e-6 and doc["closed_form_applies"]
    assert doc["epsilon_closed_form"] == pytest.approx(shuffle.closed_form_epsilon(10**6, eps0, 1e-6))
    assert doc["epsilon_numerical"] == pytest.approx(shuffle.numerical_epsilon(10**6, eps0, 1e-6))
    assert doc["epsilon_numerical"] < doc["epsilon_closed_form"] <= 0.21
    # The same from the database file, and in the table.
    code, out = _run("estimate", "s", "--json", "--db", str(running.server.config.db))
    assert code == 0 and json.loads(out)["shuffle"] == doc
    code, table = _run("estimate", "s", "--server", server)
    assert code == 0 and "shuffled in batches of 1,000,000: central epsilon" in " ".join(table.split())
    # Over gRPC: the additive field of EstimateResponse.
    resp = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="s"))
    assert resp.shuffle.epsilon_numerical == pytest.approx(doc["epsilon_numerical"])


def test_campaign_without_shuffler_has_no_shuffle_field(running: Running) -> None:
    params = GRRParams.from_epsilon(["a", "b", "c"], 4.0)
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="plain", params=params))
    )
    _submit(running, "plain", params)
    resp = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="plain"))
    assert not resp.HasField("shuffle")
    code, out = _run("estimate", "plain", "--json", "--server", running.server.target)
    assert code == 0 and "shuffle" not in json.loads(out)
    stored = running.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="plain"))
    assert not stored.HasField("shuffler")


def test_shuffler_from_a_toml_file(running: Running, tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('mechanism = "rr"\nepsilon = 2.0\n[shuffler]\nbatch_reports = 50000\ndelta = 1e-8\n')
    code, out = _run("campaign", "create", "t", "--from-file", str(toml), "--server", running.server.target)
    assert code == 0, out
    stored = running.collector.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="t"))
    assert (stored.shuffler.batch_reports, stored.shuffler.delta) == (50_000, 1e-8)


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--shuffler-batch", "1"], ["--shuffler-batch", "[2,"]),
        (["--shuffler-batch", "100", "--shuffler-delta", "0"], ["--shuffler-delta", "(0, 1)"]),
        (["--shuffler-batch", "100", "--shuffler-delta", "1.5"], ["--shuffler-delta", "(0, 1)"]),
        (["--shuffler-delta", "1e-6"], ["--shuffler-delta", "needs --shuffler-batch"]),
    ],
)
def test_bad_shuffler_options_create_nothing(running: Running, extra: list[str], needles: list[str]) -> None:
    server = running.server.target
    result = runner.invoke(
        app, ["campaign", "create", "bad", "--mechanism", "rr", "--epsilon", "1", *extra, "--server", server]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    assert not running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest()).campaigns


def test_bad_shuffler_message_is_invalid_argument(running: Running) -> None:
    msg = wire.campaign_to_proto(campaign_id="m", params=GRRParams.from_epsilon(["a", "b"], 1.0))
    msg.shuffler.batch_reports = 10  # delta left 0: refused
    with pytest.raises(grpc.RpcError) as info:
        running.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "shuffler.delta" in (info.value.details() or "")
    assert not running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest()).campaigns


def test_a_shuffler_is_refused_for_an_approximate_dp_mechanism(running: Running) -> None:
    """Amplification is computed for pure epsilon-LDP reports: a Gaussian campaign ((epsilon, delta)-LDP)
    declaring a shuffler is refused in one line, and nothing is created."""
    server = running.server.target
    args = ["campaign", "create", "g", "--mechanism", "gaussian", "--epsilon", "2", "--param", "lo=0"]
    args += ["--param", "hi=1", "--param", "delta=1e-6", "--shuffler-batch", "1000", "--server", server]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "shuffler" in result.output and "pure" in result.output
    assert not running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest()).campaigns
