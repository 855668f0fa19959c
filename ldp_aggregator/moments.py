"""The ``moments`` accumulator layout: exact, mergeable sums of the integer codes of numeric reports.

Every numeric mechanism (:mod:`ldp_client.mechanisms.numeric`) reports integer codes; a code c estimates
the position s = (x - lo)/(hi - lo) as ``s_hat = offset + scale * c`` (regular codes) or as a fixed value
(a few *special* codes: laplace's clamped ends, hybrid's duchi outputs). So the sufficient statistics are,
per attribute, the number of regular reports, the exact integer sums of c and c^2 over them, and the count
of each special code; plus the number of users (= reports for one-dimensional mechanisms; multidim users
report k attributes each). All sums are Python integers: adding batches is exact and order-free, so
merging is associative and commutative bit for bit (no floating-point accumulation anywhere). Per batch
the sums are computed with numpy in chunks where every partial sum stays below 2**53 (codes split into
16-bit halves), then added as integers.

:class:`MeanAccumulator` is the layout's class in ``ldp_aggregator.accumulators.LAYOUT_ACCUMULATORS``
(layout ``moments`` of :class:`ldp_client.spec.Layout`: shape ``(attributes, num_codes, *special_codes)``,
standard input ``(codes, attributes, users)``); a mechanism's spec turns its sums into exact sums of the
value estimates (``spec.moments``), which :mod:`ldp_aggregator.means` estimates from.

Serialized form (``to_bytes``), little-endian::

    magic  b"LDPM" | version u8 (1) | attributes u32 | specials u16 | num_codes u64
    | special codes u32 each | users (big int)
    | per attribute: regular count, sum c, sum c^2, one count per special (big ints)
    | crc32 u32 of everything before it

with each big int as ``u16 length | length bytes`` (unsigned, little-endian).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_client.errors import InvalidReportError, LdpError
from ldp_client.mechanisms.numeric.base import MAX_ATTRIBUTES

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["MEAN_MAGIC", "CorruptMeanAccumulatorError", "MeanAccumulator"]

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
    layout_kind: ClassVar[str] = "moments"

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

    @classmethod
    def of_shape(cls, shape: tuple[int, ...]) -> MeanAccumulator:
        """The empty accumulator of a ``moments`` layout of shape ``(attributes, num_codes, *specials)``."""
        attributes, num_codes, *specials = shape
        return cls.zero(attributes=attributes, num_codes=num_codes, special_codes=specials)

    @classmethod
    def from_sums(cls, sums: Any) -> MeanAccumulator:
        """The accumulator holding a ``moments`` layout's sums ``(shape, users, counts, s1, s2,
        special_counts)`` (the layout's shape first: sums of codes do not tell the range of the codes).

        Raises:
            InvalidReportError: sums that codes of that shape cannot produce.
        """
        shape, users, counts, s1, s2, special_counts = sums
        attributes, num_codes, *specials = shape
        return cls(
            attributes=attributes,
            num_codes=num_codes,
            special_codes=specials,
            users=users,
            counts=counts,
            s1=s1,
            s2=s2,
            special_counts=special_counts,
        )

    @classmethod
    def delta_of(cls, shape: tuple[int, ...], batch: Any) -> MeanAccumulator:
        """What one batch (the layout's standard input) adds: a fresh accumulator with it added."""
        delta = cls.of_shape(shape)
        delta.add_batch(batch)
        return delta

    @property
    def layout_shape(self) -> tuple[int, ...]:
        return (self.attributes, self.num_codes, *self.special_codes)

    def add_batch(self, batch: Any) -> None:
        """Add a ``moments`` layout's standard input ``(codes, attributes or None, users or None)`` in
        place: :meth:`add_codes`."""
        codes, attributes, users = batch
        self.add_codes(codes, attributes, users)

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
