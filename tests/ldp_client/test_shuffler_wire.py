"""ldp.v1 bytes of issue 17's shuffler messages, pinned in ``tests/fixtures/shuffler_golden.json`` (written
once by ``tests/fixtures/make_shuffler_golden.py``): ``Campaign.shuffler`` (field 8) and
``EstimateResponse.shuffle`` (field 25). A campaign without a shuffler keeps the bytes of the release
(``test_wire_golden.py`` pins them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldp_aggregator._proto.ldp.v1 import estimates_pb2
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.accounting.shuffle import ShufflerDeclaration
from ldp_client.errors import InvalidParameterError
from tests.fixtures.make_shuffler_golden import campaign_message, estimate_message

GOLDEN = json.loads((Path(__file__).parents[1] / "fixtures" / "shuffler_golden.json").read_text())


def test_campaign_with_shuffler_bytes() -> None:
    case = GOLDEN["campaign"]
    pinned = bytes.fromhex(case["bytes"])
    assert campaign_message(case).SerializeToString() == pinned
    info = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(pinned))
    assert info.shuffler == ShufflerDeclaration(**case["shuffler"])
    # Field 8, a length-delimited ShufflerDeclaration: batch_reports = 1 (varint), delta = 2 (double).
    assert bytes([8 << 3 | 2]) in pinned


def test_estimate_shuffle_bytes() -> None:
    case = GOLDEN["estimate_shuffle"]
    pinned = bytes.fromhex(case["bytes"])
    values = {k: v for k, v in case.items() if k != "bytes"}
    assert estimate_message(values).SerializeToString() == pinned
    parsed = estimates_pb2.EstimateResponse.FromString(pinned).shuffle
    assert parsed.batch_reports == values["batch_reports"]
    assert parsed.epsilon_numerical == values["epsilon_numerical"]
    assert pinned[:2] == bytes([25 << 3 | 2 | 0x80, 1])  # field 25, length-delimited (a two-byte tag)


def test_campaign_without_shuffler_is_unchanged() -> None:
    params = wire.params_from_proto(campaign_message(GOLDEN["campaign"]))
    plain = wire.campaign_to_proto(campaign_id="shuffled", params=params)
    assert not plain.HasField("shuffler")
    assert wire.campaign_from_proto(plain).shuffler is None
    assert bytes([8 << 3 | 2]) not in plain.SerializeToString()[:2]


@pytest.mark.parametrize(("batch", "delta", "field"), [(1, 1e-6, "batch_reports"), (10, 0.0, "delta")])
def test_bad_declaration_on_the_wire(batch: int, delta: float, field: str) -> None:
    msg = campaign_message(GOLDEN["campaign"])
    msg.shuffler.batch_reports = batch
    msg.shuffler.delta = delta
    with pytest.raises(InvalidParameterError) as info:
        wire.campaign_from_proto(msg)
    assert info.value.field == f"shuffler.{field}"
