"""Wire format of the numeric mechanisms: campaign parameters, batches, single reports, validation."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.numeric import numeric_encoder
from ldp_client.numeric_params import (
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    NumericParams,
    PiecewiseParams,
    SRParams,
)

PARAMS: list[NumericParams] = [
    LaplaceParams.from_epsilon(0.0, 10.0, 1.0, grid=64),
    DuchiParams.from_epsilon(-1.0, 1.0, 2.0, out_of_range="reject"),
    PiecewiseParams.from_epsilon(0.0, 100.0, 2.0, cells=1000),
    HybridParams.from_epsilon(5.0, 6.0, 3.0),
    SRParams.from_epsilon(0.0, 1.0, 0.5),
    MultidimParams.from_epsilon(((0.0, 1.0), (-3.0, 3.0), (10.0, 20.0)), 6.0, base="hybrid", cells=50),
    MultidimParams.from_epsilon(((0.0, 1.0),) * 4, 1.0, base="duchi"),
]
FIELDS = {
    "laplace": ("laplace", "laplace_codes", "laplace_code"),
    "duchi": ("duchi", "duchi_codes", "duchi_code"),
    "piecewise": ("piecewise", "piecewise_codes", "piecewise_code"),
    "hybrid": ("hybrid", "hybrid_codes", "hybrid_code"),
    "sr": ("sr", "sr_codes", "sr_code"),
    "multidim": ("multidim", "multidim", "multidim"),
}
NUMBERS = {"laplace": 32, "duchi": 33, "piecewise": 34, "hybrid": 35, "sr": 36, "multidim": 37}


def _values(params: NumericParams, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(params, MultidimParams):
        return np.column_stack([rng.uniform(lo, hi, n) for lo, hi in params.ranges])
    return rng.uniform(params.lo, params.hi, n)


def test_field_numbers_are_the_assigned_ones() -> None:
    for name, (c, b, r) in FIELDS.items():
        assert campaign_pb2.Campaign.DESCRIPTOR.fields_by_name[c].number == NUMBERS[name]
        assert reports_pb2.ReportBatch.DESCRIPTOR.fields_by_name[b].number == NUMBERS[name]
        assert reports_pb2.Report.DESCRIPTOR.fields_by_name[r].number == NUMBERS[name]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.name)
def test_campaign_round_trip(params: NumericParams) -> None:
    msg = wire.campaign_to_proto(campaign_id="c", params=params, description="d")
    assert msg.WhichOneof("mechanism") == FIELDS[params.name][0]
    assert msg.epsilon == pytest.approx(params.epsilon)
    assert msg.epsilon_inf == float("inf")  # fresh noise per report
    back = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(msg.SerializeToString()))
    assert back.params == params
    assert back.params.epsilon == params.epsilon  # both sides derive the same integers


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.name)
def test_batch_round_trip(params: NumericParams) -> None:
    rng = np.random.default_rng(3)
    cols = numeric_encoder(params).encode_batch(_values(params, 1001, rng), rng)  # type: ignore[arg-type]
    msg = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=cols)
    assert msg.count == 1001
    assert msg.WhichOneof("payload") == FIELDS[params.name][1]
    back = wire.batch_from_proto(reports_pb2.ReportBatch.FromString(msg.SerializeToString()), params)
    if isinstance(params, MultidimParams):
        assert isinstance(back, tuple) and isinstance(cols, tuple)
        np.testing.assert_array_equal(back[0], cols[0])
        np.testing.assert_array_equal(back[1], cols[1])
    else:
        np.testing.assert_array_equal(back, cols)  # type: ignore[arg-type]
        assert back.dtype == np.uint32  # type: ignore[union-attr]
    if params.name in ("duchi", "sr"):
        assert len(getattr(msg, FIELDS[params.name][1])) == 126  # packed bits: ceil(1001/8)


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: p.name)
def test_single_report_round_trip(params: NumericParams) -> None:
    enc = numeric_encoder(params)
    value = [r[0] for r in params.ranges] if isinstance(params, MultidimParams) else params.hi
    report = enc.encode(value)  # type: ignore[arg-type]
    msg = wire.report_to_proto(campaign_id="c", report_id="r", params=params, report=report)  # type: ignore[arg-type]
    assert msg.WhichOneof("value") == FIELDS[params.name][2]
    cols = wire.report_from_proto(reports_pb2.Report.FromString(msg.SerializeToString()), params)
    many = wire.batch_from_reports(params, [report, report])  # type: ignore[list-item]
    if isinstance(params, MultidimParams):
        assert isinstance(cols, tuple) and isinstance(many, tuple)
        assert [tuple(p) for p in zip(cols[0][0].tolist(), cols[1][0].tolist(), strict=True)] == list(report)  # type: ignore[arg-type]
        assert many[0].shape == (2, params.k)
    else:
        assert cols.tolist() == [report]  # type: ignore[union-attr]
        assert many.tolist() == [report, report]  # type: ignore[union-attr]


def _batch(params: NumericParams, **payload: object) -> reports_pb2.ReportBatch:
    msg = reports_pb2.ReportBatch(campaign_id="c", batch_id="b", count=payload.pop("count", 3))  # type: ignore[arg-type]
    for k, v in payload.items():
        if isinstance(v, dict):
            getattr(msg, k).CopyFrom(reports_pb2.MultidimColumns(**v))
        else:
            setattr(msg, k, v)
    return msg


def _u32(*xs: int) -> bytes:
    return np.array(xs, dtype="<u4").tobytes()


def test_bad_batches_are_rejected_with_names() -> None:
    pm = PiecewiseParams.from_epsilon(0.0, 1.0, 1.0, cells=100)
    with pytest.raises(InvalidReportError, match=r"piecewise_codes\[1\]=100"):
        wire.batch_from_proto(_batch(pm, piecewise_codes=_u32(0, 100, 5)), pm)
    with pytest.raises(InvalidReportError, match=r"len\(piecewise_codes\)"):
        wire.batch_from_proto(_batch(pm, piecewise_codes=_u32(0, 1)), pm)
    with pytest.raises(InvalidReportError, match="payload"):
        wire.batch_from_proto(_batch(pm, laplace_codes=_u32(0, 1, 2)), pm)
    duchi = DuchiParams.from_epsilon(0.0, 1.0, 1.0)
    with pytest.raises(InvalidReportError, match="padding"):
        wire.batch_from_proto(_batch(duchi, duchi_codes=bytes([0b1111])), duchi)  # bit 3 set for count=3
    assert wire.batch_from_proto(_batch(duchi, duchi_codes=bytes([0b101])), duchi).tolist() == [1, 0, 1]  # type: ignore[union-attr]
    md = MultidimParams.from_epsilon(((0.0, 1.0),) * 3, 5.0, base="piecewise", cells=10)
    assert md.k == 2
    ok = {"attributes": _u32(0, 2, 1, 2, 0, 1), "codes": _u32(1, 2, 3, 4, 5, 6)}
    attrs, _ = wire.batch_from_proto(_batch(md, multidim=ok), md)  # type: ignore[misc]
    assert attrs.tolist() == [[0, 2], [1, 2], [0, 1]]
    with pytest.raises(InvalidReportError, match=r"multidim.attributes\[1\]"):
        wire.batch_from_proto(
            _batch(md, multidim={"attributes": _u32(0, 2, 2, 1, 0, 1), "codes": ok["codes"]}), md
        )
    with pytest.raises(InvalidReportError, match=r"multidim.attributes\[2\]"):
        wire.batch_from_proto(
            _batch(md, multidim={"attributes": _u32(0, 2, 1, 2, 1, 1), "codes": ok["codes"]}), md
        )
    with pytest.raises(InvalidReportError, match=r"multidim.attributes\[1\]=3"):
        wire.batch_from_proto(
            _batch(md, multidim={"attributes": _u32(0, 3, 1, 2, 0, 1), "codes": ok["codes"]}), md
        )
    with pytest.raises(InvalidReportError, match=r"multidim.codes\[4\]=10"):
        wire.batch_from_proto(
            _batch(md, multidim={"attributes": ok["attributes"], "codes": _u32(1, 2, 3, 4, 10, 6)}), md
        )
    with pytest.raises(InvalidReportError, match=r"len\(multidim.codes\)"):
        wire.batch_from_proto(_batch(md, multidim={"attributes": ok["attributes"], "codes": _u32(1, 2)}), md)


def test_bad_reports_and_columns() -> None:
    sr = SRParams.from_epsilon(0.0, 1.0, 1.0)
    msg = reports_pb2.Report(campaign_id="c", report_id="r", sr_code=2)
    with pytest.raises(InvalidReportError, match="sr_code=2"):
        wire.report_from_proto(msg, sr)
    with pytest.raises(InvalidReportError, match="report"):
        wire.report_to_proto(campaign_id="c", report_id="r", params=sr, report=True)
    with pytest.raises(InvalidReportError, match="report"):
        wire.report_to_proto(campaign_id="c", report_id="r", params=sr, report=-1)
    with pytest.raises(InvalidReportError, match="integer dtype"):
        wire.batch_to_proto(campaign_id="c", batch_id="b", params=sr, columns=np.array([0.5, 1.0]))
    with pytest.raises(InvalidReportError, match="code"):
        wire.batch_to_proto(campaign_id="c", batch_id="b", params=sr, columns=np.array([0, 2]))
    md = MultidimParams.from_epsilon(((0.0, 1.0),) * 3, 5.0, base="duchi")
    with pytest.raises(InvalidReportError):
        wire.report_to_proto(campaign_id="c", report_id="r", params=md, report=((1, 0), (1, 1)))  # repeated
    with pytest.raises(InvalidReportError):
        wire.report_to_proto(campaign_id="c", report_id="r", params=md, report=((0, 0),))  # k = 2 pairs
    bad = reports_pb2.Report(campaign_id="c", report_id="r")
    bad.multidim.attributes.extend([2, 1])
    bad.multidim.codes.extend([0, 1])
    with pytest.raises(InvalidReportError, match="increasing"):
        wire.report_from_proto(bad, md)
    with pytest.raises(InvalidReportError, match="shape"):
        wire.batch_to_proto(
            campaign_id="c",
            batch_id="b",
            params=md,
            columns=(np.zeros((2, 3), np.uint32), np.zeros((2, 3), np.uint32)),
        )


def test_bad_campaign_parameters_are_named_by_path() -> None:
    msg = wire.campaign_to_proto(campaign_id="c", params=PiecewiseParams.from_epsilon(0.0, 1.0, 1.0))
    msg.piecewise.window = msg.piecewise.cells
    with pytest.raises(InvalidParameterError, match=r"piecewise\.window"):
        wire.campaign_from_proto(msg)
    msg2 = wire.campaign_to_proto(campaign_id="c", params=DuchiParams.from_epsilon(0.0, 1.0, 1.0))
    msg2.duchi.lo = 2.0
    with pytest.raises(InvalidParameterError, match=r"duchi\.hi"):
        wire.campaign_from_proto(msg2)
    msg3 = wire.campaign_to_proto(campaign_id="c", params=SRParams.from_epsilon(0.0, 1.0, 1.0))
    msg3.sr.out_of_range = 7  # type: ignore[assignment]
    with pytest.raises(InvalidParameterError, match=r"sr\.out_of_range"):
        wire.campaign_from_proto(msg3)
    md = MultidimParams.from_epsilon(((0.0, 1.0), (0.0, 2.0)), 1.0)
    msg4 = wire.campaign_to_proto(campaign_id="c", params=md)
    msg4.multidim.hi.pop()
    with pytest.raises(InvalidParameterError, match=r"multidim\.hi"):
        wire.campaign_from_proto(msg4)
    msg5 = wire.campaign_to_proto(campaign_id="c", params=md)
    msg5.multidim.piecewise.hi = 3.0
    with pytest.raises(InvalidParameterError, match=r"multidim\.base"):
        wire.campaign_from_proto(msg5)
    msg6 = wire.campaign_to_proto(campaign_id="c", params=md)
    msg6.multidim.ClearField("piecewise")
    with pytest.raises(InvalidParameterError, match=r"multidim\.base"):
        wire.campaign_from_proto(msg6)
