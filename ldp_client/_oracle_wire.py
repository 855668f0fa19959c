"""Protobuf conversion of the issue-6 frequency oracles; used only by :mod:`ldp_client.wire` (the public API).

Kept apart from ``wire.py`` so the contract of these mechanisms reads in one place. Layouts
(``reports.proto``), n = ``count``:

==========  ====================================================  ==========================================
mechanism   ``ReportBatch`` payload                               numpy columns
==========  ====================================================  ==========================================
oue, sue    ``oue_bits`` / ``sue_bits``: n rows of ceil(d/8)      uint8 (n, ceil(d/8)), little bit order,
            bytes, little bit order, padding bits 0               padding 0
ss          ``ss_bits``: as oue, each row with exactly k bits     uint8 (n, ceil(d/8))
olh, blh    ``olh`` / ``blh``: ``a``, ``b`` (n little-endian      ``(a uint64 (n,), b uint64 (n,),
            uint64 each), ``buckets`` (n uint32, each < g)        buckets uint32 (n,))``
hr          ``hr_indices``: n little-endian uint32, each < K      int64 (n,)
set-valued  the inner oracle's payload (``wire`` substitutes      the inner oracle's columns
            ``params.inner`` before calling this module)
==========  ====================================================  ==========================================

Single reports (``Report.value``): ``oue_bits``/``sue_bits``/``ss_bits`` (ceil(d/8) bytes), ``olh``/``blh``
(a ``LocalHashReport`` message), ``hr_index``. Per-report encoder outputs: an int of d bits (oue, sue,
ss), a :class:`~ldp_client.mechanisms.olh.LocalHashReport` (a, b, bucket), an int index (hr).

Every check is vectorised (one numpy pass per column): lengths against ``count``, padding bits, buckets
below g, indices below K, and for ss the number of set bits of every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from ldp_client import registry
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.codecs import (
    as_int,
    check_indices,
    check_length,
    decode_index_column,
    domain_from_proto,
    domain_to_proto,
    first_true,
)
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.params import (
    BLHParams,
    FrequencyOracleParams,
    HadamardParams,
    InnerOracleParams,
    OLHParams,
    OUEParams,
    SetValuedParams,
    SubsetSelectionParams,
    SUEParams,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "BATCH_FIELD",
    "MECHANISM_FIELD",
    "REPORT_FIELD",
    "OracleColumns",
    "OracleMessage",
    "SingleOracle",
    "batch_from_proto",
    "batch_from_reports",
    "batch_to_proto",
    "params_from_proto",
    "params_to_proto",
    "report_from_proto",
    "report_to_proto",
]

MECHANISM_FIELD: Final[dict[str, str]] = {
    "oue": "oue",
    "sue": "sue",
    "olh": "olh",
    "blh": "blh",
    "ss": "ss",
    "hr": "hr",
    "set-valued": "set_valued",
}
BATCH_FIELD: Final[dict[str, str]] = {
    "oue": "oue_bits",
    "sue": "sue_bits",
    "olh": "olh",
    "blh": "blh",
    "ss": "ss_bits",
    "hr": "hr_indices",
}
REPORT_FIELD: Final[dict[str, str]] = {
    "oue": "oue_bits",
    "sue": "sue_bits",
    "olh": "olh",
    "blh": "blh",
    "ss": "ss_bits",
    "hr": "hr_index",
}

OracleMessage: TypeAlias = (
    campaign_pb2.UnaryEncodingParams
    | campaign_pb2.LocalHashingParams
    | campaign_pb2.SubsetSelectionParams
    | campaign_pb2.HadamardResponseParams
    | campaign_pb2.SetValuedParams
)
SingleOracle: TypeAlias = OUEParams | SUEParams | OLHParams | SubsetSelectionParams | HadamardParams
"""The oracles with their own report payloads (a set-valued campaign reports with its inner oracle)."""
OracleColumns: TypeAlias = "tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint32]]"
"""Columns of local hashing; the other oracles use uint8 bit rows or int64 indices."""

_U32_LE: Final = "<u4"  # numpy dtypes by name: this module imports numpy only in its batch functions
_U64_LE: Final = "<u8"

# ------------------------------------------------------------------------------------------ parameters


def _single_to_proto(params: InnerOracleParams) -> tuple[str, Any]:
    spec = registry.find(params)
    if spec is not None:  # a registered inner oracle (grr)
        return spec.wire.campaign, spec.params_to_proto(params)
    dom = domain_to_proto(params.domain)
    if isinstance(params, OUEParams | SUEParams):
        return params.name, campaign_pb2.UnaryEncodingParams(domain=dom, p=params.p, q=params.q)
    if isinstance(params, OLHParams):
        return params.name, campaign_pb2.LocalHashingParams(
            domain=dom, g=params.g, truth_probability=params.truth_probability
        )
    if isinstance(params, SubsetSelectionParams):
        return "ss", campaign_pb2.SubsetSelectionParams(
            domain=dom, k=params.k, truth_probability=params.truth_probability
        )
    return "hr", campaign_pb2.HadamardResponseParams(domain=dom, truth_probability=params.truth_probability)


def params_to_proto(params: FrequencyOracleParams) -> tuple[str, OracleMessage]:
    """``(Campaign.mechanism member, message)`` of an issue-6 frequency oracle."""
    if isinstance(params, SetValuedParams):
        inner_field, inner = _single_to_proto(params.inner)
        msg = campaign_pb2.SetValuedParams(domain=domain_to_proto(params.domain), max_items=params.max_items)
        getattr(msg, inner_field).CopyFrom(inner)
        return "set_valued", msg
    _, message = _single_to_proto(params)
    return MECHANISM_FIELD[params.name], message


def _single_from_proto(which: str, msg: Any) -> InnerOracleParams:
    spec = registry.find_member(which)
    if spec is not None:  # a registered inner oracle (grr)
        return spec.params_from_proto(msg)  # type: ignore[no-any-return]
    dom = domain_from_proto(msg.domain)
    if which == "oue":
        return OUEParams(domain=dom, p=msg.p, q=msg.q)
    if which == "sue":
        return SUEParams(domain=dom, p=msg.p, q=msg.q)
    if which == "olh":
        return OLHParams(domain=dom, g=msg.g, truth_probability=msg.truth_probability)
    if which == "blh":
        return BLHParams(domain=dom, g=msg.g, truth_probability=msg.truth_probability)
    if which == "ss":
        return SubsetSelectionParams(domain=dom, k=msg.k, truth_probability=msg.truth_probability)
    return HadamardParams(domain=dom, truth_probability=msg.truth_probability)


def params_from_proto(campaign: campaign_pb2.Campaign, which: str) -> FrequencyOracleParams:
    """The parameters of member ``which`` of ``campaign.mechanism`` (field names relative to it)."""
    msg = getattr(campaign, which)
    if which != "set_valued":
        return _single_from_proto(which, msg)  # type: ignore[return-value]  # not grr: which is ours
    inner_which = msg.WhichOneof("inner")
    if inner_which is None:
        raise InvalidParameterError("inner", None, "exactly one of grr, oue, sue, olh, blh, ss, hr")
    try:
        inner = _single_from_proto(inner_which, getattr(msg, inner_which))
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"inner.{inner_which}.{exc.field}", exc.value, exc.allowed) from exc
    return SetValuedParams(domain=domain_from_proto(msg.domain), max_items=msg.max_items, inner=inner)


# ------------------------------------------------------------------------------------ column checks


def _check_rows(
    rows: NDArray[np.uint8], params: OUEParams | SUEParams | SubsetSelectionParams, field: str
) -> None:
    """Padding bits of every row are 0; for ss every row has exactly k bits set."""
    import numpy as np

    d = params.domain.size
    used = d % 8
    if used and rows.shape[0]:
        pad = 0xFF & ~((1 << used) - 1)
        bad = (rows[:, -1] & pad) != 0
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}][{rows.shape[1] - 1}]",
                int(rows[row, -1]),
                f"a last byte whose padding bits {used}..7 are 0 (a {d}-bit row)",
            )
    if isinstance(params, SubsetSelectionParams) and rows.shape[0]:
        counts = np.bitwise_count(rows).sum(axis=1, dtype=np.int64)
        bad = counts != params.k
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}]", f"<{int(counts[row])} bits set>", f"exactly k={params.k} bits set"
            )


# ------------------------------------------------------------------------------------------- batches


def batch_from_proto(
    msg: reports_pb2.ReportBatch,
    params: SingleOracle,
    n: int,
) -> NDArray[np.uint8] | NDArray[np.int64] | OracleColumns:
    """Validate and decode the payload of a batch of ``n`` reports (header already checked by ``wire``)."""
    import numpy as np

    field = BATCH_FIELD[params.name]
    if isinstance(params, OLHParams):
        cols = getattr(msg, field)
        check_length(f"{field}.a", cols.a, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{field}.b", cols.b, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{field}.buckets", cols.buckets, 4 * n, f"4 * count for count={n} little-endian uint32")
        buckets = np.frombuffer(cols.buckets, dtype=_U32_LE)
        check_indices(buckets, params.g, f"{field}.buckets", "a bucket")
        a = np.frombuffer(cols.a, dtype=_U64_LE).astype(np.uint64, copy=False)
        b = np.frombuffer(cols.b, dtype=_U64_LE).astype(np.uint64, copy=False)
        return a, b, buckets.astype(np.uint32, copy=False)
    if isinstance(params, HadamardParams):
        return decode_index_column(msg.hr_indices, n, params.order, field)
    raw = getattr(msg, field)
    nbytes = (params.domain.size + 7) // 8
    check_length(field, raw, n * nbytes, f"count * ceil(d/8) = {n} * {nbytes}")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(n, nbytes)
    _check_rows(rows, params, field)
    return rows


def _as_array(field: str, value: object, ndim: int, what: str) -> NDArray[Any]:
    import numpy as np

    if not isinstance(value, np.ndarray) or value.ndim != ndim:
        shape = getattr(value, "shape", type(value).__name__)
        raise InvalidReportError(field, shape, f"a {ndim}-d numpy array of {what}")
    return value


def _check_count(n: int) -> None:
    if not 1 <= n < 1 << 32:
        raise InvalidReportError("count", n, "a report count between 1 and 2**32 - 1")


def batch_to_proto(
    msg: reports_pb2.ReportBatch,
    params: SingleOracle,
    columns: Any,
) -> None:
    """Fill ``msg``'s count and payload from columns, with the checks of :func:`batch_from_proto`."""
    import numpy as np

    field = BATCH_FIELD[params.name]
    if isinstance(params, OLHParams):
        if not isinstance(columns, tuple) or len(columns) != 3:
            raise InvalidReportError(field, type(columns).__name__, "an (a, b, buckets) tuple of arrays")
        a = _as_array(f"{field}.a", columns[0], 1, "uint64 seed words")
        b = _as_array(f"{field}.b", columns[1], 1, "uint64 seed words")
        y = _as_array(f"{field}.buckets", columns[2], 1, "integer buckets")
        n = a.shape[0]
        _check_count(n)
        for name, arr in (("a", a), ("b", b)):
            if arr.dtype != np.uint64 or arr.shape[0] != n:
                raise InvalidReportError(
                    f"{field}.{name}", f"{arr.dtype}{arr.shape}", f"uint64 of shape ({n},)"
                )
        if not np.issubdtype(y.dtype, np.integer) or y.shape[0] != n:
            raise InvalidReportError(f"{field}.buckets", f"{y.dtype}{y.shape}", f"integers of shape ({n},)")
        check_indices(y, params.g, f"{field}.buckets", "a bucket")
        msg.count = n
        cols = getattr(msg, field)
        cols.a = a.astype(_U64_LE).tobytes()
        cols.b = b.astype(_U64_LE).tobytes()
        cols.buckets = y.astype(_U32_LE).tobytes()
        return
    if isinstance(params, HadamardParams):
        idx = _as_array(field, columns, 1, "integer indices")
        if not np.issubdtype(idx.dtype, np.integer):
            raise InvalidReportError(field, str(idx.dtype), "an integer dtype")
        _check_count(idx.shape[0])
        check_indices(idx, params.order, field, "an index")
        msg.count = idx.shape[0]
        msg.hr_indices = idx.astype(_U32_LE).tobytes()
        return
    rows = _as_array(field, columns, 2, "uint8 packed bit rows")
    nbytes = (params.domain.size + 7) // 8
    if rows.dtype != np.uint8 or rows.shape[1] != nbytes:
        raise InvalidReportError(field, f"{rows.dtype}{rows.shape}", f"uint8 of shape (n, {nbytes})")
    _check_count(rows.shape[0])
    _check_rows(rows, params, field)
    msg.count = rows.shape[0]
    setattr(msg, field, np.ascontiguousarray(rows).tobytes())


# ------------------------------------------------------------------------------------ single reports


def _bits_value(field: str, report: object, params: OUEParams | SUEParams | SubsetSelectionParams) -> bytes:
    d = params.domain.size
    allowed = f"an integer in [0, 2**{d}) (bit i = value i)"
    value = as_int(field, report, allowed)
    if not 0 <= value < 1 << d:
        raise InvalidReportError(field, value, allowed)
    if isinstance(params, SubsetSelectionParams) and value.bit_count() != params.k:
        raise InvalidReportError(field, f"<{value.bit_count()} bits set>", f"exactly k={params.k} bits set")
    return value.to_bytes((d + 7) // 8, "little")


def _hash_value(field: str, report: object, params: OLHParams) -> tuple[int, int, int]:
    missing = object()
    a, b, y = (getattr(report, name, missing) for name in ("a", "b", "bucket"))
    if a is missing or b is missing or y is missing:
        raise InvalidReportError(field, report, "a LocalHashReport(a, b, bucket)")
    seed = "an integer in [0, 2**64)"
    av = as_int(f"{field}.a", a, seed)
    bv = as_int(f"{field}.b", b, seed)
    for name, v in (("a", av), ("b", bv)):
        if not 0 <= v < 1 << 64:
            raise InvalidReportError(f"{field}.{name}", v, seed)
    yv = as_int(f"{field}.bucket", y, f"a bucket in [0, {params.g - 1}]")
    if not 0 <= yv < params.g:
        raise InvalidReportError(f"{field}.bucket", yv, f"a bucket in [0, {params.g - 1}]")
    return av, bv, yv


def _hr_value(field: str, report: object, params: HadamardParams) -> int:
    allowed = f"an index in [0, {params.order - 1}]"
    j = as_int(field, report, allowed)
    if not 0 <= j < params.order:
        raise InvalidReportError(field, j, allowed)
    return j


def report_to_proto(
    msg: reports_pb2.Report,
    params: SingleOracle,
    report: object,
) -> None:
    """Set ``msg``'s value from a per-report encoder output (module docstring)."""
    field = REPORT_FIELD[params.name]
    if isinstance(params, OLHParams):
        a, b, y = _hash_value("report", report, params)
        target = getattr(msg, field)
        target.a, target.b, target.bucket = a, b, y
    elif isinstance(params, HadamardParams):
        msg.hr_index = _hr_value("report", report, params)
    else:
        setattr(msg, field, _bits_value("report", report, params))


def report_from_proto(
    msg: reports_pb2.Report, params: SingleOracle
) -> NDArray[np.uint8] | NDArray[np.int64] | OracleColumns:
    """Columns of a batch of one from a validated ``Report`` (its member already checked by ``wire``)."""
    import numpy as np

    field = REPORT_FIELD[params.name]
    if isinstance(params, OLHParams):
        r = getattr(msg, field)
        if r.bucket >= params.g:
            raise InvalidReportError(f"{field}.bucket", r.bucket, f"a bucket in [0, {params.g - 1}]")
        return (
            np.array([r.a], dtype=np.uint64),
            np.array([r.b], dtype=np.uint64),
            np.array([r.bucket], dtype=np.uint32),
        )
    if isinstance(params, HadamardParams):
        if msg.hr_index >= params.order:
            raise InvalidReportError("hr_index", msg.hr_index, f"an index in [0, {params.order - 1}]")
        return np.array([msg.hr_index], dtype=np.int64)
    raw = getattr(msg, field)
    nbytes = (params.domain.size + 7) // 8
    check_length(field, raw, nbytes, f"ceil(d/8) for d={params.domain.size}")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(1, nbytes)
    _check_rows(rows, params, field)
    return rows


def batch_from_reports(
    params: SingleOracle,
    reports: Sequence[object],
) -> NDArray[np.uint8] | NDArray[np.int64] | OracleColumns:
    """Columns from per-report encoder outputs (device side; loops over the reports)."""
    import numpy as np

    if isinstance(params, OLHParams):
        triples = [_hash_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        return (
            np.array([t[0] for t in triples], dtype=np.uint64),
            np.array([t[1] for t in triples], dtype=np.uint64),
            np.array([t[2] for t in triples], dtype=np.uint32),
        )
    if isinstance(params, HadamardParams):
        return np.array(
            [_hr_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)], dtype=np.int64
        )
    nbytes = (params.domain.size + 7) // 8
    rows = b"".join(_bits_value(f"reports[{i}]", r, params) for i, r in enumerate(reports))
    return np.frombuffer(bytearray(rows), dtype=np.uint8).reshape(len(reports), nbytes)


# ---------------------------------------------------------------------------- reporter journal rows


def journal_row_packer(params: SingleOracle) -> Any:
    """The reporter's journal row of one per-report encoder output: d-bit rows ceil(d/8) bytes, local
    hashing 20 (a u64, b u64, bucket u32, little-endian), Hadamard 4 (u32 index); see
    :mod:`ldp_client._journal_rows`."""
    if isinstance(params, OLHParams):
        return lambda r: (
            r.a.to_bytes(8, "little") + r.b.to_bytes(8, "little") + r.bucket.to_bytes(4, "little")
        )
    if isinstance(params, HadamardParams):
        return lambda r: r.to_bytes(4, "little")
    nbytes = (params.domain.size + 7) // 8
    return lambda r: r.to_bytes(nbytes, "little")
