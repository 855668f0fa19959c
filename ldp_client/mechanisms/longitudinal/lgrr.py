"""L-GRR: longitudinal generalized randomized response (Arcolezi, Couchot, Bouna, Xiao, Digital
Communications and Networks 2022, "Improving the utility of locally differentially private protocols for
longitudinal and multidimensional frequency estimates", §4; multi-freq-ldpy's ``long_freq_est.L_GRR``).

Two rounds of GRR over a domain of size d, with p_i = T_i / 2**32 and q_i = (1 - p_i)/(d - 1):

1. **memoized** (epsilon_inf): the value v becomes x' = v w.p. p1, else a uniformly random other value. The
   coins come from the client secret (:mod:`~ldp_client.mechanisms.longitudinal.memo`, label
   ``ldp-client/lgrr/memo/v1``, key u32be(index of v)), so x' is the same at every report of v, survives
   restarts and is never stored. Unlimited reports of v reveal at most x': epsilon_inf = ln(p1 (d-1)/(1-p1)).
2. **fresh per report** (OS CSPRNG): GRR with p2 on x'.

The composed channel is again GRR-shaped (Arcolezi et al., eq. for L-GRR):

    p* = P(y = v | v) = p1 p2 + (d - 1) q1 q2          q* = P(y = u | v), u != v, = (1 - p*)/(d - 1)

so one report's epsilon_1 = ln(p* (d - 1)/(1 - p*)). multi-freq-ldpy solves for p2 from the two-value
ratio (p1 p2 + q1 q2)/(p1 q2 + q1 p2), which is the composed channel's only for d = 2: for d > 2 its
campaigns spend another epsilon than the one asked (``tests/ldp_client/mechanisms/test_longitudinal.py``
enumerates the composed channel). Here p2 is the largest threshold whose composed ratio is at most e^eps,
decided exactly; p* = q1 + p2 (p1 - q1) is affine in p2.

Estimation: reports are counted per index (``counts`` layout) and the one Support estimator is fed (p*, q*)
of the composed channel: count_hat = (C_v - n q*)/(p* - q*), unbiased, with its variance (Wang et al.,
USENIX Security 2017, §4). Wire: ``Campaign.lgrr``, ``ReportBatch.lgrr_indices`` (little-endian uint32),
``Report.lgrr_index``, the codec of :mod:`ldp_client.mechanisms.grr`.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client import _oracle_math
from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain, DomainLike, check_epsilon, report_quantization
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRRCodecSpec, GRREncoder, GRRParams, sample_grr_counts
from ldp_client.mechanisms.longitudinal.common import (
    MemoizedDomainSpec,
    check_epsilon_inf,
    epsilon_of,
    grr_channel_row,
    probability,
)
from ldp_client.mechanisms.longitudinal.memo import MemoWords, as_secret, memo_seed, u32be
from ldp_client.mechanisms.numeric.base import as_float
from ldp_client.spec import SecretSource, SumSampler, WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import NDArray

__all__ = ["LGRR_LABEL", "SPEC", "LGRREncoder", "LGRRParams", "LGRRSpec", "memoized_index"]

LGRR_LABEL: Final = b"ldp-client/lgrr/memo/v1"
_MEMO_SIZE: Final = 4096


def _grr_threshold(field_name: str, value: float, d: int) -> int:
    t = quantize_probability(field_name, value)
    if not (t * d > PROB_ONE and t < PROB_ONE):
        raise InvalidParameterError(
            field_name,
            value,
            f"a probability in (1/d, 1) = ({1 / d}, 1)" + rounding_note(field_name, value, t),
        )
    return t


@dataclass(frozen=True, kw_only=True)
class LGRRParams:
    """L-GRR over a declared domain of size d: a memoized GRR round (``first_probability`` p1) and a fresh
    GRR round per report (``second_probability`` p2); module docstring. Use :meth:`from_epsilon`."""

    name: ClassVar[str] = "lgrr"
    domain: Domain
    first_probability: float
    second_probability: float
    first_threshold: int = field(init=False, repr=False, compare=False)
    second_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        d = self.domain.size
        object.__setattr__(
            self, "first_threshold", _grr_threshold("first_probability", self.first_probability, d)
        )
        object.__setattr__(
            self, "second_threshold", _grr_threshold("second_probability", self.second_probability, d)
        )

    @classmethod
    def from_epsilon(cls, domain: DomainLike, epsilon: float, *, epsilon_inf: float) -> LGRRParams:
        """L-GRR with one report's epsilon ``epsilon`` (eps_1) and the longitudinal ``epsilon_inf`` (eps_inf >
        eps_1): p1 = GRR's threshold at eps_inf, p2 the largest threshold whose composed channel has
        ln(p* (d-1)/(1-p*)) <= eps_1 (both rounded toward privacy, decided exactly)."""
        eps = check_epsilon(epsilon)
        eps_inf = check_epsilon_inf(epsilon_inf)
        if not eps < eps_inf:
            raise InvalidParameterError("epsilon", epsilon, f"less than epsilon_inf={epsilon_inf!r}")
        dom = Domain.of(domain)
        d = dom.size
        t1 = _oracle_math.grr_like_threshold(d, eps_inf)
        if t1 == 0:
            raise InvalidParameterError("epsilon_inf", epsilon_inf, f"a value representable at d={d}")

        def within(t2: int) -> bool:
            ratio = _composed_ratio(t1, t2, d)
            return ratio_within_exp(ratio.numerator, ratio.denominator, eps)

        p1 = probability(t1)
        q1 = (1 - p1) / (d - 1)
        target = 1.0 / (1.0 + (d - 1) * math.exp(-eps))  # p* of GRR at eps_1
        estimate = math.floor((target - float(q1)) / float(p1 - q1) * PROB_ONE)
        t2 = largest_threshold(within, estimate, PROB_ONE // d + 1, PROB_ONE - 1)
        if t2 == 0:
            raise InvalidParameterError("epsilon", epsilon, f"a value representable at d={d}")
        params = cls(
            domain=dom,
            first_probability=threshold_to_probability(t1),
            second_probability=threshold_to_probability(t2),
        )
        report_quantization(eps, params.epsilon)
        return params

    @functools.cached_property
    def rates(self) -> tuple[Fraction, Fraction]:
        """(p*, q*) of the composed channel, exactly (module docstring)."""
        return _composed_rates(self.first_threshold, self.second_threshold, self.domain.size)

    @property
    def p(self) -> float:
        """p* = P(report = v | value = v) of the composed channel."""
        return float(self.rates[0])

    @property
    def q(self) -> float:
        """q* = P(report = u | value = v), u != v, of the composed channel."""
        return float(self.rates[1])

    @property
    def epsilon(self) -> float:
        """epsilon_1 of one report: ln(p* / q*) of the composed channel."""
        p_star, q_star = self.rates
        return epsilon_of(p_star / q_star)

    @property
    def epsilon_inf(self) -> float:
        """Unlimited reports of one value reveal at most the memoized x': ln(p1 (d-1)/(1-p1))."""
        t1 = self.first_threshold
        return epsilon_of(Fraction(t1 * (self.domain.size - 1), PROB_ONE - t1))

    def first_round(self) -> GRRParams:
        """The memoized round as GRR parameters."""
        return GRRParams(domain=self.domain, truth_probability=self.first_probability)

    def second_round(self) -> GRRParams:
        """The fresh round as GRR parameters."""
        return GRRParams(domain=self.domain, truth_probability=self.second_probability)


def _composed_rates(t1: int, t2: int, d: int) -> tuple[Fraction, Fraction]:
    p1, p2 = probability(t1), probability(t2)
    p_star = p1 * p2 + (1 - p1) * (1 - p2) / (d - 1)
    return p_star, (1 - p_star) / (d - 1)


def _composed_ratio(t1: int, t2: int, d: int) -> Fraction:
    p_star, q_star = _composed_rates(t1, t2, d)
    return p_star / q_star


def memoized_index(secret: SecretSource, params: LGRRParams, *, campaign_id: str, index: int) -> int:
    """The first round's x' of the value with index ``index`` for the device with ``secret``: GRR with p1
    on coins of the stream (label ``LGRR_LABEL``, key u32be(index)): word < T1 keeps v, else Lemire's
    uniform o below d - 1 from the next words and o + (o >= v). Deterministic."""
    words = MemoWords(as_secret(secret).prf, memo_seed(LGRR_LABEL, campaign_id, u32be(index)))
    if words.bernoulli(params.first_threshold):
        return index
    other = words.below(params.domain.size - 1)
    return other + 1 if other >= index else other


class LGRREncoder:
    """A device's L-GRR encoder: x' memoized per value from the client secret, then fresh GRR (OS CSPRNG).

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (part of every memoized stream).
        secret: the device's client secret (or a function returning it).
    """

    __slots__ = ("_memo", "_second", "params")

    def __init__(self, params: LGRRParams, *, campaign_id: str, secret: SecretSource) -> None:
        if not isinstance(params, LGRRParams):
            raise InvalidParameterError("params", type(params).__name__, "an LGRRParams")
        self.params = params
        prf_secret = as_secret(secret)
        self._second = GRREncoder(params.second_round())
        self._memo = functools.lru_cache(maxsize=_MEMO_SIZE)(
            functools.partial(memoized_index, prf_secret, params, campaign_id=campaign_id)
        )

    def __repr__(self) -> str:
        return f"LGRREncoder(params={self.params!r})"

    def memoized(self, value: str | int) -> int:
        """The memoized first-round index x' of ``value`` (DomainError outside the domain)."""
        return int(self._memo(index=self.params.domain.index(value)))

    def encode(self, value: str | int) -> int:
        """One report of ``value``: the fresh GRR round on its memoized x'. Returns the index in [0, d)."""
        return self._second.encode_index(self.memoized(value))

    def encode_batch(self, indices: Any, rng: np.random.Generator) -> NDArray[np.int64]:
        """One report per simulated device (each with its own, fresh first round). For simulation only."""
        first = GRREncoder(self.params.first_round()).encode_batch(indices, rng)
        return self._second.encode_batch(first, rng)


class LGRRSpec(MemoizedDomainSpec, GRRCodecSpec[LGRRParams]):
    """L-GRR for every layer: GRR's codec, ``counts`` layout and Support with the composed (p*, q*)
    (:class:`~ldp_client.mechanisms.grr.GRRCodecSpec`); its own parameters, encoder and exact channels."""

    name: ClassVar[str] = LGRRParams.name
    params_type: ClassVar[type[Any]] = LGRRParams
    wire: ClassVar[WireNames] = WireNames(campaign="lgrr", batch="lgrr_indices", report="lgrr_index")
    message_type: ClassVar[type[Message]] = campaign_pb2.LongitudinalGRRParams
    direct_fields: ClassVar[tuple[str, ...]] = ("first_probability", "second_probability")
    epsilon_fields: ClassVar[Mapping[str, Callable[[object], Any]]] = {
        "epsilon_inf": functools.partial(as_float, "epsilon_inf")
    }
    encoder_type: ClassVar[Callable[..., Any]] = LGRREncoder

    def encode_batch(
        self,
        params: LGRRParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        first = GRREncoder(params.first_round()).encode_batch(values, rng)
        return GRREncoder(params.second_round()).encode_batch(first, rng)

    def sum_sampler(self, params: LGRRParams) -> SumSampler | None:
        first, second = params.first_round(), params.second_round()

        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> NDArray[np.int64]:
            # The second round acts on the first round's outputs: GRR counts of GRR counts, exactly.
            return sample_grr_counts(second, sample_grr_counts(first, true_counts, rng), rng)

        return sample

    def examples(self) -> tuple[LGRRParams, ...]:
        return (
            LGRRParams.from_epsilon(2, 1.0, epsilon_inf=2.0),
            LGRRParams.from_epsilon(("red", "green", "blue", "cyan"), 1.0, epsilon_inf=3.0),
            LGRRParams(domain=Domain.of(5), first_probability=0.75, second_probability=0.5),
        )

    def largest(self) -> tuple[LGRRParams, ...]:
        return (LGRRParams(domain=Domain.of(MAX_DOMAIN_SIZE), first_probability=0.5, second_probability=0.5),)

    def exact_outputs(self, params: LGRRParams, value: Any) -> Mapping[Hashable, Fraction]:
        # The two rounds multiplied out (not the closed form p*, q*): sum over the memoized x'.
        d = params.domain.size
        first = grr_channel_row(probability(params.first_threshold), d, params.domain.index(value))
        p2 = probability(params.second_threshold)
        return {
            y: sum((first[x] * grr_channel_row(p2, d, x)[y] for x in range(d)), Fraction(0)) for y in range(d)
        }

    def exact_memoized_outputs(self, params: LGRRParams, value: Any) -> Mapping[Hashable, Fraction]:
        row = grr_channel_row(
            probability(params.first_threshold), params.domain.size, params.domain.index(value)
        )
        return dict(enumerate(row))


SPEC = LGRRSpec()
"""L-GRR, as :mod:`ldp_client.registry` lists it."""
