"""One frozen, validated parameter dataclass per mechanism: the contract shared by client and server.

Each class stores exact probabilities (multiples of 2**-32, see :mod:`ldp_client._prob`) and derives from
them the thresholds the encoders sample with and the epsilon they guarantee. ``from_epsilon``
constructors round toward privacy: the effective epsilon never exceeds the requested one, and a
:class:`~ldp_client.errors.PrivacyQuantizationWarning` says so when the difference is material.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

from ldp_client import privacy, registry
from ldp_client._prob import (
    PROB_ONE,
    quantize_probability,
    rounding_note,
    threshold_to_probability,
)
from ldp_client.auto import make_auto_params
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain
from ldp_client.domain import make_by_fields as _make_by_fields
from ldp_client.domain import pair_rounding_note as _pair_rounding_note
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.hr import HadamardParams
from ldp_client.mechanisms.numeric.duchi import DuchiParams
from ldp_client.mechanisms.numeric.laplace import LaplaceParams
from ldp_client.mechanisms.numeric.multidim import MultidimParams
from ldp_client.mechanisms.numeric.piecewise import HybridParams, PiecewiseParams
from ldp_client.mechanisms.numeric.sr import SRParams
from ldp_client.mechanisms.olh import BLHParams, OLHParams
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.mechanisms.sets import (
    MAX_SET_ITEMS,
    InnerOracleParams,
    SetValuedParams,
    oracle_rates,
    oracle_report_bits,
)
from ldp_client.mechanisms.ss import SubsetSelectionParams
from ldp_client.mechanisms.ue import OUEParams, SUEParams

__all__ = [
    "AUTO_MECHANISM",
    "FREQUENCY_ORACLE_TYPES",
    "MAX_COHORTS",
    "MAX_DOMAIN_SIZE",
    "MAX_RAPPOR_BITS",
    "MAX_RAPPOR_HASHES",
    "MAX_SET_ITEMS",
    "MECHANISM_NAMES",
    "PAIRED_SIDE_TYPES",
    "BLHParams",
    "BasicRapporParams",
    "BinaryRRParams",
    "BooleanRapporParams",
    "Domain",
    "DuchiParams",
    "FrequencyOracleParams",
    "GRRParams",
    "HadamardParams",
    "HybridParams",
    "InnerOracleParams",
    "LaplaceParams",
    "MechanismParams",
    "MultidimParams",
    "OLHParams",
    "OUEParams",
    "PairedParams",
    "PairedSide",
    "PiecewiseParams",
    "RapporParams",
    "SRParams",
    "SUEParams",
    "SetValuedParams",
    "SubsetSelectionParams",
    "UnportedParams",
    "make_params",
    "oracle_rates",
    "oracle_report_bits",
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


# -------------------------------------------------------------------------------------------------------
# Frequency oracles of issue 6: unary encoding (oue, sue), local hashing (olh, blh), subset selection
# (ss), Hadamard response (hr) and the set-valued wrapper (Wang, Blocki, Li, Jha, "Locally Differentially
# Private Protocols for Frequency Estimation", USENIX Security 2017). Each is defined with its encoder and
# spec in ldp_client/mechanisms/{ue,olh,ss,hr,sets}.py (registered in ldp_client.registry); re-exported here.

FrequencyOracleParams = (
    OUEParams | SUEParams | OLHParams | BLHParams | SubsetSelectionParams | HadamardParams | SetValuedParams
)
FREQUENCY_ORACLE_TYPES = (
    OUEParams,
    SUEParams,
    OLHParams,
    SubsetSelectionParams,
    HadamardParams,
    SetValuedParams,
)
"""The issue-6 parameter classes (BLHParams is a subclass of OLHParams)."""


# -------------------------------------------------------------------------------------------------------
# Paired reports (issue 5: association): two variables randomized independently and sent together.

PairedSide = BinaryRRParams | GRRParams | RapporParams | BasicRapporParams | BooleanRapporParams
PAIRED_SIDE_TYPES: tuple[type, ...] = (
    BinaryRRParams,
    GRRParams,
    RapporParams,
    BasicRapporParams,
    BooleanRapporParams,
)
_PAIRED_SIDES = ("first", "second")


@dataclass(frozen=True, kw_only=True)
class PairedParams:
    """Two variables of one device in one report, each randomized by its own mechanism (association).

    A device sends both randomized values together, so the server can estimate their joint distribution
    without storing any client identifier (Fanti, Pihur, Erlingsson, PETS 2016, §4 estimate the joint
    distribution of RAPPOR reports that come from the same client). Each side is encoded exactly as a
    campaign of its own mechanism, keyed by the campaign id "<id>/paired/first" or "<id>/paired/second"
    (``ldp_client.mechanisms.paired.paired_side_id``), so the two sides' permanent randomized responses are
    independent. One paired report reveals both sides: epsilon = first.epsilon + second.epsilon (basic
    sequential composition), and likewise for the longitudinal bound (infinite if a side is rr or grr).
    """

    name: ClassVar[str] = "paired"
    first: PairedSide
    second: PairedSide

    def __post_init__(self) -> None:
        for side in _PAIRED_SIDES:
            value = getattr(self, side)
            if not isinstance(value, PAIRED_SIDE_TYPES):
                raise InvalidParameterError(
                    side,
                    getattr(value, "name", type(value).__name__),
                    "the parameters of rr, grr, rappor, basic-rappor or boolean-rappor",
                )

    @property
    def sides(self) -> tuple[PairedSide, PairedSide]:
        return (self.first, self.second)

    @property
    def epsilon(self) -> float:
        """Epsilon of one paired report: the sum of the two sides' per-report epsilons."""
        return float(self.first.epsilon + self.second.epsilon)

    @property
    def epsilon_inf(self) -> float:
        """Longitudinal bound: the sum of the sides' bounds (+inf when a side is rr or grr)."""
        total = 0.0
        for side in self.sides:
            if isinstance(side, RapporParams | BasicRapporParams | BooleanRapporParams):
                total += side.epsilon_inf
            else:
                return math.inf
        return total


def _make_paired(epsilon: float | None, domain: object, fields: dict[str, object]) -> PairedParams:
    """``make_params("paired", fields=...)``: ``first``/``second`` name the mechanisms; ``first.NAME`` and
    ``second.NAME`` set their fields (``first.epsilon``, ``first.domain`` = a size or comma-separated
    labels, and any field of the side's mechanism)."""
    if epsilon is not None or domain is not None:
        raise InvalidParameterError(
            "epsilon" if epsilon is not None else "domain",
            epsilon if epsilon is not None else domain,
            "nothing at the top level for paired: use first.epsilon / second.domain etc.",
        )
    sides: dict[str, PairedSide] = {}
    for side in _PAIRED_SIDES:
        mech = fields.get(side)
        if not isinstance(mech, str) or mech not in (
            "rr",
            "grr",
            "rappor",
            "basic-rappor",
            "boolean-rappor",
        ):
            raise InvalidParameterError(
                f"param {side}", mech, "one of rr, grr, rappor, basic-rappor, boolean-rappor"
            )
        sub: dict[str, object] = {}
        side_eps: float | None = None
        side_domain: int | list[str] | None = None
        prefix = side + "."
        for name, raw in fields.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :]
            if key == "epsilon":
                try:
                    side_eps = float(raw)  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    raise InvalidParameterError(f"param {name}", raw, "a number") from None
            elif key in ("domain", "labels"):
                text = str(raw)
                side_domain = int(text) if text.isdigit() else [x.strip() for x in text.split(",")]
            else:
                sub[key] = raw
        try:
            sides[side] = make_params(mech, epsilon=side_eps, domain=side_domain, fields=sub)  # type: ignore[assignment]
        except InvalidParameterError as exc:
            raise InvalidParameterError(f"{side}.{exc.field}", exc.value, exc.allowed) from exc
    unknown = [n for n in fields if n not in _PAIRED_SIDES and not n.startswith(("first.", "second."))]
    if unknown:
        raise InvalidParameterError(
            f"param {unknown[0]}", fields[unknown[0]], "first, second, first.NAME or second.NAME for paired"
        )
    return PairedParams(first=sides["first"], second=sides["second"])


MechanismParams = (
    BinaryRRParams
    | GRRParams
    | RapporParams
    | BasicRapporParams
    | BooleanRapporParams
    | OUEParams
    | SUEParams
    | OLHParams
    | BLHParams
    | SubsetSelectionParams
    | HadamardParams
    | SetValuedParams
    | LaplaceParams
    | DuchiParams
    | PiecewiseParams
    | HybridParams
    | SRParams
    | MultidimParams
    | PairedParams
)
UnportedParams = RapporParams | BasicRapporParams | BooleanRapporParams | PairedParams
"""The parameters of mechanisms not yet registered in :mod:`ldp_client.registry`, which the facades still
handle with their own code (the fallback after ``registry.find(params)`` returned None). It shrinks as
mechanisms are ported and goes when the last one is."""
MechanismName = Literal[
    "rr",
    "grr",
    "rappor",
    "basic-rappor",
    "boolean-rappor",
    "oue",
    "sue",
    "olh",
    "blh",
    "ss",
    "hr",
    "set-valued",
    "laplace",
    "duchi",
    "piecewise",
    "hybrid",
    "sr",
    "multidim",
    "paired",
]


# Mechanisms not yet ported to a spec of ldp_client.registry, by name (the registered ones come first).
_PARAM_CLASSES: dict[str, type[MechanismParams]] = {
    cls.name: cls for cls in (RapporParams, BasicRapporParams, BooleanRapporParams)
}
_PARAM_CLASSES[PairedParams.name] = PairedParams  # issue 5: association (two variables per report)
AUTO_MECHANISM = "auto"
"""Not a mechanism: ``make_params("auto", ...)`` returns the lowest-variance frequency oracle
(:func:`ldp_client.auto.choose_mechanism`)."""
_NAME_ORDER: tuple[str, ...] = get_args(MechanismName)
MECHANISM_NAMES: tuple[str, ...] = tuple(
    sorted(
        registry.names() + tuple(_PARAM_CLASSES),
        key=lambda n: _NAME_ORDER.index(n) if n in _NAME_ORDER else len(_NAME_ORDER),
    )
)
"""Every mechanism ``make_params`` builds, in the order they are listed to users (``MechanismName``'s, then
any other registered one in registry order), whether registered or not yet."""


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
            ``boolean-rappor``, the issue-6 frequency oracles ``oue``, ``sue``, ``olh``, ``blh``, ``ss``,
            ``hr``, ``set-valued``, ...), or ``auto``: the lowest-variance frequency oracle for the domain
            at ``epsilon`` (optional field ``max_report_bits``; :func:`ldp_client.auto.choose_mechanism`).
        epsilon: For ``rr``, ``grr`` and the frequency oracles: build with ``from_epsilon`` (the oracles'
            free parameter, g for olh or k for ss, optimal unless given). RAPPOR variants are set by f, p, q.
        domain: Size or labels; required by ``grr``, ``basic-rappor`` and the frequency oracles.
        fields: Any init field of the parameter dataclass by name (e.g. ``k``, ``h``, ``m``, ``f``, ``p``,
            ``q``, ``truth_probability``); string values are converted to the field's type.

    Raises:
        InvalidParameterError: unknown mechanism or field, a value of the wrong type, or a combination
            the mechanism does not take (the message names it and lists what is allowed).
    """
    spec = registry.find_named(mechanism)
    if spec is not None:  # a registered mechanism builds its own parameters (ldp_client.registry)
        return spec.make(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[no-any-return]
    if mechanism == PairedParams.name:  # issue 5: first=MECH, second=MECH, first.FIELD=..., second.FIELD=...
        return _make_paired(epsilon, domain, dict(fields or {}))
    if mechanism == AUTO_MECHANISM:  # issue 6: resolved here to the concrete parameters
        return make_auto_params(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[no-any-return]
    cls = _PARAM_CLASSES.get(mechanism)
    if cls is None:
        raise InvalidParameterError("mechanism", mechanism, f"one of {', '.join(MECHANISM_NAMES)}")
    # The RAPPOR variants: their init fields by name, never epsilon.
    return _make_by_fields(
        cls,
        mechanism,
        epsilon=epsilon,
        domain=domain,
        fields=fields,
        takes_domain=cls is BasicRapporParams,
        from_epsilon=None,
    )
