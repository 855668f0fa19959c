"""Parameters of the numeric (mean estimation) mechanisms: laplace, duchi, piecewise, hybrid, sr, multidim.

Every numeric mechanism here takes a real value ``x`` declared in a range ``[lo, hi]`` and reports an
**integer code** drawn with exact integer arithmetic from uniform random words; the server maps a code
to an unbiased estimate of the value. Nothing continuous is ever sampled, so the epsilon each class
reports is the exact privacy loss of the distribution the encoders implement.

Inputs. ``x`` must be a finite real number (NaN and +/-inf always raise
:class:`~ldp_client.errors.DomainError`). A finite value outside ``[lo, hi]`` is handled by the
``out_of_range`` policy of the parameters: ``"clamp"`` (the default) replaces it by the nearest bound,
``"reject"`` raises :class:`~ldp_client.errors.DomainError` naming the value. The encoders work on the
*position* ``s = (x - lo) / (hi - lo)`` in ``[0, 1]`` (``t = 2 s - 1`` in ``[-1, 1]`` in the papers'
notation), computed in float64; the position only selects which of the exact integer distributions below
is sampled, and every selectable distribution satisfies the epsilon bound, so floating point cannot
weaken privacy (it moves the estimate's expectation by at most about 2**-52 of the range).

Why integer codes (Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012): a float64 Laplace sample ``x + b * log(u)`` has gaps and an input-dependent set of reachable
floating-point outputs, so an observer can tell some inputs apart with certainty. Here every output is
an integer code whose probability is a ratio of integers, so "epsilon" is a statement about exactly what
is sampled, and the tests check it by enumeration.

Mechanisms (position ``s``; ``T/2**32`` is a 32-bit quantized probability, ``W/2**64`` a 64-bit one):

``duchi`` (Duchi, Jordan, Wainwright, JASA 2018, one-dimensional case)
    One bit, 1 w.p. ``(L 2**32 + floor(s (2**32 - 2L) 2**32)) / 2**64``: from ``L/2**32`` at ``s = 0``
    to ``1 - L/2**32`` at ``s = 1``, linear in between with 64-bit resolution. epsilon =
    ln((2**32 - L) / L). Estimate: ``t_hat = C (2 b - 1)`` with ``C = 2**32 / (2**32 - 2L)``, the
    paper's ``(e^eps + 1)/(e^eps - 1)`` for the quantized L. Var(t_hat | t) = C**2 - t**2.
``sr`` (stochastic rounding, then randomized response: Ding, Kulkarni, Yekhanin, NeurIPS 2017, 1BitMean)
    Round the value to ``hi`` w.p. ``floor(s 2**63)/2**63`` (else ``lo``), then keep the bit w.p.
    ``p = T/2**32`` (else flip it). P(1 | s) = 1/(e+1) + s (e-1)/(e+1) as in 1BitMean;
    epsilon = ln(T / (2**32 - T)). Estimate ``s_hat = (b - (1-p)) / (2p - 1)``;
    Var(x_hat) = (hi-lo)**2 pi (1 - pi) / (2p - 1)**2 with pi = P(1 | s). Same channel as duchi, with
    the randomness split into a rounding coin and a response coin, and Ding et al.'s parameterization.
``piecewise`` (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, ICDE 2019, "Piecewise Mechanism")
    The output range is cut into G cells; a window of M consecutive cells (the paper's high-probability
    interval [l(t), r(t)], M/G = 1/(e^(eps/2) + 1)) starts at ``L = s (G - M)`` (randomized rounding to
    an integer with a 64-bit coin). With probability ``P = T/2**32`` the code is a uniform cell of the
    window, otherwise a uniform cell outside it. epsilon = ln(P (G - M) / ((1 - P) M)). Estimate
    ``t_hat = (2 c + 1 - G) / (kappa (G - M))`` with ``kappa = P - (1 - P) M / (G - M)`` (unbiased).
    As G grows the variance tends to the paper's t^2/(e^(eps/2)-1) + (e^(eps/2)+3)/(3(e^(eps/2)-1)^2).
``hybrid`` (Wang et al., ICDE 2019, "Hybrid Mechanism")
    Piecewise with probability ``alpha`` (32-bit quantized; the paper's 1 - e^(-eps/2) for eps > eps*
    = 0.61, else 0), otherwise duchi, both at the full epsilon. Codes ``[0, G)`` are piecewise cells,
    ``G`` and ``G + 1`` duchi's -C and +C. epsilon = max of the two; Var = alpha Var_PM + (1-alpha) Var_D.
``laplace`` (bounded input, discrete Laplace / two-sided geometric noise on a grid; Ghosh, Roughgarden,
Sundararajan, STOC 2009; Canonne, Kamath, Steinke, NeurIPS 2020)
    The position is rounded (randomized, 64-bit coin) to one of the grid points ``i = 0..K``; the code
    is ``j = clamp(i + Z, -R, K + R)`` (shifted by R) with ``P(Z = z)`` proportional to ``alpha^|z|``,
    ``alpha = A/2**32``, from an integer table of weights summing to exactly 2**64 (sampled by inverse
    CDF with one 64-bit word). R is the first distance where alpha^R <= 2**-20; the table's two end
    entries carry the geometric tails. epsilon is computed from the integer table (maximum ratio over
    every output and every pair of grid inputs, including the clamped ends) and is about
    ``K ln(1/alpha)``. The clamped end codes decode to the conditional mean of the unclamped output
    (``-R - alpha/(1-alpha)``, by the memorylessness of the geometric tail), so clamping adds no bias.
    Var(t_hat) = (4/K**2)(2 alpha/(1-alpha)**2 + f (1-f)), about 8/eps**2, f the rounding fraction.
``multidim`` (Wang et al., ICDE 2019, Algorithm 4)
    D attributes, each in its own range. A user samples k of them uniformly without replacement
    (k = max(1, min(D, floor(eps/2.5))) by default), reports each with a one-dimensional mechanism
    (``duchi``, ``piecewise`` or ``hybrid``) at eps/k, and the server scales by D/k. epsilon = k times
    the base mechanism's (quantized) epsilon.

Importing this module does not import numpy (the batch helpers import it when called).
"""

from __future__ import annotations

import bisect
import functools
import math
import numbers
import warnings
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar, Final, Literal

from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    smallest_threshold,
    threshold_to_probability,
)
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DEFAULT_CELLS",
    "DEFAULT_LAPLACE_GRID",
    "HYBRID_EPSILON_STAR",
    "MAX_ATTRIBUTES",
    "MAX_CODES",
    "NUMERIC_MECHANISM_NAMES",
    "NUMERIC_PARAM_CLASSES",
    "OUT_OF_RANGE_POLICIES",
    "DuchiParams",
    "HybridParams",
    "LaplaceParams",
    "MultidimParams",
    "NumericLayout",
    "NumericParams",
    "OneDimParams",
    "PiecewiseParams",
    "SRParams",
    "is_numeric",
    "make_numeric_params",
]

OutOfRange = Literal["clamp", "reject"]
OUT_OF_RANGE_POLICIES: tuple[str, ...] = ("clamp", "reject")
DEFAULT_CELLS = 1 << 20
"""Default number of output cells G of piecewise/hybrid (codes are uint32; the cost does not grow with G)."""
DEFAULT_LAPLACE_GRID = 1024
"""Default number of grid steps K across [lo, hi] for laplace (smaller for tiny epsilon, see from_epsilon)."""
MAX_CODES = (1 << 32) - 1
"""Codes travel as uint32: every mechanism's codes are in [0, MAX_CODES)."""
MAX_ATTRIBUTES = 4096
HYBRID_EPSILON_STAR = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1 / 3)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1 / 3)
    )
    / 27.0
)
"""eps* = 0.6094...: below it the hybrid mechanism is pure duchi (Wang et al., ICDE 2019, Lemma 5)."""

_TWO32 = PROB_ONE
_TWO63F = float(1 << 63)
_TWO64 = 1 << 64
_TWO64F = float(_TWO64)
# Same tolerance as ldp_client.params: a from_epsilon request is "met" when quantization lowers epsilon by
# at most this relative amount; otherwise a PrivacyQuantizationWarning says what is guaranteed instead.
_EPSILON_REL_TOLERANCE = 1e-6
# laplace: the clamp distance R is where alpha^R <= 2**-_LAPLACE_TAIL_BITS; the integer weight recurrence
# runs with _LAPLACE_HP_BITS bits below 2**-64 so its rounding never reaches the 64-bit weights.
_LAPLACE_TAIL_BITS = 20
_LAPLACE_HP_BITS = 96
_LAPLACE_MAX_TABLE = 1 << 20
_LAPLACE_MAX_GRID = 1 << 20


# ------------------------------------------------------------------------------------------- helpers


def _check_epsilon(epsilon: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return float(epsilon)


def _report_quantization(requested: float, effective: float) -> None:
    if requested - effective > _EPSILON_REL_TOLERANCE * max(1.0, requested):
        warnings.warn(
            f"epsilon={requested!r} cannot be met exactly by the quantized numeric mechanism; "
            f"it guarantees epsilon={effective!r} instead",
            PrivacyQuantizationWarning,
            stacklevel=3,
        )


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(name, value, f"an integer in [{lo}, {hi}]")
    return value


def _check_range(lo: object, hi: object, prefix: str = "") -> tuple[float, float]:
    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidParameterError(prefix + name, v, "a finite number")
    lo_f, hi_f = float(lo), float(hi)  # type: ignore[arg-type]
    if not lo_f < hi_f:
        raise InvalidParameterError(prefix + "hi", hi, f"a number above lo={lo!r}")
    if not math.isfinite(hi_f - lo_f):
        raise InvalidParameterError(prefix + "hi", hi, f"a number with hi - lo finite (lo={lo!r})")
    return lo_f, hi_f


def _check_policy(policy: object) -> str:
    if policy not in OUT_OF_RANGE_POLICIES:
        raise InvalidParameterError("out_of_range", policy, "'clamp' or 'reject'")
    return str(policy)


def _log_ratio_up(num: int, den: int) -> float:
    """ln(num/den) for positive integers, rounded up by two ulps so it bounds the exact value."""
    value = math.log(num) - math.log(den)
    return math.nextafter(math.nextafter(value, math.inf), math.inf)


def position(value: object, lo: float, hi: float, reject: bool, field_name: str = "value") -> float:
    """The position ``s = (x - lo)/(hi - lo)`` in [0, 1] of one value, after validation and clamping.

    Raises:
        DomainError: ``value`` is not a real number, is NaN or infinite, or (``reject``) lies outside
            ``[lo, hi]``.
    """
    kind = type(value)
    if kind is float:
        x: float = value  # type: ignore[assignment]
        integral = False
    elif kind is int:
        integral = True
        try:
            x = float(value)  # type: ignore[arg-type]
        except OverflowError:  # a finite int beyond float range: outside any float range
            x = math.inf if value > 0 else -math.inf  # type: ignore[operator]
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DomainError(field_name, value, f"a finite real number in [{lo!r}, {hi!r}]")
    else:
        integral = isinstance(value, numbers.Integral)
        try:
            x = float(value)
        except OverflowError:
            x = math.inf if value > 0 else -math.inf  # type: ignore[operator]
    if math.isnan(x) or (not integral and math.isinf(x)):
        raise DomainError(field_name, value, f"a finite real number in [{lo!r}, {hi!r}] (never NaN or inf)")
    if x < lo or x > hi:
        if reject:
            raise DomainError(field_name, value, f"a number in [{lo!r}, {hi!r}] (out_of_range='reject')")
        return 0.0 if x < lo else 1.0
    return (x - lo) / (hi - lo)


def positions(
    values: ArrayLike, lo: float | NDArray[np.float64], hi: float | NDArray[np.float64], reject: bool
) -> NDArray[np.float64]:
    """Vectorised :func:`position` for an array of values (``lo``/``hi`` may broadcast per column).

    Raises:
        DomainError: not a numeric array, a NaN or infinite value, or (``reject``) a value outside the
            range; the message names the first offending value.
    """
    import numpy as np

    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf":
        raise DomainError("values", f"<array of dtype {arr.dtype}>", "an array of real numbers")
    x = arr.astype(np.float64, copy=False)
    finite = np.isfinite(x)
    if not finite.all():
        bad = x[~finite].ravel()[0]
        raise DomainError("values", float(bad), "finite real numbers (never NaN or inf)")
    lo_a = np.asarray(lo, dtype=np.float64)
    hi_a = np.asarray(hi, dtype=np.float64)
    outside = (x < lo_a) | (x > hi_a)
    if outside.any():
        if reject:
            idx = tuple(int(i[0]) for i in np.nonzero(outside))
            lo_b = np.broadcast_to(lo_a, x.shape)[idx]
            hi_b = np.broadcast_to(hi_a, x.shape)[idx]
            raise DomainError(
                "values",
                float(x[idx]),
                f"numbers in [{float(lo_b)!r}, {float(hi_b)!r}] (out_of_range='reject')",
            )
        x = np.clip(x, lo_a, hi_a)
    s = (x - lo_a) / (hi_a - lo_a)
    return np.asarray(s, dtype=np.float64)


# --------------------------------------------------------------------------------------------- layout


@dataclass(frozen=True, kw_only=True)
class NumericLayout:
    """How codes map to unbiased estimates of the position s (exact rationals).

    A *regular* code c (any code that is not special) estimates ``s_hat = offset + scale * c``; each
    special code has its own ``s_hat``. The value estimate is ``x_hat = lo + (hi - lo) * s_hat``.

    Attributes:
        num_codes: codes are the integers in [0, num_codes).
        offset, scale: the affine map of regular codes.
        specials: ``(code, s_hat)`` pairs, sorted by code.
    """

    num_codes: int
    offset: Fraction
    scale: Fraction
    specials: tuple[tuple[int, Fraction], ...] = ()

    @property
    def special_codes(self) -> tuple[int, ...]:
        return tuple(c for c, _ in self.specials)

    def s_hat(self, code: int) -> Fraction:
        """The exact estimate of the position for one code (no range check)."""
        for c, v in self.specials:
            if c == code:
                return v
        return self.offset + self.scale * code


# ------------------------------------------------------------------------------------ 1-D base class


@dataclass(frozen=True, kw_only=True)
class _Range:
    """The declared range [lo, hi] and out-of-range policy shared by every one-dimensional mechanism."""

    lo: float
    hi: float
    out_of_range: OutOfRange = "clamp"

    def _init_range(self) -> None:
        lo, hi = _check_range(self.lo, self.hi)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "out_of_range", _check_policy(self.out_of_range))

    @property
    def reject(self) -> bool:
        return self.out_of_range == "reject"

    def position(self, value: object) -> float:
        """The validated position s in [0, 1] of ``value`` (see the module docstring for the policy)."""
        return position(value, self.lo, self.hi, self.out_of_range == "reject")

    def positions(self, values: ArrayLike) -> NDArray[np.float64]:
        """:meth:`position` for a 1-D array of values."""
        import numpy as np

        arr = np.asarray(values)
        if arr.ndim != 1:
            raise DomainError("values", f"<array of shape {arr.shape}>", "a 1-D array of real numbers")
        return positions(arr, self.lo, self.hi, self.out_of_range == "reject")

    def decode(self, code: int) -> float:
        """The unbiased estimate ``x_hat`` of the value for one reported code."""
        layout: NumericLayout = self.layout  # type: ignore[attr-defined]
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < layout.num_codes:
            raise InvalidParameterError("code", code, f"an integer in [0, {layout.num_codes - 1}]")
        s_hat = layout.s_hat(code)
        return float(Fraction(self.lo) + (Fraction(self.hi) - Fraction(self.lo)) * s_hat)


# --------------------------------------------------------------------------------------------- duchi


def _duchi_threshold(eps: float, requested: object) -> int:
    """L = ceil(2**32 / (e^eps + 1)): P(1 | lo) rounded up, i.e. the smallest L with ln((2**32-L)/L) <=
    eps, decided exactly."""
    t = smallest_threshold(
        lambda low: ratio_within_exp(_TWO32 - low, low, eps),
        math.ceil(_TWO32 / (math.exp(min(eps, 700.0)) + 1.0)),
        1,
        _TWO32 // 2 - 1,
    )
    if t == 0:
        raise InvalidParameterError("epsilon", requested, "a value large enough for 32-bit probabilities")
    return t


@dataclass(frozen=True, kw_only=True)
class DuchiParams(_Range):
    """Duchi et al.'s one-bit mean mechanism on [lo, hi] (JASA 2018; formula in the module docstring).

    Args:
        lo, hi: the declared range of the value.
        low_probability: P(bit = 1 | x = lo), quantized to L/2**32 with 0 < L < 2**31; epsilon =
            ln((2**32 - L)/L). Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "duchi"
    low_probability: float
    low_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        t = quantize_probability("low_probability", self.low_probability)
        if not 0 < t < _TWO32 // 2:
            raise InvalidParameterError(
                "low_probability",
                self.low_probability,
                "a probability in (0, 1/2)" + rounding_note("low_probability", self.low_probability, t),
            )
        object.__setattr__(self, "low_threshold", t)

    @classmethod
    def from_epsilon(
        cls, lo: float, hi: float, epsilon: float, *, out_of_range: OutOfRange = "clamp"
    ) -> DuchiParams:
        """L = ceil(2**32 / (e^eps + 1)): P(1|lo) rounded up, so the effective epsilon is <= eps."""
        eps = _check_epsilon(epsilon)
        t = _duchi_threshold(eps, epsilon)
        params = cls(lo=lo, hi=hi, low_probability=threshold_to_probability(t), out_of_range=out_of_range)
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        t = self.low_threshold
        return _log_ratio_up(_TWO32 - t, t)

    @property
    def c(self) -> Fraction:
        """C = 2**32 / (2**32 - 2L): the reported magnitude +/-C on the t scale."""
        return Fraction(_TWO32, _TWO32 - 2 * self.low_threshold)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        # s_hat = (t_hat + 1)/2 with t_hat = C (2b - 1): s_hat = (1 - C)/2 + C b.
        c = self.c
        return NumericLayout(num_codes=2, offset=(1 - c) / 2, scale=c)

    def one_probability_word(self, s: float) -> int:
        """The 64-bit threshold W with P(bit = 1 | s) = W / 2**64 (what the encoders compare with)."""
        return (self.low_threshold << 32) + int(s * float((_TWO32 - 2 * self.low_threshold) << 32))

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = (C**2 - t**2)/4 (t = 2s - 1); exact up to 2**-52 of the range."""
        import numpy as np

        t = 2.0 * np.asarray(s, dtype=np.float64) - 1.0
        c = float(self.c)
        return np.asarray((c * c - t * t) / 4.0)

    @property
    def max_variance_s(self) -> float:
        c = float(self.c)
        return c * c / 4.0


# ------------------------------------------------------------------------------------------------ sr


@dataclass(frozen=True, kw_only=True)
class SRParams(_Range):
    """Stochastic rounding + randomized response: Ding et al.'s 1BitMean (NeurIPS 2017) on [lo, hi].

    Args:
        lo, hi: the declared range.
        truth_probability: p, the probability the rounded bit is sent unchanged, quantized to T/2**32 with
            2**31 < T < 2**32; epsilon = ln(T/(2**32 - T)). Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "sr"
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        t = quantize_probability("truth_probability", self.truth_probability)
        if not _TWO32 // 2 < t < _TWO32:
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                "a probability in (1/2, 1)" + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @classmethod
    def from_epsilon(
        cls, lo: float, hi: float, epsilon: float, *, out_of_range: OutOfRange = "clamp"
    ) -> SRParams:
        """T = floor(2**32 e^eps / (e^eps + 1)), rounded toward privacy: the largest T with
        ln(T / (2**32 - T)) <= eps, decided exactly."""
        eps = _check_epsilon(epsilon)
        t = largest_threshold(
            lambda x: ratio_within_exp(x, _TWO32 - x, eps),
            math.floor(_TWO32 / (1.0 + math.exp(-eps))),
            _TWO32 // 2 + 1,
            _TWO32 - 1,
        )
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough for 32-bit probabilities")
        params = cls(lo=lo, hi=hi, truth_probability=threshold_to_probability(t), out_of_range=out_of_range)
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        t = self.truth_threshold
        return _log_ratio_up(t, _TWO32 - t)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        # s_hat = (b - (1 - p)) / (2p - 1) with p = T / 2**32.
        t = self.truth_threshold
        den = Fraction(2 * t - _TWO32, _TWO32)
        return NumericLayout(num_codes=2, offset=-Fraction(_TWO32 - t, _TWO32) / den, scale=1 / den)

    def round_word(self, s: float) -> int:
        """The 63-bit threshold k: the value rounds to hi w.p. k / 2**63."""
        return int(s * _TWO63F)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = pi (1 - pi) / (2p - 1)**2, pi = (1-p) + s (2p - 1) = P(bit = 1 | s)."""
        import numpy as np

        p = threshold_to_probability(self.truth_threshold)
        sa = np.asarray(s, dtype=np.float64)
        pi = (1.0 - p) + sa * (2.0 * p - 1.0)
        return np.asarray(pi * (1.0 - pi) / (2.0 * p - 1.0) ** 2)

    @property
    def max_variance_s(self) -> float:
        p = threshold_to_probability(self.truth_threshold)
        return 0.25 / (2.0 * p - 1.0) ** 2


# ----------------------------------------------------------------------------------------- piecewise


@dataclass(frozen=True, kw_only=True)
class _PiecewiseCore(_Range):
    """The piecewise part shared by :class:`PiecewiseParams` and :class:`HybridParams` (not a mechanism:
    the two are separate classes so that ``isinstance`` never confuses them)."""

    cells: int = DEFAULT_CELLS
    window: int
    high_probability: float
    high_threshold: int = field(init=False, repr=False, compare=False)

    def _init_pm(self, max_cells: int) -> None:
        g = _check_int("cells", self.cells, 2, max_cells)
        m = _check_int("window", self.window, 1, g - 1)
        t = quantize_probability("high_probability", self.high_probability)
        if not (0 < t < _TWO32 and t * (g - m) > (_TWO32 - t) * m):
            raise InvalidParameterError(
                "high_probability",
                self.high_probability,
                f"a probability in (M/G, 1) = ({m / g!r}, 1) (the window must be more likely than elsewhere)"
                + rounding_note("high_probability", self.high_probability, t),
            )
        object.__setattr__(self, "high_threshold", t)

    @property
    def piecewise_epsilon(self) -> float:
        """ln(P (G - M) / ((1 - P) M)) with P = T/2**32: the ratio of a window cell to an outside cell."""
        g, m, t = self.cells, self.window, self.high_threshold
        return _log_ratio_up(t * (g - m), (_TWO32 - t) * m)

    @property
    def kappa(self) -> Fraction:
        """kappa = P - (1 - P) M / (G - M): E[c + 1/2 - G/2 | window start L] = kappa (L + M/2 - G/2)."""
        g, m = self.cells, self.window
        p = Fraction(self.high_threshold, _TWO32)
        return p - (1 - p) * Fraction(m, g - m)

    def _pm_affine(self) -> tuple[Fraction, Fraction]:
        # t_hat = (2c + 1 - G) / (kappa (G - M)); s_hat = (t_hat + 1)/2.
        g, m = self.cells, self.window
        den = self.kappa * (g - m)
        return (Fraction(1 - g) / den + 1) / 2, 1 / den

    def _pm_variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Exact Var(s_hat | s) of the discretised piecewise mechanism, including the start rounding.

        With v = c + 1/2 - G/2, a window of M cells centred at mu = L + M/2 - G/2 has mean v^2
        mu^2 + (M^2 - 1)/12 and the whole grid sum G (G^2 - 1)/12, so E[v^2 | L] = P (mu^2 + (M^2-1)/12)
        + (1-P) (G (G^2-1)/12 - M (mu^2 + (M^2-1)/12)) / (G - M); averaging over the rounded start adds
        f (1 - f) to mu^2. Var(t_hat) = 4 E[v^2] / (kappa (G-M))^2 - t^2 and Var(s_hat) = Var(t_hat)/4.
        """
        import numpy as np

        g, m = float(self.cells), float(self.window)
        p = threshold_to_probability(self.high_threshold)
        kappa = float(self.kappa)
        sa = np.asarray(s, dtype=np.float64)
        pos = sa * (g - m)
        f = pos - np.floor(pos)
        mu2 = (pos + m / 2.0 - g / 2.0) ** 2 + f * (1.0 - f)
        win = mu2 + (m * m - 1.0) / 12.0
        ev2 = p * win + (1.0 - p) * (g * (g * g - 1.0) / 12.0 - m * win) / (g - m)
        t = 2.0 * sa - 1.0
        var_t = 4.0 * ev2 / (kappa * (g - m)) ** 2 - t * t
        return np.asarray(var_t / 4.0)

    def _pm_max_variance_s(self) -> float:
        # Increasing in mu^2 (positive coefficient): largest at s = 0 or 1; plus the largest rounding term.
        ends = self._pm_variance_s([0.0, 1.0])
        return float(ends.max()) + 0.25 / float((self.kappa * (self.cells - self.window)) ** 2)


def piecewise_design(epsilon: float, cells: int) -> tuple[int, int]:
    """(window M, threshold T) of the piecewise mechanism at ``epsilon`` with G = ``cells``.

    M = round(G / (e^(eps/2) + 1)) (the paper's high-probability interval, of length C - 1 out of 2C
    with C = (e^(eps/2)+1)/(e^(eps/2)-1)), and T = floor(2**32 P) for the P that makes the ratio
    P (G-M) / ((1-P) M) exactly e^eps, so the effective epsilon never exceeds the request: the largest T
    with T (G-M) / ((2**32 - T) M) <= e^eps, decided exactly.
    """
    eps = _check_epsilon(epsilon)
    g = _check_int("cells", cells, 2, MAX_CODES - 1)
    half = math.exp(min(eps / 2.0, 700.0))
    m = min(max(1, round(g / (half + 1.0))), g - 1)
    # P / (1 - P) = e^eps M / (G - M), computed as 1 / (1 + (G - M) e^-eps / M) to avoid overflow.
    t = largest_threshold(
        lambda x: ratio_within_exp(x * (g - m), (_TWO32 - x) * m, eps),
        math.floor(_TWO32 / (1.0 + (g - m) * math.exp(-eps) / m)),
        1,
        _TWO32 - 1,
    )
    if t == 0 or not t * (g - m) > (_TWO32 - t) * m:
        raise InvalidParameterError("epsilon", epsilon, f"a value representable with cells={g}")
    return m, t


@dataclass(frozen=True, kw_only=True)
class PiecewiseParams(_PiecewiseCore):
    """Wang et al.'s Piecewise Mechanism (ICDE 2019) on a grid of G output cells (module docstring).

    Args:
        lo, hi: the declared range.
        cells: G, the number of output cells (codes 0..G-1), 2 <= G <= 2**32 - 2.
        window: M, the cells of the high-probability window, 1 <= M < G.
        high_probability: P, the probability of a code in the window, quantized to T/2**32; it must favour
            the window: P/M > (1-P)/(G-M). epsilon = ln(P (G-M) / ((1-P) M)).
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "piecewise"

    def __post_init__(self) -> None:
        self._init_range()
        self._init_pm(MAX_CODES - 1)

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> PiecewiseParams:
        """Piecewise at ``epsilon`` with G = ``cells``, rounded toward privacy (:func:`piecewise_design`)."""
        eps = _check_epsilon(epsilon)
        m, t = piecewise_design(eps, cells)
        params = cls(
            lo=lo,
            hi=hi,
            cells=cells,
            window=m,
            high_probability=threshold_to_probability(t),
            out_of_range=out_of_range,
        )
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        return self.piecewise_epsilon

    @functools.cached_property
    def layout(self) -> NumericLayout:
        offset, scale = self._pm_affine()
        return NumericLayout(num_codes=self.cells, offset=offset, scale=scale)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Exact Var(s_hat | s) (see ``_PiecewiseCore._pm_variance_s``)."""
        return self._pm_variance_s(s)

    @property
    def max_variance_s(self) -> float:
        return self._pm_max_variance_s()


# -------------------------------------------------------------------------------------------- hybrid


@dataclass(frozen=True, kw_only=True)
class HybridParams(_PiecewiseCore):
    """Wang et al.'s Hybrid Mechanism (ICDE 2019): piecewise w.p. alpha, else duchi, both at epsilon.

    Args:
        lo, hi, cells, window, high_probability: the piecewise part (see :class:`PiecewiseParams`);
            cells <= 2**32 - 3 (codes G and G+1 are duchi's).
        low_probability: the duchi part (see :class:`DuchiParams`).
        mix_probability: alpha, the probability of the piecewise branch (quantized to 2**-32; any value
            in [0, 1], since the branch choice does not depend on the value).
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "hybrid"
    low_probability: float
    mix_probability: float
    low_threshold: int = field(init=False, repr=False, compare=False)
    mix_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        self._init_pm(MAX_CODES - 2)
        t = quantize_probability("low_probability", self.low_probability)
        if not 0 < t < _TWO32 // 2:
            raise InvalidParameterError(
                "low_probability",
                self.low_probability,
                "a probability in (0, 1/2)" + rounding_note("low_probability", self.low_probability, t),
            )
        object.__setattr__(self, "low_threshold", t)
        object.__setattr__(
            self, "mix_threshold", quantize_probability("mix_probability", self.mix_probability)
        )

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> HybridParams:
        """Hybrid at ``epsilon``: alpha = 1 - e^(-eps/2) if eps > eps* else 0 (Wang et al., Lemma 5)."""
        eps = _check_epsilon(epsilon)
        m, t = piecewise_design(eps, cells)
        low = _duchi_threshold(eps, epsilon)
        alpha = 1.0 - math.exp(-eps / 2.0) if eps > HYBRID_EPSILON_STAR else 0.0
        params = cls(
            lo=lo,
            hi=hi,
            cells=cells,
            window=m,
            high_probability=threshold_to_probability(t),
            low_probability=threshold_to_probability(low),
            mix_probability=threshold_to_probability(round(alpha * _TWO32)),
            out_of_range=out_of_range,
        )
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def duchi_epsilon(self) -> float:
        return _log_ratio_up(_TWO32 - self.low_threshold, self.low_threshold)

    @property
    def epsilon(self) -> float:
        # The two branches have disjoint codes and a value-independent branch coin, so the ratio of any
        # code's probabilities is that of its branch. A branch that is never taken costs nothing.
        eps = []
        if self.mix_threshold > 0:
            eps.append(self.piecewise_epsilon)
        if self.mix_threshold < _TWO32:
            eps.append(self.duchi_epsilon)
        return max(eps)

    @property
    def alpha(self) -> float:
        """The effective probability of the piecewise branch, mix_threshold / 2**32."""
        return threshold_to_probability(self.mix_threshold)

    @property
    def c(self) -> Fraction:
        """Duchi's C = 2**32 / (2**32 - 2L)."""
        return Fraction(_TWO32, _TWO32 - 2 * self.low_threshold)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        offset, scale = self._pm_affine()
        c = self.c
        g = self.cells
        return NumericLayout(
            num_codes=g + 2, offset=offset, scale=scale, specials=((g, (1 - c) / 2), (g + 1, (1 + c) / 2))
        )

    def one_probability_word(self, s: float) -> int:
        """Duchi branch: the 64-bit threshold of P(+C | s) (as :meth:`DuchiParams.one_probability_word`)."""
        return (self.low_threshold << 32) + int(s * float((_TWO32 - 2 * self.low_threshold) << 32))

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """alpha Var_PM(s) + (1 - alpha) Var_D(s) (both branches are unbiased)."""
        import numpy as np

        a = self.alpha
        t = 2.0 * np.asarray(s, dtype=np.float64) - 1.0
        c = float(self.c)
        return np.asarray(a * self._pm_variance_s(s) + (1.0 - a) * (c * c - t * t) / 4.0)

    @property
    def max_variance_s(self) -> float:
        a = self.alpha
        c = float(self.c)
        return float(a * self._pm_max_variance_s() + (1.0 - a) * c * c / 4.0)


# ------------------------------------------------------------------------------------------- laplace


@dataclass(frozen=True)
class LaplaceTable:
    """The integer noise table of :class:`LaplaceParams` (built once per (grid, decay), cached).

    Attributes:
        grid: K.
        decay_threshold: A (alpha = A / 2**32).
        reach: R, the clamp distance (outputs j are in [-R, K + R]).
        weights: w(|z|) for |z| = 0..R+K-1 (integers), then the tail weight at |z| = R + K (the mass of
            every |z| >= R + K, at each end). Sum over z of the table = 2**64 exactly.
        cumulative: ``array('Q')`` of the 2(R+K) partial sums of the table over z = -(R+K) .. R+K-1: the
            sampled table index is ``bisect_right(cumulative, u)`` for a uniform 64-bit u.
        epsilon: ln of the largest ratio P(j | i) / P(j | i') over outputs j and grid inputs i, i'.
    """

    grid: int
    decay_threshold: int
    reach: int
    weights: tuple[int, ...]
    cumulative: array[int]
    epsilon: float

    @property
    def half_width(self) -> int:
        """R + K: the table covers z in [-(R+K), R+K]."""
        return self.reach + self.grid

    def weight(self, z: int) -> int:
        """The table weight of noise z (the tail weight at |z| = R + K)."""
        return self.weights[abs(z)]


class _LaplaceLimitError(Exception):
    """Internal: a (grid, decay) pair has no valid noise table. The callers turn this into a message about
    the user's own parameters (epsilon, grid, decay), never about internal thresholds.

    ``kind`` is ``"size"`` (the table would need over 2**20 entries: too little privacy loss per grid
    step, i.e. epsilon too small for the grid) or ``"underflow"`` (the smallest noise weights round to 0
    in 64 bits: epsilon too large).
    """

    def __init__(self, kind: Literal["size", "underflow"]) -> None:
        super().__init__(kind)
        self.kind = kind


def _laplace_reach_estimate(grid: int, alpha: float) -> float:
    """About R: the first z with alpha^z <= 2**-20 (float estimate, for limits and messages only)."""
    if alpha <= 0.0:
        return 1.0
    return max(1.0, math.ceil(_LAPLACE_TAIL_BITS * math.log(2.0) / -math.log(alpha) - 1e-9))


def _laplace_fits(grid: int, epsilon: float) -> bool:
    """About whether the table at ``grid`` and alpha = e^(-epsilon/grid) stays within 2**20 entries."""
    alpha = math.exp(-epsilon / grid)
    return grid + _laplace_reach_estimate(grid, alpha) <= (_LAPLACE_MAX_TABLE - 1) // 2


def _laplace_representable(grid: int, epsilon: float) -> bool:
    """About whether the smallest weights of the table are >= 1: the last regular weight
    2**64 (1-alpha)/(1+alpha) alpha^(R+K-1) and the tail 2**64 alpha^(R+K)/(1+alpha)."""
    alpha = math.exp(-epsilon / grid)
    reach = _laplace_reach_estimate(grid, alpha)
    last = 64.0 + math.log2((1.0 - alpha) / (1.0 + alpha)) + (reach + grid - 1) * math.log2(alpha)
    tail = 64.0 + (reach + grid) * math.log2(alpha) - math.log2(1.0 + alpha)
    return min(last, tail) >= 0.5


def _laplace_min_epsilon() -> float:
    """About the smallest epsilon laplace supports (at the smallest grid, 2 steps; 2**20-entry table)."""
    lo, hi = 1e-9, 1.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _laplace_fits(2, mid) else (mid, hi)
    return hi


def _laplace_max_grid(epsilon: float) -> int:
    """About the largest grid whose noise table fits in 2**20 entries at ``epsilon`` (1 if none)."""
    lo, hi = 1, _LAPLACE_MAX_GRID
    if _laplace_fits(hi, epsilon):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _laplace_fits(mid, epsilon) else (lo, mid)
    return lo


def _laplace_max_epsilon(grid: int) -> float:
    """About the largest epsilon whose noise table at ``grid`` is representable with 64-bit weights."""
    # The tail weight needs alpha^(R+K) >= 2**-64, so epsilon < 64 ln 2 (about 44.4) at any grid.
    lo, hi = 1e-3, 64.0 * math.log(2.0)
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _laplace_representable(grid, mid) else (lo, mid)
    return lo


def _check_laplace_table(grid: int, decay_threshold: int, decay: float) -> None:
    """Build :func:`laplace_table`, or raise the user-facing error for direct parameters (grid, decay)."""
    try:
        laplace_table(grid, decay_threshold)
    except _LaplaceLimitError as exc:
        eps = grid * -math.log(threshold_to_probability(decay_threshold))
        if exc.kind == "size":
            k_max = _laplace_max_grid(eps)
            fix = (
                f"at that epsilon use a grid of at most about {k_max} steps"
                if k_max >= 2
                else f"laplace needs an epsilon of at least about {_laplace_min_epsilon():.2g}"
            )
            raise InvalidParameterError(
                "decay",
                decay,
                f"a decay further from 1 at grid={grid}: this one means epsilon about {eps:.3g}, so little "
                f"privacy loss per grid step that the noise table would need over 2**20 entries; {fix} "
                "(LaplaceParams.from_epsilon chooses the grid)",
            ) from None
        raise InvalidParameterError(
            "decay",
            decay,
            f"a larger decay at grid={grid}: this one means epsilon about {eps:.3g}, and laplace supports at "
            f"most about {_laplace_max_epsilon(grid):.3g} (less noise is not representable in its 64-bit "
            "noise table)",
        ) from None


@functools.lru_cache(maxsize=16)
def laplace_table(grid: int, decay_threshold: int) -> LaplaceTable:
    """Build the discrete Laplace table for K = ``grid``, alpha = ``decay_threshold`` / 2**32.

    Deterministic integer arithmetic only (so client and server build the same table): a fixed-point
    power sequence a_z ~ alpha^z 2**(64+H) by ``a_{z+1} = floor(a_z A / 2**32)``; R is the first z with
    a_z <= 2**(44+H) (alpha^R <= 2**-20); w(z) = floor(a_z (2**32 - A) / ((2**32 + A) 2**H)), i.e.
    2**64 (1-alpha)/(1+alpha) alpha^z rounded down; the tail weight floor(a_{R+K} 2**32 / ((2**32+A) 2**H))
    (2**64 alpha^(R+K)/(1+alpha), the mass of z >= R+K); and w(0) takes the remainder so the table sums
    to exactly 2**64. Weights are non-increasing in |z|, which the epsilon computation uses.

    Raises:
        _LaplaceLimitError: the table would exceed 2**20 entries, or its tail weight rounds to 0 (the
            parameter classes turn this into a message about epsilon, grid or decay).

    Why 2**-20: the clamped ends carry the geometric tails and decode to their conditional means, so the
    clamp distance costs no bias; a shorter table keeps its smallest weights (~2**44 (1-alpha)/(1+alpha)
    e^-eps) large, so their rounding adds almost nothing to epsilon (under 1e-6 of it at eps <= 10).
    """
    k, a = grid, decay_threshold
    hp = _LAPLACE_HP_BITS
    one = 1 << (64 + hp)
    stop = 1 << (64 - _LAPLACE_TAIL_BITS + hp)
    num, den = _TWO32 - a, (_TWO32 + a) << hp
    max_half = (_LAPLACE_MAX_TABLE - 1) // 2
    # Refuse early (without building) a table that cannot fit: alpha^R = 2**-20 at R ~ 20 ln 2 / ln(1/alpha).
    if a < _TWO32 and k + _LAPLACE_TAIL_BITS * math.log(2.0) / -math.log(a / _TWO32) > max_half * 1.01:
        raise _LaplaceLimitError("size")
    powers = [one]
    cur = one
    found: int | None = None  # R: the first z with a_z <= 2**(44+H), i.e. alpha^z <= 2**-20
    while found is None or len(powers) <= found + k:
        if found is None and cur <= stop:
            found = len(powers) - 1
            continue
        if len(powers) > max_half:
            raise _LaplaceLimitError("size")
        cur = (cur * a) >> 32
        powers.append(cur)
    reach = found
    half = reach + k
    weights = [p * num // den for p in powers[:half]]
    tail = (powers[half] << 32) // den
    weights.append(tail)
    weights[0] = 0
    weights[0] = _TWO64 - 2 * sum(weights)
    # Every weight must be >= 1: a zero weight is an impossible output for some inputs (infinite epsilon).
    # The weights fall with |z|, and the last regular one is the smallest (the tail holds more mass).
    if weights[0] < weights[1] or weights[half - 1] < 1 or tail < 1:
        raise _LaplaceLimitError("underflow")
    cumulative = array("Q")
    total = 0
    for z in range(-half, half):
        total += weights[abs(z)]
        cumulative.append(total)
    eps = _laplace_epsilon(weights, k, reach)
    return LaplaceTable(
        grid=k, decay_threshold=a, reach=reach, weights=tuple(weights), cumulative=cumulative, epsilon=eps
    )


def _laplace_epsilon(w: Sequence[int], k: int, reach: int) -> float:
    """ln of max_j max_{i,i'} P(j|i)/P(j|i') for the table, from its integers (see LaplaceParams).

    Interior outputs j in (-R, K+R): P(j|i) = w(|j - i|) over the window z in [j-K, j]; w is unimodal, so
    the ratio is w(0)/w(K) when the window holds 0 (j in [0, K]) and w(d)/w(d+K) for d = j - K in
    [1, R-1] (and symmetrically). End output -R: P = sum_{z <= -R-i} w(z), largest/smallest at i = 0/K:
    (sum_{m >= R} w(m)) / w_tail-inclusive sum from R+K, with w(R+K) the tail weight.
    """
    best_num, best_den = w[0], w[k]
    for d in range(1, reach):
        a, b = w[d], w[d + k]
        if a * best_den > best_num * b:
            best_num, best_den = a, b
    tail_from_reach = sum(w[reach:])  # sum_{m >= R} (the last weight is the tail mass beyond R + K)
    tail_end = w[reach + k]
    if tail_from_reach * best_den > best_num * tail_end:
        best_num, best_den = tail_from_reach, tail_end
    return _log_ratio_up(best_num, best_den)


def _laplace_epsilon_error(
    requested: object, eps: float, grid: int, grid_given: bool, kind: Literal["size", "underflow"]
) -> InvalidParameterError:
    """The message of a from_epsilon request laplace cannot meet, in the user's terms (epsilon, grid)."""
    if kind == "underflow":
        top = _laplace_max_epsilon(grid)
        default = "" if grid_given else " (the default)"
        return InvalidParameterError(
            "epsilon",
            requested,
            f"at most about {top:.3g} for laplace at grid={grid}{default} (less noise is not representable "
            "in its 64-bit noise table); use a smaller epsilon",
        )
    k_max = _laplace_max_grid(eps)
    if grid_given and k_max >= 2:
        return InvalidParameterError(
            "grid",
            grid,
            f"at most about {k_max} grid steps at epsilon={requested!r} (so little privacy loss per step "
            "needs a noise table of over 2**20 entries); use a smaller grid or a larger epsilon",
        )
    return InvalidParameterError(
        "epsilon",
        requested,
        f"at least about {_laplace_min_epsilon():.2g} for laplace (a smaller epsilon needs a noise table of "
        "over 2**20 entries even at the smallest grid, 2 steps)",
    )


def _auto_grid(epsilon: float) -> int:
    """The default K: 1024, smaller when the table (about 2 (22.2 K/eps + K) entries) would not fit."""
    per_k = 2.0 * (_LAPLACE_TAIL_BITS * math.log(2.0) / epsilon + 1.0) * 1.05
    return max(2, min(DEFAULT_LAPLACE_GRID, int(_LAPLACE_MAX_TABLE / per_k)))


@dataclass(frozen=True, kw_only=True)
class LaplaceParams(_Range):
    """Bounded-input Laplace as discrete Laplace noise on a grid of K steps over [lo, hi] (module docstring).

    Args:
        lo, hi: the declared range.
        grid: K, grid steps across [lo, hi] (inputs are rounded to K+1 points, outputs lie on the same
            spacing), 2 <= K <= 2**20.
        decay: alpha in (0, 1), quantized to A/2**32: P(Z = z) is proportional to alpha^|z| in grid steps.
            epsilon is about K ln(1/alpha), computed exactly from the integer table. Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "laplace"
    grid: int = DEFAULT_LAPLACE_GRID
    decay: float
    decay_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        _check_int("grid", self.grid, 2, _LAPLACE_MAX_GRID)
        a = quantize_probability("decay", self.decay)
        if not 0 < a < _TWO32:
            raise InvalidParameterError(
                "decay", self.decay, "a number in (0, 1)" + rounding_note("decay", self.decay, a)
            )
        object.__setattr__(self, "decay_threshold", a)
        _check_laplace_table(self.grid, a, self.decay)  # build (and validate) it now, not on a report

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        grid: int | None = None,
        out_of_range: OutOfRange = "clamp",
    ) -> LaplaceParams:
        """The largest alpha (least noise) whose table's exact epsilon is <= ``epsilon``.

        ``grid`` defaults to 1024 steps, fewer when epsilon is so small that the table would exceed 2**20
        entries. Starts at A = ceil(2**32 e^(-eps/K)) and raises A (more noise) by the excess that the
        integer rounding of the table adds, until the table's epsilon is at most the request.
        """
        eps = _check_epsilon(epsilon)
        k = _auto_grid(eps) if grid is None else _check_int("grid", grid, 2, _LAPLACE_MAX_GRID)
        target = eps
        a = 0
        for _ in range(64):
            a = max(a, math.ceil(_TWO32 * math.exp(-target / k)))
            if a >= _TWO32:
                raise _laplace_epsilon_error(epsilon, eps, k, grid is not None, "size")
            try:
                got = laplace_table(k, a).epsilon
            except _LaplaceLimitError as exc:
                raise _laplace_epsilon_error(epsilon, eps, k, grid is not None, exc.kind) from None
            if got <= eps:
                break
            # Ask for less by the excess (at least one step of A) and retry.
            target -= got - eps
            a += 1
        else:  # pragma: no cover - the excess shrinks geometrically
            raise InvalidParameterError("epsilon", epsilon, "a value the laplace table can meet")
        params = cls(lo=lo, hi=hi, grid=k, decay=threshold_to_probability(a), out_of_range=out_of_range)
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def table(self) -> LaplaceTable:
        return laplace_table(self.grid, self.decay_threshold)

    @property
    def reach(self) -> int:
        """R: outputs are grid points j in [-R, K + R] (codes j + R)."""
        return self.table.reach

    @property
    def epsilon(self) -> float:
        return self.table.epsilon

    @property
    def alpha(self) -> Fraction:
        return Fraction(self.decay_threshold, _TWO32)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        k, r = self.grid, self.reach
        a = self.alpha
        overshoot = a / (1 - a)  # mean of the geometric overshoot beyond a clamp (memoryless)
        last = k + 2 * r
        return NumericLayout(
            num_codes=last + 1,
            offset=Fraction(-r, k),
            scale=Fraction(1, k),
            specials=((0, (-r - overshoot) / k), (last, (k + r + overshoot) / k)),
        )

    def sample_index(self, word: int) -> int:
        """Noise z for a uniform 64-bit word (inverse CDF of the integer table)."""
        return bisect.bisect_right(self.table.cumulative, word) - self.table.half_width

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = (2 alpha/(1-alpha)^2 + f(1-f)) / K^2: discrete Laplace variance plus the input
        rounding (f = frac(s K)); the table's integer rounding and the clamped tails change it by < 1e-9."""
        import numpy as np

        a = float(self.alpha)
        k = float(self.grid)
        pos = np.asarray(s, dtype=np.float64) * k
        f = pos - np.floor(pos)
        return np.asarray((2.0 * a / (1.0 - a) ** 2 + f * (1.0 - f)) / (k * k))

    @property
    def max_variance_s(self) -> float:
        a = float(self.alpha)
        return (2.0 * a / (1.0 - a) ** 2 + 0.25) / float(self.grid) ** 2


OneDimParams = DuchiParams | SRParams | PiecewiseParams | HybridParams | LaplaceParams
BaseParams = DuchiParams | PiecewiseParams | HybridParams
_BASES: dict[str, type[DuchiParams] | type[PiecewiseParams] | type[HybridParams]] = {
    "duchi": DuchiParams,
    "piecewise": PiecewiseParams,
    "hybrid": HybridParams,
}


# ------------------------------------------------------------------------------------------ multidim


def default_k(epsilon: float, d: int) -> int:
    """k = max(1, min(D, floor(eps / 2.5))) (Wang et al., ICDE 2019, §IV-C)."""
    return max(1, min(d, math.floor(epsilon / 2.5)))


@dataclass(frozen=True, kw_only=True)
class MultidimParams:
    """Wang et al.'s multi-dimensional collection (ICDE 2019, Algorithm 4): k of D attributes per user.

    Args:
        ranges: D pairs (lo, hi), one per attribute, 1 <= D <= 4096.
        k: attributes each user reports, 1 <= k <= D.
        base: the one-dimensional mechanism of every reported attribute, on positions: a
            :class:`DuchiParams`, :class:`PiecewiseParams` or :class:`HybridParams` with lo = 0, hi = 1
            (each attribute's value is mapped to its position in its own range first).
        out_of_range: ``"clamp"`` or ``"reject"``, for every attribute.

    A report is k pairs (attribute, code), attributes strictly increasing. epsilon = k * base.epsilon
    (sequential composition; which attributes are sampled does not depend on the values).
    """

    name: ClassVar[str] = "multidim"
    ranges: tuple[tuple[float, float], ...]
    k: int
    base: BaseParams
    out_of_range: OutOfRange = "clamp"

    def __post_init__(self) -> None:
        if isinstance(self.ranges, str | bytes) or not isinstance(self.ranges, Iterable):
            raise InvalidParameterError("ranges", self.ranges, "a sequence of (lo, hi) pairs")
        pairs = tuple(self.ranges)
        if not 1 <= len(pairs) <= MAX_ATTRIBUTES:
            raise InvalidParameterError(
                "ranges", f"<{len(pairs)} ranges>", f"1 to {MAX_ATTRIBUTES} (lo, hi) pairs"
            )
        checked = []
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise InvalidParameterError(f"ranges[{i}]", pair, "a (lo, hi) pair")
            checked.append(_check_range(pair[0], pair[1], prefix=f"ranges[{i}]."))
        object.__setattr__(self, "ranges", tuple(checked))
        _check_int("k", self.k, 1, len(checked))
        if not isinstance(self.base, DuchiParams | PiecewiseParams | HybridParams):
            raise InvalidParameterError("base", self.base, "DuchiParams, PiecewiseParams or HybridParams")
        if (self.base.lo, self.base.hi) != (0.0, 1.0):
            raise InvalidParameterError(
                "base",
                f"lo={self.base.lo!r}, hi={self.base.hi!r}",
                "a base mechanism on positions: lo=0, hi=1",
            )
        object.__setattr__(self, "out_of_range", _check_policy(self.out_of_range))

    @classmethod
    def from_epsilon(
        cls,
        ranges: Sequence[tuple[float, float]],
        epsilon: float,
        *,
        base: str = "piecewise",
        k: int | None = None,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> MultidimParams:
        """k attributes per user (default :func:`default_k`) each with ``base`` at epsilon / k."""
        eps = _check_epsilon(epsilon)
        pairs = tuple(ranges) if not isinstance(ranges, str | bytes) else ranges
        d = len(pairs)
        kk = default_k(eps, max(d, 1)) if k is None else k
        _check_int("k", kk, 1, max(d, 1))
        cls_base = _BASES.get(base)
        if cls_base is None:
            raise InvalidParameterError("base", base, "duchi, piecewise or hybrid")
        with warnings.catch_warnings():
            # The composed epsilon is checked (and warned about) once, below.
            warnings.simplefilter("ignore", PrivacyQuantizationWarning)
            if cls_base is DuchiParams:
                b: BaseParams = DuchiParams.from_epsilon(0.0, 1.0, eps / kk)
            else:
                b = cls_base.from_epsilon(0.0, 1.0, eps / kk, cells=cells)  # type: ignore[call-arg]
        params = cls(ranges=tuple(pairs), k=kk, base=b, out_of_range=out_of_range)
        _report_quantization(eps, params.epsilon)
        return params

    @property
    def d(self) -> int:
        """D, the number of attributes."""
        return len(self.ranges)

    @property
    def epsilon(self) -> float:
        return self.k * self.base.epsilon

    @functools.cached_property
    def layout(self) -> NumericLayout:
        """The base mechanism's code layout (in each attribute's own position units)."""
        return self.base.layout

    @property
    def reject(self) -> bool:
        return self.out_of_range == "reject"

    def positions_of(self, values: object) -> list[float]:
        """Validated positions of one user's D values (every attribute is checked, sampled or not).

        Raises:
            DomainError: not a sequence of D numbers, or a value that is NaN, infinite or (``reject``)
                out of its attribute's range (named ``values[i]``).
        """
        if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
            raise DomainError("values", values, f"a sequence of {self.d} numbers")
        vals = list(values)
        if len(vals) != self.d:
            raise DomainError("values", f"<{len(vals)} values>", f"a sequence of exactly D={self.d} numbers")
        reject = self.out_of_range == "reject"
        out = []
        for i, (v, (lo, hi)) in enumerate(zip(vals, self.ranges, strict=True)):
            # Fast path for a float in range; anything else gets the full validation (and its message).
            if type(v) is float and lo <= v <= hi:
                out.append((v - lo) / (hi - lo))
            else:
                out.append(position(v, lo, hi, reject, f"values[{i}]"))
        return out


NumericParams = OneDimParams | MultidimParams
NUMERIC_PARAM_CLASSES: Final = (
    LaplaceParams,
    DuchiParams,
    PiecewiseParams,
    HybridParams,
    SRParams,
    MultidimParams,
)
NUMERIC_MECHANISM_NAMES: tuple[str, ...] = ("laplace", "duchi", "piecewise", "hybrid", "sr", "multidim")


def is_numeric(params: object) -> bool:
    """True for the parameters of a numeric (mean) mechanism."""
    return isinstance(params, NUMERIC_PARAM_CLASSES)


# ---------------------------------------------------------------------------------------- make_params


def _as_float(name: str, raw: object) -> float:
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            raise InvalidParameterError(name, raw, "a number") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidParameterError(name, raw, "a number")
    return float(raw)


def _as_int(name: str, raw: object) -> int:
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            raise InvalidParameterError(name, raw, "an integer") from None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidParameterError(name, raw, "an integer")
    return raw


def parse_ranges(raw: object) -> tuple[tuple[float, float], ...]:
    """Ranges from ``"lo:hi,lo:hi,..."`` or a sequence of (lo, hi) pairs."""
    if isinstance(raw, str):
        out = []
        for part in raw.split(","):
            lo, sep, hi = part.partition(":")
            if not sep:
                raise InvalidParameterError("ranges", raw, "LO:HI pairs separated by commas, e.g. 0:1,-5:5")
            out.append((_as_float("ranges", lo.strip()), _as_float("ranges", hi.strip())))
        return tuple(out)
    if isinstance(raw, Sequence):
        pairs = []
        for pair in raw:
            if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
                raise InvalidParameterError("ranges", raw, "(lo, hi) pairs")
            pairs.append((_as_float("ranges", pair[0]), _as_float("ranges", pair[1])))
        return tuple(pairs)
    raise InvalidParameterError("ranges", raw, "LO:HI pairs separated by commas, or a list of (lo, hi) pairs")


_ONE_DIM_EXTRA: dict[str, tuple[str, ...]] = {
    "laplace": ("grid",),
    "duchi": (),
    "sr": (),
    "piecewise": ("cells",),
    "hybrid": ("cells",),
}
_DIRECT_FIELDS: dict[str, tuple[str, ...]] = {
    "laplace": ("grid", "decay"),
    "duchi": ("low_probability",),
    "sr": ("truth_probability",),
    "piecewise": ("cells", "window", "high_probability"),
    "hybrid": ("cells", "window", "high_probability", "low_probability", "mix_probability"),
}
_INT_FIELDS = frozenset({"grid", "cells", "window", "k"})
_ONE_DIM_CLASSES: dict[str, type[LaplaceParams | DuchiParams | SRParams | PiecewiseParams | HybridParams]] = {
    "laplace": LaplaceParams,
    "duchi": DuchiParams,
    "sr": SRParams,
    "piecewise": PiecewiseParams,
    "hybrid": HybridParams,
}


def make_numeric_params(
    mechanism: str,
    *,
    epsilon: float | None = None,
    domain: object = None,
    fields: Mapping[str, object] | None = None,
) -> NumericParams:
    """Numeric parameters by name, as :func:`ldp_client.params.make_params` describes them.

    One-dimensional mechanisms (laplace, duchi, piecewise, hybrid, sr) take the fields ``lo`` and ``hi``
    (required), ``out_of_range`` (``clamp``/``reject``) and, with ``epsilon``, ``grid`` (laplace) or
    ``cells`` (piecewise, hybrid); without ``epsilon`` their quantized fields directly (``decay``,
    ``low_probability``, ``truth_probability``, ``window``, ``high_probability``, ``mix_probability``).
    ``multidim`` needs ``epsilon``; its attributes are ``ranges="lo:hi,lo:hi,..."``, or ``lo``/``hi``
    with ``domain`` = D attributes; also ``base`` (piecewise/hybrid/duchi), ``k``, ``cells``,
    ``out_of_range``. No numeric mechanism takes a categorical domain.

    Raises:
        InvalidParameterError: unknown field, missing lo/hi, a bad value (named by field).
    """
    given = dict(fields or {})
    policy = str(given.pop("out_of_range", "clamp"))
    if mechanism == "multidim":
        return _make_multidim(epsilon, domain, given, policy)
    cls = _ONE_DIM_CLASSES.get(mechanism)
    if cls is None:
        raise InvalidParameterError("mechanism", mechanism, ", ".join(NUMERIC_MECHANISM_NAMES))
    if domain is not None:
        raise InvalidParameterError(
            "domain", domain, f"nothing: {mechanism} takes a range (lo, hi), not a domain"
        )
    allowed = (
        "lo",
        "hi",
        "out_of_range",
        *(_ONE_DIM_EXTRA[mechanism] if epsilon is not None else _DIRECT_FIELDS[mechanism]),
    )
    for name, raw in given.items():
        if name not in allowed:
            raise InvalidParameterError(f"param {name}", raw, f"a field of {mechanism}: {', '.join(allowed)}")
    for name in ("lo", "hi"):
        if name not in given:
            raise InvalidParameterError(
                name, None, f"the {'lower' if name == 'lo' else 'upper'} end of {mechanism}'s range"
            )
    lo, hi = _as_float("lo", given.pop("lo")), _as_float("hi", given.pop("hi"))
    kw: dict[str, object] = {
        n: (_as_int(n, v) if n in _INT_FIELDS else _as_float(n, v)) for n, v in given.items()
    }
    if epsilon is not None:
        return cls.from_epsilon(lo, hi, epsilon, out_of_range=policy, **kw)  # type: ignore[arg-type]
    try:
        return cls(lo=lo, hi=hi, out_of_range=policy, **kw)  # type: ignore[arg-type]
    except TypeError as exc:  # a required field is missing
        raise InvalidParameterError(
            "epsilon", None, f"an epsilon, or the fields {', '.join(_DIRECT_FIELDS[mechanism])} ({exc})"
        ) from None


def _make_multidim(
    epsilon: float | None, domain: object, given: dict[str, object], policy: str
) -> MultidimParams:
    allowed = ("ranges", "lo", "hi", "base", "k", "cells", "out_of_range")
    for name, raw in given.items():
        if name not in allowed:
            raise InvalidParameterError(f"param {name}", raw, f"a field of multidim: {', '.join(allowed)}")
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "an epsilon > 0 (multidim is built from epsilon)")
    if "ranges" in given:
        if "lo" in given or "hi" in given:
            raise InvalidParameterError(
                "ranges", given["ranges"], "either ranges or lo/hi with a domain, not both"
            )
        ranges = parse_ranges(given.pop("ranges"))
        if domain is not None and domain != len(ranges):
            raise InvalidParameterError("domain", domain, f"{len(ranges)} (the number of ranges) or nothing")
    else:
        if isinstance(domain, bool) or not isinstance(domain, int):
            raise InvalidParameterError(
                "domain", domain, "the number of attributes D (with lo/hi), or give ranges=lo:hi,lo:hi,..."
            )
        if "lo" not in given or "hi" not in given:
            raise InvalidParameterError(
                "lo", given.get("lo"), "lo and hi for every attribute (or ranges=...)"
            )
        lo, hi = _as_float("lo", given.pop("lo")), _as_float("hi", given.pop("hi"))
        ranges = ((lo, hi),) * _check_int("domain", domain, 1, MAX_ATTRIBUTES)
    base = str(given.pop("base", "piecewise"))
    k = _as_int("k", given.pop("k")) if "k" in given else None
    cells = _as_int("cells", given.pop("cells")) if "cells" in given else DEFAULT_CELLS
    return MultidimParams.from_epsilon(ranges, epsilon, base=base, k=k, cells=cells, out_of_range=policy)  # type: ignore[arg-type]
