"""Building blocks of the ``ldp.v1`` report layouts and of the reporter's journal rows.

A mechanism's spec (:mod:`ldp_client.spec`) describes its wire format by combining these parts; the facades
(:mod:`ldp_client.wire`, :mod:`ldp_client._journal_rows`) and the not-yet-ported mechanisms use the same
functions, so each layout rule is written once. Layouts (``protos/ldp/v1/reports.proto``; n = ``count``):

* **index column**: n little-endian uint32, each below a bound (grr ``grr_indices``, hr ``hr_indices``);
  decoded as int64 (n,).
* **bool column**: n answers packed 8 per byte in little bit order (rr ``rr_answers``); bit j of the
  column is ``(byte[j // 8] >> (j % 8)) & 1`` and the padding bits after answer n-1 must be 0.
* **bit rows**: n rows of ceil(k/8) bytes, little bit order, padding bits of the last byte 0 (RAPPOR and
  the unary encodings); decoded as uint8 (n, ceil(k/8)).
* **cohort + bits**: a uint32 cohort column beside bit rows (string RAPPOR).
* **domains**: the ``Domain`` message (size, optional labels) of the parameters.

Decoding is the server's trust boundary: every function checks what a report could get wrong and raises
:class:`~ldp_client.errors.InvalidReportError` (or :class:`~ldp_client.errors.InvalidParameterError` for
parameters) naming the field and value. Checks are vectorised (one numpy pass per column).

Journal rows (:mod:`ldp_client._journal_rows`): one fixed-size row per report, described by a list of
:class:`RowField` (a slice of the row that goes to one column of the batch), packed and unpacked here in
pure Python.

Importing this module does not import numpy; the column functions import it when called.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client._scalars import bool_types, int_types
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain
from ldp_client.errors import InvalidParameterError, InvalidReportError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "U32_LE",
    "U64_LE",
    "RowField",
    "as_array",
    "as_int",
    "bool_value",
    "check_bit_rows",
    "check_count",
    "check_indices",
    "check_length",
    "check_padding",
    "decode_bit_rows",
    "decode_bool_column",
    "decode_index_column",
    "domain_from_proto",
    "domain_to_proto",
    "encode_bool_column",
    "encode_index_column",
    "first_true",
    "index_value",
    "pack_flag_row",
    "pack_u32_row",
    "packed_value",
    "unpack_flag_row",
    "unpack_u32_row",
]

U32_LE: Final = "<u4"  # little-endian uint32, the dtype of every 32-bit column (named: numpy is lazy here)
U64_LE: Final = "<u8"


# ------------------------------------------------------------------------------------------ domains


def domain_to_proto(domain: Domain) -> campaign_pb2.Domain:
    """The ``Domain`` message of a declared domain."""
    return campaign_pb2.Domain(size=domain.size, labels=domain.labels or ())


def domain_from_proto(msg: campaign_pb2.Domain) -> Domain:
    """The validated :class:`Domain` of a ``Domain`` message.

    Field names are relative (``domain.size``); the caller prefixes the mechanism.
    """
    size = msg.size
    labels = tuple(msg.labels)
    if not 2 <= size <= MAX_DOMAIN_SIZE:
        raise InvalidParameterError("domain.size", size, f"an integer in [2, {MAX_DOMAIN_SIZE}]")
    if labels and len(labels) != size:
        raise InvalidParameterError(
            "domain.labels", f"<{len(labels)} labels>", f"none, or exactly domain.size={size} labels"
        )
    try:
        return Domain(size=size, labels=labels or None)
    except InvalidParameterError as exc:  # a repeated label
        raise InvalidParameterError("domain.labels", exc.value, exc.allowed) from exc


# ----------------------------------------------------------------------------------- column checks


def first_true(mask: NDArray[np.bool_]) -> int:
    """Position of the first True of a boolean array (the caller knows there is one)."""
    import numpy as np

    return int(np.argmax(mask))


def check_length(field: str, data: bytes, expected: int, how: str) -> None:
    """``len(data) == expected``, else InvalidReportError on ``len(field)`` saying ``how`` it is computed."""
    if len(data) != expected:
        raise InvalidReportError(f"len({field})", len(data), f"{expected} bytes ({how})")


def check_indices(values: NDArray[Any], bound: int, field: str, what: str) -> None:
    """Every value in [0, bound); otherwise name the first bad one and its position."""
    if values.size == 0:
        return
    # Reductions first (only max for the unsigned wire columns); build the mask only when something is wrong.
    too_low = values.dtype.kind != "u" and int(values.min()) < 0
    if too_low or int(values.max()) >= bound:
        pos = first_true((values < 0) | (values >= bound))
        raise InvalidReportError(f"{field}[{pos}]", int(values[pos]), f"{what} in [0, {bound - 1}]")


def check_padding(rows: NDArray[np.uint8], k: int, field: str, *, name_row: bool = True) -> None:
    """The unused high bits (k..8*ceil(k/8)-1) of each row's last byte are 0; name the first bad row.

    Padding must be 0 so that every report has exactly one encoding (a device cannot smuggle data in it,
    and byte-identical reports mean identical bits).
    """
    used = k % 8
    if used == 0:
        return
    pad = 0xFF & ~((1 << used) - 1)
    last = rows.shape[1] - 1
    bad = (rows[:, last] & pad) != 0
    if bad.any():
        row = first_true(bad)
        where = f"{field}[{row}][{last}]" if name_row else f"{field}[{last}]"
        raise InvalidReportError(
            where,
            int(rows[row, last]),
            f"a last byte whose padding bits {used}..7 are 0 (bits {k}..{8 * last + 7} of a {k}-bit row; "
            f"byte & 0x{pad:02x} == 0)",
        )


def as_array(field: str, columns: object, kind: str, ndim: int) -> NDArray[Any]:
    """``columns`` if it is a numpy array of ``ndim`` dimensions, else InvalidReportError."""
    import numpy as np

    if not isinstance(columns, np.ndarray) or columns.ndim != ndim:
        shape = getattr(columns, "shape", type(columns).__name__)
        raise InvalidReportError(field, shape, f"a {ndim}-d numpy array of {kind}")
    return columns


def check_count(field: str, n: int) -> None:
    """A batch holds 1 to 2**32 - 1 reports."""
    if not 1 <= n < 1 << 32:
        raise InvalidReportError(field, n, "a report count between 1 and 2**32 - 1")


def check_bit_rows(field: str, bits: object, n: int | None, k: int) -> NDArray[np.uint8]:
    """Packed k-bit rows: uint8 of shape (n, ceil(k/8)) (any n if None) with zero padding bits."""
    import numpy as np

    arr = as_array(field, bits, "uint8 packed bit rows", 2)
    nbytes = (k + 7) // 8
    if arr.dtype != np.uint8 or arr.shape[1] != nbytes or (n is not None and arr.shape[0] != n):
        rows = "n" if n is None else str(n)
        raise InvalidReportError(
            field, f"{arr.dtype}{arr.shape}", f"uint8 of shape ({rows}, {nbytes}) = (n, ceil(k/8)) for k={k}"
        )
    check_padding(arr, k, field)
    return arr


# ----------------------------------------------------------------------------------- column layouts


def decode_index_column(raw: bytes, n: int, bound: int, field: str) -> NDArray[np.int64]:
    """An index column of ``n`` little-endian uint32 below ``bound``, as int64 (n,)."""
    import numpy as np

    check_length(field, raw, 4 * n, f"4 * count for count={n} little-endian uint32")
    indices = np.frombuffer(raw, dtype=U32_LE)
    check_indices(indices, bound, field, "an index")
    return indices.astype(np.int64)


def encode_index_column(field: str, columns: object, bound: int) -> tuple[int, bytes]:
    """(n, bytes) of an index column: a 1-D integer array, every value in [0, bound)."""
    import numpy as np

    indices = as_array(field, columns, "integers", 1)
    if not np.issubdtype(indices.dtype, np.integer):
        raise InvalidReportError(field, str(indices.dtype), "an integer dtype")
    check_count("count", indices.shape[0])
    check_indices(indices, bound, field, "an index")
    return indices.shape[0], indices.astype(U32_LE).tobytes()


def decode_bool_column(raw: bytes, n: int, field: str) -> NDArray[np.bool_]:
    """``n`` answers packed 8 per byte (little bit order, zero padding) as a bool array (n,)."""
    import numpy as np

    check_length(field, raw, (n + 7) // 8, f"ceil(count/8) for count={n}")
    packed = np.frombuffer(raw, dtype=np.uint8)
    # The bits after answer n-1 in the last byte are padding and must be 0 (one encoding per batch).
    check_padding(packed.reshape(1, -1), n, field, name_row=False)
    return np.unpackbits(packed, count=n, bitorder="little").view(np.bool_)


def encode_bool_column(field: str, columns: object) -> tuple[int, bytes]:
    """(n, bytes) of a bool column: a 1-D bool array packed 8 per byte in little bit order."""
    import numpy as np

    answers = as_array(field, columns, "bool", 1)
    if answers.dtype != np.bool_:
        raise InvalidReportError(field, str(answers.dtype), "dtype bool")
    check_count("count", answers.shape[0])
    return answers.shape[0], np.packbits(answers, bitorder="little").tobytes()


def decode_bit_rows(raw: bytes, n: int, k: int, field: str, *, name_row: bool = True) -> NDArray[np.uint8]:
    """``n`` packed k-bit rows (ceil(k/8) bytes each, zero padding) as uint8 (n, ceil(k/8))."""
    import numpy as np

    nbytes = (k + 7) // 8
    # name_row=False: a single report, whose length is stated per report.
    how = f"count * ceil(k/8) = {n} * {nbytes}" if name_row else f"ceil(k/8) for k={k}"
    check_length(field, raw, n * nbytes, how)
    bits = np.frombuffer(raw, dtype=np.uint8).reshape(n, nbytes)
    check_padding(bits, k, field, name_row=name_row)
    return bits


# ----------------------------------------------------------------------- single reports (pure Python)


def as_int(field: str, value: object, allowed: str) -> int:
    """``value`` as an int (a Python or numpy integer, not a bool), else InvalidReportError."""
    if isinstance(value, bool_types()) or not isinstance(value, int_types()):
        raise InvalidReportError(field, value, allowed)
    return operator.index(value)


def bool_value(field: str, report: object) -> bool:
    """A one-bit report (rr's answer): a Python or numpy bool."""
    if not isinstance(report, bool_types()):
        raise InvalidReportError(field, report, "a bool (True = yes)")
    return bool(report)


def index_value(field: str, report: object, bound: int) -> int:
    """An index report in [0, bound)."""
    index = as_int(field, report, f"an index in [0, {bound - 1}]")
    if not 0 <= index < bound:
        raise InvalidReportError(field, index, f"an index in [0, {bound - 1}]")
    return index


def packed_value(field: str, bits: object, k: int) -> bytes:
    """An int of k report bits (bit i = report bit i) as ceil(k/8) little-bit-order bytes."""
    allowed = f"an integer in [0, 2**{k}) (bit i = report bit i)"
    value = as_int(field, bits, allowed)
    if not 0 <= value < 1 << k:
        raise InvalidReportError(field, value, allowed)
    return value.to_bytes((k + 7) // 8, "little")


# ------------------------------------------------------------------------------------- journal rows


@dataclass(frozen=True, slots=True)
class RowField:
    """One field of a journal row: a slice of ``width`` bytes that goes to one column of the batch.

    Attributes:
        path: attribute path of the column in ``ReportBatch``, e.g. ``("rappor", "cohorts")``.
        width: bytes of this field in a row.
        packed: the column packs one bit per report (the field's first byte, 0 or 1), as ``rr_answers``.
    """

    path: tuple[str, ...]
    width: int
    packed: bool = False


def pack_u32_row(report: int) -> bytes:
    """The 4-byte little-endian row of an index or code report."""
    return report.to_bytes(4, "little")


def unpack_u32_row(row: bytes) -> int:
    """Inverse of :func:`pack_u32_row` (and of any little-endian integer row)."""
    return int.from_bytes(row, "little")


def pack_flag_row(report: bool) -> bytes:
    """The 1-byte row of a one-bit report: 1 or 0."""
    return b"\x01" if report else b"\x00"


def unpack_flag_row(row: bytes) -> bool | int:
    """Inverse of :func:`pack_flag_row`; a byte other than 0/1 comes back as an int, refused later."""
    return {0: False, 1: True}.get(row[0], row[0])
