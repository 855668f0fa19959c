"""Journal rows -> ReportBatch in pure Python equal the numpy path byte for byte (issue 13 item 11).

For every mechanism: per-report encoder outputs are packed into journal rows; the batch built from the rows
without numpy must serialize exactly like ``wire.batch_to_proto(batch_from_reports(...))`` (the numpy path
the server decodes), the rows must come back from the batch unchanged (the reporter's split), and
``check_rows`` must accept them and name the first bad row of a corrupted journal.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from ldp_client import wire
from ldp_client._journal_rows import batch_from_rows, check_rows, row_bytes, row_packer, rows_from_batch
from ldp_client.errors import InvalidReportError, PrivacyQuantizationWarning
from ldp_client.numeric_params import (
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    PiecewiseParams,
    SRParams,
)
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    MechanismParams,
    PairedParams,
    RapporParams,
    make_params,
)
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret

SECRET = ClientSecret.from_bytes(bytes(range(32)))
CID = "rows"


def _params() -> dict[str, tuple[MechanismParams, list[Any]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        labels = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
        cases: dict[str, tuple[MechanismParams, list[Any]]] = {
            "rr": (BinaryRRParams.from_epsilon(1.0), [True, False, True] * 7),
            "grr": (GRRParams.from_epsilon(labels, 2.0), labels * 2),
            "rappor": (RapporParams(k=13, h=2, m=5), ["x", "y", "zz"] * 5),
            "basic-rappor": (BasicRapporParams(domain=11), list(range(11))),
            "boolean-rappor": (BooleanRapporParams(), [True, False] * 9),
            "laplace": (LaplaceParams.from_epsilon(0.0, 10.0, 1.0, grid=64), [0.0, 3.3, 10.0, 7.5]),
            "duchi": (DuchiParams.from_epsilon(-1.0, 1.0, 2.0), [-1.0, 0.0, 0.5, 1.0] * 5),
            "piecewise": (PiecewiseParams.from_epsilon(0.0, 100.0, 2.0, cells=1000), [1.0, 50.0, 99.0]),
            "hybrid": (HybridParams.from_epsilon(5.0, 6.0, 3.0), [5.0, 5.5, 6.0]),
            "sr": (SRParams.from_epsilon(0.0, 1.0, 0.5), [0.0, 0.3, 1.0] * 4),
            "multidim": (
                MultidimParams.from_epsilon(
                    ((0.0, 1.0), (-3.0, 3.0), (10.0, 20.0)), 6.0, base="hybrid", cells=50
                ),
                [(0.5, 0.0, 15.0), (1.0, 3.0, 10.0)],
            ),
            "multidim-duchi": (
                MultidimParams.from_epsilon(((0.0, 1.0),) * 4, 1.0, base="duchi"),
                [(0.5, 0.1, 0.9, 0.0)] * 3,
            ),
            "paired-rappor-rr": (
                PairedParams(first=RapporParams(k=9, h=2, m=3), second=BinaryRRParams.from_epsilon(1.0)),
                [("u", True), ("v", False)] * 5,
            ),
            "paired-grr-boolean": (
                PairedParams(first=GRRParams.from_epsilon(4, 1.0), second=BooleanRapporParams()),
                [(0, True), (3, False), (2, True)],
            ),
        }
        for name in ("oue", "sue", "olh", "blh", "ss", "hr"):
            cases[name] = (make_params(name, epsilon=1.5, domain=11), list(range(11)))
        cases["set-valued"] = (
            make_params("set-valued", epsilon=1.0, domain=9, fields={"max_items": 3, "inner": "olh"}),
            [{0, 1}, {2}, set(), {3, 4, 5}],
        )
    return cases


CASES = _params()


def _encode(params: MechanismParams, values: list[Any]) -> list[Any]:
    encode = encoder_for(params, campaign_id=CID, secret=SECRET)
    return [encode(v) for v in values]


@pytest.mark.parametrize("name", list(CASES))
def test_rows_make_the_same_batch_as_the_numpy_path(name: str) -> None:
    params, values = CASES[name]
    reports = _encode(params, values)
    pack = row_packer(params)
    rows = b"".join(pack(r) for r in reports)
    assert len(rows) == len(reports) * row_bytes(params)
    got = batch_from_rows(campaign_id=CID, batch_id="b1", params=params, rows=rows)
    want = wire.batch_to_proto(
        campaign_id=CID, batch_id="b1", params=params, columns=wire.batch_from_reports(params, reports)
    )
    assert got.SerializeToString() == want.SerializeToString()
    assert rows_from_batch(params, got) == rows
    check_rows(params, CID, rows)
    # And the server's decoder accepts it.
    wire.batch_from_proto(got, params, campaign_id=CID)


def test_a_single_report_batch_and_bit_packing_edges() -> None:
    rr = BinaryRRParams.from_epsilon(1.0)
    for n in (1, 7, 8, 9, 16, 17):
        rows = bytes([1, 0, 1] * 6)[:n]
        msg = batch_from_rows(campaign_id=CID, batch_id="b", params=rr, rows=rows)
        assert msg.count == n and len(msg.rr_answers) == (n + 7) // 8
        assert rows_from_batch(rr, msg) == rows
        assert wire.batch_from_proto(msg, rr).tolist() == [bool(b) for b in rows]


@pytest.mark.parametrize(
    ("params", "rows", "field"),
    [
        (
            GRRParams.from_epsilon(4, 1.0),
            (2).to_bytes(4, "little") + (4).to_bytes(4, "little"),
            "journal row 1",
        ),
        (BinaryRRParams.from_epsilon(1.0), b"\x00\x02", "journal row 1"),
        (RapporParams(k=12, h=2, m=5), (7).to_bytes(4, "little") + b"\x00\x00", "journal row 0.cohort"),
        (RapporParams(k=12, h=2, m=5), (1).to_bytes(4, "little") + b"\x00\xf0", "journal row 0.bits"),
    ],
)
def test_check_rows_names_the_first_bad_row(params: MechanismParams, rows: bytes, field: str) -> None:
    with pytest.raises(InvalidReportError) as info:
        check_rows(params, CID, rows)
    assert info.value.field == field


def test_partial_rows_are_refused() -> None:
    grr = GRRParams.from_epsilon(4, 1.0)
    for rows in (b"", b"\x00\x00\x00"):
        with pytest.raises(InvalidReportError, match="len\\(journal rows\\)"):
            batch_from_rows(campaign_id=CID, batch_id="b", params=grr, rows=rows)
