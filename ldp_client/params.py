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

from ldp_client import _oracle_math, privacy, registry
from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    smallest_threshold,
    threshold_to_probability,
)
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain
from ldp_client.domain import check_epsilon as _check_epsilon
from ldp_client.domain import int_field as _int_field
from ldp_client.domain import no_more_fields as _no_more_fields
from ldp_client.domain import pair_rounding_note as _pair_rounding_note
from ldp_client.domain import report_quantization as _report_quantization
from ldp_client.domain import require_domain as _require_domain
from ldp_client.domain import take_field as _take
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.paired import PAIRED_SIDE_TYPES, PairedParams, PairedSide
from ldp_client.mechanisms.rappor.params import (
    MAX_COHORTS,
    MAX_RAPPOR_BITS,
    MAX_RAPPOR_HASHES,
    BasicRapporParams,
    BooleanRapporParams,
    RapporParams,
)
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.numeric_params import (  # issue 6: numeric mechanisms (own module)
    NUMERIC_PARAM_CLASSES,
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    PiecewiseParams,
    SRParams,
    make_numeric_params,
)

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

# -------------------------------------------------------------------------------------------------------
# Frequency oracles of issue 6: unary encoding (oue, sue), local hashing (olh, blh), subset selection
# (ss), Hadamard response (hr) and the set-valued wrapper. Wang, Blocki, Li, Jha, "Locally Differentially
# Private Protocols for Frequency Estimation", USENIX Security 2017. Rates, variances and optimal settings
# are computed in ldp_client/_oracle_math.py; the encoders live in ldp_client/mechanisms/{ue,olh,ss,hr,
# sets}.py.

MAX_SET_ITEMS = 4096


def _as_domain(obj: _FrequencyOracle) -> None:
    # A size or labels given for the domain field becomes a Domain (as GRRParams does).
    if not isinstance(obj.domain, Domain):
        object.__setattr__(obj, "domain", Domain.of(obj.domain))


@dataclass(frozen=True, kw_only=True)
class _FrequencyOracle:
    """Shared interface of the issue-6 frequency oracles (Wang et al., USENIX Security 2017, §4).

    A report *supports* item v with probability ``p_star`` if the user holds v and ``q_star`` otherwise;
    the unbiased estimate of a count is (C_v - n q*)/(p* - q*) and n Var[f_hat_v] is :meth:`variance`.
    ``report_bits`` is the size of one report as uploaded.
    """

    name: ClassVar[str]
    domain: Domain

    @property
    def p_star(self) -> float:
        raise NotImplementedError

    @property
    def q_star(self) -> float:
        raise NotImplementedError

    @property
    def epsilon(self) -> float:
        raise NotImplementedError

    @property
    def report_bits(self) -> int:
        raise NotImplementedError

    def variance(self, frequency: float = 0.0) -> float:
        """n Var[f_hat_v] = (q*(1-q*) + f (p*-q*)(1-p*-q*)) / (p*-q*)^2 at true frequency f (default 0)."""
        return _oracle_math.oracle_variance(self.p_star, self.q_star, frequency)

    @classmethod
    def _make(
        cls, *, epsilon: float | None, domain: object, fields: dict[str, object]
    ) -> _FrequencyOracle:  # pragma: no cover - every concrete class overrides it
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class _UnaryEncoding(_FrequencyOracle):
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
        _as_domain(self)
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
                + _pair_rounding_note(("q", self.q, qt), ("p", self.p, pt)),
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
        dom = _require_domain(domain, cls.name)
        if epsilon is not None:
            _no_more_fields(fields, cls.name, ())
            return cls.from_epsilon(dom, epsilon)
        kwargs = {n: _take(fields, n, float, cls.name) for n in ("p", "q") if n in fields}
        _no_more_fields(fields, cls.name, ("p", "q"))
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
        eps = _check_epsilon(epsilon)
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
        _report_quantization(eps, params.epsilon)
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
        eps = _check_epsilon(epsilon)
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
        _report_quantization(eps, params.epsilon)
        return params


@dataclass(frozen=True, kw_only=True)
class OLHParams(_FrequencyOracle):
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
        _as_domain(self)
        _int_field("g", self.g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        t = quantize_probability("truth_probability", self.truth_probability)
        if not (t * self.g > PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                f"a probability in (1/g, 1) = ({1 / self.g}, 1)"
                + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

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
        eps = _check_epsilon(epsilon)
        dom = Domain.of(domain)
        chosen = g is None
        if g is None:
            g = _oracle_math.best_olh_g(eps)
        _int_field("g", g, 2, _oracle_math.MAX_LOCAL_HASH_BUCKETS)
        t = _oracle_math.grr_like_threshold(g, eps)
        if t == 0:
            where = "" if chosen else f" at g={g}"
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to change a 32-bit probability{where}"
            )
        params = cls(domain=dom, g=g, truth_probability=threshold_to_probability(t))
        _report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> OLHParams:
        dom = _require_domain(domain, cls.name)
        g = _take(fields, "g", int, cls.name) if "g" in fields else None
        if epsilon is not None:
            _no_more_fields(fields, cls.name, ("g",))
            if cls is BLHParams:
                return BLHParams.from_epsilon(dom, epsilon, g=2 if g is None else g)  # type: ignore[arg-type]
            return cls.from_epsilon(dom, epsilon, g=g)  # type: ignore[arg-type]
        tp = _take(fields, "truth_probability", float, cls.name) if "truth_probability" in fields else None
        _no_more_fields(fields, cls.name, ("g", "truth_probability"))
        if tp is None:
            raise InvalidParameterError("params", [], f"epsilon, or truth_probability (and g) for {cls.name}")
        if g is None:
            g = 2 if cls is BLHParams else None
        if g is None:
            raise InvalidParameterError("g", None, "an integer number of buckets >= 2 (or give epsilon)")
        return cls(domain=dom, g=g, truth_probability=tp)  # type: ignore[arg-type]


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
        eps = _check_epsilon(epsilon)
        t = _oracle_math.grr_like_threshold(2, eps)
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=Domain.of(domain), g=2, truth_probability=threshold_to_probability(t))
        _report_quantization(eps, params.epsilon)
        return params


@dataclass(frozen=True, kw_only=True)
class SubsetSelectionParams(_FrequencyOracle):
    """k-subset selection (Ye and Barg, IEEE T-IT 2018; Wang et al. 2016, "Mutual information optimally
    local private discrete distribution estimation").

    The report is a set Y of exactly k of the d values: w.p. p = ``truth_probability`` it holds x plus
    k-1 values drawn uniformly from the other d-1, otherwise k values drawn uniformly from the other d-1.
    Y supports every v in it: p* = p, q* = p (k-1)/(d-1) + (1-p) k/(d-1). epsilon = ln(p (d-k)/((1-p) k));
    at a given epsilon p = k e^eps/(k e^eps + d - k). The optimal k is about d/(e^eps + 1)
    (:func:`ldp_client._oracle_math.best_ss_k` finds it exactly); k = 1 is GRR. Reports are packed
    d-bit rows with exactly k bits set.
    """

    name: ClassVar[str] = "ss"
    k: int
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _as_domain(self)
        d = self.domain.size
        _int_field("k", self.k, 1, d - 1)
        t = quantize_probability("truth_probability", self.truth_probability)
        if not (t * d > self.k * PROB_ONE and t < PROB_ONE):
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                f"a probability in (k/d, 1) = ({self.k / d}, 1)"
                + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @property
    def p_star(self) -> float:
        return threshold_to_probability(self.truth_threshold)

    @property
    def q_star(self) -> float:
        return _oracle_math.ss_q_star(self.p_star, self.domain.size, self.k)

    @property
    def epsilon(self) -> float:
        return _oracle_math.ss_epsilon(self.p_star, self.domain.size, self.k)

    @property
    def report_bits(self) -> int:
        return self.domain.size

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed report: ceil(d/8)."""
        return (self.domain.size + 7) // 8

    @classmethod
    def from_epsilon(
        cls, domain: int | Sequence[str] | Domain, epsilon: float, *, k: int | None = None
    ) -> SubsetSelectionParams:
        """Subset selection at ``epsilon`` with subset size k (default: the variance-optimal k*), and
        p = k e^eps/(k e^eps + d - k) rounded down to a multiple of 2**-32."""
        eps = _check_epsilon(epsilon)
        dom = Domain.of(domain)
        d = dom.size
        if k is None:
            k = _oracle_math.best_ss_k(d, eps)
        _int_field("k", k, 1, d - 1)
        t = _oracle_math.ss_threshold(d, k, eps)
        if t == 0:
            raise InvalidParameterError(
                "epsilon", epsilon, f"a value large enough to be represented at k={k}"
            )
        params = cls(domain=dom, k=k, truth_probability=threshold_to_probability(t))
        _report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(
        cls, *, epsilon: float | None, domain: object, fields: dict[str, object]
    ) -> SubsetSelectionParams:
        dom = _require_domain(domain, cls.name)
        k = _take(fields, "k", int, cls.name) if "k" in fields else None
        if epsilon is not None:
            _no_more_fields(fields, cls.name, ("k",))
            return cls.from_epsilon(dom, epsilon, k=k)  # type: ignore[arg-type]
        tp = _take(fields, "truth_probability", float, cls.name) if "truth_probability" in fields else None
        _no_more_fields(fields, cls.name, ("k", "truth_probability"))
        if k is None or tp is None:
            raise InvalidParameterError(
                "params", [], "epsilon (and optionally k), or k and truth_probability"
            )
        return cls(domain=dom, k=k, truth_probability=tp)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class HadamardParams(_FrequencyOracle):
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
        _as_domain(self)
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
        eps = _check_epsilon(epsilon)
        t = _oracle_math.grr_like_threshold(2, eps)
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough to be represented")
        params = cls(domain=Domain.of(domain), truth_probability=threshold_to_probability(t))
        _report_quantization(eps, params.epsilon)
        return params

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> HadamardParams:
        dom = _require_domain(domain, cls.name)
        if epsilon is not None:
            _no_more_fields(fields, cls.name, ())
            return cls.from_epsilon(dom, epsilon)
        tp = _take(fields, "truth_probability", float, cls.name) if "truth_probability" in fields else None
        _no_more_fields(fields, cls.name, ("truth_probability",))
        if tp is None:
            raise InvalidParameterError("params", [], "epsilon, or truth_probability for hr")
        return cls(domain=dom, truth_probability=tp)  # type: ignore[arg-type]


InnerOracleParams = GRRParams | OUEParams | SUEParams | OLHParams | SubsetSelectionParams | HadamardParams
_INNER_TYPES = (GRRParams, OUEParams, SUEParams, OLHParams, SubsetSelectionParams, HadamardParams)


def oracle_rates(params: InnerOracleParams) -> tuple[float, float]:
    """(p*, q*) of a single-item frequency oracle, GRR included (p* = p, q* = (1-p)/(d-1))."""
    if isinstance(params, GRRParams):
        return params.p, params.q
    return params.p_star, params.q_star


def oracle_report_bits(params: InnerOracleParams) -> int:
    """Upload size of one report in bits (GRR: ceil(log2 d))."""
    if isinstance(params, GRRParams):
        return _oracle_math.ceil_log2(params.domain.size)
    return params.report_bits


@dataclass(frozen=True, kw_only=True)
class SetValuedParams(_FrequencyOracle):
    """Set-valued frequency estimation by padding and sampling (Qin et al., "Heavy Hitter Estimation over
    Set-Valued Data with Local Differential Privacy" (LDPMiner), CCS 2016; Wang, Li, Jha, "Locally
    Differentially Private Frequent Itemset Mining", IEEE S&P 2018).

    A user holds a set S of at most L = ``max_items`` distinct values of ``domain`` (size d). It is padded
    to L items with dummies d + |S|, ..., d + L - 1, one of the L padded items is drawn uniformly, and it
    is reported with the ``inner`` frequency oracle over the extended domain of size d + L at full epsilon
    (the sampling is free: each possible input is an epsilon-LDP mixture). Each holder of v reports v
    w.p. 1/L, so with the inner rates (p_i, q_i) a report supports v w.p. p* = q_i + (p_i - q_i)/L if the
    user holds v and q* = q_i otherwise: the pure-oracle estimator with these rates is L times the inner
    estimate, and its variance (with the item's own term) follows from the same formula.
    """

    name: ClassVar[str] = "set-valued"
    max_items: int
    inner: InnerOracleParams

    def __post_init__(self) -> None:
        _as_domain(self)
        d = self.domain.size
        _int_field("max_items", self.max_items, 1, min(MAX_SET_ITEMS, MAX_DOMAIN_SIZE - d))
        if not isinstance(self.inner, _INNER_TYPES):
            raise InvalidParameterError(
                "inner", type(self.inner).__name__, "the parameters of grr, oue, sue, olh, blh, ss or hr"
            )
        size = d + self.max_items
        if self.inner.domain.size != size or self.inner.domain.labels is not None:
            raise InvalidParameterError(
                "inner.domain",
                self.inner.domain.size,
                f"the extended integer domain of size d + max_items = {size} (no labels)",
            )

    @property
    def p_star(self) -> float:
        p, q = oracle_rates(self.inner)
        return q + (p - q) / self.max_items

    @property
    def q_star(self) -> float:
        return oracle_rates(self.inner)[1]

    @property
    def epsilon(self) -> float:
        return self.inner.epsilon

    @property
    def report_bits(self) -> int:
        return oracle_report_bits(self.inner)

    @classmethod
    def from_epsilon(
        cls,
        domain: int | Sequence[str] | Domain,
        epsilon: float,
        *,
        max_items: int,
        inner: str = "auto",
        max_report_bits: int | None = None,
    ) -> SetValuedParams:
        """Padding and sampling with ``inner`` (a mechanism name, or ``auto`` for the lowest-variance
        oracle over the extended domain within ``max_report_bits``) at ``epsilon``."""
        dom = Domain.of(domain)
        d = dom.size
        _int_field("max_items", max_items, 1, min(MAX_SET_ITEMS, MAX_DOMAIN_SIZE - d))
        size = d + max_items
        if inner == "auto":
            from ldp_client.auto import choose_mechanism

            chosen = choose_mechanism(size, epsilon, max_report_bits=max_report_bits).params
        else:
            if max_report_bits is not None:
                raise InvalidParameterError("max_report_bits", max_report_bits, "none unless inner is auto")
            if inner not in ("grr", "oue", "sue", "olh", "blh", "ss", "hr"):
                raise InvalidParameterError("inner", inner, "auto, grr, oue, sue, olh, blh, ss or hr")
            chosen = make_params(inner, epsilon=epsilon, domain=size)  # type: ignore[assignment]
        return cls(domain=dom, max_items=max_items, inner=chosen)

    @classmethod
    def _make(cls, *, epsilon: float | None, domain: object, fields: dict[str, object]) -> SetValuedParams:
        dom = _require_domain(domain, cls.name)
        allowed = ("max_items", "inner", "max_report_bits")
        if "max_items" not in fields:
            raise InvalidParameterError("max_items", None, "the largest set size L (--param max_items=L)")
        max_items = _take(fields, "max_items", int, cls.name)
        inner = str(_take(fields, "inner", str, cls.name)) if "inner" in fields else "auto"
        budget = _take(fields, "max_report_bits", int, cls.name) if "max_report_bits" in fields else None
        _no_more_fields(fields, cls.name, allowed)
        if epsilon is None:
            raise InvalidParameterError("epsilon", None, "an epsilon > 0 for set-valued")
        return cls.from_epsilon(
            dom,
            epsilon,
            max_items=max_items,  # type: ignore[arg-type]
            inner=inner,
            max_report_bits=budget,  # type: ignore[arg-type]
        )


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
"""The issue-6 parameter classes (BLHParams is a subclass of OLHParams), for isinstance dispatch."""


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
UnportedParams = (
    OUEParams
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
)
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


# Mechanisms not yet ported to a spec of ldp_client.registry, by name.
_PARAM_CLASSES: dict[str, type[MechanismParams]] = {
    cls.name: cls for cls in (OUEParams, SUEParams, OLHParams, BLHParams)
}
_PARAM_CLASSES.update((cls.name, cls) for cls in (SubsetSelectionParams, HadamardParams, SetValuedParams))
_PARAM_CLASSES.update((cls.name, cls) for cls in NUMERIC_PARAM_CLASSES)  # issue 6: numeric mechanisms
AUTO_MECHANISM = "auto"
"""Not a mechanism: ``make_params("auto", ...)`` returns the lowest-variance frequency oracle
(:func:`ldp_client.auto.choose_mechanism`)."""
MECHANISM_NAMES: tuple[str, ...] = tuple(
    n for n in get_args(MechanismName) if registry.find_named(n) is not None or n in _PARAM_CLASSES
)
"""Every mechanism ``make_params`` builds, in the order they are listed to users (:data:`MechanismName`'s)."""


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
    if mechanism == AUTO_MECHANISM:  # issue 6: resolved here to the concrete parameters
        from ldp_client.auto import make_auto_params

        return make_auto_params(epsilon=epsilon, domain=domain, fields=dict(fields or {}))
    cls = _PARAM_CLASSES.get(mechanism)
    if cls is None:
        raise InvalidParameterError("mechanism", mechanism, f"one of {', '.join(MECHANISM_NAMES)}")
    if issubclass(cls, _FrequencyOracle):  # issue 6: oue, sue, olh, blh, ss, hr, set-valued
        return cls._make(epsilon=epsilon, domain=domain, fields=dict(fields or {}))  # type: ignore[return-value]
    if cls in NUMERIC_PARAM_CLASSES:  # issue 6: laplace, duchi, piecewise, hybrid, sr, multidim
        return make_numeric_params(mechanism, epsilon=epsilon, domain=domain, fields=dict(fields or {}))
    raise InvalidParameterError("mechanism", mechanism, f"one of {', '.join(MECHANISM_NAMES)}")  # unreachable
