"""Unary encoding: OUE and SUE (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.3).

The value x in a domain of size d becomes a one-hot d-bit vector; the reported bit x is 1 with probability
p and every other bit is 1 with probability q, independently. With the quantized thresholds P, Q
(p = P/2**32, q = Q/2**32) the encoders implement exactly:

* per report (OS CSPRNG, one read of about d + 4 bytes): all d bits are drawn Bernoulli(q) by
  :class:`ldp_client._bytesample.ByteBernoulli` (about one random byte per bit, a lexicographic comparison
  of a uniform 32-bit word with Q evaluated lazily), then bit x is replaced by an independent coin
  ``u < P`` (u a uniform 32-bit word from the same read). Bits stay
  independent, bit x is Bernoulli(p), the others Bernoulli(q).
* batch (seeded numpy Generator, for simulation): the same law, sampled either densely (a uniform byte
  per position compared with Q >> 24, ties broken by a 24-bit word) or, when q d is small, sparsely:
  the number of noise ones of a row is Binomial(d, q) and their positions are a uniformly random subset
  of that size (drawn with replacement and topped up until the row has its count: a procedure
  equivariant under permutations of the positions, hence uniform), so no d uniforms per report.

Reports are ints (bit i = report bit i) per report and packed uint8 rows ``(n, ceil(d/8))`` in little
bit order in batches (``docs/rappor-encoding.md``; bit i is ``(row[i // 8] >> (i % 8)) & 1``).

Everything else about the two mechanisms is :data:`OUE_SPEC` and :data:`SUE_SPEC` (:mod:`ldp_client.spec`):
the wire layout (``oue``/``sue`` with ``UnaryEncodingParams``; d-bit rows in ``oue_bits``/``sue_bits``), the
journal row (the row bytes), the ``support`` accumulator of d counts (report bit v set supports v: p* = p,
q* = q) and the exact sum sampler (:func:`sample_ue_support`).

Importing this module does not import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client import _oracle_math
from ldp_client._bytesample import ByteBernoulli
from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    smallest_threshold,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import domain_from_proto, domain_to_proto
from ldp_client.domain import (
    Domain,
    check_epsilon,
    no_more_fields,
    pair_rounding_note,
    report_quantization,
    require_domain,
    take_field,
)
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms._oracle import BitRowsSpec, FrequencyOracle, as_domain, true_counts_of
from ldp_client.spec import MakeArgs, SecretSource, SumSampler, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "OUE_SPEC",
    "SUE_SPEC",
    "OUEParams",
    "SUEParams",
    "UnaryEncoder",
    "UnaryEncodingSpec",
    "exact_report_probability",
    "sample_ue_support",
    "sparse_or_dense",
]


# Expected noise ones per row below which the batch encoder samples positions sparsely (measured on the
# project machine: the sparse path costs about 25 ns per one, the dense path about 1 us per 1024 bits).
_SPARSE_MAX_ONES = 40.0


@dataclass(frozen=True, kw_only=True)
class _UnaryEncoding(FrequencyOracle):
    """Unary encoding over a declared domain of size d (Wang et al. 2017, §4.3).

    The value x becomes a one-hot d-bit vector; the reported bit x is 1 with probability p and every
    other bit is 1 with probability q, independently. Bit v of a report supports v: p* = p, q* = q, and
    epsilon = ln(p (1-q) / ((1-p) q)) (two values differ in two bits).
    """

    p: float
    q: float
    p_threshold: int = field(init=False, repr=False, compare=False)
    q_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        pt = quantize_probability("p", self.p)
        qt = quantize_probability("q", self.q)
        if not 0 < qt < PROB_ONE:
            allowed = "a probability in (0, 1)" + rounding_note("q", self.q, qt)
            raise InvalidParameterError("q", self.q, allowed)
        if not qt < pt < PROB_ONE:
            raise InvalidParameterError(
                "p",
                self.p,
                f"a probability in (q, 1) = ({self.q!r}, 1)"
                + pair_rounding_note(("q", self.q, qt), ("p", self.p, pt)),
            )
        object.__setattr__(self, "p_threshold", pt)
        object.__setattr__(self, "q_threshold", qt)

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.p_threshold)

    @property
    def q_star(self) -> float:
        return threshold_to_probability(self.q_threshold)

    @property
    def epsilon(self) -> float:
        return _oracle_math.unary_epsilon(self.p_star, self.q_star)

    @property
    def report_bits(self) -> int:
        return self.domain.size

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed report: ceil(d/8)."""
        return (self.domain.size + 7) // 8

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> _UnaryEncoding:
        dom = require_domain(domain, cls.name)
        if epsilon is not None:
            no_more_fields(fields, cls.name, ())
            return cls.from_epsilon(dom, epsilon)
        kwargs = {n: take_field(fields, n, float, cls.name) for n in ("p", "q") if n in fields}
        no_more_fields(fields, cls.name, ("p", "q"))
        try:
            return cls(domain=dom, **kwargs)  # type: ignore[arg-type]
        except TypeError as exc:
            raise InvalidParameterError("params", sorted(kwargs), f"epsilon, or p and q ({exc})") from None

    @classmethod
    def from_epsilon(cls, domain: int | Sequence[str] | Domain, epsilon: float) -> _UnaryEncoding:
        raise NotImplementedError  # pragma: no cover - overridden


@dataclass(frozen=True, kw_only=True)
class OUEParams(_UnaryEncoding):
    """Optimized unary encoding (Wang et al. 2017, §4.3): p = 1/2, q = 1/(e^eps + 1).

    n Var* = 4 e^eps / (e^eps - 1)^2, the large-domain optimum; a report is d bits.
    """

    name: ClassVar[str] = "oue"
    p: float = 0.5

    @classmethod
    def from_epsilon(cls, domain: int | Sequence[str] | Domain, epsilon: float) -> OUEParams:
        """OUE at ``epsilon``: p = 1/2 exactly and q = 1/(e^eps + 1) rounded UP to a multiple of 2**-32
        (a larger q is more private: epsilon = ln((1-q)/q))."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        # The smallest Q with ln((2**32 - Q) / Q) <= eps, decided exactly.
        qt = smallest_threshold(
            lambda q: ratio_within_exp(PROB_ONE - q, q, eps),
            math.ceil(PROB_ONE / (math.exp(min(eps, 700.0)) + 1.0)),
            1,
            PROB_ONE // 2 - 1,
        )
        if qt == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=dom, p=0.5, q=threshold_to_probability(qt))
        report_quantization(eps, params.epsilon)
        return params


@dataclass(frozen=True, kw_only=True)
class SUEParams(_UnaryEncoding):
    """Symmetric unary encoding = basic one-time RAPPOR (Wang et al. 2017, §4.3; Erlingsson et al. 2014).

    p = e^(eps/2)/(e^(eps/2) + 1), q = 1 - p; n Var* = e^(eps/2)/(e^(eps/2) - 1)^2.
    """

    name: ClassVar[str] = "sue"

    @classmethod
    def from_epsilon(cls, domain: int | Sequence[str] | Domain, epsilon: float) -> SUEParams:
        """SUE at ``epsilon``: p rounded DOWN to a multiple of 2**-32 and q = 1 - p exactly: the largest P
        with 2 ln(P / (2**32 - P)) <= eps, decided exactly."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        pt = largest_threshold(
            lambda t: ratio_within_exp(t * t, (PROB_ONE - t) ** 2, eps),
            math.floor(PROB_ONE / (1.0 + math.exp(-eps / 2.0))),
            PROB_ONE // 2 + 1,
            PROB_ONE - 1,
        )
        if pt == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=dom, p=threshold_to_probability(pt), q=threshold_to_probability(PROB_ONE - pt))
        report_quantization(eps, params.epsilon)
        return params


def exact_report_probability(params: OUEParams | SUEParams, value: int, report: int) -> Fraction:
    """P(report | value) exactly, from the quantized thresholds: prod over bits of p, 1-p, q or 1-q.

    For tests and small domains (the caller enumerates the 2**d reports).
    """
    d = params.domain.size
    p = Fraction(params.p_threshold, PROB_ONE)
    q = Fraction(params.q_threshold, PROB_ONE)
    out = Fraction(1)
    for i in range(d):
        bit = (report >> i) & 1
        rate = p if i == value else q
        out *= rate if bit else 1 - rate
    return out


def sparse_or_dense(params: OUEParams | SUEParams) -> str:
    """Which batch sampler :meth:`UnaryEncoder.encode_batch` uses: ``"sparse"`` or ``"dense"``."""
    return "sparse" if params.q_star * params.domain.size <= _SPARSE_MAX_ONES else "dense"


class UnaryEncoder:
    """Encodes one domain value per report with unary encoding (OUE or SUE parameters).

    Args:
        params: :class:`OUEParams` or :class:`SUEParams`.

    Raises:
        InvalidParameterError: ``params`` is neither.
    """

    __slots__ = ("_coin", "_index_of", "_noise", "_size", "params")

    def __init__(self, params: OUEParams | SUEParams) -> None:
        if not isinstance(params, OUEParams | SUEParams):
            raise InvalidParameterError("params", type(params).__name__, "OUEParams or SUEParams")
        self.params = params
        self._size = params.domain.size
        self._coin = params.p_threshold
        self._noise = ByteBernoulli(params.q_threshold, params.domain.size)
        self._index_of = params.domain.index

    def __repr__(self) -> str:
        return f"UnaryEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> int:
        """Randomize one value (a domain label, or an int for an integer domain) with the OS CSPRNG.

        Returns:
            The d report bits as an int (bit i = report bit i).

        Raises:
            DomainError: ``value`` is not in the declared domain.
        """
        return self._encode(self._index_of(value))

    def encode_index(self, index: int) -> int:
        """Like :meth:`encode`, for a value given as its index in ``[0, d)``.

        Raises:
            DomainError: ``index`` is not an int in ``[0, d)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self._size:
            raise DomainError("index", index, f"an integer in [0, {self._size - 1}]")
        return self._encode(index)

    def _encode(self, index: int) -> int:
        noise, word = self._noise.sample_with_word()  # one CSPRNG read for both
        coin = word < self._coin
        bit = 1 << index
        return (noise | bit) if coin else (noise & ~bit)

    def encode_batch(self, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint8]:
        """Randomize a 1-D array of indices with a seeded numpy Generator. For simulation only.

        Same law and quantized thresholds as :meth:`encode` (module docstring): the noise bits of a row
        are Bernoulli(Q/2**32), sampled sparsely when q d <= 40 (see :func:`sparse_or_dense`) and densely
        otherwise, then bit x of each row is an independent ``u < P`` coin.

        Args:
            indices: 1-D integers in ``[0, d)``.
            rng: an explicit :class:`numpy.random.Generator` (never the global numpy state).

        Returns:
            uint8 array ``(n, ceil(d/8))``, little bit order, padding bits 0.

        Raises:
            DomainError: not a 1-D integer array, or a value outside ``[0, d)``.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        import numpy as np

        from ldp_client.mechanisms._batchbits import (
            as_index_array,
            bernoulli_rows_dense,
            bernoulli_rows_sparse,
            set_bit,
        )

        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
        idx = as_index_array(indices, self._size)
        d = self._size
        if sparse_or_dense(self.params) == "sparse":
            rows = bernoulli_rows_sparse(self.params.q_threshold, idx.shape[0], d, rng)
        else:
            rows = bernoulli_rows_dense(self.params.q_threshold, idx.shape[0], d, rng)
        coins = rng.integers(0, PROB_ONE, size=idx.shape[0], dtype=np.uint32) < np.uint32(self._coin)
        set_bit(rows, idx, coins)
        return rows


def sample_ue_support(
    params: OUEParams | SUEParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> tuple[int, NDArray[np.int64]]:
    """(n, C): support counts of unary encoding for ``true_counts[v]`` users holding v. For simulation only.

    The bits of a report are independent, so C_v = Bin(c_v, P/2**32) + Bin(n - c_v, Q/2**32),
    independently across v: exactly the law of the sums of one report per user, at a cost independent of
    the number of users.
    """
    import numpy as np

    from ldp_client._exact_sampling import check_rng

    g = check_rng(rng)
    c = true_counts_of(params.domain.size, true_counts)
    n = int(c.sum())
    support = g.binomial(c, params.p_star) + g.binomial(n - c, params.q_star)
    return n, support.astype(np.int64)


class UnaryEncodingSpec(BitRowsSpec[Any]):
    """Unary encoding (OUE or SUE) for every layer (:mod:`ldp_client.spec`).

    Wire: ``Campaign.<name>`` (``UnaryEncodingParams``: domain, p, q), d-bit rows in ``<name>_bits``.
    Journal row: the ceil(d/8) row bytes. Accumulator: ``support`` of d counts; report bit v set supports
    v with p* = p and q* = q. Exact sum sampler: :func:`sample_ue_support`.
    """

    def make_args(self, params: OUEParams | SUEParams) -> MakeArgs:
        return MakeArgs(domain=self.domain_arg(params), fields={"p": params.p, "q": params.q})

    def params_to_proto(self, params: OUEParams | SUEParams) -> campaign_pb2.UnaryEncodingParams:
        return campaign_pb2.UnaryEncodingParams(domain=domain_to_proto(params.domain), p=params.p, q=params.q)

    def params_from_proto(self, msg: campaign_pb2.UnaryEncodingParams) -> OUEParams | SUEParams:
        cls: type[OUEParams | SUEParams] = self.params_type
        return cls(domain=domain_from_proto(msg.domain), p=msg.p, q=msg.q)

    def encoder(
        self, params: OUEParams | SUEParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return UnaryEncoder(params).encode

    def encode_batch(
        self,
        params: OUEParams | SUEParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return UnaryEncoder(params).encode_batch(values, rng)

    def sum_sampler(self, params: OUEParams | SUEParams) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> tuple[int, NDArray[np.int64]]:
            return sample_ue_support(params, true_counts, rng)

        return sample

    def examples(self) -> tuple[OUEParams | SUEParams, ...]:
        cls = self.params_type
        return (
            cls.from_epsilon(3, 1.0),
            cls.from_epsilon(("red", "green", "blue", "cyan"), 2.0),
            cls(domain=Domain.of(5), p=0.75, q=0.3),
        )

    def exact_outputs(self, params: OUEParams | SUEParams, value: Any) -> Mapping[Hashable, Fraction]:
        index = params.domain.index(value)
        return {r: exact_report_probability(params, index, r) for r in range(1 << params.domain.size)}


class OUESpec(UnaryEncodingSpec):
    """Optimized unary encoding (:class:`OUEParams`)."""

    name: ClassVar[str] = OUEParams.name
    params_type: ClassVar[type[Any]] = OUEParams
    wire: ClassVar[WireNames] = WireNames(campaign="oue", batch="oue_bits", report="oue_bits")


class SUESpec(UnaryEncodingSpec):
    """Symmetric unary encoding (:class:`SUEParams`)."""

    name: ClassVar[str] = SUEParams.name
    params_type: ClassVar[type[Any]] = SUEParams
    wire: ClassVar[WireNames] = WireNames(campaign="sue", batch="sue_bits", report="sue_bits")


OUE_SPEC = OUESpec()
"""Optimized unary encoding, as :mod:`ldp_client.registry` lists it."""
SUE_SPEC = SUESpec()
"""Symmetric unary encoding, as :mod:`ldp_client.registry` lists it."""
