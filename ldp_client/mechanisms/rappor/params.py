"""The parameters of the three RAPPOR variants: string RAPPOR, basic (one-hot) and boolean (one bit).

Erlingsson, Pihur, Korolova, "RAPPOR: Randomized Aggregatable Privacy-Preserving Ordinal Response", CCS
2014. Each class stores the exact probabilities (multiples of 2**-32, :mod:`ldp_client._prob`) of the two
randomizations, derives the thresholds the encoders sample with and the epsilons they guarantee:
``epsilon`` (= ``epsilon_one``, one report) and ``epsilon_inf`` (unlimited reports of one value, bounded by
the memoized permanent response).

The bit-level rates are named by the Bloom bit they condition on (``prob_one_if_set`` = P(reported bit 1 |
Bloom bit 1), CCS 2014's q*; ``prob_one_if_clear`` = P(reported bit 1 | Bloom bit 0), its p*), so that they
cannot be taken for the ``p_star``/``q_star`` of the Support contract (:mod:`ldp_client.spec`).

Importing this module does not import numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ldp_client import privacy
from ldp_client._prob import PROB_ONE, quantize_probability, rounding_note, threshold_to_probability
from ldp_client.domain import Domain
from ldp_client.domain import pair_rounding_note as _pair_rounding_note
from ldp_client.errors import InvalidParameterError

__all__ = [
    "MAX_COHORTS",
    "MAX_RAPPOR_BITS",
    "MAX_RAPPOR_HASHES",
    "BasicRapporParams",
    "BooleanRapporParams",
    "RapporNoiseParams",
    "RapporParams",
]

MAX_RAPPOR_BITS = 4096
MAX_RAPPOR_HASHES = 16
MAX_COHORTS = 1 << 16


@dataclass(frozen=True, kw_only=True)
class _RapporNoise:
    """RAPPOR's two randomizations, shared by the string, basic (one-hot) and boolean variants.

    Permanent randomized response (PRR): each bit is 1 w.p. f/2, 0 w.p. f/2, else the true bit; sampled
    as "randomize w.p. f, then a fair coin", so the effective f/2 is F/2**33 for the quantized F.
    Instantaneous randomized response (IRR): a reported bit is 1 w.p. q where the PRR bit is 1 and w.p.
    p where it is 0. (Erlingsson, Pihur, Korolova, "RAPPOR", CCS 2014.)
    """

    f: float = 0.5
    p: float = 0.5
    q: float = 0.75
    allow_f_zero: bool = field(default=False, repr=False, compare=False)
    """Opt in to f = 0 (no permanent randomized response, epsilon_inf = inf); not part of the wire."""
    f_threshold: int = field(init=False, repr=False, compare=False)
    p_threshold: int = field(init=False, repr=False, compare=False)
    q_threshold: int = field(init=False, repr=False, compare=False)

    def _init_noise(self) -> None:
        ft = quantize_probability("f", self.f)
        if not (0.0 <= self.f < 1.0) or ft >= PROB_ONE:
            allowed = "a probability in [0, 1)" + rounding_note("f", self.f, ft)
            raise InvalidParameterError("f", self.f, allowed)
        if not isinstance(self.allow_f_zero, bool):
            raise InvalidParameterError("allow_f_zero", self.allow_f_zero, "True or False")
        if ft == 0 and not self.allow_f_zero:
            # f = 0 is the wire default (an unset field), so it must never pass by accident.
            raise InvalidParameterError(
                "f",
                self.f,
                "a probability in (0, 1): f=0 turns off the permanent randomized response, so repeated "
                "reports of one value reveal it (epsilon_inf = inf); use the standard f=0.5 (or 0.25), "
                "or opt in with allow_f_zero=True" + rounding_note("f", self.f, ft),
            )
        pt = quantize_probability("p", self.p)
        qt = quantize_probability("q", self.q)
        if pt >= qt:
            raise InvalidParameterError(
                "p",
                self.p,
                f"a probability below q={self.q!r} (p < q)"
                + _pair_rounding_note(("p", self.p, pt), ("q", self.q, qt)),
            )
        object.__setattr__(self, "f_threshold", ft)
        object.__setattr__(self, "p_threshold", pt)
        object.__setattr__(self, "q_threshold", qt)

    @property
    def f_effective(self) -> float:
        return threshold_to_probability(self.f_threshold)

    @property
    def p_effective(self) -> float:
        return threshold_to_probability(self.p_threshold)

    @property
    def q_effective(self) -> float:
        return threshold_to_probability(self.q_threshold)

    @property
    def prob_one_if_set(self) -> float:
        """P(reported bit = 1 | Bloom bit = 1), from the effective f, p, q (CCS 2014 calls it q*).

        Named by the Bloom bit it conditions on, so that it cannot be taken for the ``q_star`` of the
        Support contract (:mod:`ldp_client.spec`), which means P(a report supports v | v not held)."""
        return privacy.rappor_effective_rates(self.f_effective, self.p_effective, self.q_effective)[0]

    @property
    def prob_one_if_clear(self) -> float:
        """P(reported bit = 1 | Bloom bit = 0), from the effective f, p, q (CCS 2014 calls it p*)."""
        return privacy.rappor_effective_rates(self.f_effective, self.p_effective, self.q_effective)[1]


@dataclass(frozen=True, kw_only=True)
class RapporParams(_RapporNoise):
    """String RAPPOR: a k-bit Bloom filter with h hashes in one of m cohorts, then PRR and IRR.

    The Bloom filter hashing, cohort derivation and PRR derivation are specified in
    ``docs/rappor-encoding.md``.
    """

    name: ClassVar[str] = "rappor"
    k: int = 128
    h: int = 2
    m: int = 64

    def __post_init__(self) -> None:
        for fname, value, hi in (
            ("k", self.k, MAX_RAPPOR_BITS),
            ("h", self.h, MAX_RAPPOR_HASHES),
            ("m", self.m, MAX_COHORTS),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
                raise InvalidParameterError(fname, value, f"an integer in [1, {hi}]")
        if self.h > self.k:
            # h hash functions set at most k distinct bits: h > k adds no information, only cost, and
            # the epsilon formulas (which count 2h differing bits) would no longer describe the filter.
            raise InvalidParameterError(
                "h", self.h, f"an integer in [1, k] = [1, {self.k}] (h hashes set at most h of the k bits)"
            )
        self._init_noise()

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed report: ceil(k/8)."""
        return (self.k + 7) // 8

    @property
    def epsilon_inf(self) -> float:
        """eps_inf = 2h ln((1-f/2)/(f/2)): what unlimited reports of one value can reveal."""
        return privacy.rappor_epsilon_inf(self.f_effective, self.h)

    @property
    def epsilon_one(self) -> float:
        """eps_1 = h ln(q*(1-p*)/(p*(1-q*))): what one report reveals."""
        return privacy.rappor_epsilon_one(self.f_effective, self.p_effective, self.q_effective, self.h)

    @property
    def epsilon(self) -> float:
        """The per-report epsilon (eps_1); see :attr:`epsilon_inf` for the longitudinal bound."""
        return self.epsilon_one


@dataclass(frozen=True, kw_only=True)
class BasicRapporParams(_RapporNoise):
    """Basic RAPPOR: one-hot encoding over a known domain (no hashing, no cohorts), then PRR and IRR.

    Two values differ in two bits, one on each side, so the epsilons are those of RAPPOR with h = 1.
    """

    name: ClassVar[str] = "basic-rappor"
    domain: Domain

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        self._init_noise()

    @property
    def k(self) -> int:
        return self.domain.size

    @property
    def num_bytes(self) -> int:
        return (self.k + 7) // 8

    @property
    def epsilon_inf(self) -> float:
        return privacy.rappor_epsilon_inf(self.f_effective, 1)

    @property
    def epsilon_one(self) -> float:
        return privacy.rappor_epsilon_one(self.f_effective, self.p_effective, self.q_effective, 1)

    @property
    def epsilon(self) -> float:
        return self.epsilon_one


@dataclass(frozen=True, kw_only=True)
class BooleanRapporParams(_RapporNoise):
    """Boolean RAPPOR (k = 1): the single bit is the value itself, then PRR and IRR.

    One bit differs between the two inputs, so eps_inf = ln((1-f/2)/(f/2)) and eps_1 is the epsilon of
    the one-bit channel with P(1|1) = prob_one_if_set, P(1|0) = prob_one_if_clear.
    """

    name: ClassVar[str] = "boolean-rappor"

    def __post_init__(self) -> None:
        self._init_noise()

    k: ClassVar[int] = 1
    num_bytes: ClassVar[int] = 1

    @property
    def epsilon_inf(self) -> float:
        half_f = self.f_effective / 2.0
        return privacy.binary_channel_epsilon(1.0 - half_f, half_f)

    @property
    def epsilon_one(self) -> float:
        return privacy.binary_channel_epsilon(self.prob_one_if_set, self.prob_one_if_clear)

    @property
    def epsilon(self) -> float:
        return self.epsilon_one


RapporNoiseParams = RapporParams | BasicRapporParams | BooleanRapporParams
"""Any RAPPOR variant: what the permanent and instantaneous randomized responses need (f, p, q)."""
