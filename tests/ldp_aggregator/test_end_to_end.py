"""Devices report through the client's Reporter to a real aggregator; analysts read the estimates through
the Analyst service and the CLI (issue 3's end-to-end path)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.cli import app
from ldp_client import wire
from ldp_client.params import GRRParams, RapporParams
from ldp_client.reporter import Reporter
from ldp_client.secret import ClientSecret
from tests.ldp_aggregator.conftest import Running

LABELS = ["red", "green", "blue"]


def test_reporter_to_server_to_analyst_and_cli(running: Running, tmp_path: Path) -> None:
    params = GRRParams.from_epsilon(LABELS, 3.0)
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(campaign=wire.campaign_to_proto(campaign_id="color", params=params))
    )
    rng = np.random.default_rng(11)
    truth = rng.choice(3, size=3000, p=[0.6, 0.3, 0.1])
    with Reporter(
        running.server.target, "color", max_epsilon=3.0, state_dir=tmp_path / "app", batch_size=500
    ) as reporter:
        for v in truth:
            reporter.report(LABELS[v])
        assert reporter.flush(timeout=60)
        stats = reporter.stats()
    assert stats.sent_reports == 3000 and stats.rejected_batches == 0

    est = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="color"))
    assert est.n_reports == 3000
    for it in est.items:
        true_count = int((truth == LABELS.index(it.label)).sum())
        assert abs(it.count - true_count) < 5 * it.std_error  # z = 5: false failure < 1e-6 per item

    result = CliRunner().invoke(app, ["estimate", "color", "--json", "--server", running.server.target])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["n_reports"] == 3000
    assert [it["count"] for it in doc["items"]] == [it.count for it in est.items]


def test_rappor_reporters_each_with_their_own_secret(running: Running, tmp_path: Path) -> None:
    params = RapporParams(k=16, h=2, m=4)
    cands = ("a", "b", "c")
    running.analyst.CreateCampaign(
        analyst_pb2.CreateCampaignRequest(
            campaign=wire.campaign_to_proto(campaign_id="words", params=params, candidates=cands)
        )
    )
    for device in range(6):  # six devices, each its own state dir, secret and cohort
        secret = ClientSecret.from_bytes(bytes([device]) * 32)
        with Reporter(
            running.server.target,
            "words",
            max_epsilon=2.0,
            state_dir=tmp_path / f"dev{device}",
            secret=secret,
        ) as reporter:
            for _ in range(5):
                reporter.report(cands[device % 3])
            assert reporter.flush(timeout=60)
    est = running.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="words"))
    assert est.n_reports == 30
    assert sum(est.rappor_bits.cohort_reports) == 30
    assert [it.label for it in est.items] == list(cands)
