"""The Analyst answers range queries (issue 18): ``EstimateRequest.ranges``, the CLI's ``--range``."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_aggregator.cli import app
from ldp_client import wire
from ldp_client.mechanisms.hio import SPEC, HIOParams
from tests.ldp_aggregator.conftest import Running

runner = CliRunner()
N = 30_000


def _submit(running: Running) -> np.ndarray:
    code = runner.invoke(
        app,
        ["campaign", "create", "age", "--mechanism", "hio", "--domain", "60", "--epsilon", "2",
         "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0, code.output
    params = HIOParams.from_epsilon(60, 2.0)
    rng = np.random.default_rng(181)
    values = np.minimum(rng.geometric(0.05, N) - 1, 59)
    columns = SPEC.encode_batch(params, values, rng, campaign_id="age", labels=[str(i) for i in range(60)])
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="age", batch_id="b", params=params, columns=columns)
    )
    return values


def test_ranges_and_quantiles_over_grpc_and_the_database(running: Running) -> None:
    values = _submit(running)
    server, db = running.server.target, str(running.server.config.db)
    args = ["estimate", "age", "--json", "--range", "0:9", "--range", "10:29", "--quantile", "0.5"]
    result = runner.invoke(app, [*args, "--server", server])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [(r["lo"], r["hi"]) for r in doc["ranges"]] == [(0, 9), (10, 29)]
    for r in doc["ranges"]:
        truth = np.count_nonzero((values >= r["lo"]) & (values <= r["hi"]))
        # Seeded: each 95% interval holds the truth here (z = 1.96); the standard error is the range's.
        assert r["ci_low"] <= truth <= r["ci_high"], (r, truth)
        assert 0 < r["std_error"] < 0.05 * N
    true_median = int(np.quantile(values, 0.5))
    assert abs(doc["quantiles"][0]["position"] - true_median) <= 3
    from_db = runner.invoke(app, [*args, "--db", db])
    assert from_db.exit_code == 0, from_db.output
    assert json.loads(from_db.output)["ranges"] == doc["ranges"]
    table = runner.invoke(app, ["estimate", "age", "--range", "0:9", "--server", server])
    assert table.exit_code == 0 and "[0, 9]" in table.output and "interval" in table.output


@pytest.mark.parametrize(
    ("rng_arg", "expect"), [("9:3", "range='9:3'"), ("0:60", "range='0:60'"), ("a-b", "range='a-b'")]
)
def test_a_bad_range_is_one_line(running: Running, rng_arg: str, expect: str) -> None:
    _submit(running)
    result = runner.invoke(app, ["estimate", "age", "--range", rng_arg, "--server", running.server.target])
    assert result.exit_code == 2, result.output
    assert expect in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_ranges_of_a_mechanism_without_them_are_invalid_argument(running: Running) -> None:
    code = runner.invoke(
        app,
        ["campaign", "create", "c", "--mechanism", "grr", "--domain", "5", "--epsilon", "1",
         "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0
    request = estimates_pb2.EstimateRequest(campaign_id="c", ranges=[estimates_pb2.RangeQuery(lo=0, hi=2)])
    with pytest.raises(grpc.RpcError) as info:
        running.analyst.GetEstimate(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ranges" in (info.value.details() or "") and "range mechanism" in (info.value.details() or "")


def test_haar_ranges_over_grpc_and_the_database(running: Running) -> None:
    """The same queries of a haar campaign (issue 18): ranges and a quantile through the Analyst, and the
    same answers from the database."""
    from ldp_client.mechanisms.haar import SPEC as HAAR
    from ldp_client.mechanisms.haar import HaarParams

    code = runner.invoke(
        app,
        ["campaign", "create", "wage", "--mechanism", "haar", "--domain", "60", "--epsilon", "2",
         "--server", running.server.target],
    )  # fmt: skip
    assert code.exit_code == 0, code.output
    params = HaarParams.from_epsilon(60, 2.0)
    rng = np.random.default_rng(182)
    values = np.minimum(rng.geometric(0.05, N) - 1, 59)
    columns = HAAR.encode_batch(params, values, rng, campaign_id="wage", labels=())
    running.collector.Submit(
        wire.batch_to_proto(campaign_id="wage", batch_id="b", params=params, columns=columns)
    )
    args = ["estimate", "wage", "--json", "--range", "0:9", "--range", "10:29", "--quantile", "0.5"]
    result = runner.invoke(app, [*args, "--server", running.server.target])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    for r in doc["ranges"]:
        truth = np.count_nonzero((values >= r["lo"]) & (values <= r["hi"]))
        assert r["ci_low"] <= truth <= r["ci_high"], (r, truth)
        assert 0 < r["std_error"] < 0.05 * N
    assert abs(doc["quantiles"][0]["position"] - int(np.quantile(values, 0.5))) <= 3
    from_db = runner.invoke(app, [*args, "--db", str(running.server.config.db)])
    assert from_db.exit_code == 0, from_db.output
    assert json.loads(from_db.output)["ranges"] == doc["ranges"]
