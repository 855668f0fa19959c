"""L-OSUE: longitudinal unary encoding, OUE memoized then SUE per report (Arcolezi, Couchot, Bouna, Xiao,
Digital Communications and Networks 2022, §4; multi-freq-ldpy's ``long_freq_est.L_OSUE``).

The value v is the one-hot d-bit vector B. Two rounds, bit by bit:

1. **memoized** (epsilon_inf): optimal unary encoding B'. Bit v is 1 w.p. p1 = 1/2 and every other bit 1
   w.p. q1 = T1 / 2**32. The coins come from the client secret (:mod:`~ldp_client.mechanisms.longitudinal.
   memo`, label ``ldp-client/losue/memo/v1``, key u32be(index of v): word 0 is bit v's coin, word 1 + i bit
   i's), so B' is the same at every report of v; unlimited reports reveal at most B', and two values differ
   in two bits of it: epsilon_inf = ln(p1 (1 - q1) / ((1 - p1) q1)) = ln((1 - q1) / q1).
2. **fresh per report** (OS CSPRNG): symmetric unary encoding of B': each bit kept w.p. p2 = T2 / 2**32, else
   flipped (RAPPOR's instantaneous response with P(1 | 1) = p2, P(1 | 0) = 1 - p2).

The bits stay independent, so the composed channel is unary encoding with

    p* = p1 p2 + (1 - p1)(1 - p2) = 1/2        q* = q1 p2 + (1 - q1)(1 - p2)

and one report's epsilon_1 = ln(p* (1 - q*) / ((1 - p*) q*)) = ln((1 - q*) / q*). At an epsilon, p2 is the
largest threshold with epsilon_1 <= eps (q* falls as p2 grows), decided exactly; q1 the smallest with
epsilon_inf <= eps_inf.

Estimation: bit v of a report supports v, through the one Support estimator with the composed (p*, q*).
Wire: ``Campaign.losue``, ``ReportBatch.losue_bits`` / ``Report.losue_bits`` (d-bit rows as ``oue_bits``).

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

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
from ldp_client.domain import Domain, DomainLike, check_epsilon, report_quantization
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms._oracle import BitRowsSpec, FrequencyOracle, as_domain, true_counts_of
from ldp_client.mechanisms.longitudinal.common import (
    MemoizedDomainSpec,
    check_epsilon_inf,
    epsilon_of,
    probability,
)
from ldp_client.mechanisms.longitudinal.memo import MemoWords, as_secret, memo_seed, u32be
from ldp_client.mechanisms.numeric.base import as_float
from ldp_client.mechanisms.rappor.encoding import _make_irr
from ldp_client.spec import SecretSource, SumSampler, WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = ["LOSUE_LABEL", "SPEC", "LOSUEEncoder", "LOSUEParams", "LOSUESpec", "memoized_bits"]

LOSUE_LABEL: Final = b"ldp-client/losue/memo/v1"
_HALF: Final = PROB_ONE // 2  # p1 = 1/2 (OUE)
_MEMO_SIZE: Final = 1024
MAX_VALUES: Final = 1 << 16
"""The largest domain: a new value's memoized vector takes d words of the stream (d / 8 HMAC blocks)."""


@dataclass(frozen=True, kw_only=True)
class LOSUEParams(FrequencyOracle):
    """L-OSUE over a declared domain of size d: memoized OUE (``first_one_probability`` q1, p1 = 1/2), then
    fresh SUE per report (``second_probability`` p2); module docstring. Use :meth:`from_epsilon`."""

    name: ClassVar[str] = "losue"
    first_one_probability: float
    second_probability: float
    first_threshold: int = field(init=False, repr=False, compare=False)
    second_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        if self.domain.size > MAX_VALUES:
            raise InvalidParameterError(
                "domain.size", self.domain.size, f"at most {MAX_VALUES} values for losue"
            )
        t1 = quantize_probability("first_one_probability", self.first_one_probability)
        if not 0 < t1 < _HALF:
            raise InvalidParameterError(
                "first_one_probability",
                self.first_one_probability,
                "a probability in (0, 1/2)"
                + rounding_note("first_one_probability", self.first_one_probability, t1),
            )
        t2 = quantize_probability("second_probability", self.second_probability)
        if not _HALF < t2 < PROB_ONE:
            raise InvalidParameterError(
                "second_probability",
                self.second_probability,
                "a probability in (1/2, 1)"
                + rounding_note("second_probability", self.second_probability, t2),
            )
        object.__setattr__(self, "first_threshold", t1)
        object.__setattr__(self, "second_threshold", t2)

    @classmethod
    def from_epsilon(cls, domain: DomainLike, epsilon: float, *, epsilon_inf: float) -> LOSUEParams:
        """L-OSUE at one report's ``epsilon`` (eps_1) and ``epsilon_inf`` (> eps_1): q1 the smallest threshold
        with ln((1-q1)/q1) <= eps_inf, p2 the largest with ln((1-q*)/q*) <= eps_1 (exact decisions)."""
        eps = check_epsilon(epsilon)
        eps_inf = check_epsilon_inf(epsilon_inf)
        if not eps < eps_inf:
            raise InvalidParameterError("epsilon", epsilon, f"less than epsilon_inf={epsilon_inf!r}")
        t1 = smallest_threshold(
            lambda t: ratio_within_exp(PROB_ONE - t, t, eps_inf),
            math.ceil(PROB_ONE / (math.exp(eps_inf) + 1.0)),
            1,
            _HALF - 1,
        )
        if t1 == 0:
            raise InvalidParameterError(
                "epsilon_inf", epsilon_inf, "a value representable in 32-bit thresholds"
            )

        def within(t2: int) -> bool:
            q_star = _q_star(t1, t2)
            ratio = (1 - q_star) / q_star
            return ratio_within_exp(ratio.numerator, ratio.denominator, eps)

        q1 = t1 / PROB_ONE
        target = 1.0 / (math.exp(eps) + 1.0)  # q* of SUE at eps
        estimate = math.floor(((1.0 - q1) - target) / (1.0 - 2.0 * q1) * PROB_ONE)
        t2 = largest_threshold(within, estimate, _HALF + 1, PROB_ONE - 1)
        if t2 == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value representable in 32-bit thresholds")
        params = cls(
            domain=Domain.of(domain),
            first_one_probability=threshold_to_probability(t1),
            second_probability=threshold_to_probability(t2),
        )
        report_quantization(eps, params.epsilon)
        return params

    @functools.cached_property
    def rates(self) -> tuple[Fraction, Fraction]:
        """(p*, q*) of the composed channel, exactly: (1/2, q1 p2 + (1 - q1)(1 - p2))."""
        return Fraction(1, 2), _q_star(self.first_threshold, self.second_threshold)

    @property
    def p_star(self) -> float:
        return float(self.rates[0])

    @property
    def q_star(self) -> float:
        return float(self.rates[1])

    @property
    def epsilon(self) -> float:
        """epsilon_1 of one report: ln(p* (1 - q*) / ((1 - p*) q*))."""
        p_star, q_star = self.rates
        return epsilon_of(p_star * (1 - q_star) / ((1 - p_star) * q_star))

    @property
    def epsilon_inf(self) -> float:
        """Unlimited reports of one value reveal at most B': ln((1 - q1) / q1) (p1 = 1/2)."""
        t1 = self.first_threshold
        return epsilon_of(Fraction(PROB_ONE - t1, t1))

    @property
    def report_bits(self) -> int:
        return self.domain.size


def _q_star(t1: int, t2: int) -> Fraction:
    q1, p2 = probability(t1), probability(t2)
    return q1 * p2 + (1 - q1) * (1 - p2)


def memoized_bits(secret: SecretSource, params: LOSUEParams, *, campaign_id: str, index: int) -> int:
    """The memoized OUE vector B' (bit i of the int = bit i) of the value with index ``index`` for the device
    with ``secret``: word 0 of the stream (label ``LOSUE_LABEL``, key u32be(index)) sets bit ``index`` iff it
    is below 2**31; word 1 + i sets bit i != index iff it is below T1. Deterministic."""
    words = MemoWords(as_secret(secret).prf, memo_seed(LOSUE_LABEL, campaign_id, u32be(index)))
    own = words.bernoulli(_HALF)
    t1 = params.first_threshold
    bits = 0
    for i in range(params.domain.size):
        if words.bernoulli(t1) and i != index:
            bits |= 1 << i
    return bits | (int(own) << index)


class LOSUEEncoder:
    """A device's L-OSUE encoder: B' memoized per value from the client secret, then fresh SUE (OS CSPRNG).

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (part of every memoized stream).
        secret: the device's client secret (or a function returning it).
    """

    __slots__ = ("_irr", "_memo", "params")

    def __init__(self, params: LOSUEParams, *, campaign_id: str, secret: SecretSource) -> None:
        if not isinstance(params, LOSUEParams):
            raise InvalidParameterError("params", type(params).__name__, "an LOSUEParams")
        self.params = params
        t2 = params.second_threshold
        # RAPPOR's IRR: P(1 | memoized 1) = p2, P(1 | memoized 0) = 1 - p2.
        self._irr = _make_irr(PROB_ONE - t2, t2, params.domain.size)
        self._memo = functools.lru_cache(maxsize=_MEMO_SIZE)(
            functools.partial(memoized_bits, as_secret(secret), params, campaign_id=campaign_id)
        )

    def __repr__(self) -> str:
        return f"LOSUEEncoder(params={self.params!r})"

    def memoized(self, value: str | int) -> int:
        """The memoized B' of ``value`` (DomainError outside the domain)."""
        return int(self._memo(index=self.params.domain.index(value)))

    def encode(self, value: str | int) -> int:
        """One report of ``value``: the d bits (bit i of the int = bit i) of fresh SUE on its B'."""
        return self._irr(self.memoized(value))


def encode_batch(params: LOSUEParams, indices: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint8]:
    """One report per simulated device (each with its own memoized round, drawn from ``rng``): packed rows
    (n, ceil(d/8)). For simulation only. B' has Bernoulli(q1) bits and bit v a fair coin; then every bit is
    flipped w.p. 1 - p2."""
    import numpy as np

    from ldp_client._npbits import bernoulli_packed
    from ldp_client.mechanisms._batchbits import as_index_array, bernoulli_rows_dense, set_bit

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    d = params.domain.size
    idx = as_index_array(indices, d)
    n = idx.shape[0]
    rows = bernoulli_rows_dense(params.first_threshold, n, d, rng)
    set_bit(rows, idx, rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(_HALF))
    flips = bernoulli_packed(PROB_ONE - params.second_threshold, n, d, rng)
    out: NDArray[np.uint8] = rows ^ flips
    return out


class LOSUESpec(MemoizedDomainSpec, BitRowsSpec[LOSUEParams]):
    """L-OSUE for every layer: d-bit rows (``losue_bits``), the ``support`` layout, the composed (p*, q*);
    its own parameters, encoder and exact channels."""

    name: ClassVar[str] = LOSUEParams.name
    params_type: ClassVar[type[Any]] = LOSUEParams
    wire: ClassVar[WireNames] = WireNames(campaign="losue", batch="losue_bits", report="losue_bits")
    message_type: ClassVar[type[Message]] = campaign_pb2.LongitudinalOSUEParams
    direct_fields: ClassVar[tuple[str, ...]] = ("first_one_probability", "second_probability")
    epsilon_fields: ClassVar[Mapping[str, Callable[[object], Any]]] = {
        "epsilon_inf": functools.partial(as_float, "epsilon_inf")
    }
    encoder_type: ClassVar[Callable[..., Any]] = LOSUEEncoder

    def encode_batch(
        self,
        params: LOSUEParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch(params, values, rng)

    def sum_sampler(self, params: LOSUEParams) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> tuple[int, NDArray[np.int64]]:
            # Bit v of every report is independent across users: Bin(c_v, p*) + Bin(n - c_v, q*), exactly the
            # law of the support counts (each item's; the simulator reads them item by item).
            c = true_counts_of(params.domain.size, true_counts)
            n = int(c.sum())
            return n, rng.binomial(c, params.p_star) + rng.binomial(n - c, params.q_star)

        return sample

    def examples(self) -> tuple[LOSUEParams, ...]:
        return (
            LOSUEParams.from_epsilon(2, 1.0, epsilon_inf=2.0),
            LOSUEParams.from_epsilon(("red", "green", "blue"), 0.5, epsilon_inf=3.0),
            LOSUEParams(domain=Domain.of(4), first_one_probability=0.25, second_probability=0.75),
        )

    def largest(self) -> tuple[LOSUEParams, ...]:
        return (
            LOSUEParams(
                domain=Domain.of(MAX_VALUES),
                first_one_probability=2.0**-32,
                second_probability=1.0 - 2.0**-32,
            ),
        )

    def exact_outputs(self, params: LOSUEParams, value: Any) -> Mapping[Hashable, Fraction]:
        # Each bit's two rounds multiplied out over its memoized bit (not the closed form p*, q*).
        v = params.domain.index(value)
        p2 = probability(params.second_threshold)
        ones = []
        for i in range(params.domain.size):
            first = Fraction(1, 2) if i == v else probability(params.first_threshold)
            ones.append(first * p2 + (1 - first) * (1 - p2))
        return _bit_vectors(ones)

    def exact_memoized_outputs(self, params: LOSUEParams, value: Any) -> Mapping[Hashable, Fraction]:
        v = params.domain.index(value)
        q1 = probability(params.first_threshold)
        return _bit_vectors([Fraction(1, 2) if i == v else q1 for i in range(params.domain.size)])


def _bit_vectors(ones: list[Fraction]) -> dict[Hashable, Fraction]:
    """P(vector) of independent bits with P(bit i = 1) = ``ones[i]``, for every vector (an int, bit i = bit
    i). 2**d entries: small domains only."""
    out: dict[Hashable, Fraction] = {}
    for bits in itertools.product((0, 1), repeat=len(ones)):
        prob = Fraction(1)
        for b, one in zip(bits, ones, strict=True):
            prob *= one if b else 1 - one
        out[sum(b << i for i, b in enumerate(bits))] = prob
    return out


SPEC = LOSUESpec()
"""L-OSUE, as :mod:`ldp_client.registry` lists it."""
