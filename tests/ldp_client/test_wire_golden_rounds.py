"""Pinned ldp.v1 bytes of an adaptive pem campaign (issue 16): the campaign with its round state
(``Campaign.discovery_round`` = 9, ``discovery_rounds`` = 10, ``PrefixExtensionParams.adaptive`` = 10), a
round's GRR batch, report and journal rows, as ``tests/fixtures/make_rounds_golden_pem.py`` wrote them.
Campaigns without rounds keep their bytes: ``test_wire_golden.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ldp_aggregator._proto.ldp.v1 import analyst_pb2
from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.mechanisms.pem.rounds import check_round_columns, round_plan
from tests.fixtures.make_rounds_golden_pem import CAMPAIGN_ID, campaign, params, rounds

GOLDEN = json.loads((Path(__file__).parents[1] / "fixtures" / "rounds_golden_pem.json").read_text("utf-8"))


def test_the_campaign_with_its_round_state() -> None:
    pinned = bytes.fromhex(GOLDEN["campaign"])
    assert campaign().SerializeToString(deterministic=True) == pinned
    info = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(pinned))
    assert info.params == params() and info.params.adaptive
    assert info.discovery_round == 2 and info.discovery_rounds == rounds()
    # The new fields' numbers and wire types: Campaign 9 (varint) and 10 (bytes), pem params 10 (varint).
    assert bytes([9 << 3 | 0, 2]) in pinned and bytes([10 << 3 | 2]) in pinned
    assert campaign_pb2.PrefixExtensionParams(adaptive=True).SerializeToString() == bytes([10 << 3 | 0, 1])


def test_a_rounds_batch_report_and_journal_rows() -> None:
    p = params()
    msg = reports_pb2.ReportBatch.FromString(bytes.fromhex(GOLDEN["batch"]))
    rows = bytes.fromhex(GOLDEN["journal_rows"])
    from_rows = _journal_rows.batch_from_rows(
        params=p, campaign_id=CAMPAIGN_ID, batch_id=msg.batch_id, rows=rows
    )
    assert from_rows.SerializeToString(deterministic=True) == bytes.fromhex(GOLDEN["batch"])
    columns = wire.batch_from_proto(msg, p)
    again = wire.batch_to_proto(campaign_id=CAMPAIGN_ID, batch_id=msg.batch_id, params=p, columns=columns)
    assert again.SerializeToString(deterministic=True) == bytes.fromhex(GOLDEN["batch"])
    # Every report is of round 2, GRR (a = b = 0) over the round's candidates and "none".
    plan = round_plan(p, 2, [r.kept for r in rounds()][1])
    assert plan.grr == GOLDEN["grr"] and len(plan.candidates) == GOLDEN["candidates"]
    check_round_columns(plan, columns, CAMPAIGN_ID)
    assert np.all(columns[0] == 2) and np.all(columns[1] == 0) and np.all(columns[3] <= len(plan.candidates))
    report = reports_pb2.Report.FromString(bytes.fromhex(GOLDEN["report"]))
    first = wire.report_from_proto(report, p, campaign_id=CAMPAIGN_ID)
    assert all(np.array_equal(a[:1], b) for a, b in zip(columns, first, strict=True))


def test_the_next_round_request() -> None:
    req = analyst_pb2.NextRoundRequest(campaign_id="c", round=3)
    assert req.SerializeToString() == b"\x0a\x01c\x10\x03"
