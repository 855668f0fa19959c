"""Hadamard count-mean sketch ("hcms"; Apple, "Learning with Privacy at Scale", 2017): one sign per report.

A device holding string v picks a hash row j uniformly in [0, k) and a column l uniformly in [0, m) (m a
power of two), and sends (j, l, the sign H[bucket_j(v), l] flipped with probability f), with H the
Sylvester-Hadamard matrix of order m, H[r, l] = (-1)^popcount(r & l). Two strings change the sign of a
(j, l) at most, so epsilon = ln((1 - f)/f); f = 1/(1 + e^eps) rounded up to a multiple of 2**-32.

Per report (OS CSPRNG, one 12-byte read): a word for the row (Lemire's unbiased method), a word whose low
log2(m) bits are the column (m divides 2**32: exactly uniform), and a word u for the flip (u < T). Batch
(seeded numpy Generator, simulation only): the same, vectorised.

Server: a ``counts`` layout of size 2 k m, report (j, l, sign) counted at (j m + l) 2 + (sign is +1). With
Y[j, l] = (+1 reports) - (-1 reports) at (j, l), Z_j = H Y_j (a fast Walsh-Hadamard transform per row,
:func:`fwht_rows`) and n_j the reports of row j: a report supports v when its sign times
H[bucket_j(v), l] is +1, so C_v = (n + sum_j Z[j, bucket_j(v)]) / 2, with p* = 1 - f and
q* = 1/2 + (1/2 - f) S (a non-colliding string's sign agrees on exactly half the columns). The bucket
totals for the collision term of :mod:`.base` are T_hat = Z/(1 - 2f), with noise variance n_j/(1 - 2f)^2 -
T[j, b] (their sum over b: m n_j/(1 - 2f)^2 - n_j).

Wire: ``Campaign.hcms`` (``CountMeanSketchParams``); ``ReportBatch.hcms`` columns ``rows`` (little-endian
uint32 < k), ``columns`` (little-endian uint32 < m) and ``signs`` (packed 8 per byte, 1 = +1, as
``rr_answers``); ``Report.hcms`` one (row, column, plus). Journal row: u32 row, u32 column, one byte 0/1.

Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, threshold_to_probability
from ldp_client.codecs import (
    U32_LE,
    RowField,
    as_array,
    as_int,
    bool_value,
    check_count,
    check_indices,
    decode_bool_column,
    decode_index_column,
    encode_bool_column,
    pack_flag_row,
    unpack_flag_row,
)
from ldp_client.domain import int_field, report_quantization
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.sketch import hashing
from ldp_client.mechanisms.sketch.base import (
    DEFAULT_ROWS,
    DEFAULT_WIDTH,
    MAX_ROWS,
    SketchParams,
    SketchSpec,
    flip_threshold_for,
)
from ldp_client.spec import Layout, SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = ["MAX_HCMS_CELLS", "MAX_HCMS_WIDTH", "SPEC", "HCMSEncoder", "HCMSParams", "HCMSReport", "HCMSSpec"]

MAX_HCMS_WIDTH = 1 << 16
"""Largest width m (a power of two)."""
MAX_HCMS_CELLS = 1 << 23
"""Largest k m: the accumulator counts 2 k m (row, column, sign) cells, at most 2**24 (a count layout)."""
_M32 = PROB_ONE - 1
_from_bytes = int.from_bytes


@dataclass(frozen=True, kw_only=True)
class HCMSParams(SketchParams):
    """Hadamard count-mean sketch: k hash rows, width m a power of two (2..65536, k m <= 2**23), flip
    probability f in (0, 1/2).

    epsilon = ln((1 - f)/f); a report is log2(k) + log2(m) + 1 bits; p* = 1 - f, q* = 1/2 + (1/2 - f)/m.
    """

    name: ClassVar[str] = "hcms"

    def _check_shape(self) -> None:
        int_field("k", self.k, 1, MAX_ROWS)
        int_field("m", self.m, 2, MAX_HCMS_WIDTH)
        if self.m & (self.m - 1):
            raise InvalidParameterError("m", self.m, "a power of two (the Hadamard matrix's order), 2..65536")
        if self.k * self.m > MAX_HCMS_CELLS:
            raise InvalidParameterError(
                "k", self.k, f"at most {MAX_HCMS_CELLS // self.m} (k m <= 2**23) at m={self.m}"
            )

    @property
    def epsilon(self) -> float:
        f = self.flip
        return privacy.log_ratio(1.0 - f, f)

    @property
    def q_star(self) -> float:
        return 0.5 + (0.5 - self.flip) * self.collision_mass

    @property
    def report_bits(self) -> int:
        return (self.k - 1).bit_length() + (self.m - 1).bit_length() + 1

    @classmethod
    def from_epsilon(cls, epsilon: float, *, k: int = DEFAULT_ROWS, m: int = DEFAULT_WIDTH) -> HCMSParams:
        """HCMS at ``epsilon``: f = 1/(1 + e^eps) rounded UP to a multiple of 2**-32 (the smallest
        threshold whose exact epsilon does not exceed the request)."""
        t = flip_threshold_for(epsilon, 1)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, "a value large enough to change a 32-bit probability"
            )
        params = cls(k=k, m=m, flip_probability=threshold_to_probability(t))
        report_quantization(epsilon, params.epsilon)
        return params


class HCMSReport(NamedTuple):
    """One Hadamard count-mean-sketch report: the hash row, the Hadamard column, the sign (True = +1)."""

    row: int
    column: int
    plus: bool


def hadamard_plus(bucket: int, column: int) -> bool:
    """H[bucket, column] == +1: popcount(bucket & column) is even."""
    return not (bucket & column).bit_count() & 1


class HCMSEncoder:
    """Encodes strings of one campaign with the Hadamard count-mean sketch (per report: the OS CSPRNG).

    Raises:
        InvalidParameterError: ``params`` is not an :class:`HCMSParams`, or a bad campaign id.
    """

    __slots__ = ("_campaign", "_keys", "params")

    def __init__(self, params: HCMSParams, *, campaign_id: str) -> None:
        if not isinstance(params, HCMSParams):
            raise InvalidParameterError("params", type(params).__name__, "an HCMSParams")
        hashing.value_bytes("campaign_id", campaign_id)
        self.params = params
        self._campaign = campaign_id
        self._keys: dict[int, hashing.RowKey] = {}

    def __repr__(self) -> str:
        return f"HCMSEncoder(params={self.params!r}, campaign_id={self._campaign!r})"

    def encode(self, value: str) -> HCMSReport:
        """Randomize one string (any length, UTF-8) with the OS CSPRNG.

        Raises:
            DomainError: ``value`` is not a string encodable as UTF-8.
        """
        fp = hashing.fingerprint(hashing.value_bytes("value", value, DomainError))
        p = self.params
        r = _from_bytes(_rnd._source(12), "little")
        row = _rnd.uniform_below(p.k, r & _M32)
        column = (r >> 32) & (p.m - 1)
        flip = ((r >> 64) & _M32) < p.flip_threshold
        key = self._keys.get(row)
        if key is None:
            key = self._keys[row] = hashing.row_key(self._campaign, row)
        return HCMSReport(row, column, hadamard_plus(hashing.bucket(key, fp, p.m), column) != flip)


def encode_batch(
    params: HCMSParams, values: Any, rng: np.random.Generator, *, campaign_id: str, labels: Sequence[str]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
    """One report per simulated user holding ``labels[values[i]]`` (seeded ``rng``; simulation only).

    Returns ``(rows int64 (n,), columns int64 (n,), plus bool (n,))``.
    """
    import numpy as np

    from ldp_client.mechanisms._batchbits import as_index_array

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    idx = as_index_array(values, len(labels), "values")
    n, k, m = idx.shape[0], params.k, params.m
    fps = hashing.fingerprints(tuple(labels))[idx]
    rows: NDArray[np.int64] = np.asarray(rng.integers(0, k, size=n, dtype=np.int64))
    columns: NDArray[np.int64] = np.asarray(rng.integers(0, m, size=n, dtype=np.int64))
    flip = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(params.flip_threshold)
    a0, a1, b = hashing.key_arrays(campaign_id, k)
    buckets = hashing.hash_buckets(fps, a0[rows], a1[rows], b[rows], m)
    plus = (np.bitwise_count(buckets & columns) & 1) == 0
    return rows, columns, plus != flip


def fwht_rows(values: NDArray[Any]) -> NDArray[Any]:
    """H y for every row y of a (k, m) array (m a power of two), in Sylvester order: (H y)_r =
    sum_l (-1)^popcount(r & l) y_l, by log2 m vectorised butterfly passes over all rows at once (int64 for
    integer counts, float64 for the expected counts of tests)."""
    import numpy as np

    out: NDArray[Any] = np.array(
        values, dtype=np.float64 if values.dtype.kind == "f" else np.int64, copy=True
    )
    rows, m = out.shape
    h = 1
    while h < m:
        blocks = out.reshape(rows, -1, 2, h)
        top = blocks[:, :, 0, :].copy()
        blocks[:, :, 0, :] += blocks[:, :, 1, :]
        blocks[:, :, 1, :] = top - blocks[:, :, 1, :]
        h *= 2
    return out


def sample_signs(
    params: HCMSParams, n_j: NDArray[np.int64], totals: NDArray[np.int64], rng: np.random.Generator
) -> NDArray[np.int64]:
    """The ``counts`` layout's sums given each row's bucket totals T[j, b] (simulation, seeded ``rng``).

    Each user picks its column l uniformly, i.e. log2 m fair bits l_0, l_1, ...; the sign H[b, l] is the
    parity of sum_i b_i l_i. Users are split bit by bit: at step i every group of users that agree on
    l_0..l_{i-1}, on their bucket's bits i.. and on the parity so far is split by Bin(., 1/2) into l_i = 0
    (parity unchanged) and l_i = 1 (parity flipped when b_i = 1). Users in a group are exchangeable, so this
    is exactly the law of independent uniform columns, in 2 m log2 m binomial draws per row (not m^2).
    Then each (row, column) reports +1 for Bin(users with H = +1, 1 - f) + Bin(users with H = -1, f).
    """
    import numpy as np

    k, m = params.k, params.m
    # state[j, node, b_rest, parity]: node = the column bits chosen so far, b_rest = the bucket's other bits.
    state = np.zeros((k, 1, m, 2), dtype=np.int64)
    state[:, 0, :, 0] = totals
    while state.shape[2] > 1:
        nodes, half = state.shape[1], state.shape[2] // 2
        zero = rng.binomial(state, 0.5)
        one = (state - zero).reshape(k, nodes, half, 2, 2)  # [..., b', b_i, parity]
        zero = zero.reshape(k, nodes, half, 2, 2)
        keep = zero.sum(axis=3)
        flipped = one[:, :, :, 0, :] + one[:, :, :, 1, ::-1]  # b_i = 1 flips the parity
        state = np.concatenate([keep, flipped], axis=1)  # the new bit is the node's most significant
    by_sign = state[:, :, 0, :]  # (k, m columns, parity): parity 0 is H = +1
    f = params.flip
    plus = rng.binomial(by_sign[..., 0], 1.0 - f) + rng.binomial(by_sign[..., 1], f)
    out = np.empty((k, m, 2), dtype=np.int64)
    out[..., 1] = plus
    out[..., 0] = by_sign.sum(axis=2) - plus
    return out.reshape(-1)


# ------------------------------------------------------------------------------------------------- codec


def _report_value(field: str, report: object, params: HCMSParams) -> tuple[int, int, bool]:
    """One per-report output (an HCMSReport) as its validated row, column and sign."""
    if not isinstance(report, tuple) or len(report) != 3:
        raise InvalidReportError(field, report, "an HCMSReport(row, column, plus)")
    row = as_int(f"{field}.row", report[0], f"a row in [0, {params.k - 1}]")
    if not 0 <= row < params.k:
        raise InvalidReportError(f"{field}.row", row, f"a row in [0, {params.k - 1}]")
    column = as_int(f"{field}.column", report[1], f"a column in [0, {params.m - 1}]")
    if not 0 <= column < params.m:
        raise InvalidReportError(f"{field}.column", column, f"a column in [0, {params.m - 1}]")
    return row, column, bool_value(f"{field}.plus", report[2])


def _check_columns(
    field: str, columns: object, params: HCMSParams
) -> tuple[NDArray[Any], NDArray[Any], NDArray[np.bool_]]:
    """Batch columns (rows, columns, plus): integers < k, integers < m and bools, n of each."""
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 3:
        raise InvalidReportError(field, type(columns).__name__, "a (rows, columns, plus) tuple of arrays")
    out = []
    for name, col, bound in (("rows", columns[0], params.k), ("columns", columns[1], params.m)):
        arr = as_array(f"{field}.{name}", col, "integers", 1)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError(f"{field}.{name}", str(arr.dtype), "an integer dtype")
        check_indices(arr, bound, f"{field}.{name}", "an index")
        out.append(arr)
    plus = as_array(f"{field}.plus", columns[2], "bool", 1)
    if plus.dtype != np.bool_:
        raise InvalidReportError(f"{field}.plus", str(plus.dtype), "dtype bool")
    n = out[0].shape[0]
    if out[1].shape[0] != n or plus.shape[0] != n:
        raise InvalidReportError(
            field, [out[1].shape[0], plus.shape[0]], f"{n} columns and signs (one per row)"
        )
    return out[0], out[1], plus


class HCMSSpec(SketchSpec[HCMSParams]):
    """The Hadamard count-mean sketch for every layer (module docstring)."""

    name: ClassVar[str] = HCMSParams.name
    params_type: ClassVar[type[Any]] = HCMSParams
    wire: ClassVar[WireNames] = WireNames(campaign="hcms", batch="hcms", report="hcms")

    def encoder(
        self, params: HCMSParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return HCMSEncoder(params, campaign_id=campaign_id).encode

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: HCMSParams, columns: Any) -> None:
        rows, cols, plus = _check_columns("hcms", columns, params)
        check_count("count", rows.shape[0])
        msg.count = rows.shape[0]
        msg.hcms.rows = rows.astype(U32_LE).tobytes()
        msg.hcms.columns = cols.astype(U32_LE).tobytes()
        msg.hcms.signs = encode_bool_column("hcms.signs", plus)[1]

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: HCMSParams, n: int) -> Any:
        return (
            decode_index_column(msg.hcms.rows, n, params.k, "hcms.rows"),
            decode_index_column(msg.hcms.columns, n, params.m, "hcms.columns"),
            decode_bool_column(msg.hcms.signs, n, "hcms.signs"),
        )

    def report_to_proto(self, msg: reports_pb2.Report, params: HCMSParams, output: Any) -> None:
        row, column, plus = _report_value("report", output, params)
        msg.hcms.row, msg.hcms.column, msg.hcms.plus = row, column, plus

    def report_from_proto(self, msg: reports_pb2.Report, params: HCMSParams) -> Any:
        import numpy as np

        r = msg.hcms
        if r.row >= params.k:
            raise InvalidReportError("hcms.row", r.row, f"a row in [0, {params.k - 1}]")
        if r.column >= params.m:
            raise InvalidReportError("hcms.column", r.column, f"a column in [0, {params.m - 1}]")
        return (
            np.array([r.row], dtype=np.int64),
            np.array([r.column], dtype=np.int64),
            np.array([r.plus], dtype=np.bool_),
        )

    def batch_from_reports(self, params: HCMSParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        values = [_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        return (
            np.array([v[0] for v in values], dtype=np.int64),
            np.array([v[1] for v in values], dtype=np.int64),
            np.array([v[2] for v in values], dtype=np.bool_),
        )

    def row_fields(self, params: HCMSParams) -> tuple[RowField, ...]:
        return (
            RowField(("hcms", "rows"), 4),
            RowField(("hcms", "columns"), 4),
            RowField(("hcms", "signs"), 1, packed=True),
        )

    def row_packer(self, params: HCMSParams) -> Callable[[Any], bytes]:
        return lambda r: r.row.to_bytes(4, "little") + r.column.to_bytes(4, "little") + pack_flag_row(r.plus)

    def row_unpacker(self, params: HCMSParams) -> Callable[[bytes], Any]:
        # A flag byte other than 0/1 comes back as an int, refused when the report is validated.
        return lambda row: HCMSReport(
            int.from_bytes(row[:4], "little"),
            int.from_bytes(row[4:8], "little"),
            unpack_flag_row(row[8:]),  # type: ignore[arg-type]
        )

    def encode_batch(
        self,
        params: HCMSParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)

    def layout(self, params: HCMSParams) -> Layout:
        return Layout.counts(2 * params.k * params.m)

    def layout_batch(self, params: HCMSParams, columns: Any) -> Any:
        rows, cols, plus = _check_columns("reports", columns, params)
        return (rows * params.m + cols) * 2 + plus

    def _transformed(self, params: HCMSParams, acc: Any) -> tuple[NDArray[Any], NDArray[Any]]:
        """(n_j, Z): each row's reports and Z_j = H Y_j (module docstring)."""
        import numpy as np

        counts = np.asarray(acc.counts).reshape(params.k, params.m, 2)
        return counts.sum(axis=(1, 2)), fwht_rows(counts[:, :, 1] - counts[:, :, 0])

    def candidate_counts(
        self, params: HCMSParams, acc: Any, candidates: Sequence[str], campaign_id: str
    ) -> NDArray[Any]:
        import numpy as np

        n_j, z = self._transformed(params, acc)
        total = np.zeros(len(candidates), dtype=z.dtype)
        for j, buckets in enumerate(hashing.row_buckets(campaign_id, params.k, params.m, candidates)):
            total += z[j][buckets]
        n = n_j.sum()
        # n_j + Z[j, b] is twice the supporting reports of row j: the halving is exact for integer counts.
        out: NDArray[Any] = (n + total) / 2 if z.dtype.kind == "f" else (n + total) // 2
        return out

    def row_squares(self, params: HCMSParams, acc: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import numpy as np

        a = 1.0 - 2.0 * params.flip
        n_j, z = self._transformed(params, acc)
        nf = n_j.astype(np.float64)
        t_hat = z.astype(np.float64) / a
        return nf, np.einsum("jb,jb->j", t_hat, t_hat) - params.m * nf / (a * a) + nf

    def sample_from_totals(
        self, params: HCMSParams, n_j: NDArray[np.int64], totals: NDArray[np.int64], rng: np.random.Generator
    ) -> Any:
        return sample_signs(params, n_j, totals, rng)

    def largest(self) -> tuple[HCMSParams, ...]:
        # k m is bounded: the most rows, and the widest rows.
        return (
            HCMSParams(k=MAX_ROWS, m=MAX_HCMS_CELLS // MAX_ROWS, flip_probability=0.5 - 2.0**-32),
            HCMSParams(k=MAX_HCMS_CELLS // MAX_HCMS_WIDTH, m=MAX_HCMS_WIDTH, flip_probability=2.0**-32),
        )

    def examples(self) -> tuple[HCMSParams, ...]:
        return (
            HCMSParams.from_epsilon(1.0, k=4, m=2),
            HCMSParams(k=4, m=4, flip_probability=0.2),
            HCMSParams(k=8, m=8, flip_probability=0.125),
        )

    def campaign_outputs(
        self, params: HCMSParams, value: Any, campaign_id: str
    ) -> Mapping[Hashable, Fraction]:
        """Every report (row, column, sign): row and column uniform, the sign H[bucket, column] kept with
        probability 1 - f, exactly."""
        f = Fraction(params.flip_threshold, PROB_ONE)
        weight = Fraction(1, params.k * params.m)
        out: dict[Hashable, Fraction] = {}
        for j, b in enumerate(self.value_buckets(params, value, campaign_id)):
            for column in range(params.m):
                true_sign = hadamard_plus(b, column)
                out[HCMSReport(j, column, true_sign)] = weight * (1 - f)
                out[HCMSReport(j, column, not true_sign)] = weight * f
        return out


SPEC = HCMSSpec()
"""The Hadamard count-mean sketch, as :mod:`ldp_client.registry` lists it."""
