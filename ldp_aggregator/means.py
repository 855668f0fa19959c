"""Means of numeric values: an exact, mergeable accumulator of codes and the mean/sum estimator.

Accumulator (:class:`MeanAccumulator`). Every numeric mechanism reports integer codes
(:mod:`ldp_client.numeric_params`); a code c estimates the position s = (x - lo)/(hi - lo) as
``s_hat = offset + scale * c`` (regular codes) or as a fixed value (a few *special* codes: laplace's
clamped ends, hybrid's duchi outputs). So the sufficient statistics are, per attribute, the number of
regular reports, the exact integer sums of c and c^2 over them, and the count of each special code; plus
the number of users (= reports for one-dimensional mechanisms; multidim users report k attributes each).
All sums are Python integers: adding batches is exact and order-free, so merging is associative and
commutative bit for bit (no floating-point accumulation anywhere). Per batch the sums are computed with
numpy in chunks where every partial sum stays below 2**53 (codes split into 16-bit halves), then added
as integers.

Estimator (:func:`estimate_means`). Each user u contributes z_u = (D/k) x_hat_u for an attribute it
reported and 0 otherwise (D/k = 1 in one dimension); z_u is unbiased for x_u (Wang et al., ICDE 2019).
The mean is the average of z over the n users; its standard error is

    SE = s_z / sqrt(n),   s_z^2 = (sum z^2 - n mean^2) / (n - 1),

computed from the exact sums with rational arithmetic (then rounded once to float64), and the interval
is mean +/- z_{1 - (1 - confidence)/2} SE. The sum over a population of N is N * mean with standard error
N * SE (N = the number of users unless the request gives the population size).

Why the empirical s_z and not the analytic Var(t) of the mechanism with the estimate plugged in (the two
options of the formulas reference, §8): users are modelled as a sample from a population, and the target
is that population's mean. Then Var(z) = E[Var(z | x)] + Var_x(x) (plus, for multidim, the sampling
of attributes), which s_z^2 estimates without bias for every mechanism and every data distribution. The
plug-in Var(t_hat) misses the spread of the data entirely (for piecewise at eps = 4 and uniform data it is
about a fifth of the true variance, so 95% intervals would cover about 50%), and for duchi and sr it
over-states the per-user variance C^2 - t^2 by using the mean's t^2 instead of the mean of t^2.
``bench/accuracy_numeric.py`` measures both; the empirical one is calibrated (coverage in [93%, 97%]) and
is what is reported. For the finite set of users who reported, s_z/sqrt(n) is conservative (it adds the
data's own spread). :func:`plugin_std_error` gives the analytic alternative for comparison.

Serialized form (``to_bytes``), little-endian::

    magic  b"LDPM" | version u8 (1) | attributes u32 | specials u16 | special codes u32 each
    | users (big int) | per attribute: regular count, sum c, sum c^2, one count per special (big ints)
    | crc32 u32 of everything before it

with each big int as ``u16 length | length bytes`` (unsigned, little-endian).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_client.errors import InvalidParameterError, InvalidReportError, LdpError
from ldp_client.numeric_params import (
    MAX_ATTRIBUTES,
    MultidimParams,
    NumericLayout,
    NumericParams,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "MEAN_MAGIC",
    "CorruptMeanAccumulatorError",
    "MeanAccumulator",
    "MeanEstimate",
    "MeansEstimate",
    "add_numeric_columns",
    "estimate_means",
    "mean_accumulator_for",
    "plugin_std_error",
]

MEAN_MAGIC = b"LDPM"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBIH")
_CRC = struct.Struct("<I")
# Codes per chunk: with codes < 2**32 split into 16-bit halves, every partial sum of a chunk is below
# 2**20 * 2**32 = 2**52, exact in int64 and in float64 (np.bincount weights).
_CHUNK = 1 << 20


class CorruptMeanAccumulatorError(LdpError, ValueError):
    """Serialized mean-accumulator bytes are truncated, corrupted, or of an unknown format or version."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"mean accumulator bytes: {field}={value!r} is invalid: allowed {allowed}")


def _pack_int(x: int) -> bytes:
    raw = x.to_bytes(max(1, (x.bit_length() + 7) // 8), "little")
    return struct.pack("<H", len(raw)) + raw


def _exact_sums(
    codes: NDArray[np.int64], groups: NDArray[np.intp] | None, attributes: int
) -> tuple[list[int], list[int], list[int]]:
    """Per group: (count, sum c, sum c^2) as exact Python ints; codes in [0, 2**32)."""
    counts = [0] * attributes
    s1 = [0] * attributes
    s2 = [0] * attributes
    for start in range(0, codes.shape[0], _CHUNK):
        c = codes[start : start + _CHUNK]
        hi = c >> 16
        lo = c & 0xFFFF
        # c = hi 2**16 + lo, c^2 = hi^2 2**32 + 2 hi lo 2**16 + lo^2: each product < 2**32.
        if groups is None:
            counts[0] += int(c.shape[0])
            s1[0] += (int(hi.sum()) << 16) + int(lo.sum())
            s2[0] += (int((hi * hi).sum()) << 32) + (int((hi * lo).sum()) << 17) + int((lo * lo).sum())
            continue
        g = groups[start : start + _CHUNK]
        sums = [
            np.bincount(g, weights=w, minlength=attributes)
            for w in (hi.astype(np.float64), lo.astype(np.float64), (hi * hi).astype(np.float64))
        ]
        sums += [
            np.bincount(g, weights=w, minlength=attributes)
            for w in ((hi * lo).astype(np.float64), (lo * lo).astype(np.float64))
        ]
        n_g = np.bincount(g, minlength=attributes)
        for a in np.flatnonzero(n_g).tolist():
            counts[a] += int(n_g[a])
            s1[a] += (int(sums[0][a]) << 16) + int(sums[1][a])
            s2[a] += (int(sums[2][a]) << 32) + (int(sums[3][a]) << 17) + int(sums[4][a])
    return counts, s1, s2


class MeanAccumulator:
    """Exact sufficient statistics of numeric reports (module docstring).

    Attributes:
        attributes: A, the number of attributes (1 for one-dimensional mechanisms).
        special_codes: the codes counted separately (sorted).
        num_codes: codes are in [0, num_codes).
        users: n, the number of users (reports, in one dimension).
        counts, s1, s2: per attribute, the regular reports, sum of their codes and of their squares.
        special_counts: per attribute, the count of each special code.
    """

    __slots__ = ("attributes", "counts", "num_codes", "s1", "s2", "special_codes", "special_counts", "users")
    kind: ClassVar[str] = "means"

    def __init__(
        self,
        *,
        attributes: int,
        num_codes: int,
        special_codes: Sequence[int] = (),
        users: int = 0,
        counts: Sequence[int] | None = None,
        s1: Sequence[int] | None = None,
        s2: Sequence[int] | None = None,
        special_counts: Sequence[Sequence[int]] | None = None,
    ) -> None:
        if (
            isinstance(attributes, bool)
            or not isinstance(attributes, int)
            or not 1 <= attributes <= MAX_ATTRIBUTES
        ):
            raise InvalidReportError("attributes", attributes, f"an integer in [1, {MAX_ATTRIBUTES}]")
        if isinstance(num_codes, bool) or not isinstance(num_codes, int) or not 1 <= num_codes <= 1 << 32:
            raise InvalidReportError("num_codes", num_codes, "an integer in [1, 2**32]")
        specials = tuple(int(c) for c in special_codes)
        if list(specials) != sorted(set(specials)) or any(not 0 <= c < num_codes for c in specials):
            raise InvalidReportError(
                "special_codes", specials, f"distinct sorted codes in [0, {num_codes - 1}]"
            )
        self.attributes = attributes
        self.num_codes = num_codes
        self.special_codes = specials
        self.users = int(users)
        self.counts = list(counts) if counts is not None else [0] * attributes
        self.s1 = list(s1) if s1 is not None else [0] * attributes
        self.s2 = list(s2) if s2 is not None else [0] * attributes
        self.special_counts = (
            [list(row) for row in special_counts]
            if special_counts is not None
            else [[0] * len(specials) for _ in range(attributes)]
        )
        self._validate()

    def _validate(self) -> None:
        a, ns = self.attributes, len(self.special_codes)
        if not (len(self.counts) == len(self.s1) == len(self.s2) == len(self.special_counts) == a):
            raise InvalidReportError("accumulator", "per-attribute lists", f"{a} entries each")
        if self.users < 0:
            raise InvalidReportError("users", self.users, "a count >= 0")
        top = self.num_codes - 1
        for i in range(a):
            n, s1, s2, sp = self.counts[i], self.s1[i], self.s2[i], self.special_counts[i]
            if len(sp) != ns or any(x < 0 for x in sp) or n < 0 or s1 < 0 or s2 < 0:
                raise InvalidReportError(f"attribute {i}", (n, s1, s2, sp), "non-negative counts and sums")
            # Consistency: sum c <= n (G-1), (sum c)^2 <= n sum c^2 (Cauchy-Schwarz), sum c^2 <= n (G-1)^2.
            if s1 > n * top or s2 > n * top * top or s1 * s1 > n * s2:
                raise InvalidReportError(
                    f"attribute {i}", (n, s1, s2), "sums that codes in range can produce"
                )
            if n + sum(sp) > self.users:
                raise InvalidReportError(f"attribute {i}", n + sum(sp), f"at most users={self.users} reports")

    @classmethod
    def zero(cls, *, attributes: int, num_codes: int, special_codes: Sequence[int] = ()) -> MeanAccumulator:
        """The empty accumulator."""
        return cls(attributes=attributes, num_codes=num_codes, special_codes=special_codes)

    @property
    def n(self) -> int:
        """Number of users (reports for one-dimensional mechanisms): what the store counts."""
        return self.users

    def reports(self, attribute: int = 0) -> int:
        """Reports that carried ``attribute`` (regular and special)."""
        return self.counts[attribute] + sum(self.special_counts[attribute])

    # ------------------------------------------------------------------------------------------- adding

    def add_codes(self, codes: Any, attributes: Any = None, users: int | None = None) -> None:
        """Add a batch in place: ``codes`` (integer array, shape (r,)), and for multi-attribute
        accumulators ``attributes`` (same shape) and ``users`` (how many users sent the r reports).

        Raises:
            InvalidReportError: wrong dtype or shape, a code or attribute out of range. Nothing is added
                when the batch is rejected.
        """
        c = np.asarray(codes)
        if c.dtype == np.bool_ or not np.issubdtype(c.dtype, np.integer) or c.ndim != 1:
            raise InvalidReportError("codes", f"{c.dtype}{c.shape}", "a 1-D integer array of codes")
        if c.size and (int(c.min()) < 0 or int(c.max()) >= self.num_codes):
            bad = int(c.min()) if int(c.min()) < 0 else int(c.max())
            raise InvalidReportError("codes", bad, f"codes in [0, {self.num_codes - 1}]")
        codes64 = c.astype(np.int64, copy=False)
        groups: NDArray[np.intp] | None = None
        if attributes is None:
            if self.attributes != 1:
                raise InvalidReportError(
                    "attributes", None, f"an attribute array ({self.attributes} attributes)"
                )
            n_users = int(c.shape[0]) if users is None else int(users)
        else:
            g = np.asarray(attributes)
            if g.dtype == np.bool_ or not np.issubdtype(g.dtype, np.integer) or g.shape != c.shape:
                raise InvalidReportError(
                    "attributes", f"{g.dtype}{g.shape}", f"an integer array of shape {c.shape}"
                )
            if g.size and (int(g.min()) < 0 or int(g.max()) >= self.attributes):
                bad = int(g.min()) if int(g.min()) < 0 else int(g.max())
                raise InvalidReportError("attributes", bad, f"attributes in [0, {self.attributes - 1}]")
            if users is None:
                raise InvalidReportError("users", None, "the number of users who sent the reports")
            n_users = int(users)
            groups = g.astype(np.intp, copy=False)
        if n_users < 0:
            raise InvalidReportError("users", n_users, "a count >= 0")
        # Special codes are counted apart and left out of the regular sums.
        special_mask = np.zeros(c.shape, dtype=np.bool_)
        special_counts = [[0] * len(self.special_codes) for _ in range(self.attributes)]
        for j, code in enumerate(self.special_codes):
            hit = codes64 == code
            if not hit.any():
                continue
            special_mask |= hit
            if groups is None:
                special_counts[0][j] = int(np.count_nonzero(hit))
            else:
                per = np.bincount(groups[hit], minlength=self.attributes)
                for a in np.flatnonzero(per).tolist():
                    special_counts[a][j] = int(per[a])
        if special_mask.any():
            keep = ~special_mask
            codes64 = codes64[keep]
            if groups is not None:
                groups = groups[keep]
        counts, s1, s2 = _exact_sums(codes64, groups, self.attributes)
        # Per user at most one report per attribute (multidim reports k distinct attributes).
        for a in range(self.attributes):
            if counts[a] + sum(special_counts[a]) > n_users:
                raise InvalidReportError("attributes", a, f"at most one report per user ({n_users} users)")
        for a in range(self.attributes):
            self.counts[a] += counts[a]
            self.s1[a] += s1[a]
            self.s2[a] += s2[a]
            row = self.special_counts[a]
            for j, v in enumerate(special_counts[a]):
                row[j] += v
        self.users += n_users

    # ------------------------------------------------------------------------------------------- merging

    def _check_same_shape(self, other: MeanAccumulator) -> None:
        if (other.attributes, other.num_codes, other.special_codes) != (
            self.attributes,
            self.num_codes,
            self.special_codes,
        ):
            raise InvalidReportError(
                "accumulator",
                f"attributes={other.attributes}, codes={other.num_codes}, specials={other.special_codes}",
                f"attributes={self.attributes}, codes={self.num_codes}, specials={self.special_codes} "
                "(accumulators of one campaign)",
            )

    def copy(self) -> MeanAccumulator:
        return MeanAccumulator(
            attributes=self.attributes,
            num_codes=self.num_codes,
            special_codes=self.special_codes,
            users=self.users,
            counts=self.counts,
            s1=self.s1,
            s2=self.s2,
            special_counts=self.special_counts,
        )

    def __iadd__(self, other: object) -> MeanAccumulator:
        if not isinstance(other, MeanAccumulator):
            return NotImplemented
        self._check_same_shape(other)
        self.users += other.users
        for a in range(self.attributes):
            self.counts[a] += other.counts[a]
            self.s1[a] += other.s1[a]
            self.s2[a] += other.s2[a]
            self.special_counts[a] = [
                x + y for x, y in zip(self.special_counts[a], other.special_counts[a], strict=True)
            ]
        return self

    def __add__(self, other: object) -> MeanAccumulator:
        if not isinstance(other, MeanAccumulator):
            return NotImplemented
        out = self.copy()
        out += other
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeanAccumulator):
            return NotImplemented
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def _state(self) -> tuple[Any, ...]:
        return (
            self.attributes,
            self.num_codes,
            self.special_codes,
            self.users,
            self.counts,
            self.s1,
            self.s2,
            self.special_counts,
        )

    def __repr__(self) -> str:
        return (
            f"MeanAccumulator(attributes={self.attributes}, num_codes={self.num_codes}, users={self.users})"
        )

    # ------------------------------------------------------------------------------------- serialization

    def to_bytes(self) -> bytes:
        """The versioned, checksummed serialization of the module docstring."""
        parts = [_HEADER.pack(MEAN_MAGIC, FORMAT_VERSION, self.attributes, len(self.special_codes))]
        parts.append(struct.pack("<Q", self.num_codes))
        parts += [struct.pack("<I", c) for c in self.special_codes]
        parts.append(_pack_int(self.users))
        for a in range(self.attributes):
            parts += [_pack_int(self.counts[a]), _pack_int(self.s1[a]), _pack_int(self.s2[a])]
            parts += [_pack_int(x) for x in self.special_counts[a]]
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> MeanAccumulator:
        """Inverse of :meth:`to_bytes`.

        Raises:
            CorruptMeanAccumulatorError: wrong magic/version/lengths, bad checksum, or sums that violate the
                invariants (negative, more reports than users, impossible sums of squares).
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptMeanAccumulatorError("data", type(data).__name__, "bytes")
        buf = bytes(data)
        if len(buf) < _HEADER.size + 8 + _CRC.size:
            raise CorruptMeanAccumulatorError(
                "length", len(buf), f"at least {_HEADER.size + 8 + _CRC.size} bytes"
            )
        magic, version, attributes, n_special = _HEADER.unpack_from(buf, 0)
        if magic != MEAN_MAGIC:
            raise CorruptMeanAccumulatorError("magic", magic, repr(MEAN_MAGIC))
        if version != FORMAT_VERSION:
            raise CorruptMeanAccumulatorError(
                "version", version, f"{FORMAT_VERSION} (this build reads only that)"
            )
        (crc,) = _CRC.unpack_from(buf, len(buf) - _CRC.size)
        if zlib.crc32(buf[: len(buf) - _CRC.size]) != crc:
            raise CorruptMeanAccumulatorError(
                "crc32", crc, "the checksum of the preceding bytes (data corrupted)"
            )
        end = len(buf) - _CRC.size
        pos = _HEADER.size

        def take(fmt: str) -> int:
            nonlocal pos
            size = struct.calcsize(fmt)
            if pos + size > end:
                raise CorruptMeanAccumulatorError("length", len(buf), "the lengths its header announces")
            (value,) = struct.unpack_from(fmt, buf, pos)
            pos += size
            return int(value)

        def big() -> int:
            nonlocal pos
            length = take("<H")
            if pos + length > end:
                raise CorruptMeanAccumulatorError("length", len(buf), "the lengths its header announces")
            value = int.from_bytes(buf[pos : pos + length], "little")
            pos += length
            return value

        num_codes = take("<Q")
        specials = [take("<I") for _ in range(n_special)]
        users = big()
        counts, s1, s2, sp = [], [], [], []
        for _ in range(attributes):
            counts.append(big())
            s1.append(big())
            s2.append(big())
            sp.append([big() for _ in range(n_special)])
        if pos != end:
            raise CorruptMeanAccumulatorError("length", len(buf), f"{pos + _CRC.size} bytes (trailing data)")
        try:
            return cls(
                attributes=attributes,
                num_codes=num_codes,
                special_codes=specials,
                users=users,
                counts=counts,
                s1=s1,
                s2=s2,
                special_counts=sp,
            )
        except InvalidReportError as exc:
            raise CorruptMeanAccumulatorError(exc.field, exc.value, exc.allowed) from exc


def mean_accumulator_for(params: NumericParams) -> MeanAccumulator:
    """The empty accumulator of a numeric campaign."""
    layout = params.layout
    attributes = params.d if isinstance(params, MultidimParams) else 1
    return MeanAccumulator.zero(
        attributes=attributes, num_codes=layout.num_codes, special_codes=layout.special_codes
    )


def check_mean_accumulator(acc: object, params: NumericParams) -> MeanAccumulator:
    """``acc`` if it is the accumulator shape ``params`` implies; InvalidReportError otherwise."""
    expected = mean_accumulator_for(params)
    if not isinstance(acc, MeanAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, f"a MeanAccumulator for {params.name!r}")
    expected._check_same_shape(acc)
    return acc


def add_numeric_columns(acc: MeanAccumulator, params: NumericParams, columns: Any) -> None:
    """Add one batch of numeric columns (``ldp_client.wire``) to ``acc`` in place.

    Columns: uint32 codes (n,) for one-dimensional mechanisms; ``(attributes, codes)`` (n, k) for multidim.

    Raises:
        InvalidReportError: the accumulator does not belong to ``params``, or the batch is malformed.
    """
    check_mean_accumulator(acc, params)
    if isinstance(params, MultidimParams):
        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "reports", type(columns).__name__, "an (attributes, codes) tuple for multidim"
            )
        attrs, codes = (np.asarray(x) for x in columns)
        if attrs.ndim != 2 or attrs.shape != codes.shape or attrs.shape[1] != params.k:
            raise InvalidReportError(
                "reports", f"{attrs.shape} and {codes.shape}", f"two arrays of shape (n, {params.k})"
            )
        if params.k > 1 and attrs.size and bool((np.diff(attrs.astype(np.int64), axis=1) <= 0).any()):
            raise InvalidReportError(
                "attributes", "a repeated or unsorted attribute", "k distinct increasing attributes"
            )
        acc.add_codes(codes.ravel(), attrs.ravel(), users=attrs.shape[0])
    else:
        acc.add_codes(np.asarray(columns))


# -------------------------------------------------------------------------------------------- estimate


@dataclass(frozen=True, kw_only=True)
class MeanEstimate:
    """The estimated mean (and sum) of one attribute, with standard errors and intervals.

    ``n`` is the number of reports that carried the attribute (all users in one dimension).
    """

    label: str
    mean: float
    std_error: float
    ci_low: float
    ci_high: float
    sum: float
    sum_std_error: float
    sum_ci_low: float
    sum_ci_high: float
    n: int


@dataclass(frozen=True, kw_only=True)
class MeansEstimate:
    """Means of every attribute of a numeric campaign.

    Attributes:
        mechanism: the mechanism name.
        n: users who reported.
        epsilon: per-report epsilon.
        confidence: level of every interval.
        population_size: N used for the sums.
        means: one :class:`MeanEstimate` per attribute ("value" in one dimension, "0".."D-1" for multidim).
    """

    mechanism: str
    n: int
    epsilon: float
    confidence: float
    population_size: int
    means: tuple[MeanEstimate, ...]

    def mean(self, label: str = "value") -> MeanEstimate:
        """The estimate of attribute ``label``; KeyError if there is none."""
        for m in self.means:
            if m.label == label:
                return m
        raise KeyError(label)


def _ranges(params: NumericParams) -> tuple[tuple[float, float], ...]:
    if isinstance(params, MultidimParams):
        return params.ranges
    return ((params.lo, params.hi),)


def _s_sums(
    layout: NumericLayout, count: int, s1: int, s2: int, specials: Sequence[int]
) -> tuple[Fraction, Fraction]:
    """(sum s_hat, sum s_hat^2) over one attribute's reports, exactly."""
    off, sc = layout.offset, layout.scale
    total = count * off + sc * s1
    square = count * off * off + 2 * off * sc * s1 + sc * sc * s2
    for (_, v), cnt in zip(layout.specials, specials, strict=True):
        total += cnt * v
        square += cnt * v * v
    return total, square


def _check_population(population_size: int | None, n: int) -> int:
    if population_size is None or population_size == 0:
        return n
    if isinstance(population_size, bool) or not isinstance(population_size, int | np.integer):
        raise InvalidParameterError("population_size", population_size, f"an integer >= n_reports = {n}")
    if population_size < n:
        raise InvalidParameterError("population_size", population_size, f"an integer >= n_reports = {n}")
    return int(population_size)


def _bound_variance(params: NumericParams, scale: float, lo: float, hi: float) -> float:
    """An upper bound on Var(z) for one user (used only when n < 2: no sample variance exists)."""
    base = params.base if isinstance(params, MultidimParams) else params
    span = hi - lo
    if scale == 1.0:
        return span * span * (base.max_variance_s + 0.25)
    return scale * (span * span * base.max_variance_s + max(lo * lo, hi * hi))


def _as_float(q: Fraction) -> float:
    """The nearest float, or +/-inf when ``q`` lies beyond the float range.

    Only at the extremes of the legal parameters (a range near +/-1.8e308, where the unbiased estimate or
    its variance exceeds what a float can hold): the exact rational is right, and no float is; an infinite
    value says so (JSON writes it "inf") instead of failing the whole estimate.
    """
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def estimate_means(
    params: NumericParams,
    acc: MeanAccumulator,
    *,
    confidence: float = 0.95,
    population_size: int | None = None,
) -> MeansEstimate:
    """Mean (and sum) of every attribute, with standard errors and intervals (module docstring).

    Args:
        params: the campaign's numeric parameters.
        acc: its accumulator.
        confidence: two-sided level of the intervals.
        population_size: N for the sums (default: the number of users n).

    Raises:
        InvalidParameterError: bad confidence or population size (N < n).
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: the accumulator is empty.
    """
    from ldp_aggregator.estimators import NoReportsError, normal_quantile

    z = normal_quantile(confidence)
    check_mean_accumulator(acc, params)
    n = acc.users
    if n == 0:
        raise NoReportsError(0)
    big_n = _check_population(population_size, n)
    layout = params.layout
    scale = Fraction(params.d, params.k) if isinstance(params, MultidimParams) else Fraction(1)
    labels = [str(a) for a in range(acc.attributes)] if isinstance(params, MultidimParams) else ["value"]
    out = []
    for a, (lo_f, hi_f) in enumerate(_ranges(params)):
        lo, span = Fraction(lo_f), Fraction(hi_f) - Fraction(lo_f)
        reports = acc.reports(a)
        sum_s, sum_s2 = _s_sums(layout, acc.counts[a], acc.s1[a], acc.s2[a], acc.special_counts[a])
        # z = scale * (lo + span s_hat) for a reported attribute, 0 otherwise.
        sum_z = scale * (reports * lo + span * sum_s)
        sum_z2 = scale * scale * (reports * lo * lo + 2 * lo * span * sum_s + span * span * sum_s2)
        mean_q = sum_z / n
        if n >= 2:
            var_z = max(Fraction(0), (sum_z2 - n * mean_q * mean_q) / (n - 1))
            se = math.sqrt(_as_float(var_z / n))
        else:
            se = math.sqrt(_bound_variance(params, float(scale), lo_f, hi_f))
        mean = _as_float(mean_q)
        half = z * se
        out.append(
            MeanEstimate(
                label=labels[a],
                mean=mean,
                std_error=se,
                ci_low=mean - half,
                ci_high=mean + half,
                sum=_as_float(mean_q * big_n),
                sum_std_error=se * big_n,
                sum_ci_low=(mean - half) * big_n,
                sum_ci_high=(mean + half) * big_n,
                n=reports,
            )
        )
    return MeansEstimate(
        mechanism=params.name,
        n=n,
        epsilon=params.epsilon,
        confidence=float(confidence),
        population_size=big_n,
        means=tuple(out),
    )


def plugin_std_error(params: NumericParams, estimate: MeansEstimate) -> tuple[float, ...]:
    """The analytic alternative, per attribute: sqrt(Var_mech(t_hat) / n) with the estimated mean plugged
    into the mechanism's Var(t) (for multidim, (D/k)(Var_1D + t^2) - t^2). Shown for comparison only: it
    ignores the spread of the data (module docstring), so it is not what :func:`estimate_means` reports."""
    base = params.base if isinstance(params, MultidimParams) else params
    scale = params.d / params.k if isinstance(params, MultidimParams) else 1.0
    out = []
    for m, (lo, hi) in zip(estimate.means, _ranges(params), strict=True):
        span = hi - lo
        s = min(1.0, max(0.0, (m.mean - lo) / span))
        var_x = span * span * float(base.variance_s(s))
        var_z = scale * (var_x + m.mean * m.mean) - m.mean * m.mean
        out.append(math.sqrt(max(var_z, 0.0) / estimate.n))
    return tuple(out)
