"""Protobuf conversion of the numeric mechanisms; used only by :mod:`ldp_client.wire` (the public API).

Kept apart from ``wire.py`` so the numeric contract reads in one place. Layouts (``reports.proto``):

==========  =================================================  ============================================
mechanism   ``ReportBatch`` payload (n = count)                 numpy columns
==========  =================================================  ============================================
laplace     ``laplace_codes``: n little-endian uint32           uint32 (n,), each < the number of codes
piecewise   ``piecewise_codes``: as laplace                     uint32 (n,)
hybrid      ``hybrid_codes``: as laplace                        uint32 (n,)
duchi       ``duchi_codes``: n bits packed as ``rr_answers``    uint32 (n,), each 0 or 1
sr          ``sr_codes``: as duchi                              uint32 (n,), each 0 or 1
multidim    ``multidim``: attributes and codes, n*k uint32 each ``(attributes, codes)``, uint32 (n, k) each
==========  =================================================  ============================================

Codes are integers: a device cannot send NaN, an infinity or a float outside the range, and every check is
a vectorised integer comparison (range, packing padding, strictly increasing attributes per report).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client._scalars import bool_types, int_types
from ldp_client.codecs import check_length, first_true
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.numeric_params import (
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    NumericParams,
    PiecewiseParams,
    SRParams,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "BATCH_FIELD",
    "MECHANISM_FIELD",
    "NUMERIC_MESSAGES",
    "REPORT_FIELD",
    "NumericColumns",
    "NumericMessage",
    "batch_from_proto",
    "batch_from_reports",
    "batch_to_proto",
    "params_from_proto",
    "params_to_proto",
    "report_from_proto",
    "report_to_proto",
]

MECHANISM_FIELD: Final[dict[str, str]] = {
    "laplace": "laplace",
    "duchi": "duchi",
    "piecewise": "piecewise",
    "hybrid": "hybrid",
    "sr": "sr",
    "multidim": "multidim",
}
BATCH_FIELD: Final[dict[str, str]] = {
    "laplace": "laplace_codes",
    "duchi": "duchi_codes",
    "piecewise": "piecewise_codes",
    "hybrid": "hybrid_codes",
    "sr": "sr_codes",
    "multidim": "multidim",
}
REPORT_FIELD: Final[dict[str, str]] = {
    "laplace": "laplace_code",
    "duchi": "duchi_code",
    "piecewise": "piecewise_code",
    "hybrid": "hybrid_code",
    "sr": "sr_code",
    "multidim": "multidim",
}
NumericMessage: TypeAlias = (
    campaign_pb2.LaplaceParams
    | campaign_pb2.DuchiParams
    | campaign_pb2.PiecewiseParams
    | campaign_pb2.HybridParams
    | campaign_pb2.StochasticRoundingParams
    | campaign_pb2.MultidimParams
)
NUMERIC_MESSAGES: Final = (
    campaign_pb2.LaplaceParams,
    campaign_pb2.DuchiParams,
    campaign_pb2.PiecewiseParams,
    campaign_pb2.HybridParams,
    campaign_pb2.StochasticRoundingParams,
    campaign_pb2.MultidimParams,
)
NumericColumns: TypeAlias = "NDArray[np.uint32] | tuple[NDArray[np.uint32], NDArray[np.uint32]]"
"""uint32 codes (n,), or (attributes, codes) uint32 (n, k) for multidim."""

_U32_LE: Final = "<u4"  # numpy dtype by name: this module imports numpy only in its batch functions
_POLICY_TO_PROTO: Final[dict[str, campaign_pb2.OutOfRange.ValueType]] = {
    "clamp": campaign_pb2.OUT_OF_RANGE_CLAMP,
    "reject": campaign_pb2.OUT_OF_RANGE_REJECT,
}
_POLICY_FROM_PROTO: Final[dict[int, str]] = {int(v): k for k, v in _POLICY_TO_PROTO.items()}
_PACKED: Final = ("duchi", "sr")  # one-bit codes, packed 8 per byte on the wire


# ------------------------------------------------------------------------------------------- params


def _policy(value: int, field: str) -> str:
    policy = _POLICY_FROM_PROTO.get(value)
    if policy is None:
        raise InvalidParameterError(field, value, "OUT_OF_RANGE_CLAMP (0) or OUT_OF_RANGE_REJECT (1)")
    return policy


def _base_to_proto(
    params: DuchiParams | PiecewiseParams | HybridParams,
) -> campaign_pb2.DuchiParams | campaign_pb2.PiecewiseParams | campaign_pb2.HybridParams:
    policy = _POLICY_TO_PROTO[params.out_of_range]
    if isinstance(params, DuchiParams):
        return campaign_pb2.DuchiParams(
            lo=params.lo, hi=params.hi, out_of_range=policy, low_probability=params.low_probability
        )
    if isinstance(params, HybridParams):
        return campaign_pb2.HybridParams(
            lo=params.lo,
            hi=params.hi,
            out_of_range=policy,
            cells=params.cells,
            window=params.window,
            high_probability=params.high_probability,
            low_probability=params.low_probability,
            mix_probability=params.mix_probability,
        )
    return campaign_pb2.PiecewiseParams(
        lo=params.lo,
        hi=params.hi,
        out_of_range=policy,
        cells=params.cells,
        window=params.window,
        high_probability=params.high_probability,
    )


def params_to_proto(params: NumericParams) -> tuple[str, NumericMessage]:
    """``(Campaign.mechanism member, message)`` of numeric parameters (fields as in campaign.proto)."""
    field = MECHANISM_FIELD[params.name]
    if isinstance(params, MultidimParams):
        msg = campaign_pb2.MultidimParams(
            lo=[r[0] for r in params.ranges],
            hi=[r[1] for r in params.ranges],
            out_of_range=_POLICY_TO_PROTO[params.out_of_range],
            k=params.k,
        )
        getattr(msg, params.base.name).CopyFrom(_base_to_proto(params.base))
        return field, msg
    policy = _POLICY_TO_PROTO[params.out_of_range]
    if isinstance(params, LaplaceParams):
        return field, campaign_pb2.LaplaceParams(
            lo=params.lo, hi=params.hi, out_of_range=policy, grid=params.grid, decay=params.decay
        )
    if isinstance(params, SRParams):
        return field, campaign_pb2.StochasticRoundingParams(
            lo=params.lo, hi=params.hi, out_of_range=policy, truth_probability=params.truth_probability
        )
    return field, _base_to_proto(params)


def _base_from_proto(
    msg: campaign_pb2.DuchiParams | campaign_pb2.PiecewiseParams | campaign_pb2.HybridParams,
) -> DuchiParams | PiecewiseParams | HybridParams:
    policy: Any = _policy(msg.out_of_range, "out_of_range")
    if isinstance(msg, campaign_pb2.DuchiParams):
        return DuchiParams(lo=msg.lo, hi=msg.hi, out_of_range=policy, low_probability=msg.low_probability)
    if isinstance(msg, campaign_pb2.HybridParams):
        return HybridParams(
            lo=msg.lo,
            hi=msg.hi,
            out_of_range=policy,
            cells=msg.cells,
            window=msg.window,
            high_probability=msg.high_probability,
            low_probability=msg.low_probability,
            mix_probability=msg.mix_probability,
        )
    return PiecewiseParams(
        lo=msg.lo,
        hi=msg.hi,
        out_of_range=policy,
        cells=msg.cells,
        window=msg.window,
        high_probability=msg.high_probability,
    )


def params_from_proto(campaign: campaign_pb2.Campaign, which: str) -> NumericParams:
    """The numeric parameters of ``campaign`` (``which`` is its mechanism member).

    Raises:
        InvalidParameterError: a field out of range, named relative to the member (the caller prefixes
            the member, e.g. ``"piecewise.window"``).
    """
    if which == "multidim":
        m = campaign.multidim
        if len(m.lo) != len(m.hi):
            raise InvalidParameterError("hi", f"<{len(m.hi)} values>", f"{len(m.lo)} values (one per lo)")
        base_which = m.WhichOneof("base")
        if base_which is None:
            raise InvalidParameterError("base", None, "one of duchi, piecewise, hybrid")
        try:
            base = _base_from_proto(getattr(m, base_which))
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{base_which}.{exc.field}", exc.value, exc.allowed) from exc
        return MultidimParams(
            ranges=tuple(zip(m.lo, m.hi, strict=True)),
            k=m.k,
            base=base,
            out_of_range=_policy(m.out_of_range, "out_of_range"),  # type: ignore[arg-type]
        )
    msg = getattr(campaign, which)
    if which == "laplace":
        return LaplaceParams(
            lo=msg.lo,
            hi=msg.hi,
            out_of_range=_policy(msg.out_of_range, "out_of_range"),  # type: ignore[arg-type]
            grid=msg.grid,
            decay=msg.decay,
        )
    if which == "sr":
        return SRParams(
            lo=msg.lo,
            hi=msg.hi,
            out_of_range=_policy(msg.out_of_range, "out_of_range"),  # type: ignore[arg-type]
            truth_probability=msg.truth_probability,
        )
    return _base_from_proto(msg)


# ------------------------------------------------------------------------------------------ columns


def _check_codes(codes: NDArray[Any], bound: int, field: str) -> None:
    if codes.size == 0:
        return
    if (codes.dtype.kind != "u" and int(codes.min()) < 0) or int(codes.max()) >= bound:
        flat = codes.ravel()
        pos = first_true((flat < 0) | (flat >= bound))
        raise InvalidReportError(f"{field}[{pos}]", int(flat[pos]), f"a code in [0, {bound - 1}]")


def _check_attributes(attrs: NDArray[Any], d: int, field: str) -> None:
    """Every attribute < D, strictly increasing within each report (row); name the first bad one."""
    import numpy as np

    _check_codes(attrs, d, field)
    if attrs.shape[1] > 1:
        bad = np.asarray((np.diff(attrs.astype(np.int64), axis=1) <= 0).any(axis=1))
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}]",
                attrs[row].tolist(),
                f"{attrs.shape[1]} distinct attributes in increasing order",
            )


def _unpack_bits(raw: bytes, n: int, field: str) -> NDArray[np.uint32]:
    import numpy as np

    check_length(field, raw, (n + 7) // 8, f"ceil(count/8) for count={n}")
    packed = np.frombuffer(raw, dtype=np.uint8)
    used = n % 8
    if used and packed[-1] >> used:
        raise InvalidReportError(
            f"{field}[{len(raw) - 1}]", int(packed[-1]), f"a last byte whose padding bits {used}..7 are 0"
        )
    return np.unpackbits(packed, count=n, bitorder="little").astype(np.uint32)


def batch_from_proto(msg: reports_pb2.ReportBatch, params: NumericParams, n: int) -> NumericColumns:
    """Decode and validate a numeric batch of ``n`` reports (header already checked by wire.py)."""
    import numpy as np

    field = BATCH_FIELD[params.name]
    if isinstance(params, MultidimParams):
        k = params.k
        cols = msg.multidim
        how = f"4 * count * k for count={n}, k={k} little-endian uint32"
        check_length("multidim.attributes", cols.attributes, 4 * n * k, how)
        check_length("multidim.codes", cols.codes, 4 * n * k, how)
        attrs = np.frombuffer(cols.attributes, dtype=_U32_LE).reshape(n, k)
        codes = np.frombuffer(cols.codes, dtype=_U32_LE).reshape(n, k)
        _check_attributes(attrs, params.d, "multidim.attributes")
        _check_codes(codes, params.layout.num_codes, "multidim.codes")
        return attrs.astype(np.uint32, copy=False), codes.astype(np.uint32, copy=False)
    raw = getattr(msg, field)
    if params.name in _PACKED:
        return _unpack_bits(raw, n, field)
    check_length(field, raw, 4 * n, f"4 * count for count={n} little-endian uint32")
    codes = np.frombuffer(raw, dtype=_U32_LE)
    _check_codes(codes, params.layout.num_codes, field)
    return codes.astype(np.uint32, copy=False)


def _as_code_array(field: str, columns: object, ndim: int) -> NDArray[Any]:
    import numpy as np

    if not isinstance(columns, np.ndarray) or columns.ndim != ndim:
        shape = getattr(columns, "shape", type(columns).__name__)
        raise InvalidReportError(field, shape, f"a {ndim}-d numpy array of integer codes")
    if columns.dtype == np.bool_ or not np.issubdtype(columns.dtype, np.integer):
        raise InvalidReportError(field, str(columns.dtype), "an integer dtype")
    return columns


def _check_count(field: str, n: int) -> None:
    if not 1 <= n < 1 << 32:
        raise InvalidReportError(field, n, "a report count between 1 and 2**32 - 1")


def batch_to_proto(msg: reports_pb2.ReportBatch, params: NumericParams, columns: object) -> None:
    """Fill ``msg``'s count and payload from numeric columns, checked with the server's rules."""
    import numpy as np

    field = BATCH_FIELD[params.name]
    if isinstance(params, MultidimParams):
        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "multidim", type(columns).__name__, "an (attributes, codes) tuple of arrays"
            )
        attrs = _as_code_array("multidim.attributes", columns[0], 2)
        codes = _as_code_array("multidim.codes", columns[1], 2)
        k = params.k
        if attrs.shape[1] != k or codes.shape != attrs.shape:
            raise InvalidReportError(
                "multidim", f"{attrs.shape} and {codes.shape}", f"two arrays of shape (n, {k}) (k = {k})"
            )
        _check_count("count", attrs.shape[0])
        _check_attributes(attrs, params.d, "multidim.attributes")
        _check_codes(codes, params.layout.num_codes, "multidim.codes")
        msg.count = attrs.shape[0]
        msg.multidim.attributes = np.ascontiguousarray(attrs).astype(_U32_LE).tobytes()
        msg.multidim.codes = np.ascontiguousarray(codes).astype(_U32_LE).tobytes()
        return
    codes = _as_code_array(field, columns, 1)
    _check_count("count", codes.shape[0])
    _check_codes(codes, params.layout.num_codes, field)
    msg.count = codes.shape[0]
    if params.name in _PACKED:
        setattr(msg, field, np.packbits(codes.astype(np.uint8), bitorder="little").tobytes())
    else:
        setattr(msg, field, codes.astype(_U32_LE).tobytes())


# ----------------------------------------------------------------------------------- single reports


def _code_value(field: str, report: object, bound: int) -> int:
    allowed = f"an integer code in [0, {bound - 1}]"
    if isinstance(report, bool_types()) or not isinstance(report, int_types()):
        raise InvalidReportError(field, report, allowed)
    code = operator.index(report)
    if not 0 <= code < bound:
        raise InvalidReportError(field, code, allowed)
    return code


def _pairs_value(field: str, report: object, params: MultidimParams) -> tuple[list[int], list[int]]:
    k = params.k
    allowed = f"{k} (attribute, code) pairs with increasing attributes in [0, {params.d - 1}]"
    if not isinstance(report, Sequence) or isinstance(report, str | bytes) or len(report) != k:
        raise InvalidReportError(field, report, allowed)
    attrs, codes = [], []
    for i, pair in enumerate(report):
        if not (isinstance(pair, Sequence) and not isinstance(pair, str | bytes) and len(pair) == 2):
            raise InvalidReportError(f"{field}[{i}]", pair, "an (attribute, code) pair")
        attrs.append(_code_value(f"{field}[{i}].attribute", pair[0], params.d))
        codes.append(_code_value(f"{field}[{i}].code", pair[1], params.layout.num_codes))
    if any(b <= a for a, b in itertools.pairwise(attrs)):
        raise InvalidReportError(field, attrs, allowed)
    return attrs, codes


def report_to_proto(msg: reports_pb2.Report, params: NumericParams, report: object) -> None:
    """Set ``msg.value`` from one encoder output: an int code, or multidim's (attribute, code) pairs."""
    if isinstance(params, MultidimParams):
        attrs, codes = _pairs_value("report", report, params)
        msg.multidim.attributes.extend(attrs)
        msg.multidim.codes.extend(codes)
        return
    setattr(msg, REPORT_FIELD[params.name], _code_value("report", report, params.layout.num_codes))


def report_from_proto(msg: reports_pb2.Report, params: NumericParams) -> NumericColumns:
    """Columns of a batch of one from a single numeric ``Report`` (value member already checked)."""
    import numpy as np

    if isinstance(params, MultidimParams):
        k = params.k
        attrs = np.array(msg.multidim.attributes, dtype=np.uint32)
        codes = np.array(msg.multidim.codes, dtype=np.uint32)
        if attrs.size != k or codes.size != k:
            raise InvalidReportError(
                "multidim", f"{attrs.size} attributes, {codes.size} codes", f"{k} of each (k = {k})"
            )
        a2, c2 = attrs.reshape(1, k), codes.reshape(1, k)
        _check_attributes(a2, params.d, "multidim.attributes")
        _check_codes(c2, params.layout.num_codes, "multidim.codes")
        return a2, c2
    field = REPORT_FIELD[params.name]
    code = getattr(msg, field)
    bound = params.layout.num_codes
    if code >= bound:
        raise InvalidReportError(field, code, f"a code in [0, {bound - 1}]")
    return np.array([code], dtype=np.uint32)


def batch_from_reports(params: NumericParams, reports: Sequence[object]) -> NumericColumns:
    """Columns from per-report encoder outputs (a device-side loop over at most a few thousand reports)."""
    import numpy as np

    n = len(reports)
    _check_count("reports", n)
    if isinstance(params, MultidimParams):
        pairs = [_pairs_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        attrs = np.array([a for a, _ in pairs], dtype=np.uint32).reshape(n, params.k)
        codes = np.array([c for _, c in pairs], dtype=np.uint32).reshape(n, params.k)
        return attrs, codes
    bound = params.layout.num_codes
    return np.array([_code_value(f"reports[{i}]", r, bound) for i, r in enumerate(reports)], dtype=np.uint32)
