"""Local hashing: OLH and BLH (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4).

Hash family (chosen so that the server can evaluate it for all reports and all values at once with
numpy). A report carries a fresh seed (a, b) of two uniform 64-bit words; the 32-bit hash of a value
index x < 2**24 is the multiply-add-shift

    h_{a,b}(x) = ((a x + b) mod 2**64) >> 32,

which is *strongly universal* (pairwise independent and uniform) from w-bit keys to l-bit values whenever
64 >= w + l - 1 (Dietzfelbinger 1996, "Universal hashing and k-wise independent random variables via
integer arithmetic without primes"; Thorup 2015, "High Speed Hashing for Integers and Strings", §3.3):
here w <= 24 and l = 32. The bucket of x is floor(h(x) g / 2**32) in [0, g) ("multiply-shift" range
reduction), whose buckets hold floor(2**32/g) or floor(2**32/g) + 1 hash values. So for x != v the
buckets of x and v are independent, each with that exact law, and they coincide with probability
S = sum_y P(y)^2 = 1/g + O(g/2**64) (:func:`ldp_client._oracle_math.hash_collision_mass`). The
estimator's q* uses this exact S, not the idealised 1/g (they agree to about 1e-19 relative).

Client, with the quantized threshold T (p = T/2**32): compute the bucket y0 of x, then report y0 if a
uniform 32-bit word u < T, else a uniformly random other bucket (Lemire's unbiased method). Report =
(a, b, y). Given the seed, P(y | x) = p or (1-p)/(g-1), so epsilon = ln(p (g-1)/(1-p)); the seed is
independent of x.

Server: report (a, b, y) supports v iff bucket(h_{a,b}(v)) == y. Writing [lo, lo + w) for the hash values
of bucket y, that is ((a v + b - lo 2**32) mod 2**64) < w 2**32: one multiply, one add and one compare
per (report, value) pair in uint64 (:func:`support_test_constants`).

Per report: one 24-byte ``os.urandom`` read (a, b, u, and a word for the other bucket; Lemire rejection
draws more only with probability < g/2**32). Batch (seeded numpy Generator, simulation only): the same
construction vectorised.

Everything else about the two mechanisms is :data:`OLH_SPEC` and :data:`BLH_SPEC` (:mod:`ldp_client.spec`):
the wire layout (``olh``/``blh`` with ``LocalHashingParams``; the batch columns ``a``, ``b`` (n little-endian
uint64 each) and ``buckets`` (n uint32, each < g)), the journal row (u64 a, u64 b, u32 bucket), and the
``support`` accumulator of d counts, computed at ingest for the declared domain
(:func:`local_hash_support`), so the accumulator never holds a seed. Importing this module does not import
numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ldp_client import _oracle_math, privacy
from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    U32_LE,
    U64_LE,
    RowField,
    as_array,
    as_int,
    check_count,
    check_indices,
    check_length,
    domain_from_proto,
    domain_to_proto,
)
from ldp_client.domain import (
    Domain,
    check_epsilon,
    int_field,
    no_more_fields,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._oracle import FrequencyOracle, OracleSpec, as_domain
from ldp_client.spec import MakeArgs, SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "BLH_SPEC",
    "OLH_SPEC",
    "BLHParams",
    "LocalHashEncoder",
    "LocalHashReport",
    "LocalHashingSpec",
    "OLHParams",
    "bucket_of",
    "exact_report_probability",
    "hash_buckets",
    "local_hash_support",
    "support_test_constants",
    "truth_threshold",
]

_M64 = (1 << 64) - 1
_M32 = PROB_ONE - 1
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


@dataclass(frozen=True, kw_only=True)
class OLHParams(FrequencyOracle):
    """Optimized local hashing (Wang et al. 2017, §4.4): hash the value into g buckets, then GRR over them.

    Each report carries a fresh hash seed (a, b), two uniform 64-bit words, and a bucket y in [0, g). The
    hash is the strongly universal multiply-add-shift family h(x) = ((a x + b) mod 2**64) >> 32
    (Dietzfelbinger 1996; Thorup 2015), and the bucket of x is floor(h(x) g / 2**32). The client reports
    its own bucket w.p. p = ``truth_probability`` and each other bucket w.p. (1-p)/(g-1); a report
    supports v when v hashes to y under the report's seed. So p* = p and q* = S p + (1-S)(1-p)/(g-1)
    with S the exact bucket collision mass (1/g up to g/2**64;
    :func:`ldp_client._oracle_math.local_hashing_q_star`), and epsilon = ln(p (g-1)/(1-p)). The
    optimum g is about e^eps + 1 (n Var* = 4e^eps/(e^eps-1)^2).
    """

    name: ClassVar[str] = "olh"
    g: int
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        object.__setattr__(self, "truth_threshold", truth_threshold(self.g, self.truth_probability))

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        return _oracle_math.local_hashing_q_star(self.p_star, self.g)

    @property
    def epsilon(self) -> float:
        return privacy.grr_epsilon(self.p_star, self.g)

    @property
    def report_bits(self) -> int:
        """128 bits of seed (a, b) plus ceil(log2 g) bits of bucket."""
        return 128 + _oracle_math.ceil_log2(self.g)

    @classmethod
    def from_epsilon(
        cls, domain: int | Sequence[str] | Domain, epsilon: float, *, g: int | None = None
    ) -> OLHParams:
        """Local hashing at ``epsilon`` with g buckets (default: the variance-optimal integer g, about
        e^eps + 1) and p = e^eps/(e^eps + g - 1) rounded down to a multiple of 2**-32."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        chosen = g is None
        if g is None:
            g = _oracle_math.best_olh_g(eps)
        int_field("g", g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        t = _oracle_math.grr_like_threshold(g, eps)
        if t == 0:
            where = "" if chosen else f" at g={g}"
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to change a 32-bit probability{where}"
            )
        params = cls(domain=dom, g=g, truth_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> OLHParams:
        dom = require_domain(domain, cls.name)
        g = take_field(fields, "g", int, cls.name) if "g" in fields else None
        if epsilon is not None:
            no_more_fields(fields, cls.name, ("g",))
            if cls is BLHParams:
                return BLHParams.from_epsilon(dom, epsilon, g=2 if g is None else g)  # type: ignore[arg-type]
            return cls.from_epsilon(dom, epsilon, g=g)  # type: ignore[arg-type]
        tp = (
            take_field(fields, "truth_probability", float, cls.name)
            if "truth_probability" in fields
            else None
        )
        no_more_fields(fields, cls.name, ("g", "truth_probability"))
        if tp is None:
            raise InvalidParameterError("params", [], f"epsilon, or truth_probability (and g) for {cls.name}")
        if g is None:
            g = 2 if cls is BLHParams else None
        if g is None:
            raise InvalidParameterError("g", None, "an integer number of buckets >= 2 (or give epsilon)")
        return cls(domain=dom, g=g, truth_probability=tp)  # type: ignore[arg-type]


def truth_threshold(g: object, truth_probability: float) -> int:
    """P(report the true bucket) quantized to its 2^-32 threshold, with g checked: local hashing needs
    1/g < p < 1 (p = 1/g reports nothing; p = 1 is no privacy). OLH, BLH and pem's levels share it.

    Raises:
        InvalidParameterError: g outside [2, MAX_LOCAL_HASH_BUCKETS] or the probability outside (1/g, 1).
    """
    g = int_field("g", g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
    t = quantize_probability("truth_probability", truth_probability)
    if not (t * g > PROB_ONE and t < PROB_ONE):
        raise InvalidParameterError(
            "truth_probability",
            truth_probability,
            f"a probability in (1/g, 1) = ({1 / g}, 1)"
            + rounding_note("truth_probability", truth_probability, t),
        )
    return t


@dataclass(frozen=True, kw_only=True)
class BLHParams(OLHParams):
    """Binary local hashing: local hashing with g = 2 buckets (Wang et al. 2017, §4.4).

    One bit of bucket per report (plus the seed); n Var* = (e^eps + 1)^2/(e^eps - 1)^2.
    """

    name: ClassVar[str] = "blh"
    g: int = 2

    def __post_init__(self) -> None:
        if self.g != 2:
            raise InvalidParameterError("g", self.g, "2 (binary local hashing; use olh for other g)")
        super().__post_init__()

    @classmethod
    def from_epsilon(
        cls, domain: int | Sequence[str] | Domain, epsilon: float, *, g: int | None = 2
    ) -> BLHParams:
        """BLH at ``epsilon``: p = e^eps/(e^eps + 1) rounded down to a multiple of 2**-32."""
        if g not in (None, 2):
            raise InvalidParameterError("g", g, "2 (binary local hashing; use olh for other g)")
        eps = check_epsilon(epsilon)
        t = _oracle_math.grr_like_threshold(2, eps)
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=Domain.of(domain), g=2, truth_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params


class LocalHashReport(NamedTuple):
    """One local-hashing report: the hash seed (a, b), two 64-bit words, and the bucket in [0, g)."""

    a: int
    b: int
    bucket: int


def bucket_of(a: int, b: int, x: int, g: int) -> int:
    """floor(h_{a,b}(x) g / 2**32) with h_{a,b}(x) = ((a x + b) mod 2**64) >> 32 (module docstring)."""
    return (((((a * x + b) & _M64) >> 32) * g) >> 32) & _M32


def hash_buckets(
    a: NDArray[np.uint64], b: NDArray[np.uint64], values: NDArray[np.uint64], g: int
) -> NDArray[np.uint64]:
    """numpy version of :func:`bucket_of`, broadcasting ``a``, ``b`` against ``values`` (uint64 arrays,
    arithmetic modulo 2**64 as numpy's unsigned arrays wrap)."""
    import numpy as np

    a64 = np.atleast_1d(np.asarray(a, dtype=np.uint64))
    b64 = np.atleast_1d(np.asarray(b, dtype=np.uint64))
    v64 = np.atleast_1d(np.asarray(values, dtype=np.uint64))
    h = (a64 * v64 + b64) >> np.uint64(32)
    out: NDArray[np.uint64] = (h * np.uint64(g)) >> np.uint64(32)
    return out


def support_test_constants(
    b: NDArray[np.uint64], buckets: NDArray[np.integer], g: int
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """(b', W) per report such that report (a, b, y) supports v iff ``(a v + b') mod 2**64 < W``.

    With bucket y = [lo, lo + w) of hash values: b' = (b - lo 2**32) mod 2**64 and W = w 2**32. The top 32
    bits of a v + b' are (h(v) - lo) mod 2**32 (subtracting a multiple of 2**32 leaves the low bits and
    their carries alone), which is < w exactly when lo <= h(v) < lo + w.
    """
    import numpy as np

    y = np.asarray(buckets, dtype=np.int64)
    # Bucket bounds lo_y = ceil(y 2**32 / g) for every bucket, in exact int64 arithmetic (y 2**32 < 2**52
    # for g <= 2**20), then gathered per report.
    edges = -((-(np.arange(g + 1, dtype=np.int64) << 32)) // g)
    lo_table = edges[:-1].astype(np.uint64)
    width_table = np.diff(edges).astype(np.uint64)
    b_prime = np.asarray(b, dtype=np.uint64) - (lo_table[y] << np.uint64(32))
    limit = width_table[y] << np.uint64(32)
    return b_prime, limit


def exact_report_probability(params: OLHParams, value: int, a: int, b: int, bucket: int) -> Fraction:
    """P(bucket | value, seed (a, b)) exactly: p if ``bucket`` is the value's bucket, else (1-p)/(g-1).

    The seed itself is uniform and independent of the value (for tests).
    """
    p = Fraction(params.truth_threshold, PROB_ONE)
    if bucket_of(a, b, value, params.g) == bucket:
        return p
    return (1 - p) / (params.g - 1)


class LocalHashEncoder:
    """Encodes one domain value per report with local hashing (OLH or BLH parameters).

    Raises:
        InvalidParameterError: ``params`` is not an :class:`OLHParams` (BLHParams included).
    """

    __slots__ = ("_g", "_index_of", "_others", "_size", "_truth", "params")

    def __init__(self, params: OLHParams) -> None:
        if not isinstance(params, OLHParams):
            raise InvalidParameterError("params", type(params).__name__, "OLHParams or BLHParams")
        self.params = params
        self._size = params.domain.size
        self._g = params.g
        self._others = params.g - 1
        self._truth = params.truth_threshold
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"LocalHashEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> LocalHashReport:
        """Randomize one value (a label, or an int for an integer domain) with the OS CSPRNG.

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> LocalHashReport:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> LocalHashReport:
        r = _from_bytes(_rnd._source(24), "little")
        a = r & _M64
        b = (r >> 64) & _M64
        g = self._g
        own = (((((a * index + b) & _M64) >> 32) * g) >> 32) & _M32
        if ((r >> 128) & _M32) < self._truth:
            return LocalHashReport(a, b, own)
        other = _uniform_below(self._others, r >> 160)
        return LocalHashReport(a, b, other + 1 if other >= own else other)

    def encode_batch(
        self, indices: ArrayLike, rng: np.random.Generator
    ) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint32]]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Per row: a, b uniform 64-bit words, u a uniform uint32 (truthful iff u < T), and an "other" bucket
        ``o + (o >= own)`` with o uniform in [0, g-1) -- the per-report law, vectorised.

        Returns:
            ``(a uint64 (n,), b uint64 (n,), buckets uint32 (n,))``.

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
        a = raw_words(rng, n).astype(np.uint64)
        b = raw_words(rng, n).astype(np.uint64)
        own = hash_buckets(a, b, idx.astype(np.uint64), self._g).astype(np.int64)
        truthful = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(self._truth)
        other: NDArray[np.int64] = np.asarray(rng.integers(0, self._others, size=n, dtype=np.int64))
        other = other + (other >= own)
        buckets = np.where(truthful, own, other).astype(np.uint32)
        return a, b, buckets


# ------------------------------------------------------------------------------------------------ server

# uint64 elements per (reports x values) block of the local-hashing evaluation: 2 MiB stays in cache.
_HASH_BLOCK = 1 << 18


def local_hash_support(
    a: NDArray[np.uint64], b: NDArray[np.uint64], buckets: NDArray[np.integer], params: OLHParams
) -> NDArray[np.int64]:
    """C_v for v in [0, d): the number of reports (a, b, y) whose seed hashes v into bucket y.

    Report (a, b, y) supports v iff (a v + b') mod 2**64 < W with per-report constants b', W
    (:func:`support_test_constants`), evaluated for a block of reports x all d values at once in uint64
    numpy arithmetic (multiply, add, compare), and the block's booleans summed per value: O(n d) work with
    no Python loop per report. Validated columns expected.
    """
    import numpy as np

    d, g = params.domain.size, params.g
    n = int(a.shape[0])
    counts = np.zeros(d, dtype=np.int64)
    if n == 0:
        return counts
    b_prime, limit = support_test_constants(b, buckets, g)
    a64 = np.asarray(a, dtype=np.uint64)
    values = np.arange(d, dtype=np.uint64)
    rows = max(1, _HASH_BLOCK // d)
    work = np.empty((min(rows, n), d), dtype=np.uint64)
    hits = np.empty((min(rows, n), d), dtype=np.bool_)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        r = stop - start
        t, m = work[:r], hits[:r]
        # (a v + b') mod 2**64 for every (report, value): numpy's uint64 arithmetic wraps modulo 2**64.
        np.multiply(a64[start:stop, None], values[None, :], out=t)
        np.add(t, b_prime[start:stop, None], out=t)
        np.less(t, limit[start:stop, None], out=m)
        counts += m.sum(axis=0, dtype=np.int64)
    return counts


def _check_hash_columns(columns: object, params: OLHParams) -> tuple[NDArray[np.uint64], ...]:
    """Decoded (a, b, buckets) columns as the aggregator takes them (uint64, uint64, integers < g)."""
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 3:
        raise InvalidReportError(
            "reports", type(columns).__name__, f"an (a, b, buckets) tuple for {params.name}"
        )
    a, b, y = (np.asarray(c) for c in columns)
    n = a.shape[0] if a.ndim == 1 else -1
    for name, arr in (("a", a), ("b", b)):
        if arr.dtype != np.uint64 or arr.ndim != 1 or arr.shape[0] != n:
            raise InvalidReportError(f"reports.{name}", f"{arr.dtype}{arr.shape}", "uint64 of shape (n,)")
    if y.ndim != 1 or y.shape[0] != n or not np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        raise InvalidReportError("reports.buckets", f"{y.dtype}{y.shape}", f"integers of shape ({n},)")
    if y.size and (int(y.min()) < 0 or int(y.max()) >= params.g):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise InvalidReportError("reports.buckets", bad, f"buckets in [0, {params.g - 1}]")
    return a, b, y


# ------------------------------------------------------------------------------------------------- codec


def _hash_value(field: str, report: object, params: OLHParams) -> tuple[int, int, int]:
    """One per-report output (a LocalHashReport) as validated (a, b, bucket) integers."""
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


def _pack_row(r: LocalHashReport) -> bytes:
    """The 20-byte journal row of a report: u64 a, u64 b, u32 bucket, little-endian."""
    return r.a.to_bytes(8, "little") + r.b.to_bytes(8, "little") + r.bucket.to_bytes(4, "little")


def _unpack_row(row: bytes) -> LocalHashReport:
    return LocalHashReport(
        int.from_bytes(row[:8], "little"),
        int.from_bytes(row[8:16], "little"),
        int.from_bytes(row[16:], "little"),
    )


# ------------------------------------------------------------------------------- exhaustive checks (tests)


@functools.cache
def balanced_seeds(d: int, g: int) -> tuple[tuple[int, int], ...]:
    """A sample of seeds (a, b) over which the buckets of any two of the d values behave exactly as over the
    whole family: each value's bucket uniform on [0, g), two values in one bucket for exactly 1/g of them.

    For g = 2**r (the bucket is then the top r bits of a x + b mod 2**64, and the family's collision mass
    is exactly 1/g): a = a' 2**(64-s) and b = b' 2**(64-s) for every a', b' in [0, 2**s), so a x + b is
    (a' x + b' mod 2**s) 2**(64-s). b' uniform makes a' x + b' uniform; for x != v the offset a' (x - v)
    is uniform on the multiples of 2**t in Z_(2**s) (2**t the largest power of two dividing x - v), and
    averaged over those offsets two points fall into one of g equal arcs of 2**(s-r) with probability
    exactly 1/g as long as 2**t <= 2**(s-r). So s = r + max t over differences below d (2**(2s) seeds).
    The support rates averaged over the sample are then exactly p* and q*, which the exhaustive checks
    of the estimator need; the seeds themselves are arbitrary valid ones.

    Raises:
        InvalidParameterError: g is not a power of two, or the sample would exceed 2**12 seeds.
    """
    r = g.bit_length() - 1
    if g != 1 << r:
        raise InvalidParameterError("g", g, "a power of two for the exhaustive seed sample (2, 4, 8, ...)")
    s = r + (d - 1).bit_length() - 1
    if 2 * s > 12:
        raise InvalidParameterError("d", d, f"a domain small enough for an exhaustive seed sample at g={g}")
    shift = 64 - s
    return tuple((a << shift, b << shift) for a in range(1 << s) for b in range(1 << s))


class LocalHashingSpec(OracleSpec[Any]):
    """Local hashing (OLH or BLH) for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.<name>`` (``LocalHashingParams``: domain, g, truth probability); batch columns ``a``,
    ``b`` (little-endian uint64) and ``buckets`` (little-endian uint32, each < g) of ``ReportBatch.<name>``;
    ``Report.<name>`` one (a, b, bucket). Journal row: u64 a, u64 b, u32 bucket. Accumulator: ``support`` of
    d counts, computed at ingest for the declared domain; p* = p, q* = S p + (1-S)(1-p)/(g-1).

    Exhaustive checks: the seed is public and independent of the value, so :meth:`exact_outputs` conditions
    on the balanced seed sample of :func:`balanced_seeds` (each seed with equal weight; g a power of two),
    and :meth:`exact_output_probability` gives P(bucket | value, seed) for any seed.
    """

    def make_args(self, params: OLHParams) -> MakeArgs:
        return MakeArgs(
            domain=self.domain_arg(params),
            fields={"g": params.g, "truth_probability": params.truth_probability},
        )

    def params_to_proto(self, params: OLHParams) -> campaign_pb2.LocalHashingParams:
        return campaign_pb2.LocalHashingParams(
            domain=domain_to_proto(params.domain), g=params.g, truth_probability=params.truth_probability
        )

    def params_from_proto(self, msg: campaign_pb2.LocalHashingParams) -> OLHParams:
        cls: type[OLHParams] = self.params_type
        return cls(domain=domain_from_proto(msg.domain), g=msg.g, truth_probability=msg.truth_probability)

    def encoder(
        self, params: OLHParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return LocalHashEncoder(params).encode

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: OLHParams, columns: Any) -> None:
        import numpy as np

        field = self.wire.batch
        if not isinstance(columns, tuple) or len(columns) != 3:
            raise InvalidReportError(field, type(columns).__name__, "an (a, b, buckets) tuple of arrays")
        a = as_array(f"{field}.a", columns[0], "uint64 seed words", 1)
        b = as_array(f"{field}.b", columns[1], "uint64 seed words", 1)
        y = as_array(f"{field}.buckets", columns[2], "integer buckets", 1)
        n = a.shape[0]
        check_count("count", n)
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
        cols.a = a.astype(U64_LE).tobytes()
        cols.b = b.astype(U64_LE).tobytes()
        cols.buckets = y.astype(U32_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: OLHParams, n: int) -> Any:
        import numpy as np

        field = self.wire.batch
        cols = getattr(msg, field)
        check_length(f"{field}.a", cols.a, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{field}.b", cols.b, 8 * n, f"8 * count for count={n} little-endian uint64")
        check_length(f"{field}.buckets", cols.buckets, 4 * n, f"4 * count for count={n} little-endian uint32")
        buckets = np.frombuffer(cols.buckets, dtype=U32_LE)
        check_indices(buckets, params.g, f"{field}.buckets", "a bucket")
        a = np.frombuffer(cols.a, dtype=U64_LE).astype(np.uint64, copy=False)
        b = np.frombuffer(cols.b, dtype=U64_LE).astype(np.uint64, copy=False)
        return a, b, buckets.astype(np.uint32, copy=False)

    def report_to_proto(self, msg: reports_pb2.Report, params: OLHParams, output: Any) -> None:
        a, b, y = _hash_value("report", output, params)
        target = getattr(msg, self.wire.report)
        target.a, target.b, target.bucket = a, b, y

    def report_from_proto(self, msg: reports_pb2.Report, params: OLHParams) -> Any:
        import numpy as np

        field = self.wire.report
        r = getattr(msg, field)
        if r.bucket >= params.g:
            raise InvalidReportError(f"{field}.bucket", r.bucket, f"a bucket in [0, {params.g - 1}]")
        return (
            np.array([r.a], dtype=np.uint64),
            np.array([r.b], dtype=np.uint64),
            np.array([r.bucket], dtype=np.uint32),
        )

    def batch_from_reports(self, params: OLHParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        triples = [_hash_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        return (
            np.array([t[0] for t in triples], dtype=np.uint64),
            np.array([t[1] for t in triples], dtype=np.uint64),
            np.array([t[2] for t in triples], dtype=np.uint32),
        )

    def row_fields(self, params: OLHParams) -> tuple[RowField, ...]:
        field = self.wire.batch
        return (RowField((field, "a"), 8), RowField((field, "b"), 8), RowField((field, "buckets"), 4))

    def row_packer(self, params: OLHParams) -> Callable[[Any], bytes]:
        return _pack_row

    def row_unpacker(self, params: OLHParams) -> Callable[[bytes], Any]:
        return _unpack_row

    def encode_batch(
        self,
        params: OLHParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return LocalHashEncoder(params).encode_batch(values, rng)

    def layout_batch(self, params: OLHParams, columns: Any) -> Any:
        a, b, y = _check_hash_columns(columns, params)
        return int(a.shape[0]), local_hash_support(a, b, y, params)

    def exact_outputs(self, params: OLHParams, value: Any) -> Mapping[Hashable, Fraction]:
        index = params.domain.index(value)
        seeds = balanced_seeds(params.domain.size, params.g)
        weight = Fraction(1, len(seeds))
        return {
            LocalHashReport(a, b, y): weight * exact_report_probability(params, index, a, b, y)
            for a, b in seeds
            for y in range(params.g)
        }

    def exact_output_probability(self, params: OLHParams, value: Any, output: Any) -> Fraction:
        if not isinstance(output, LocalHashReport) or not 0 <= output.bucket < params.g:
            return Fraction(0)
        index = params.domain.index(value)
        return exact_report_probability(params, index, output.a, output.b, output.bucket)


class OLHSpec(LocalHashingSpec):
    """Optimized local hashing (:class:`OLHParams`)."""

    name: ClassVar[str] = OLHParams.name
    params_type: ClassVar[type[Any]] = OLHParams
    wire: ClassVar[WireNames] = WireNames(campaign="olh", batch="olh", report="olh")

    def examples(self) -> tuple[OLHParams, ...]:
        return (
            OLHParams.from_epsilon(3, math.log(3.0), g=4),
            OLHParams(domain=Domain.of(("a", "b", "c", "d")), g=4, truth_probability=0.5),
            OLHParams(domain=Domain.of(5), g=2, truth_probability=0.6),
        )


class BLHSpec(LocalHashingSpec):
    """Binary local hashing (:class:`BLHParams`): local hashing with g = 2."""

    name: ClassVar[str] = BLHParams.name
    params_type: ClassVar[type[Any]] = BLHParams
    wire: ClassVar[WireNames] = WireNames(campaign="blh", batch="blh", report="blh")

    def make_args(self, params: OLHParams) -> MakeArgs:
        return MakeArgs(
            domain=self.domain_arg(params), fields={"truth_probability": params.truth_probability}
        )

    def examples(self) -> tuple[OLHParams, ...]:
        return (
            BLHParams.from_epsilon(2, 1.0),
            BLHParams.from_epsilon(("x", "y", "z"), 2.0),
            BLHParams(domain=Domain.of(6), truth_probability=0.7),
        )


OLH_SPEC = OLHSpec()
"""Optimized local hashing, as :mod:`ldp_client.registry` lists it."""
BLH_SPEC = BLHSpec()
"""Binary local hashing, as :mod:`ldp_client.registry` lists it."""
