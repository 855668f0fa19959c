"""The wire layout of numeric codes, and the spec every one-dimensional numeric mechanism shares.

Layouts (``reports.proto``; the parameter messages of ``campaign.proto`` carry ``lo``, ``hi``,
``out_of_range`` and the mechanism's own fields under the same names as its parameter class):

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

A single ``Report`` carries one ``uint32 *_code`` (multidim: ``NumericPairs``); a journal row is the u32
code (duchi and sr: packed 8 per byte in the batch, as rr's answers; multidim: k (attribute, code) pairs).
Codes are integers: a device cannot send NaN, an infinity or a float outside the range, and every check is
a vectorised integer comparison (range, packing padding, strictly increasing attributes per report).

:class:`OneDimSpec` implements :class:`ldp_client.spec.MechanismSpec` once for the one-dimensional
mechanisms (kind MEAN, layout ``moments`` of one attribute); each of them declares its parameter class,
proto message, wire members, fields, encoder and exact distribution. ``multidim`` has its own spec.

Importing this module does not import numpy (the column functions import it when called).
"""

from __future__ import annotations

import abc
import itertools
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeAlias, TypeVar

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client._scalars import bool_types, int_types
from ldp_client.codecs import (
    U32_LE,
    RowField,
    check_count,
    check_length,
    first_true,
    pack_u32_row,
    unpack_u32_row,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.numeric.base import (
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    as_float,
    as_int,
)
from ldp_client.spec import (
    Kind,
    Layout,
    MakeArgs,
    MeanDesign,
    MechanismSpec,
    Moments,
    MomentsView,
    SecretSource,
)

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.domain import DomainLike

__all__ = [
    "NUMERIC_MESSAGES",
    "NumericColumns",
    "NumericMessage",
    "OneDimSpec",
    "moments_of",
]

NumericMessage: TypeAlias = (
    campaign_pb2.LaplaceParams
    | campaign_pb2.DuchiParams
    | campaign_pb2.PiecewiseParams
    | campaign_pb2.HybridParams
    | campaign_pb2.StochasticRoundingParams
    | campaign_pb2.MultidimParams
    | campaign_pb2.GaussianParams
)
NUMERIC_MESSAGES: Final = (
    campaign_pb2.LaplaceParams,
    campaign_pb2.DuchiParams,
    campaign_pb2.PiecewiseParams,
    campaign_pb2.HybridParams,
    campaign_pb2.StochasticRoundingParams,
    campaign_pb2.MultidimParams,
    campaign_pb2.GaussianParams,
)
NumericColumns: TypeAlias = "NDArray[np.uint32] | tuple[NDArray[np.uint32], NDArray[np.uint32]]"
"""uint32 codes (n,), or (attributes, codes) uint32 (n, k) for multidim."""

POLICY_TO_PROTO: Final[dict[str, campaign_pb2.OutOfRange.ValueType]] = {
    "clamp": campaign_pb2.OUT_OF_RANGE_CLAMP,
    "reject": campaign_pb2.OUT_OF_RANGE_REJECT,
}
_POLICY_FROM_PROTO: Final[dict[int, str]] = {int(v): k for k, v in POLICY_TO_PROTO.items()}
# Fields given by name that are integers (the others are numbers).
INT_FIELDS: Final = frozenset({"grid", "cells", "window", "k", "buckets"})


def policy_from_proto(value: int, field: str) -> OutOfRange:
    """The ``out_of_range`` policy of an ``OutOfRange`` enum value."""
    policy = _POLICY_FROM_PROTO.get(value)
    if policy is None:
        raise InvalidParameterError(field, value, "OUT_OF_RANGE_CLAMP (0) or OUT_OF_RANGE_REJECT (1)")
    return policy  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ columns


def check_codes(codes: NDArray[Any], bound: int, field: str) -> None:
    """Every code in [0, bound); name the first bad one and its position."""
    if codes.size == 0:
        return
    if (codes.dtype.kind != "u" and int(codes.min()) < 0) or int(codes.max()) >= bound:
        flat = codes.ravel()
        pos = first_true((flat < 0) | (flat >= bound))
        raise InvalidReportError(f"{field}[{pos}]", int(flat[pos]), f"a code in [0, {bound - 1}]")


def unpack_bits(raw: bytes, n: int, field: str) -> NDArray[np.uint32]:
    """``n`` one-bit codes packed 8 per byte (little bit order, zero padding) as uint32 (n,)."""
    import numpy as np

    check_length(field, raw, (n + 7) // 8, f"ceil(count/8) for count={n}")
    packed = np.frombuffer(raw, dtype=np.uint8)
    used = n % 8
    if used and packed[-1] >> used:
        raise InvalidReportError(
            f"{field}[{len(raw) - 1}]", int(packed[-1]), f"a last byte whose padding bits {used}..7 are 0"
        )
    return np.unpackbits(packed, count=n, bitorder="little").astype(np.uint32)


def as_code_array(field: str, columns: object, ndim: int) -> NDArray[Any]:
    """``columns`` if it is an integer numpy array of ``ndim`` dimensions, else InvalidReportError."""
    import numpy as np

    if not isinstance(columns, np.ndarray) or columns.ndim != ndim:
        shape = getattr(columns, "shape", type(columns).__name__)
        raise InvalidReportError(field, shape, f"a {ndim}-d numpy array of integer codes")
    if columns.dtype == np.bool_ or not np.issubdtype(columns.dtype, np.integer):
        raise InvalidReportError(field, str(columns.dtype), "an integer dtype")
    return columns


def code_value(field: str, report: object, bound: int) -> int:
    """One code report (a Python or numpy integer, not a bool) in [0, bound)."""
    allowed = f"an integer code in [0, {bound - 1}]"
    if isinstance(report, bool_types()) or not isinstance(report, int_types()):
        raise InvalidReportError(field, report, allowed)
    code = operator.index(report)
    if not 0 <= code < bound:
        raise InvalidReportError(field, code, allowed)
    return code


# ---------------------------------------------------------------------- multidim: attribute, code pairs


def check_attributes(attrs: NDArray[Any], d: int, field: str) -> None:
    """Every attribute < D, strictly increasing within each report (row); name the first bad one."""
    import numpy as np

    check_codes(attrs, d, field)
    if attrs.shape[1] > 1:
        bad = np.asarray((np.diff(attrs.astype(np.int64), axis=1) <= 0).any(axis=1))
        if bad.any():
            row = first_true(bad)
            raise InvalidReportError(
                f"{field}[{row}]",
                attrs[row].tolist(),
                f"{attrs.shape[1]} distinct attributes in increasing order",
            )


def pairs_value(field: str, report: object, k: int, d: int, num_codes: int) -> tuple[list[int], list[int]]:
    """A multidim report: k (attribute, code) pairs, attributes in [0, d) strictly increasing, codes in
    [0, num_codes); as (attributes, codes)."""
    allowed = f"{k} (attribute, code) pairs with increasing attributes in [0, {d - 1}]"
    if not isinstance(report, Sequence) or isinstance(report, str | bytes) or len(report) != k:
        raise InvalidReportError(field, report, allowed)
    attrs, codes = [], []
    for i, pair in enumerate(report):
        if not (isinstance(pair, Sequence) and not isinstance(pair, str | bytes) and len(pair) == 2):
            raise InvalidReportError(f"{field}[{i}]", pair, "an (attribute, code) pair")
        attrs.append(code_value(f"{field}[{i}].attribute", pair[0], d))
        codes.append(code_value(f"{field}[{i}].code", pair[1], num_codes))
    if any(b <= a for a, b in itertools.pairwise(attrs)):
        raise InvalidReportError(field, attrs, allowed)
    return attrs, codes


def pack_pairs(report: Sequence[tuple[int, int]]) -> bytes:
    """The journal row of a multidim report: k pairs (u32 attribute, u32 code)."""
    return b"".join(a.to_bytes(4, "little") + c.to_bytes(4, "little") for a, c in report)


def unpack_pairs(row: bytes) -> list[tuple[int, int]]:
    """Inverse of :func:`pack_pairs`."""
    return [
        (int.from_bytes(row[i : i + 4], "little"), int.from_bytes(row[i + 4 : i + 8], "little"))
        for i in range(0, len(row), 8)
    ]


# ------------------------------------------------------------------------------------------ moments


def moments_of(design: MeanDesign, layout: NumericLayout, acc: MomentsView) -> Moments:
    """The exact sums of x_hat = lo + (hi - lo) s_hat and of x_hat^2 per attribute, from an accumulator's
    sums of codes (:class:`ldp_client.spec.MomentsView`) and the map from codes to s_hat."""
    reports, sum_x, sum_x2 = [], [], []
    for a, (lo_f, hi_f) in enumerate(design.ranges):
        lo, span = Fraction(lo_f), Fraction(hi_f) - Fraction(lo_f)
        specials = acc.special_counts[a]
        count = acc.counts[a] + sum(specials)
        sum_s, sum_s2 = layout.s_sums(acc.counts[a], acc.s1[a], acc.s2[a], specials)
        reports.append(count)
        sum_x.append(count * lo + span * sum_s)
        sum_x2.append(count * lo * lo + 2 * lo * span * sum_s + span * span * sum_s2)
    return Moments(
        design=design, n=acc.users, reports=tuple(reports), sum_x=tuple(sum_x), sum_x2=tuple(sum_x2)
    )


# --------------------------------------------------------------------------------------------- spec


class OneDimLike(Protocol):
    """What :class:`OneDimSpec` needs of a one-dimensional parameter class (:class:`RangeParams` and
    the mechanism's own fields)."""

    name: ClassVar[str]

    @property
    def lo(self) -> float: ...

    @property
    def hi(self) -> float: ...

    @property
    def out_of_range(self) -> OutOfRange: ...

    @property
    def epsilon(self) -> float: ...

    @property
    def layout(self) -> NumericLayout: ...

    @property
    def max_variance_s(self) -> float: ...

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]: ...

    def position(self, value: object) -> float: ...


P1 = TypeVar("P1", bound=OneDimLike)


class OneDimSpec(MechanismSpec[P1]):
    """A one-dimensional numeric mechanism for every layer (:mod:`ldp_client.spec`), from declarations.

    Parameters by name: ``lo``, ``hi`` (required) and ``out_of_range``, then with ``epsilon`` the
    ``epsilon_fields`` of ``from_epsilon`` (``grid``, ``cells``), without it the ``direct_fields`` (the
    quantized fields, which are also the proto message's). Wire: ``message_type`` with lo, hi,
    out_of_range and the direct fields; codes as little-endian uint32 (``packed``: one bit each, 8 per
    byte); the encoder is :meth:`new_encoder`'s. Accumulator: ``moments`` of one attribute. Items:
    ``("value",)``; the inputs of exhaustive checks are lo, the middle of the range and hi.

    Attributes:
        message_type: the ``campaign_pb2`` parameter message.
        direct_fields: the init fields that set the mechanism without epsilon, in message order.
        epsilon_fields: the ``from_epsilon`` keyword fields besides lo, hi and out_of_range.
        packed: codes are 0 or 1, packed 8 per byte on the wire.
    """

    kind: ClassVar[Kind] = Kind.MEAN
    message_type: ClassVar[type[Message]]
    direct_fields: ClassVar[tuple[str, ...]]
    epsilon_fields: ClassVar[tuple[str, ...]] = ()
    packed: ClassVar[bool] = False

    # ------------------------------------------------------------------------------------ parameters

    def make(self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]) -> P1:
        given = dict(fields)
        policy = str(given.pop("out_of_range", "clamp"))
        name = self.name
        if domain is not None:
            raise InvalidParameterError(
                "domain", domain, f"nothing: {name} takes a range (lo, hi), not a domain"
            )
        extra = self.epsilon_fields if epsilon is not None else self.direct_fields
        allowed = ("lo", "hi", "out_of_range", *extra)
        for field, raw in given.items():
            if field not in allowed:
                raise InvalidParameterError(f"param {field}", raw, f"a field of {name}: {', '.join(allowed)}")
        for field in ("lo", "hi"):
            if field not in given:
                raise InvalidParameterError(
                    field, None, f"the {'lower' if field == 'lo' else 'upper'} end of {name}'s range"
                )
        lo, hi = as_float("lo", given.pop("lo")), as_float("hi", given.pop("hi"))
        kw: dict[str, object] = {
            n: (as_int(n, v) if n in INT_FIELDS else as_float(n, v)) for n, v in given.items()
        }
        cls: Any = self.params_type
        if epsilon is not None:
            return cls.from_epsilon(lo, hi, epsilon, out_of_range=policy, **kw)  # type: ignore[no-any-return]
        try:
            return cls(lo=lo, hi=hi, out_of_range=policy, **kw)  # type: ignore[no-any-return]
        except TypeError as exc:  # a required field is missing
            raise InvalidParameterError(
                "epsilon", None, f"an epsilon, or the fields {', '.join(self.direct_fields)} ({exc})"
            ) from None

    def make_args(self, params: P1) -> MakeArgs:
        fields: dict[str, object] = {"lo": params.lo, "hi": params.hi, "out_of_range": params.out_of_range}
        fields.update((f, getattr(params, f)) for f in self.direct_fields)
        return MakeArgs(fields=fields)

    def params_to_proto(self, params: P1) -> Message:
        direct = {f: getattr(params, f) for f in self.direct_fields}
        policy = POLICY_TO_PROTO[params.out_of_range]
        return self.message_type(lo=params.lo, hi=params.hi, out_of_range=policy, **direct)

    def params_from_proto(self, msg: Any) -> P1:
        policy = policy_from_proto(msg.out_of_range, "out_of_range")
        direct = {f: getattr(msg, f) for f in self.direct_fields}
        return self.params_type(lo=msg.lo, hi=msg.hi, out_of_range=policy, **direct)  # type: ignore[no-any-return]

    # ---------------------------------------------------------------------------------------- device

    @abc.abstractmethod
    def new_encoder(self, params: P1) -> OneDimEncoder:
        """The mechanism's encoder object (per report and batch)."""
        raise NotImplementedError

    def encoder(self, params: P1, *, campaign_id: str, secret: SecretSource | None) -> Callable[[Any], Any]:
        return self.new_encoder(params).encode

    # ----------------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: P1, columns: Any) -> None:
        import numpy as np

        field = self.wire.batch
        codes = as_code_array(field, columns, 1)
        check_count("count", codes.shape[0])
        check_codes(codes, params.layout.num_codes, field)
        msg.count = codes.shape[0]
        if self.packed:
            setattr(msg, field, np.packbits(codes.astype(np.uint8), bitorder="little").tobytes())
        else:
            setattr(msg, field, codes.astype(U32_LE).tobytes())

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: P1, n: int) -> Any:
        import numpy as np

        field = self.wire.batch
        raw = getattr(msg, field)
        if self.packed:
            return unpack_bits(raw, n, field)
        check_length(field, raw, 4 * n, f"4 * count for count={n} little-endian uint32")
        codes = np.frombuffer(raw, dtype=U32_LE)
        check_codes(codes, params.layout.num_codes, field)
        return codes.astype(np.uint32, copy=False)

    def report_to_proto(self, msg: reports_pb2.Report, params: P1, output: Any) -> None:
        setattr(msg, self.wire.report, code_value("report", output, params.layout.num_codes))

    def report_from_proto(self, msg: reports_pb2.Report, params: P1) -> Any:
        import numpy as np

        field = self.wire.report
        code = getattr(msg, field)
        bound = params.layout.num_codes
        if code >= bound:
            raise InvalidReportError(field, code, f"a code in [0, {bound - 1}]")
        return np.array([code], dtype=np.uint32)

    def batch_from_reports(self, params: P1, reports: Sequence[Any]) -> Any:
        import numpy as np

        bound = params.layout.num_codes
        return np.array(
            [code_value(f"reports[{i}]", r, bound) for i, r in enumerate(reports)], dtype=np.uint32
        )

    def row_fields(self, params: P1) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), 4, packed=self.packed),)

    def row_packer(self, params: P1) -> Callable[[Any], bytes]:
        return pack_u32_row

    def row_unpacker(self, params: P1) -> Callable[[bytes], Any]:
        return unpack_u32_row

    # ------------------------------------------------------------------------------------ simulation

    def encode_batch(
        self,
        params: P1,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        import numpy as np

        x = np.asarray(self.inputs(params), dtype=np.float64)[np.asarray(values)]
        return self.new_encoder(params).encode_batch(x, rng)

    def encode_values(self, params: P1, values: NDArray[np.float64], rng: np.random.Generator) -> Any:
        import numpy as np

        arr = np.asarray(values)
        if arr.ndim != 2 or arr.shape[1] != 1:
            raise DomainError("values", f"<array of shape {arr.shape}>", "an (n, 1) array of numbers")
        return self.new_encoder(params).encode_batch(arr[:, 0], rng)

    # ---------------------------------------------------------------------------------------- server

    def layout(self, params: P1) -> Layout:
        codes = params.layout
        return Layout.moments(1, codes.num_codes, codes.special_codes)

    def layout_batch(self, params: P1, columns: Any) -> Any:
        import numpy as np

        return np.asarray(columns), None, None

    def items(self, params: P1) -> tuple[str, ...]:
        return ("value",)

    def inputs(self, params: P1) -> tuple[Any, ...]:
        return (params.lo, (params.lo + params.hi) / 2.0, params.hi)

    def input_value(self, params: P1, index: int) -> Any:
        return self.inputs(params)[index]

    def mean_design(self, params: P1) -> MeanDesign:
        return MeanDesign(
            labels=("value",),
            ranges=((params.lo, params.hi),),
            scale=Fraction(1),
            variance_s=params.variance_s,
            max_variance_s=lambda: params.max_variance_s,
        )

    def moments(self, params: P1, acc: MomentsView) -> Moments:
        return moments_of(self.mean_design(params), params.layout, acc)

    # ------------------------------------------------------------------------------ conformance tests

    @abc.abstractmethod
    def distribution(self, params: P1, s: float) -> dict[int, Fraction]:
        """P(code | position s) for every code with positive probability, exactly (small parameters)."""
        raise NotImplementedError

    def exact_outputs(self, params: P1, value: Any) -> Mapping[Hashable, Fraction]:
        out: dict[Hashable, Fraction] = dict(self.distribution(params, params.position(value)).items())
        return out
