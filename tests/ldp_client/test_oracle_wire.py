"""Wire contract of the issue-6 frequency oracles: campaign, batch and report round trips, and every
malformed batch the server must refuse (lengths, padding, subset sizes, buckets, indices)."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client import _journal_rows, reporter, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.params import (
    BLHParams,
    HadamardParams,
    OLHParams,
    OUEParams,
    SetValuedParams,
    SubsetSelectionParams,
    SUEParams,
    make_params,
)

NAMES = ["oue", "sue", "olh", "blh", "ss", "hr"]


def _params(name: str, d: int = 13) -> object:
    return make_params(name, epsilon=1.0, domain=d)


def _same_columns(a: object, b: object) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    else:
        np.testing.assert_array_equal(a, b)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [*NAMES, "set-valued"])
def test_campaign_round_trip(name: str) -> None:
    if name == "set-valued":
        params = make_params(
            name, epsilon=2.0, domain=["a", "b", "c"], fields={"max_items": 2, "inner": "olh"}
        )
    else:
        params = make_params(name, epsilon=2.0, domain=["a", "b", "c", "d"])
    msg = wire.campaign_to_proto(campaign_id="c1", params=params)  # type: ignore[arg-type]
    back = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(msg.SerializeToString()))
    assert back.params == params
    assert msg.epsilon == params.epsilon  # type: ignore[union-attr]
    assert msg.epsilon_inf == float("inf")
    expected_member = "set_valued" if name == "set-valued" else name
    assert msg.WhichOneof("mechanism") == expected_member


@pytest.mark.parametrize("inner", ["grr", "oue", "sue", "olh", "blh", "ss", "hr"])
def test_set_valued_reports_use_the_inner_payload(inner: str) -> None:
    params = make_params("set-valued", epsilon=1.0, domain=6, fields={"max_items": 2, "inner": inner})
    assert isinstance(params, SetValuedParams)
    enc = SetValuedEncoder(params)
    sets = np.array([[0, 1], [2, -1], [-1, -1]] * 10)
    cols = enc.encode_batch(sets, np.random.default_rng(0))
    msg = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=cols)
    assert msg.WhichOneof("payload") == wire._BATCH_FIELD[params.inner.name]
    back = wire.batch_from_proto(reports_pb2.ReportBatch.FromString(msg.SerializeToString()), params)
    _same_columns(cols, back)
    one = enc.encode({0, 5})
    rmsg = wire.report_to_proto(campaign_id="c", report_id="r", params=params, report=one)
    wire.report_from_proto(rmsg, params)
    wire.batch_from_reports(params, [one, enc.encode([])])
    bad = campaign_pb2.Campaign(id="c")
    bad.set_valued.max_items = 2
    bad.set_valued.domain.size = 6
    with pytest.raises(InvalidParameterError, match=r"set_valued\.inner"):
        wire.params_from_proto(bad)


@pytest.mark.parametrize("name", NAMES)
def test_batch_and_report_round_trips(name: str) -> None:
    params = _params(name)
    enc = oracle_encoder(params)  # type: ignore[arg-type]
    values = np.arange(50) % 13
    cols = enc.encode_batch(values, np.random.default_rng(1))
    msg = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=cols)  # type: ignore[arg-type]
    back = wire.batch_from_proto(reports_pb2.ReportBatch.FromString(msg.SerializeToString()), params)  # type: ignore[arg-type]
    _same_columns(cols, back)
    reports = [enc.encode(int(v)) for v in values[:5]]
    cols2 = wire.batch_from_reports(params, reports)  # type: ignore[arg-type]
    msg2 = wire.batch_to_proto(campaign_id="c", batch_id="b2", params=params, columns=cols2)  # type: ignore[arg-type]
    _same_columns(cols2, wire.batch_from_proto(msg2, params))  # type: ignore[arg-type]
    for r in reports:
        rmsg = wire.report_to_proto(campaign_id="c", report_id="r", params=params, report=r)  # type: ignore[arg-type]
        single = wire.report_from_proto(reports_pb2.Report.FromString(rmsg.SerializeToString()), params)  # type: ignore[arg-type]
        _same_columns(single, wire.batch_from_reports(params, [r]))  # type: ignore[arg-type]


def _batch(params: object, **payload: object) -> reports_pb2.ReportBatch:
    msg = reports_pb2.ReportBatch(campaign_id="c", batch_id="b", count=2)
    for field, value in payload.items():
        if isinstance(value, dict):
            for sub, raw in value.items():
                setattr(getattr(msg, field), sub, raw)
        else:
            setattr(msg, field, value)
    return msg


def test_malformed_batches_are_refused() -> None:
    oue = OUEParams.from_epsilon(10, 1.0)  # 2 bytes per row, padding bits 2..7 of byte 1
    with pytest.raises(InvalidReportError, match=r"len\(oue_bits\)"):
        wire.batch_from_proto(_batch(oue, oue_bits=bytes(3)), oue)
    with pytest.raises(InvalidReportError, match=r"oue_bits\[1\]\[1\]"):
        wire.batch_from_proto(_batch(oue, oue_bits=bytes([0, 0, 0, 0b100])), oue)
    with pytest.raises(InvalidReportError, match="payload"):
        wire.batch_from_proto(_batch(oue, sue_bits=bytes(4)), oue)
    sue = SUEParams.from_epsilon(10, 1.0)
    wire.batch_from_proto(_batch(sue, sue_bits=bytes([255, 3, 0, 0])), sue)
    ss = SubsetSelectionParams.from_epsilon(10, 1.0, k=2)
    wire.batch_from_proto(_batch(ss, ss_bits=bytes([3, 0, 0, 3])), ss)
    with pytest.raises(InvalidReportError, match=r"ss_bits\[1\].*k=2"):
        wire.batch_from_proto(_batch(ss, ss_bits=bytes([3, 0, 1, 3])), ss)
    olh = OLHParams.from_epsilon(10, 2.0, g=5)
    good = {"a": bytes(16), "b": bytes(16), "buckets": bytes(8)}
    wire.batch_from_proto(_batch(olh, olh=good), olh)
    with pytest.raises(InvalidReportError, match=r"olh.buckets\[1\]"):
        wire.batch_from_proto(_batch(olh, olh={**good, "buckets": bytes(4) + (5).to_bytes(4, "little")}), olh)
    with pytest.raises(InvalidReportError, match=r"len\(olh.a\)"):
        wire.batch_from_proto(_batch(olh, olh={**good, "a": bytes(15)}), olh)
    blh = BLHParams.from_epsilon(10, 1.0)
    with pytest.raises(InvalidReportError, match="payload"):
        wire.batch_from_proto(_batch(blh, olh=good), blh)
    hr = HadamardParams.from_epsilon(10, 1.0)  # K = 16
    wire.batch_from_proto(_batch(hr, hr_indices=(15).to_bytes(4, "little") * 2), hr)
    with pytest.raises(InvalidReportError, match=r"hr_indices\[0\]"):
        wire.batch_from_proto(_batch(hr, hr_indices=(16).to_bytes(4, "little") * 2), hr)


def test_malformed_columns_and_reports_are_refused() -> None:
    ss = SubsetSelectionParams.from_epsilon(10, 1.0, k=2)
    with pytest.raises(InvalidReportError, match="k=2"):
        wire.batch_to_proto(
            campaign_id="c", batch_id="b", params=ss, columns=np.array([[7, 0]], dtype=np.uint8)
        )
    with pytest.raises(InvalidReportError, match="k=2"):
        wire.report_to_proto(campaign_id="c", report_id="r", params=ss, report=0b111)
    oue = OUEParams.from_epsilon(10, 1.0)
    with pytest.raises(InvalidReportError, match="report="):
        wire.report_to_proto(campaign_id="c", report_id="r", params=oue, report=1 << 10)
    with pytest.raises(InvalidReportError, match="uint8"):
        wire.batch_to_proto(
            campaign_id="c", batch_id="b", params=oue, columns=np.zeros((2, 3), dtype=np.uint8)
        )
    olh = OLHParams.from_epsilon(10, 2.0, g=5)
    u = np.zeros(2, dtype=np.uint64)
    with pytest.raises(InvalidReportError, match=r"olh\.buckets"):
        wire.batch_to_proto(
            campaign_id="c", batch_id="b", params=olh, columns=(u, u, np.array([0, 5], dtype=np.uint32))
        )
    with pytest.raises(InvalidReportError, match=r"olh\.a"):
        wire.batch_to_proto(
            campaign_id="c", batch_id="b", params=olh, columns=(u.astype(np.int64), u, np.zeros(2, np.uint32))
        )
    with pytest.raises(InvalidReportError, match="LocalHashReport"):
        wire.report_to_proto(campaign_id="c", report_id="r", params=olh, report=3)
    with pytest.raises(InvalidReportError, match="bucket"):
        wire.batch_from_reports(olh, [(0, 0, 9)])  # a plain tuple has no .bucket
    hr = HadamardParams.from_epsilon(10, 1.0)
    with pytest.raises(InvalidReportError, match="report="):
        wire.report_to_proto(campaign_id="c", report_id="r", params=hr, report=16)
    msg = reports_pb2.Report(campaign_id="c", report_id="r", hr_index=16)
    with pytest.raises(InvalidReportError, match="hr_index"):
        wire.report_from_proto(msg, hr)


@pytest.mark.parametrize("name", [*NAMES, "set-valued"])
def test_reporter_journal_rows_round_trip(name: str) -> None:
    if name == "set-valued":
        params = make_params(name, epsilon=1.0, domain=9, fields={"max_items": 3, "inner": "olh"})
        enc = SetValuedEncoder(params)  # type: ignore[arg-type]
        reports = [enc.encode([v, (v + 1) % 9]) for v in range(7)]
    else:
        params = _params(name, d=9)
        enc1 = oracle_encoder(params)  # type: ignore[arg-type]
        reports = [enc1.encode(v) for v in range(7)]
    pack = reporter._row_packer(params)  # type: ignore[arg-type]
    rows = b"".join(pack(r) for r in reports)
    assert len(rows) == 7 * reporter._row_bytes(params)  # type: ignore[arg-type]
    # The reporter turns rows into a batch without numpy (ldp_client._journal_rows); the server decodes it.
    msg = _journal_rows.batch_from_rows(campaign_id="c", batch_id="b", params=params, rows=rows)  # type: ignore[arg-type]
    _same_columns(wire.batch_from_proto(msg, params), wire.batch_from_reports(params, reports))  # type: ignore[arg-type]


@pytest.mark.parametrize("inner", ["grr", "oue", "olh", "blh", "ss", "hr"])
def test_set_valued_parameters_by_name_round_trip_exactly(inner: str) -> None:
    from ldp_client import registry

    spec = registry.spec_named("set-valued")
    params = make_params(
        "set-valued", epsilon=1.5, domain=["a", "b", "c", "d"], fields={"max_items": 3, "inner": inner}
    )
    args = spec.make_args(params)
    # The inner oracle's own fields, not an epsilon that would have to rebuild the same thresholds.
    assert args.epsilon is None and args.fields["inner"] == inner
    assert all(k in ("max_items", "inner") or k.startswith("inner.") for k in args.fields)
    text = {k: str(v) for k, v in args.fields.items()}  # as --param NAME=VALUE gives them
    assert make_params("set-valued", domain=args.domain, fields=text) == params
    assert spec.wire_names(params).batch == registry.spec_named(inner).wire.batch == wire.batch_field(params)


def test_set_valued_inner_fields_are_checked() -> None:
    params = make_params(
        "set-valued",
        domain=5,
        fields={"max_items": 2, "inner": "olh", "inner.g": "5", "inner.truth_probability": "0.5"},
    )
    assert isinstance(params, SetValuedParams) and params.inner == OLHParams(
        domain=7, g=5, truth_probability=0.5
    )
    # With epsilon the inner fields are those make_params takes with it (olh: g).
    at_eps = make_params(
        "set-valued", epsilon=2.0, domain=5, fields={"max_items": 2, "inner": "olh", "inner.g": 3}
    )
    assert isinstance(at_eps, SetValuedParams) and at_eps.inner == OLHParams.from_epsilon(7, 2.0, g=3)
    with pytest.raises(InvalidParameterError, match=r"inner\.truth_probability"):
        make_params(
            "set-valued", domain=5, fields={"max_items": 2, "inner": "hr", "inner.truth_probability": 0.2}
        )
    with pytest.raises(InvalidParameterError, match="not auto"):
        make_params("set-valued", domain=5, fields={"max_items": 2, "inner.truth_probability": 0.7})
    with pytest.raises(InvalidParameterError, match="inner"):
        make_params("set-valued", domain=5, fields={"max_items": 2, "inner": "rappor", "inner.k": 8})
