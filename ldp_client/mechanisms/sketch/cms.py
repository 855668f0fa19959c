"""Count-mean sketch ("cms"; Apple, "Learning with Privacy at Scale", 2017): any string, m-bit reports.

A device holding string v picks a hash row j uniformly in [0, k), builds the m-vector with +1 at
bucket_j(v) (:mod:`.hashing`) and -1 elsewhere, flips each coordinate independently with probability f,
and sends (j, the m signs as bits, 1 = +1). Two strings differ in at most two coordinates of a row, so
epsilon = 2 ln((1 - f)/f); f = 1/(1 + e^(eps/2)) rounded up to a multiple of 2**-32 (more private).

Per report (OS CSPRNG, one read): the m noise bits are Bernoulli(f) (:class:`ldp_client._bytesample.
ByteBernoulli`, about one random byte per bit) and the report is the one-hot vector XOR the noise; the row
comes from the same read's 32-bit word (Lemire's unbiased method). Batch (seeded numpy Generator,
simulation only): the same law, vectorised.

Server: the ``bits`` layout with the k rows as cohorts, m bits each: cohort_reports[j] reports of row j,
ones[j, b] of which set bit b. Report (j, bits) supports candidate v when bit bucket_j(v) is set, so
C_v = sum_j ones[j, bucket_j(v)] (one vectorised gather per row over all candidates), with p* = 1 - f and
q* = f + (1 - 2f) S, and the collision term of :mod:`.base`: the debiased bucket totals are
T_hat[j, b] = (ones[j, b] - n_j f)/(1 - 2f), each with noise variance n_j f (1 - f)/(1 - 2f)^2.

Wire: ``Campaign.cms`` (``CountMeanSketchParams``); ``ReportBatch.cms`` columns ``rows`` (little-endian
uint32 < k) and ``bits`` (n rows of ceil(m/8) bytes, little bit order, padding 0); ``Report.cms`` one
(row, bits). Journal row: u32 row, then the ceil(m/8) bytes.

Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._bytesample import ByteBernoulli
from ldp_client._prob import PROB_ONE, threshold_to_probability
from ldp_client.codecs import (
    U32_LE,
    RowField,
    as_array,
    as_int,
    check_bit_rows,
    check_count,
    check_indices,
    decode_bit_rows,
    decode_index_column,
    packed_value,
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

__all__ = ["MAX_CMS_WIDTH", "SPEC", "CMSEncoder", "CMSParams", "CMSReport", "CMSSpec"]

MAX_CMS_WIDTH = 4096
"""Largest width m (the bit-count accumulator's bits per cohort)."""
# Expected noise ones per report below which the batch encoder samples them sparsely (as unary encoding).
_SPARSE_MAX_ONES = 40.0


@dataclass(frozen=True, kw_only=True)
class CMSParams(SketchParams):
    """Count-mean sketch: k hash rows (1..65536), width m (2..4096), flip probability f in (0, 1/2).

    epsilon = 2 ln((1 - f)/f); a report is log2(k) + m bits; p* = 1 - f, q* = f + (1 - 2f) S with S the
    collision mass (1/m for a power of two).
    """

    name: ClassVar[str] = "cms"

    def _check_shape(self) -> None:
        int_field("k", self.k, 1, MAX_ROWS)
        int_field("m", self.m, 2, MAX_CMS_WIDTH)

    @property
    def epsilon(self) -> float:
        f = self.flip
        return 2.0 * privacy.log_ratio(1.0 - f, f)

    @property
    def q_star(self) -> float:
        f = self.flip
        return f + (1.0 - 2.0 * f) * self.collision_mass

    @property
    def report_bits(self) -> int:
        return _oracle_math.ceil_log2(self.k) + self.m

    @classmethod
    def from_epsilon(cls, epsilon: float, *, k: int = DEFAULT_ROWS, m: int = DEFAULT_WIDTH) -> CMSParams:
        """CMS at ``epsilon``: f = 1/(1 + e^(eps/2)) rounded UP to a multiple of 2**-32 (the smallest
        threshold whose exact epsilon does not exceed the request)."""
        t = flip_threshold_for(epsilon, 2)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, "a value large enough to change a 32-bit probability"
            )
        params = cls(k=k, m=m, flip_probability=threshold_to_probability(t))
        report_quantization(epsilon, params.epsilon)
        return params


class CMSReport(NamedTuple):
    """One count-mean-sketch report: the hash row and the m sent signs (bit b = 1 for +1)."""

    row: int
    bits: int


class CMSEncoder:
    """Encodes strings of one campaign with the count-mean sketch (per report: the OS CSPRNG).

    Raises:
        InvalidParameterError: ``params`` is not a :class:`CMSParams`, or a bad campaign id.
    """

    __slots__ = ("_campaign", "_keys", "_noise", "params")

    def __init__(self, params: CMSParams, *, campaign_id: str) -> None:
        if not isinstance(params, CMSParams):
            raise InvalidParameterError("params", type(params).__name__, "a CMSParams")
        hashing.value_bytes("campaign_id", campaign_id)
        self.params = params
        self._campaign = campaign_id
        self._noise = ByteBernoulli(params.flip_threshold, params.m)
        self._keys: dict[int, hashing.RowKey] = {}

    def __repr__(self) -> str:
        return f"CMSEncoder(params={self.params!r}, campaign_id={self._campaign!r})"

    def encode(self, value: str) -> CMSReport:
        """Randomize one string (any length, UTF-8) with the OS CSPRNG.

        Raises:
            DomainError: ``value`` is not a string encodable as UTF-8.
        """
        fp = hashing.fingerprint(hashing.value_bytes("value", value, DomainError))
        noise, word = self._noise.sample_with_word()  # one CSPRNG read: m noise bits and the row's word
        row = _rnd.uniform_below(self.params.k, word)
        key = self._keys.get(row)
        if key is None:
            key = self._keys[row] = hashing.row_key(self._campaign, row)
        return CMSReport(row, noise ^ (1 << hashing.bucket(key, fp, self.params.m)))


def encode_batch(
    params: CMSParams, values: Any, rng: np.random.Generator, *, campaign_id: str, labels: Sequence[str]
) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """One report per simulated user holding ``labels[values[i]]`` (seeded ``rng``; simulation only).

    Returns ``(rows int64 (n,), bits uint8 (n, ceil(m/8)))``: rows uniform, the m noise bits Bernoulli(f)
    (sparse or dense, as unary encoding), the user's bucket bit flipped.
    """
    import numpy as np

    from ldp_client.mechanisms._batchbits import as_index_array, bernoulli_rows_dense, bernoulli_rows_sparse

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    idx = as_index_array(values, len(labels), "values")
    n, k, m = idx.shape[0], params.k, params.m
    fps = hashing.fingerprints(tuple(labels))[idx]
    rows: NDArray[np.int64] = np.asarray(rng.integers(0, k, size=n, dtype=np.int64))
    a0, a1, b = hashing.key_arrays(campaign_id, k)
    buckets = hashing.hash_buckets(fps, a0[rows], a1[rows], b[rows], m)
    sample = bernoulli_rows_sparse if params.flip * m <= _SPARSE_MAX_ONES else bernoulli_rows_dense
    bits = sample(params.flip_threshold, n, m, rng)
    bits[np.arange(n), buckets >> 3] ^= np.left_shift(1, buckets & 7).astype(np.uint8)
    return rows, bits


# ------------------------------------------------------------------------------------------------- codec


def _report_value(field: str, report: object, params: CMSParams) -> tuple[int, bytes]:
    """One per-report output (a CMSReport) as its validated row and ceil(m/8) bit bytes."""
    if not isinstance(report, tuple) or len(report) != 2:
        raise InvalidReportError(field, report, "a CMSReport(row, bits)")
    row = as_int(f"{field}.row", report[0], f"a row in [0, {params.k - 1}]")
    if not 0 <= row < params.k:
        raise InvalidReportError(f"{field}.row", row, f"a row in [0, {params.k - 1}]")
    return row, packed_value(f"{field}.bits", report[1], params.m)


def _check_columns(field: str, columns: object, params: CMSParams) -> tuple[NDArray[Any], NDArray[np.uint8]]:
    """Batch columns (rows, bits): integer rows < k and packed m-bit rows, n of each."""
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 2:
        raise InvalidReportError(field, type(columns).__name__, "a (rows, bits) tuple of arrays")
    rows = as_array(f"{field}.rows", columns[0], "integer rows", 1)
    if rows.dtype == np.bool_ or not np.issubdtype(rows.dtype, np.integer):
        raise InvalidReportError(f"{field}.rows", str(rows.dtype), "an integer dtype")
    check_indices(rows, params.k, f"{field}.rows", "a row")
    bits = check_bit_rows(f"{field}.bits", columns[1], rows.shape[0], params.m)
    return rows, bits


class CMSSpec(SketchSpec[CMSParams]):
    """The count-mean sketch for every layer (module docstring)."""

    name: ClassVar[str] = CMSParams.name
    params_type: ClassVar[type[Any]] = CMSParams
    wire: ClassVar[WireNames] = WireNames(campaign="cms", batch="cms", report="cms")

    def encoder(
        self, params: CMSParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return CMSEncoder(params, campaign_id=campaign_id).encode

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: CMSParams, columns: Any) -> None:
        import numpy as np

        rows, bits = _check_columns("cms", columns, params)
        check_count("count", rows.shape[0])
        msg.count = rows.shape[0]
        msg.cms.rows = rows.astype(U32_LE).tobytes()
        msg.cms.bits = np.ascontiguousarray(bits).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: CMSParams, n: int) -> Any:
        rows = decode_index_column(msg.cms.rows, n, params.k, "cms.rows")
        return rows, decode_bit_rows(msg.cms.bits, n, params.m, "cms.bits")

    def report_to_proto(self, msg: reports_pb2.Report, params: CMSParams, output: Any) -> None:
        row, bits = _report_value("report", output, params)
        msg.cms.row = row
        msg.cms.bits = bits

    def report_from_proto(self, msg: reports_pb2.Report, params: CMSParams) -> Any:
        import numpy as np

        if msg.cms.row >= params.k:
            raise InvalidReportError("cms.row", msg.cms.row, f"a row in [0, {params.k - 1}]")
        bits = decode_bit_rows(msg.cms.bits, 1, params.m, "cms.bits", name_row=False)
        return np.array([msg.cms.row], dtype=np.int64), bits

    def batch_from_reports(self, params: CMSParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        values = [_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        rows = np.array([v[0] for v in values], dtype=np.int64)
        # A bytearray buffer, so the rows are writable like any other client-side array.
        bits = np.frombuffer(bytearray(b"".join(v[1] for v in values)), dtype=np.uint8)
        return rows, bits.reshape(len(values), (params.m + 7) // 8)

    def row_fields(self, params: CMSParams) -> tuple[RowField, ...]:
        return (RowField(("cms", "rows"), 4), RowField(("cms", "bits"), (params.m + 7) // 8))

    def row_packer(self, params: CMSParams) -> Callable[[Any], bytes]:
        nbytes = (params.m + 7) // 8
        return lambda r: r.row.to_bytes(4, "little") + r.bits.to_bytes(nbytes, "little")

    def row_unpacker(self, params: CMSParams) -> Callable[[bytes], Any]:
        return lambda row: CMSReport(int.from_bytes(row[:4], "little"), int.from_bytes(row[4:], "little"))

    def encode_batch(
        self,
        params: CMSParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)

    def layout(self, params: CMSParams) -> Layout:
        return Layout.bits(params.k, params.m)

    def layout_batch(self, params: CMSParams, columns: Any) -> Any:
        return _check_columns("reports", columns, params)

    def candidate_counts(
        self, params: CMSParams, acc: Any, candidates: Sequence[str], campaign_id: str
    ) -> NDArray[Any]:
        import numpy as np

        ones = np.asarray(acc.ones)
        counts = np.zeros(len(candidates), dtype=np.float64 if ones.dtype.kind == "f" else np.int64)
        for j, buckets in enumerate(hashing.row_buckets(campaign_id, params.k, params.m, candidates)):
            counts += ones[j][buckets]
        return counts

    def row_squares(self, params: CMSParams, acc: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import numpy as np

        f, a = params.flip, 1.0 - 2.0 * params.flip
        n_j = np.asarray(acc.cohort_reports, dtype=np.float64)
        t_hat = (np.asarray(acc.ones, dtype=np.float64) - n_j[:, None] * f) / a
        q_j = np.einsum("jb,jb->j", t_hat, t_hat) - params.m * n_j * f * (1.0 - f) / (a * a)
        return n_j, q_j

    def sample_from_totals(
        self, params: CMSParams, n_j: NDArray[np.int64], totals: NDArray[np.int64], rng: np.random.Generator
    ) -> Any:
        """ones[j, b] = Bin(T[j, b], 1 - f) + Bin(n_j - T[j, b], f): the bits are independent given rows."""
        f = params.flip
        ones = rng.binomial(totals, 1.0 - f) + rng.binomial(n_j[:, None] - totals, f)
        return n_j, ones

    def largest(self) -> tuple[CMSParams, ...]:
        return (CMSParams(k=MAX_ROWS, m=MAX_CMS_WIDTH, flip_probability=2.0**-32),)

    def examples(self) -> tuple[CMSParams, ...]:
        return (
            CMSParams.from_epsilon(1.0, k=4, m=2),
            CMSParams(k=3, m=3, flip_probability=0.25),
            CMSParams(k=4, m=4, flip_probability=0.2),
        )

    def campaign_outputs(
        self, params: CMSParams, value: Any, campaign_id: str
    ) -> Mapping[Hashable, Fraction]:
        """Every report (row, bits): the row uniform, then each bit flipped from the one-hot vector with
        probability f, exactly."""
        f = Fraction(params.flip_threshold, PROB_ONE)
        m = params.m
        weight = Fraction(1, params.k)
        powers = [weight * f**d * (1 - f) ** (m - d) for d in range(m + 1)]
        return {
            CMSReport(j, bits): powers[(bits ^ (1 << b)).bit_count()]
            for j, b in enumerate(self.value_buckets(params, value, campaign_id))
            for bits in range(1 << m)
        }


SPEC = CMSSpec()
"""The count-mean sketch, as :mod:`ldp_client.registry` lists it."""
