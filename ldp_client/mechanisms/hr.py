"""Hadamard response (Acharya, Sun, Zhang, "Hadamard Response: Estimating Distributions Privately,
Efficiently, and with Little Communication", AISTATS 2019).

K = 2**ceil(log2(d + 1)). Value x owns C_x, the K/2 columns j where row r = x + 1 of the Sylvester-Hadamard
matrix H[r, j] = (-1)**popcount(r & j) is +1. The report is j in [0, K): uniform in C_x with probability
p = T/2**32, uniform in its complement otherwise, so P(j | x) = 2p/K on C_x and 2(1-p)/K off it, exactly.

Sampling, exact and O(1): draw j uniform in [0, K); if the parity of popcount(r & j) is not the wanted
one (even for C_x, chosen when a uniform 32-bit word u < T; odd otherwise), flip bit lowbit(r) of j.
Flipping a bit of r changes the parity, so this is a bijection between C_x and its complement, and j is
uniform on the wanted side.

Per report: one 8-byte ``os.urandom`` read (u in bytes 0-3, j from bytes 4-7; K <= 2**25). Batch (seeded
numpy Generator, simulation only): the same, vectorised. Reports are ints in [0, K) (batches: int64).
Everything else about the mechanism is :data:`SPEC` (:mod:`ldp_client.spec`): the wire layout (``hr`` with
``HadamardResponseParams``; little-endian uint32 indices < K in ``hr_indices``, ``hr_index``), u32 journal
rows, and the ``counts`` accumulator of the K reported indices. With the Sylvester matrix H
(H[r, j] = (-1)^popcount(r & j)) and N_j the reports of index j, C_v = sum_{j in C_v} N_j =
(n + (H N)_{v+1}) / 2, and H N is a fast Walsh-Hadamard transform (:func:`fwht`): O(K log K) for all d
items at once (:func:`hadamard_support`). Exact sum sampler: :func:`sample_hr_counts`.

Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    U32_LE,
    RowField,
    as_array,
    as_int,
    check_count,
    check_indices,
    decode_index_column,
    domain_from_proto,
    domain_to_proto,
    pack_u32_row,
    unpack_u32_row,
)
from ldp_client.domain import (
    Domain,
    check_epsilon,
    no_more_fields,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._oracle import FrequencyOracle, OracleSpec, as_domain, true_counts_of
from ldp_client.spec import CountsView, Layout, MakeArgs, SecretSource, SumSampler, Support, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "MAX_HR_CELLS",
    "SPEC",
    "HadamardEncoder",
    "HadamardParams",
    "HadamardSpec",
    "exact_report_probability",
    "fwht",
    "hadamard_support",
    "in_support",
    "sample_hr_counts",
]

_M32 = PROB_ONE - 1
_from_bytes = int.from_bytes


@dataclass(frozen=True, kw_only=True)
class HadamardParams(FrequencyOracle):
    """Hadamard response (Acharya, Sun, Zhang, AISTATS 2019).

    K = 2**ceil(log2(d + 1)); value x owns the set C_x of the K/2 columns j where row x + 1 of the
    Sylvester-Hadamard matrix is +1, i.e. popcount((x + 1) & j) is even. The report is an index j in
    [0, K): uniform in C_x w.p. p = ``truth_probability``, else uniform outside it. A report supports v
    when j is in C_v: p* = p and q* = 1/2 exactly (two distinct non-zero rows agree on exactly K/2
    columns). epsilon = ln(p/(1-p)); n Var* = (e^eps + 1)^2/(e^eps - 1)^2; log2 K bits per report and a
    fast Walsh-Hadamard transform decodes all d supports in O(K log K).
    """

    name: ClassVar[str] = "hr"
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        t = quantize_probability("truth_probability", self.truth_probability)
        if not (2 * t > PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                "a probability in (1/2, 1)" + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @property
    def order(self) -> int:
        """K = 2**ceil(log2(d + 1)), the number of possible reports."""
        return _oracle_math.hadamard_order(self.domain.size)

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        return 0.5

    @property
    def epsilon(self) -> float:
        return privacy.binary_channel_epsilon(self.p_star, 1.0 - self.p_star)

    @property
    def report_bits(self) -> int:
        return _oracle_math.ceil_log2(self.order)

    @classmethod
    def from_epsilon(cls, domain: int | Sequence[str] | Domain, epsilon: float) -> HadamardParams:
        """HR at ``epsilon``: p = e^eps/(e^eps + 1) rounded down to a multiple of 2**-32."""
        eps = check_epsilon(epsilon)
        t = _oracle_math.grr_like_threshold(2, eps)
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=Domain.of(domain), truth_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> HadamardParams:
        dom = require_domain(domain, cls.name)
        if epsilon is not None:
            no_more_fields(fields, cls.name, ())
            return cls.from_epsilon(dom, epsilon)
        tp = (
            take_field(fields, "truth_probability", float, cls.name)
            if "truth_probability" in fields
            else None
        )
        no_more_fields(fields, cls.name, ("truth_probability",))
        if tp is None:
            raise InvalidParameterError("params", [], "epsilon, or truth_probability for hr")
        return cls(domain=dom, truth_probability=tp)  # type: ignore[arg-type]


def in_support(value: int, report: int) -> bool:
    """Whether report j is in C_value, i.e. H[value + 1, j] = +1 (popcount((value + 1) & j) even)."""
    return ((value + 1) & report).bit_count() % 2 == 0


def exact_report_probability(params: HadamardParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly: 2p/K on C_value, 2(1-p)/K off it (for tests)."""
    k = params.order
    p = Fraction(params.truth_threshold, PROB_ONE)
    return (2 * p if in_support(value, report) else 2 * (1 - p)) / k


class HadamardEncoder:
    """Encodes one domain value per report with Hadamard response.

    Raises:
        InvalidParameterError: ``params`` is not a :class:`HadamardParams`.
    """

    __slots__ = ("_index_of", "_mask", "_size", "_truth", "params")

    def __init__(self, params: HadamardParams) -> None:
        if not isinstance(params, HadamardParams):
            raise InvalidParameterError("params", type(params).__name__, "a HadamardParams")
        self.params = params
        self._size = params.domain.size
        self._mask = params.order - 1
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"HadamardEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value with the OS CSPRNG; returns the reported index j in [0, K).

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> int:
        r = _from_bytes(_rnd._source(8), "little")
        row = index + 1
        j = (r >> 32) & self._mask
        odd = (row & j).bit_count() & 1
        # Wanted parity: even (j in C_x) iff u < T. Flip the lowest set bit of row in j on a mismatch.
        if odd == ((r & _M32) < self._truth):
            j ^= row & -row
        return j

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.int64]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Returns:
            int64 array of reported indices in [0, K), shape (n,).

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms._batchbits import as_index_array, raw_words

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = as_index_array(indices, self._size)
        n = idx.shape[0]
        inside = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        j = (raw_words(rng, n) & np.uint64(self._mask)).astype(np.int64)
        row = idx + 1
        odd = np.bitwise_count(row & j) & 1
        flip = odd.astype(bool) == inside
        j ^= np.where(flip, row & -row, 0)
        return j


# ------------------------------------------------------------------------------------ server, simulation

MAX_HR_CELLS = 1 << 26
"""Largest d * K for which Hadamard response is sampled exactly in the simulator's sum runner."""


def fwht(values: ArrayLike) -> NDArray[Any]:
    """The fast Walsh-Hadamard transform H x of a length-K vector (K a power of two), in Sylvester order.

    (H x)_r = sum_j (-1)^popcount(r & j) x_j, computed with log2 K vectorised butterfly passes
    (x, y) -> (x + y, x - y) over blocks of doubling size; exact in int64 for counts below 2**62 / K.
    Float values (expected counts, in tests) are transformed in float64.

    Raises:
        InvalidReportError: ``values`` is not 1-D of a power-of-two length.
    """
    import numpy as np

    arr = np.asarray(values)
    out: NDArray[Any] = np.array(arr, dtype=np.float64 if arr.dtype.kind == "f" else np.int64, copy=True)
    k = out.shape[0]
    if k & (k - 1) or out.ndim != 1:
        raise InvalidReportError("values", out.shape, "a 1-D array whose length is a power of two")
    h = 1
    while h < k:
        blocks = out.reshape(-1, 2, h)
        top = blocks[:, 0, :].copy()
        blocks[:, 0, :] += blocks[:, 1, :]
        blocks[:, 1, :] = top - blocks[:, 1, :]
        h *= 2
    return out


def hadamard_support(params: HadamardParams, index_counts: NDArray[Any]) -> NDArray[Any]:
    """C_v for v in [0, d) from the counts of reported indices: (n + (H N)_{v+1}) / 2 (module docstring).

    Float counts (expected counts, in tests) give float support counts.
    """
    transformed = fwht(index_counts)
    d = params.domain.size
    if transformed.dtype.kind == "f":
        return (float(index_counts.sum()) + transformed[1 : d + 1]) / 2
    n = int(index_counts.sum())
    # n + (H N)_r = 2 * (number of reports in C_{r-1}): always even, so the halving is exact.
    return (n + transformed[1 : d + 1]) // 2


def sample_hr_counts(
    params: HadamardParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Counts of each reported index j in [0, K) of Hadamard response. For simulation only.

    A user holding x lands in C_x w.p. p, then uniformly on it. So the counts of reported indices are
    N = sum_x [Mult(A_x, uniform on C_x) + Mult(c_x - A_x, uniform off C_x)] with A_x ~ Bin(c_x, p):
    exactly the law of the sums of one report per user, in O(d K) work.

    Raises:
        InvalidParameterError: d K > :data:`MAX_HR_CELLS` (use the report runner).
    """
    import numpy as np

    from ldp_client._exact_sampling import check_rng

    g = check_rng(rng)
    c = true_counts_of(params.domain.size, true_counts)
    d, k = params.domain.size, params.order
    if d * k > MAX_HR_CELLS:
        raise InvalidParameterError("domain", d, f"d * K <= {MAX_HR_CELLS} for the exact hr sum sampler")
    inside = g.binomial(c, params.p_star)
    cols = np.arange(k, dtype=np.int64)
    out = np.zeros(k, dtype=np.int64)
    half = np.full(k // 2, 2.0 / k)
    for x in np.flatnonzero(c).tolist():
        even = (np.bitwise_count((x + 1) & cols) & 1) == 0
        members, others = cols[even], cols[~even]
        out[members] += g.multinomial(int(inside[x]), half)
        out[others] += g.multinomial(int(c[x] - inside[x]), half)
    return out


def _hr_value(field: str, report: object, params: HadamardParams) -> int:
    """One per-report output: an index in [0, K)."""
    allowed = f"an index in [0, {params.order - 1}]"
    j = as_int(field, report, allowed)
    if not 0 <= j < params.order:
        raise InvalidReportError(field, j, allowed)
    return j


_ROW_FIELDS = (RowField(("hr_indices",), 4),)  # the journal row: the u32 index


class HadamardSpec(OracleSpec[HadamardParams]):
    """Hadamard response for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.hr`` (``HadamardResponseParams``: domain, truth probability), ``ReportBatch.hr_indices``
    (little-endian uint32, each < K), ``Report.hr_index``. Journal row: the u32 index. Accumulator:
    ``counts`` of the K reported indices, decoded into the d support counts by a fast Walsh-Hadamard
    transform; p* = p, q* = 1/2. Exact sum sampler while d K <= :data:`MAX_HR_CELLS`.
    """

    name: ClassVar[str] = HadamardParams.name
    params_type: ClassVar[type[Any]] = HadamardParams
    wire: ClassVar[WireNames] = WireNames(campaign="hr", batch="hr_indices", report="hr_index")

    def make_args(self, params: HadamardParams) -> MakeArgs:
        return MakeArgs(
            domain=self.domain_arg(params), fields={"truth_probability": params.truth_probability}
        )

    def params_to_proto(self, params: HadamardParams) -> campaign_pb2.HadamardResponseParams:
        return campaign_pb2.HadamardResponseParams(
            domain=domain_to_proto(params.domain), truth_probability=params.truth_probability
        )

    def params_from_proto(self, msg: campaign_pb2.HadamardResponseParams) -> HadamardParams:
        return HadamardParams(domain=domain_from_proto(msg.domain), truth_probability=msg.truth_probability)

    def encoder(
        self, params: HadamardParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return HadamardEncoder(params).encode

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: HadamardParams, columns: Any) -> None:
        import numpy as np

        field = self.wire.batch
        idx = as_array(field, columns, "integer indices", 1)
        if not np.issubdtype(idx.dtype, np.integer):
            raise InvalidReportError(field, str(idx.dtype), "an integer dtype")
        check_count("count", idx.shape[0])
        check_indices(idx, params.order, field, "an index")
        msg.count = idx.shape[0]
        msg.hr_indices = idx.astype(U32_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: HadamardParams, n: int) -> Any:
        return decode_index_column(msg.hr_indices, n, params.order, self.wire.batch)

    def report_to_proto(self, msg: reports_pb2.Report, params: HadamardParams, output: Any) -> None:
        msg.hr_index = _hr_value("report", output, params)

    def report_from_proto(self, msg: reports_pb2.Report, params: HadamardParams) -> Any:
        import numpy as np

        if msg.hr_index >= params.order:
            raise InvalidReportError("hr_index", msg.hr_index, f"an index in [0, {params.order - 1}]")
        return np.array([msg.hr_index], dtype=np.int64)

    def batch_from_reports(self, params: HadamardParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        return np.array(
            [_hr_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)], dtype=np.int64
        )

    def row_fields(self, params: HadamardParams) -> tuple[RowField, ...]:
        return _ROW_FIELDS

    def row_packer(self, params: HadamardParams) -> Callable[[Any], bytes]:
        return pack_u32_row

    def row_unpacker(self, params: HadamardParams) -> Callable[[bytes], Any]:
        return unpack_u32_row

    def encode_batch(
        self,
        params: HadamardParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return HadamardEncoder(params).encode_batch(values, rng)

    def sum_sampler(self, params: HadamardParams) -> SumSampler | None:
        if params.domain.size * params.order > MAX_HR_CELLS:
            return None  # the simulator encodes every report

        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> NDArray[np.int64]:
            return sample_hr_counts(params, true_counts, rng)

        return sample

    def layout(self, params: HadamardParams) -> Layout:
        return Layout.counts(params.order)

    def layout_batch(self, params: HadamardParams, columns: Any) -> Any:
        import numpy as np

        arr = np.asarray(columns)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise InvalidReportError("reports", str(arr.dtype), "an integer array of indices for hr")
        return arr

    def support(self, params: HadamardParams, acc: CountsView, candidates: Sequence[str] = ()) -> Support:
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=self.items(params),
            counts=hadamard_support(params, acc.counts),
            n=acc.n,
            p_star=p_star,
            q_star=q_star,
        )

    def examples(self) -> tuple[HadamardParams, ...]:
        return (
            HadamardParams.from_epsilon(3, 1.0),
            HadamardParams.from_epsilon(("a", "b", "c", "d", "e"), 2.0),
            HadamardParams(domain=Domain.of(8), truth_probability=0.8),
        )

    def exact_outputs(self, params: HadamardParams, value: Any) -> Mapping[Hashable, Fraction]:
        index = params.domain.index(value)
        return {j: exact_report_probability(params, index, j) for j in range(params.order)}


SPEC = HadamardSpec()
"""Hadamard response, as :mod:`ldp_client.registry` lists it."""
