"""RAPPOR f = 0 needs an explicit opt-in to be created (issue 13), and stored f = 0 campaigns still work.

An unset ``f`` reads as 0 on the wire: no permanent randomized response, epsilon_inf = inf. The server
refuses to create such a campaign over raw ``CreateCampaign`` unless the params message says
``allow_f_zero = true``; a campaign stored before that rule (written through the store here) still opens,
takes reports and estimates.
"""

from __future__ import annotations

import math
from pathlib import Path

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
from ldp_aggregator.cli import app
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_aggregator.service import open_store
from ldp_aggregator.store import CampaignRecord
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, collector_pb2
from ldp_client.mechanisms.rappor import encode_batch_rappor
from ldp_client.params import BooleanRapporParams, PairedParams, RapporParams
from tests.ldp_aggregator.conftest import Running


def _create(running: Running, msg: campaign_pb2.Campaign) -> campaign_pb2.Campaign:
    return running.analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=msg))  # type: ignore[no-any-return]


def _refusal(running: Running, msg: campaign_pb2.Campaign) -> str:
    with pytest.raises(grpc.RpcError) as info:
        _create(running, msg)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    return str(info.value.details())


def test_raw_create_with_f_unset_is_refused_naming_the_field(running: Running) -> None:
    msg = campaign_pb2.Campaign(id="no-prr")
    msg.rappor.CopyFrom(campaign_pb2.RapporParams(k=16, h=2, m=4, p=0.5, q=0.75))  # f unset
    details = _refusal(running, msg)
    assert "rappor.f=0.0" in details and "f = 0.5" in details and "0.25" in details
    assert "allow_f_zero = true" in details and "--param allow_f_zero=true" in details
    for member, message in (
        ("basic_rappor", campaign_pb2.BasicRapporParams(domain=campaign_pb2.Domain(size=3), p=0.5, q=0.75)),
        ("boolean_rappor", campaign_pb2.BooleanRapporParams(p=0.5, q=0.75)),
    ):
        other = campaign_pb2.Campaign(id=f"no-prr-{member}")
        getattr(other, member).CopyFrom(message)
        assert f"{member}.f=0.0" in _refusal(running, other)
    # A paired campaign: the side is named.
    paired = wire.campaign_to_proto(
        campaign_id="pair",
        params=PairedParams(first=BooleanRapporParams(), second=RapporParams(k=16, h=2, m=4)),
    )
    paired.paired.second.rappor.f = 0.0
    assert "paired.second.rappor.f=0.0" in _refusal(running, paired)
    # Nothing was stored.
    assert not running.analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest()).campaigns


def test_opted_in_f_zero_is_created_and_round_trips(running: Running) -> None:
    msg = campaign_pb2.Campaign(id="opted")
    msg.rappor.CopyFrom(campaign_pb2.RapporParams(k=16, h=2, m=4, p=0.5, q=0.75, allow_f_zero=True))
    created = _create(running, msg)
    assert math.isinf(created.epsilon_inf) and created.rappor.allow_f_zero
    # The Python client's opt-in travels: RapporParams(f=0, allow_f_zero=True) round-trips.
    params = RapporParams(k=16, h=2, m=4, f=0.0, allow_f_zero=True)
    sent = wire.campaign_to_proto(campaign_id="from-client", params=params)
    assert sent.rappor.allow_f_zero
    assert wire.params_from_proto(sent).allow_f_zero
    got = _create(running, sent)
    assert math.isinf(got.epsilon_inf) and wire.params_from_proto(got) == params


def test_f_above_zero_sends_no_opt_in_bytes() -> None:
    # The field is additive: messages with f > 0 are byte-identical with or without the object's flag.
    plain = RapporParams(k=16, h=2, m=4, f=0.5)
    flagged = RapporParams(k=16, h=2, m=4, f=0.5, allow_f_zero=True)
    a = wire.campaign_to_proto(campaign_id="c", params=plain).SerializeToString()
    b = wire.campaign_to_proto(campaign_id="c", params=flagged).SerializeToString()
    assert a == b and b"\x38\x01" not in a  # field 7, varint true


def test_cli_create_with_f_zero_needs_the_param_opt_in(running: Running) -> None:
    server = running.server.target
    runner = CliRunner()
    args = ["campaign", "create", "z", "--mechanism", "rappor", "--param", "k=16", "--param", "f=0"]
    result = runner.invoke(app, [*args, "--server", server])
    assert result.exit_code == 2, result.output
    assert "--param allow_f_zero=true" in result.output and "allow_f_zero=True" not in result.output
    result = runner.invoke(app, [*args, "--param", "allow_f_zero=true", "--server", server, "--json"])
    assert result.exit_code == 0, result.output
    assert '"epsilon_inf": "inf"' in result.output


def test_a_stored_f_zero_campaign_still_opens_and_estimates(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    old = campaign_pb2.Campaign(id="old", created_unix_ms=1)  # as created before the rule: no opt-in
    old.rappor.CopyFrom(campaign_pb2.RapporParams(k=16, h=2, m=4, p=0.25, q=0.75))
    store = open_store(str(db))
    try:
        store.create_campaign(
            CampaignRecord(
                campaign_id="old", mechanism="rappor", params_blob=old.SerializeToString(), created_unix_ms=1
            )
        )
    finally:
        store.close()
    params = RapporParams(k=16, h=2, m=4, f=0.0, p=0.25, q=0.75, allow_f_zero=True)
    rng = np.random.default_rng(7)
    columns = encode_batch_rappor(
        params, campaign_id="old", values=np.zeros(300, dtype=np.int64), labels=["a"], rng=rng
    )
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as server:
        r = Running(server)
        try:
            got = r.analyst.GetCampaign(collector_pb2.GetCampaignRequest(campaign_id="old"))
            assert math.isinf(got.epsilon_inf) and wire.params_from_proto(got) == params
            assert got.rappor.allow_f_zero  # docs/wire-protocol.md: every f = 0 campaign is answered so
            batch = wire.batch_to_proto(campaign_id="old", batch_id="b0", params=params, columns=columns)
            assert r.collector.Submit(batch).accepted == 300
            est = r.analyst.GetEstimate(estimates_pb2.EstimateRequest(campaign_id="old", candidates=["a"]))
            assert est.n_reports == 300 and len(est.items) == 1
        finally:
            r.channel.close()
