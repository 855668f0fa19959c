"""What every numeric (mean) mechanism shares: ranges, positions, integer codes, validators, encoder plumbing.

Every numeric mechanism takes a real value ``x`` declared in a range ``[lo, hi]`` and reports an **integer
code** drawn with exact integer arithmetic from uniform random words; the server maps a code to an unbiased
estimate of the value. Nothing continuous is ever sampled, so the epsilon each parameter class reports is
the exact privacy loss of the distribution the encoders implement.

Inputs. ``x`` must be a finite real number (NaN and +/-inf always raise
:class:`~ldp_client.errors.DomainError`). A finite value outside ``[lo, hi]`` is handled by the
``out_of_range`` policy of the parameters: ``"clamp"`` (the default) replaces it by the nearest bound,
``"reject"`` raises :class:`~ldp_client.errors.DomainError` naming the value. The encoders work on the
*position* ``s = (x - lo) / (hi - lo)`` in ``[0, 1]`` (``t = 2 s - 1`` in ``[-1, 1]`` in the papers'
notation), computed in float64; the position only selects which of the exact integer distributions is
sampled, and every selectable distribution satisfies the epsilon bound, so floating point cannot weaken
privacy (it moves the estimate's expectation by at most about 2**-52 of the range).

Why integer codes (Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012): a float64 Laplace sample ``x + b * log(u)`` has gaps and an input-dependent set of reachable
floating-point outputs, so an observer can tell some inputs apart with certainty. Here every output is an
integer code whose probability is a ratio of integers, so "epsilon" is a statement about exactly what is
sampled, and the tests check it by enumeration.

A code c estimates the position through :class:`NumericLayout` (``s_hat = offset + scale * c``, or a fixed
value for a few special codes). The mechanisms themselves are the sibling modules (``duchi``, ``sr``,
``piecewise`` with ``hybrid``, ``laplace``, ``multidim``); the wire codec and the spec they share are
:mod:`ldp_client.mechanisms.numeric.codec`.

Per-report encoders (:class:`OneDimEncoder`) read all the random bytes one report needs in ONE
``os.urandom`` call (through :mod:`ldp_client.randomness`) and turn them into a code with exact integer
comparisons; the batch encoders draw the same quantized thresholds from a seeded
:class:`numpy.random.Generator` (``uint64``/``uint32`` words and numpy's unbiased bounded integers), so
they sample exactly the same distributions; they are for simulation only.

Importing this module does not import numpy (the batch helpers import it when called).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DEFAULT_CELLS",
    "DEFAULT_LAPLACE_GRID",
    "MAX_ATTRIBUTES",
    "MAX_CODES",
    "OUT_OF_RANGE_POLICIES",
    "NumericLayout",
    "OneDimEncoder",
    "OutOfRange",
    "RangeParams",
    "parse_ranges",
    "position",
    "positions",
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

TWO32 = PROB_ONE
TWO63F = float(1 << 63)
TWO64 = 1 << 64
TWO64F = float(TWO64)
M32 = PROB_ONE - 1
M64 = (1 << 64) - 1
# Same tolerance as ldp_client.params: a from_epsilon request is "met" when quantization lowers epsilon by
# at most this relative amount; otherwise a PrivacyQuantizationWarning says what is guaranteed instead.
_EPSILON_REL_TOLERANCE = 1e-6
from_bytes = int.from_bytes
uniform_below = _rnd.uniform_below


# --------------------------------------------------------------------------------------------- checks


def check_epsilon(epsilon: object) -> float:
    """``epsilon`` as a float, or InvalidParameterError unless it is a finite number > 0."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if not math.isfinite(epsilon) or epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return float(epsilon)


def report_quantization(requested: float, effective: float) -> None:
    """Warn (PrivacyQuantizationWarning) when quantization lowered a requested epsilon materially.

    Called directly by a ``from_epsilon`` constructor: the warning points at that constructor's caller.
    """
    if requested - effective > _EPSILON_REL_TOLERANCE * max(1.0, requested):
        warnings.warn(
            f"epsilon={requested!r} cannot be met exactly by the quantized numeric mechanism; "
            f"it guarantees epsilon={effective!r} instead",
            PrivacyQuantizationWarning,
            stacklevel=3,
        )


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` if it is an int in [lo, hi] (not a bool), else InvalidParameterError."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidParameterError(name, value, f"an integer in [{lo}, {hi}]")
    return value


def check_range(lo: object, hi: object, prefix: str = "") -> tuple[float, float]:
    """(lo, hi) as floats: finite, lo < hi, and hi - lo finite."""
    for name, v in (("lo", lo), ("hi", hi)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidParameterError(prefix + name, v, "a finite number")
    lo_f, hi_f = float(lo), float(hi)  # type: ignore[arg-type]
    if not lo_f < hi_f:
        raise InvalidParameterError(prefix + "hi", hi, f"a number above lo={lo!r}")
    if not math.isfinite(hi_f - lo_f):
        raise InvalidParameterError(prefix + "hi", hi, f"a number with hi - lo finite (lo={lo!r})")
    return lo_f, hi_f


def check_policy(policy: object) -> str:
    """An ``out_of_range`` policy: ``"clamp"`` or ``"reject"``."""
    if policy not in OUT_OF_RANGE_POLICIES:
        raise InvalidParameterError("out_of_range", policy, "'clamp' or 'reject'")
    return str(policy)


def log_ratio_up(num: int, den: int) -> float:
    """ln(num/den) for positive integers, rounded up by two ulps so it bounds the exact value."""
    value = math.log(num) - math.log(den)
    return math.nextafter(math.nextafter(value, math.inf), math.inf)


def as_float(name: str, raw: object) -> float:
    """A field given by name (a number, or its string) as a float."""
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            raise InvalidParameterError(name, raw, "a number") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidParameterError(name, raw, "a number")
    return float(raw)


def as_int(name: str, raw: object) -> int:
    """A field given by name (an int, or its string) as an int."""
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
            out.append((as_float("ranges", lo.strip()), as_float("ranges", hi.strip())))
        return tuple(out)
    if isinstance(raw, Sequence):
        pairs = []
        for pair in raw:
            if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
                raise InvalidParameterError("ranges", raw, "(lo, hi) pairs")
            pairs.append((as_float("ranges", pair[0]), as_float("ranges", pair[1])))
        return tuple(pairs)
    raise InvalidParameterError("ranges", raw, "LO:HI pairs separated by commas, or a list of (lo, hi) pairs")


# ------------------------------------------------------------------------------------------ positions


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

    def s_sums(self, count: int, s1: int, s2: int, specials: Any) -> tuple[Fraction, Fraction]:
        """(sum s_hat, sum s_hat^2), exactly, over ``count`` regular reports whose codes sum to ``s1`` (and
        their squares to ``s2``) and ``specials[j]`` reports of the j-th special code."""
        off, sc = self.offset, self.scale
        total = count * off + sc * s1
        square = count * off * off + 2 * off * sc * s1 + sc * sc * s2
        for (_, v), cnt in zip(self.specials, specials, strict=True):
            total += cnt * v
            square += cnt * v * v
        return total, square


# ------------------------------------------------------------------------------------ 1-D base class


@dataclass(frozen=True, kw_only=True)
class RangeParams:
    """The declared range [lo, hi] and out-of-range policy shared by every one-dimensional mechanism.

    Subclasses set ``layout`` (a :class:`NumericLayout`), ``variance_s`` and ``max_variance_s``.
    """

    lo: float
    hi: float
    out_of_range: OutOfRange = "clamp"

    def _init_range(self) -> None:
        lo, hi = check_range(self.lo, self.hi)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "out_of_range", check_policy(self.out_of_range))

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


# ------------------------------------------------------------------------------------ encoder plumbing


def check_rng(rng: object) -> np.random.Generator:
    """``rng`` if it is a numpy Generator (simulation only), else InvalidParameterError."""
    import numpy as np

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    return rng


def u64(rng: np.random.Generator, n: int) -> NDArray[np.uint64]:
    """n uniform 64-bit words."""
    import numpy as np

    return rng.integers(0, 1 << 64, size=n, dtype=np.uint64)


def u32(rng: np.random.Generator, n: int) -> NDArray[np.uint32]:
    """n uniform 32-bit words."""
    import numpy as np

    return rng.integers(0, PROB_ONE, size=n, dtype=np.uint32)


def round_up(pos: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.int64]:
    """floor(pos) + [u64 < floor(frac(pos) 2**64)]: randomized rounding with a 64-bit coin (pos >= 0)."""
    import numpy as np

    base = np.floor(pos)
    thr = ((pos - base) * TWO64F).astype(np.uint64)
    out: NDArray[np.int64] = base.astype(np.int64)
    out += u64(rng, pos.shape[0]) < thr
    return out


def rounding(pos: float) -> tuple[int, Fraction]:
    """(floor(pos), P(round up)) of the 64-bit randomized rounding the encoders use (exact)."""
    base = int(pos)
    return base, Fraction(int((pos - base) * TWO64F), 1 << 64)


class OneDimEncoder:
    """Shared per-report plumbing of the one-dimensional encoders: validate the value, read the bytes,
    call the core (``_core(s, r)``: the code for position s and the random integer r of ``_nbytes`` bytes).
    """

    __slots__ = ("_hi", "_lo", "_nbytes", "_reject", "params")
    params: Any
    _nbytes: int
    _lo: float
    _hi: float

    def __init__(self, params: Any, cls: type[Any]) -> None:
        if not isinstance(params, cls):
            raise InvalidParameterError("params", params, f"a {cls.__name__}")
        self.params = params
        self._lo = params.lo
        self._hi = params.hi
        self._reject = params.out_of_range == "reject"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(params={self.params!r})"

    def _position(self, value: object) -> float:
        # Fast path for a float in range; everything else goes through the full validation.
        if type(value) is float and self._lo <= value <= self._hi:
            return (value - self._lo) / (self._hi - self._lo)
        s: float = self.params.position(value)
        return s

    def _core(self, s: float, r: int) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self, value: float) -> int:
        """Randomize one value with the OS CSPRNG. Production path; not seedable by design.

        Returns:
            The integer code of the report (decode it with ``params.decode``).

        Raises:
            DomainError: ``value`` is not a real number, is NaN or infinite, or is outside [lo, hi] with
                ``out_of_range="reject"`` (it is clamped with ``"clamp"``).
        """
        s = self._position(value)
        return self._core(s, from_bytes(_rnd._source(self._nbytes), "little"))

    def encode_batch(self, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint32]:
        """Randomize a 1-D array of values with a seeded numpy Generator. For simulation only.

        Same quantized probabilities as :meth:`encode` (see the module docstring).

        Returns:
            uint32 codes, shape (n,).

        Raises:
            DomainError: a value that is not finite or (``reject``) out of range, named.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        g = check_rng(rng)
        s = self.params.positions(values)
        return self.encode_positions(s, g)

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        """:meth:`encode_batch` for validated positions in [0, 1] (used by multidim)."""
        raise NotImplementedError  # pragma: no cover - overridden
