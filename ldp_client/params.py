"""One frozen, validated parameter dataclass per mechanism: the contract shared by client and server.

Each class stores exact probabilities (multiples of 2**-32, see :mod:`ldp_client._prob`) and derives from
them the thresholds the encoders sample with and the epsilon they guarantee. ``from_epsilon``
constructors round toward privacy: the effective epsilon never exceeds the requested one, and a
:class:`~ldp_client.errors.PrivacyQuantizationWarning` says so when the difference is material.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ldp_client import privacy
from ldp_client._prob import PROB_ONE, quantize_probability, threshold_to_probability
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning

__all__ = [
    "MAX_COHORTS",
    "MAX_DOMAIN_SIZE",
    "MAX_RAPPOR_BITS",
    "MAX_RAPPOR_HASHES",
    "MECHANISM_NAMES",
    "BasicRapporParams",
    "BinaryRRParams",
    "BooleanRapporParams",
    "Domain",
    "GRRParams",
    "MechanismParams",
    "RapporParams",
    "make_params",
]

MAX_RAPPOR_BITS = 4096
MAX_RAPPOR_HASHES = 16
MAX_COHORTS = 1 << 16
MAX_DOMAIN_SIZE = 1 << 24
# A from_epsilon request is "met" when quantization lowers epsilon by at most this (relative) amount.
_EPSILON_REL_TOLERANCE = 1e-6


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return float(epsilon)


def _report_quantization(requested: float, effective: float) -> None:
    if requested - effective > _EPSILON_REL_TOLERANCE * max(1.0, requested):
        warnings.warn(
            f"epsilon={requested!r} cannot be met exactly with 32-bit probabilities; "
            f"the mechanism guarantees epsilon={effective!r} instead",
            PrivacyQuantizationWarning,
            stacklevel=3,
        )


@dataclass(frozen=True, slots=True)
class Domain:
    """A declared, finite domain: labels (strings) or the integers 0..size-1.

    Values outside the domain are rejected by :meth:`index`, never mapped to another value.
    """

    size: int
    labels: tuple[str, ...] | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise InvalidParameterError("domain", self.size, f"an integer size in [2, {MAX_DOMAIN_SIZE}]")
        if not 2 <= self.size <= MAX_DOMAIN_SIZE:
            raise InvalidParameterError("domain", self.size, f"a size in [2, {MAX_DOMAIN_SIZE}]")
        index: dict[str, int] = {}
        if self.labels is not None:
            if len(self.labels) != self.size:
                raise InvalidParameterError("domain", self.labels, f"{self.size} labels")
            for i, label in enumerate(self.labels):
                if not isinstance(label, str):
                    raise InvalidParameterError("domain", label, "labels that are strings")
                if label in index:
                    raise InvalidParameterError("domain", label, "distinct labels (this one is repeated)")
                index[label] = i
        object.__setattr__(self, "_index", index)

    @classmethod
    def of(cls, spec: int | Iterable[str] | Domain) -> Domain:
        """A domain from a size ``d`` (values 0..d-1) or from a sequence of distinct string labels."""
        if isinstance(spec, Domain):
            return spec
        if isinstance(spec, bool):
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels")
        if isinstance(spec, int):
            return cls(size=spec)
        if isinstance(spec, str | bytes):
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels, not one string")
        try:
            labels = tuple(spec)
        except TypeError:
            raise InvalidParameterError("domain", spec, "a size or a sequence of labels") from None
        if len(labels) < 2:
            raise InvalidParameterError("domain", labels, "at least 2 values")
        return cls(size=len(labels), labels=labels)

    def index(self, value: object, field_name: str = "value") -> int:
        """The index of ``value``; raises :class:`DomainError` if it is not in the domain."""
        if self.labels is None:
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < self.size:
                return value
            raise DomainError(field_name, value, f"an integer in [0, {self.size - 1}]")
        if isinstance(value, str):
            i = self._index.get(value)
            if i is not None:
                return i
        raise DomainError(field_name, value, f"one of the {self.size} declared labels")

    def label(self, index: int) -> str:
        """Display label of an index (the label, or the integer as a string)."""
        return self.labels[index] if self.labels is not None else str(index)


@dataclass(frozen=True, kw_only=True)
class BinaryRRParams:
    """Binary randomized response as a two-coin survey (Warner, JASA 1965).

    The first coin is heads with ``truth_probability`` a: answer truthfully. Otherwise answer a second
    coin, "yes" with ``yes_probability`` b. So P(yes|yes) = a + (1-a) b and P(yes|no) = (1-a) b.
    Warner's form (truthful w.p. p = e^eps/(1+e^eps), else the opposite) is a = 2p - 1 = tanh(eps/2),
    b = 1/2; the classic two fair coins (a = b = 1/2) is ln 3-LDP.
    """

    name: ClassVar[str] = "rr"
    truth_probability: float
    yes_probability: float = 0.5
    truth_threshold: int = field(init=False, repr=False, compare=False)
    yes_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        a = quantize_probability("truth_probability", self.truth_probability)
        b = quantize_probability("yes_probability", self.yes_probability)
        if not 0 < a < PROB_ONE:
            raise InvalidParameterError(
                "truth_probability", self.truth_probability, "a probability in (0, 1) (0 reveals nothing)"
            )
        if not 0 < b < PROB_ONE:
            raise InvalidParameterError("yes_probability", self.yes_probability, "a probability in (0, 1)")
        object.__setattr__(self, "truth_threshold", a)
        object.__setattr__(self, "yes_threshold", b)

    @classmethod
    def from_epsilon(cls, epsilon: float) -> BinaryRRParams:
        """Warner's RR at ``epsilon``: truthful w.p. e^eps/(1+e^eps), rounded toward privacy."""
        eps = _check_epsilon(epsilon)
        a = math.floor(math.tanh(eps / 2.0) * PROB_ONE)
        a = min(a, PROB_ONE - 1)
        if a == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value whose truth probability exceeds 2**-32")
        params = cls(truth_probability=threshold_to_probability(a), yes_probability=0.5)
        _report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def two_coin(cls, truth_probability: float = 0.5, yes_probability: float = 0.5) -> BinaryRRParams:
        """The two-coin survey; the defaults (two fair coins) give epsilon = ln 3."""
        return cls(truth_probability=truth_probability, yes_probability=yes_probability)

    @property
    def p_yes_given_yes(self) -> float:
        a = threshold_to_probability(self.truth_threshold)
        return a + (1.0 - a) * threshold_to_probability(self.yes_threshold)

    @property
    def p_yes_given_no(self) -> float:
        a = threshold_to_probability(self.truth_threshold)
        return (1.0 - a) * threshold_to_probability(self.yes_threshold)

    @property
    def epsilon(self) -> float:
        return privacy.binary_channel_epsilon(self.p_yes_given_yes, self.p_yes_given_no)


@dataclass(frozen=True, kw_only=True)
class GRRParams:
    """k-ary (generalized) randomized response over a declared domain of size d.

    Report the true value w.p. p, otherwise a uniformly random *other* value; epsilon = ln(p(d-1)/(1-p)),
    and p = e^eps/(e^eps + d - 1) at a given epsilon (Kairouz et al., ICML 2016; Wang et al., USENIX
    Security 2017, "direct encoding").
    """

    name: ClassVar[str] = "grr"
    domain: Domain
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, Domain):
            object.__setattr__(self, "domain", Domain.of(self.domain))
        t = quantize_probability("truth_probability", self.truth_probability)
        d = self.domain.size
        if not (t * d > PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability", self.truth_probability, f"a probability in (1/d, 1) = ({1 / d}, 1)"
            )
        object.__setattr__(self, "truth_threshold", t)

    @classmethod
    def from_epsilon(cls, domain: int | Sequence[str] | Domain, epsilon: float) -> GRRParams:
        """GRR at ``epsilon``: p = e^eps/(e^eps + d - 1), rounded down to a multiple of 2**-32."""
        eps = _check_epsilon(epsilon)
        dom = Domain.of(domain)
        d = dom.size
        # p = 1 / (1 + (d-1) e^-eps) avoids overflow for large eps.
        t = min(math.floor(PROB_ONE / (1.0 + (d - 1) * math.exp(-eps))), PROB_ONE - 1)
        if t * d <= PROB_ONE:
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to be represented at d={d}"
            )
        params = cls(domain=dom, truth_probability=threshold_to_probability(t))
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def p(self) -> float:
        """P(report = v | value = v)."""
        return threshold_to_probability(self.truth_threshold)

    @property
    def q(self) -> float:
        """P(report = v | value != v) = (1-p)/(d-1)."""
        return (1.0 - self.p) / (self.domain.size - 1)

    @property
    def epsilon(self) -> float:
        return privacy.grr_epsilon(self.p, self.domain.size)


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
    f_threshold: int = field(init=False, repr=False, compare=False)
    p_threshold: int = field(init=False, repr=False, compare=False)
    q_threshold: int = field(init=False, repr=False, compare=False)

    def _init_noise(self) -> None:
        ft = quantize_probability("f", self.f)
        if not (0.0 <= self.f < 1.0) or ft >= PROB_ONE:
            raise InvalidParameterError("f", self.f, "a probability in [0, 1)")
        pt = quantize_probability("p", self.p)
        qt = quantize_probability("q", self.q)
        if pt >= qt:
            raise InvalidParameterError("p", self.p, f"a probability below q={self.q!r} (p < q)")
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
    def q_star(self) -> float:
        """P(reported bit = 1 | Bloom bit = 1), from the effective f, p, q."""
        return privacy.rappor_effective_rates(self.f_effective, self.p_effective, self.q_effective)[0]

    @property
    def p_star(self) -> float:
        """P(reported bit = 1 | Bloom bit = 0), from the effective f, p, q."""
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
    the one-bit channel with P(1|1) = q*, P(1|0) = p*.
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
        return privacy.binary_channel_epsilon(self.q_star, self.p_star)

    @property
    def epsilon(self) -> float:
        return self.epsilon_one


MechanismParams = BinaryRRParams | GRRParams | RapporParams | BasicRapporParams | BooleanRapporParams
MechanismName = Literal["rr", "grr", "rappor", "basic-rappor", "boolean-rappor"]


_PARAM_CLASSES: dict[str, type[MechanismParams]] = {
    cls.name: cls for cls in (BinaryRRParams, GRRParams, RapporParams, BasicRapporParams, BooleanRapporParams)
}
MECHANISM_NAMES: tuple[str, ...] = tuple(_PARAM_CLASSES)


def _tunable_fields(cls: type[MechanismParams]) -> dict[str, type]:
    """Init fields settable by name (``--param NAME=VALUE``), with their value types."""
    from dataclasses import fields

    kinds: dict[str, type] = {}
    for f in fields(cls):
        if f.init and f.name != "domain":
            kinds[f.name] = int if f.type in ("int", int) else float
    return kinds


def make_params(
    mechanism: str,
    *,
    epsilon: float | None = None,
    domain: int | Sequence[str] | Domain | None = None,
    fields: dict[str, object] | None = None,
) -> MechanismParams:
    """Build a mechanism's parameters by name, as the command lines and config files describe them.

    Args:
        mechanism: One of :data:`MECHANISM_NAMES` (``rr``, ``grr``, ``rappor``, ``basic-rappor``,
            ``boolean-rappor``).
        epsilon: For ``rr`` and ``grr``: build with ``from_epsilon``. RAPPOR variants are set by f, p, q.
        domain: Size or labels; required by ``grr`` and ``basic-rappor``, refused by the others.
        fields: Any init field of the parameter dataclass by name (e.g. ``k``, ``h``, ``m``, ``f``, ``p``,
            ``q``, ``truth_probability``); string values are converted to the field's type.

    Raises:
        InvalidParameterError: unknown mechanism or field, a value of the wrong type, or a combination
            the mechanism does not take (the message names it and lists what is allowed).
    """
    cls = _PARAM_CLASSES.get(mechanism)
    if cls is None:
        raise InvalidParameterError("mechanism", mechanism, f"one of {', '.join(MECHANISM_NAMES)}")
    kinds = _tunable_fields(cls)
    kwargs: dict[str, object] = {}
    for name, raw in (fields or {}).items():
        if name not in kinds:
            allowed = ", ".join(sorted(kinds)) or "none"
            raise InvalidParameterError(f"param {name}", raw, f"a field of {mechanism}: {allowed}")
        kind = kinds[name]
        try:
            kwargs[name] = kind(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise InvalidParameterError(name, raw, "an integer" if kind is int else "a number") from None
    takes_domain = cls in (GRRParams, BasicRapporParams)
    if takes_domain and domain is None:
        raise InvalidParameterError("domain", None, f"a size or labels (required by {mechanism})")
    if not takes_domain and domain is not None:
        raise InvalidParameterError("domain", domain, f"nothing: {mechanism} has no declared domain")
    if epsilon is not None:
        if cls is BinaryRRParams and not kwargs:
            return BinaryRRParams.from_epsilon(epsilon)
        if cls is GRRParams and not kwargs and domain is not None:
            return GRRParams.from_epsilon(domain, epsilon)
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            "only for rr and grr without other fields (RAPPOR variants are set by f, p, q)",
        )
    if takes_domain:
        kwargs["domain"] = Domain.of(domain)  # type: ignore[arg-type]
    try:
        return cls(**kwargs)  # type: ignore[arg-type]
    except TypeError as exc:  # a required field is missing
        needed = f"the fields {mechanism} needs ({exc})"
        raise InvalidParameterError("params", sorted(kwargs), needed) from None
