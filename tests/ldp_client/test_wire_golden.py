"""ldp.v1 bytes pinned per mechanism: what a released device or server sent must still mean the same.

``tests/fixtures/wire_golden.json`` holds, for every mechanism, the Campaign, a ReportBatch built from
journal rows, one Report and the journal rows themselves, as the release named in the file encoded them
(``tests/fixtures/make_wire_golden.py`` wrote it; this test never regenerates it); a mechanism added later
pins its own in ``wire_golden_<NAME>.json``, as the release that added it encoded them. Any change to how
parameters, batches, reports or journal rows are encoded fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldp_client import _journal_rows, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.params import make_params

FIXTURE = Path(__file__).parents[1] / "fixtures" / "wire_golden.json"
# The release's pins, then those of each mechanism added later (one file each).
FIXTURES = [FIXTURE, *sorted(FIXTURE.parent.glob("wire_golden_*.json"))]
CASES: list[dict[str, Any]] = [
    case for path in FIXTURES for case in json.loads(path.read_text(encoding="utf-8"))["cases"]
]


def _params(case: dict[str, Any]) -> Any:
    return make_params(
        case["mechanism"], epsilon=case.get("epsilon"), domain=case.get("domain"), fields=case.get("fields")
    )


def _first_row(columns: Any) -> Any:
    if isinstance(columns, tuple):
        return tuple(_first_row(c) for c in columns)
    return np.asarray(columns)[:1]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(_equal, a, b))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def test_every_mechanism_is_pinned() -> None:
    from ldp_client.params import MECHANISM_NAMES

    assert {c["mechanism"] for c in CASES} == set(MECHANISM_NAMES)


@pytest.mark.parametrize("case", CASES, ids=[c["campaign_id"] for c in CASES])
def test_campaign_bytes(case: dict[str, Any]) -> None:
    params = _params(case)
    pinned = bytes.fromhex(case["campaign"])
    made = wire.campaign_to_proto(
        campaign_id=case["campaign_id"],
        params=params,
        description="pinned",
        candidates=["x", "y"],
        created_unix_ms=1_700_000_000_000,
    )
    assert made.SerializeToString(deterministic=True) == pinned
    info = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(pinned))
    assert info.params == params and info.campaign_id == case["campaign_id"]


@pytest.mark.parametrize("case", CASES, ids=[c["campaign_id"] for c in CASES])
def test_batch_report_and_journal_bytes(case: dict[str, Any]) -> None:
    params = _params(case)
    cid = case["campaign_id"]
    pinned_batch = bytes.fromhex(case["batch"])
    rows = bytes.fromhex(case["journal_rows"])
    msg = reports_pb2.ReportBatch.FromString(pinned_batch)
    # Journal rows (a device's outbox written by the pinned release) become the same batch.
    from_rows = _journal_rows.batch_from_rows(
        params=params, campaign_id=cid, batch_id=msg.batch_id, rows=rows
    )
    assert from_rows.SerializeToString(deterministic=True) == pinned_batch
    assert _journal_rows.rows_from_batch(params, msg) == rows
    # The server decodes the batch, and encoding the columns again gives the same bytes.
    columns = wire.batch_from_proto(msg, params)
    again = wire.batch_to_proto(campaign_id=cid, batch_id=msg.batch_id, params=params, columns=columns)
    assert again.SerializeToString(deterministic=True) == pinned_batch
    # The single Report is the batch's first report.
    report = reports_pb2.Report.FromString(bytes.fromhex(case["report"]))
    assert _equal(wire.report_from_proto(report, params, campaign_id=cid), _first_row(columns))
