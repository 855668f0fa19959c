"""The Analyst answers marginal queries (issue 18, calm): ``EstimateRequest.marginals``, ``--marginal``."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_aggregator.cli import app
from ldp_client import wire
from ldp_client.mechanisms.calm import SPEC, CalmParams
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()
N = 40_000
ATTRS = "age=young/mid/old;os=android/ios;plan=free/paid"
MARGINALS = "age+os;os+plan;age+plan"


def _submit(running: Running) -> np.ndarray:
    code = runner.invoke(
        app,
        ["campaign", "create", "users", "--mechanism", "calm", "--param", f"attributes={ATTRS}",
         "--param", f"marginals={MARGINALS}", "--epsilon", "2", "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0, code.output
    params = SPEC.make(epsilon=2.0, domain=None, fields={"attributes": ATTRS, "marginals": MARGINALS})
    assert isinstance(params, CalmParams)
    rng = np.random.default_rng(18)
    probs = rng.dirichlet(np.ones(params.joint_size))
    values = rng.choice(params.joint_size, size=N, p=probs)
    columns = SPEC.encode_batch(params, values, rng, campaign_id="users", labels=())
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="users", batch_id="b", params=params, columns=columns)
    )
    return np.bincount(values, minlength=params.joint_size).reshape(params.sizes)


def test_marginals_over_grpc_and_the_database(running: Running) -> None:
    joint = _submit(running)
    server, db = running.server.target, str(running.server.config.db)
    args = ["estimate", "users", "--json", "--marginal", "os,age", "--marginal", "plan", "--non-negative"]
    result = runner.invoke(app, [*args, "--server", server])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert "items" not in doc or not doc["items"]  # no full attribute set: no item table
    first, second = doc["marginals"]
    assert first["attributes"] == ["os", "age"] and second["attributes"] == ["plan"]
    truth_os_age = joint.sum(axis=2).T.reshape(-1)  # query order: os major, then age
    assert [c["labels"] for c in first["cells"]][:2] == [["android", "young"], ["android", "mid"]]
    truth_plan = joint.sum(axis=(0, 1))
    for cells, truth in ((first["cells"], truth_os_age), (second["cells"], truth_plan)):
        assert len(cells) == truth.size
        for c, t in zip(cells, truth, strict=True):
            # Seeded: each 95% interval holds the truth here; the error is a cell's, not the whole n's.
            assert c["ci_low"] <= t <= c["ci_high"], (c, t)
            assert 0 < c["std_error"] < 0.05 * N
            assert c["non_negative_count"] >= 0
    assert sum(c["count"] for c in second["cells"]) == pytest.approx(N)  # consistency: total n
    from_db = runner.invoke(app, [*args, "--db", db])
    assert from_db.exit_code == 0, from_db.output
    assert json.loads(from_db.output)["marginals"] == doc["marginals"]
    table = runner.invoke(app, ["estimate", "users", "--marginal", "age,os", "--server", server])
    assert table.exit_code == 0 and "age=young, os=android" in table.output and "interval" in table.output


@pytest.mark.parametrize(
    ("query", "expect"),
    [
        ("age,colour", "marginal='colour'"),  # an unknown attribute
        ("age,os,plan", "covered by one chosen marginal"),  # no chosen set covers the three
        ("age,age", "each attribute once"),
    ],
)
def test_a_bad_marginal_is_one_line(running: Running, query: str, expect: str) -> None:
    _submit(running)
    result = runner.invoke(app, ["estimate", "users", "--marginal", query, "--server", running.server.target])
    assert result.exit_code == 2, result.output
    assert expect in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("param", "expect"),
    [
        ("attributes=age=young/old;os=a/b", "marginals"),  # marginals missing
        ("marginals=age+colour", "colour"),
    ],
)
def test_a_bad_campaign_is_one_line(running: Running, param: str, expect: str) -> None:
    extra = [] if param.startswith("attributes") else ["--param", "attributes=age=young/old;os=a/b"]
    result = runner.invoke(
        app,
        ["campaign", "create", "bad", "--mechanism", "calm", *extra, "--param", param, "--epsilon", "1",
         "--server", running.server.target],
    )  # fmt: skip
    assert result.exit_code != 0
    assert expect in result.output and "Traceback" not in result.output


def test_marginals_of_a_mechanism_without_them_are_invalid_argument(running: Running) -> None:
    code = runner.invoke(
        app,
        ["campaign", "create", "c", "--mechanism", "grr", "--domain", "5", "--epsilon", "1",
         "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0
    request = estimates_pb2.EstimateRequest(
        campaign_id="c", marginals=[estimates_pb2.MarginalQuery(attributes=["a"])]
    )
    with pytest.raises(grpc.RpcError) as info:
        running.analyst.GetEstimate(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "marginal mechanism" in (info.value.details() or "")


def test_a_group_without_reports_is_named_not_internal(running: Running) -> None:
    _submit(running)
    params = SPEC.make(epsilon=2.0, domain=None, fields={"attributes": ATTRS, "marginals": MARGINALS})
    code = runner.invoke(
        app,
        ["campaign", "create", "few", "--mechanism", "calm", "--param", f"attributes={ATTRS}",
         "--param", f"marginals={MARGINALS}", "--epsilon", "2", "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0, code.output
    rng = np.random.default_rng(1)
    groups, a, b, y = SPEC.encode_batch(
        params, np.zeros(50, dtype=np.int64), rng, campaign_id="few", labels=()
    )
    keep = groups == 1  # only group 1 reports
    columns = (groups[keep], a[keep], b[keep], y[keep])
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="few", batch_id="b", params=params, columns=columns)
    )
    result = runner.invoke(app, ["estimate", "few", "--marginal", "age", "--server", running.server.target])
    assert result.exit_code != 0 and "group 2 has none" in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
