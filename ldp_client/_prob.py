"""Quantized probabilities and exact Bernoulli sampling from random bytes (pure Python, no numpy).

Every probability a mechanism samples with is a 32-bit dyadic rational ``T / 2**32``. Sampling is exact
for that value: a Bernoulli(T/2**32) bit is ``u < T`` for a uniform 32-bit ``u``, and a whole vector of
independent Bernoulli(T/2**32) bits is built from uniform random words with the binary expansion of T
(see :class:`BitVectorSampler`). Because the code samples with exactly ``T/2**32``, privacy guarantees
are computed from that value, never from the float that was requested.

Two rules turn numbers into thresholds (``docs/wire-protocol.md``, "Probabilities and thresholds", states
them with test vectors):

* a probability given directly (and every probability on the wire) becomes the integer nearest to
  ``x * 2**32``, ties to even (:func:`quantize_probability`);
* a mechanism built from epsilon takes the threshold nearest to its exact formula on the private side: the
  largest (or, for a probability whose increase adds privacy, the smallest) T whose epsilon, computed
  exactly, does not exceed the request (:func:`largest_threshold`, :func:`smallest_threshold`, with
  :func:`ratio_within_exp` deciding each comparison exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Context, Decimal
from fractions import Fraction

from ldp_client.errors import InvalidParameterError

__all__ = [
    "PROB_BITS",
    "PROB_ONE",
    "BitVectorSampler",
    "expansion_ops",
    "largest_threshold",
    "quantize_probability",
    "ratio_within_exp",
    "rounding_note",
    "smallest_threshold",
    "threshold_to_probability",
]

PROB_BITS = 32
PROB_ONE = 1 << PROB_BITS


def quantize_probability(field: str, value: float, *, lo: float = 0.0, hi: float = 1.0) -> int:
    """Validate ``value`` in ``[lo, hi]`` and return the nearest threshold ``T`` with ``T/2**32 ≈ value``.

    ``T`` is the integer nearest to ``value * 2**32``, ties to even. The product is exact in binary64 (a
    scaling by a power of two), so the rule is exact for every double: a tie happens only for an odd
    multiple of 2**-33, e.g. 3 * 2**-33 gives 2 and 5 * 2**-33 gives 2 too. Dyadic inputs such as 0.5 or
    0.75 are represented exactly; any other value moves by at most 2**-33.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, f"a number in [{lo}, {hi}]")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidParameterError(field, value, f"a finite number in [{lo}, {hi}]")
    return round(value * PROB_ONE)  # Python's round: to nearest, ties to even


# Below this distance from epsilon, a float64 log ratio may be on the wrong side (its error is ~1e-14).
_FLOAT_MARGIN = 1e-12


def ratio_within_exp(num: int, den: int, epsilon: float) -> bool:
    """Whether ``num / den <= e**epsilon`` exactly, for positive integers and a finite ``epsilon``.

    ``epsilon`` is taken as the exact value of its double. A float64 comparison decides unless the two
    sides are within 1e-12 of each other; then ``e**epsilon`` is bracketed with decimal arithmetic (whose
    ``exp`` is correctly rounded) at increasing precision until the bracket excludes ``num / den`` (e to
    a nonzero rational power is irrational, so this ends; epsilon = 0 is compared directly).
    """
    if num <= 0 or den <= 0:
        raise InvalidParameterError("ratio", f"{num}/{den}", "positive integers")
    approx = math.log(num) - math.log(den)
    margin = _FLOAT_MARGIN * (1.0 + abs(epsilon))
    if approx < epsilon - margin:
        return True
    if approx > epsilon + margin:
        return False
    if epsilon == 0.0:
        return num <= den  # e**0 = 1 is the one rational value e**epsilon takes
    ratio = Fraction(num, den)
    exponent = Decimal(epsilon)  # exact: every double is a finite decimal
    digits = 50
    while True:
        value = Context(prec=digits).exp(exponent)  # within half a unit of its last digit
        center = Fraction(value)
        ulp = Fraction(10) ** (value.adjusted() - digits + 1)  # exact: no decimal context rounds here
        if ratio < center - ulp:
            return True
        if ratio > center + ulp:
            return False
        digits *= 2


def largest_threshold(within: Callable[[int], bool], estimate: int, lo: int, hi: int) -> int:
    """The largest T in ``[lo, hi]`` with ``within(T)``, for a ``within`` true up to some T and false
    above it; 0 if even ``lo`` fails. ``estimate`` (e.g. the floor of the float formula) is where the
    search starts: it is off by a step or two at most, so a few exact checks settle it.
    """
    if lo > hi or not within(lo):
        return 0
    t = min(max(estimate, lo), hi)
    while not within(t):
        t -= 1
    while t < hi and within(t + 1):
        t += 1
    return t


def smallest_threshold(within: Callable[[int], bool], estimate: int, lo: int, hi: int) -> int:
    """The smallest T in ``[lo, hi]`` with ``within(T)``, for a ``within`` false below some T and true
    from it on (a probability whose increase adds privacy); 0 if even ``hi`` fails."""
    if lo > hi or not within(hi):
        return 0
    t = min(max(estimate, lo), hi)
    while not within(t):
        t += 1
    while t > lo and within(t - 1):
        t -= 1
    return t


def rounding_note(field: str, value: object, threshold: int) -> str:
    """A message suffix saying what ``value`` became after rounding to a multiple of 2**-32 ('' if exact).

    A check on the rounded threshold can fail for a value that satisfies the rule as written (p < q, but
    both round to the same multiple of 2**-32); without this note the message would contradict itself.
    """
    rounded = threshold_to_probability(threshold)
    if isinstance(value, int | float) and not isinstance(value, bool) and float(value) == rounded:
        return ""
    return f" (probabilities are rounded to multiples of 2**-32: {field}={value!r} becomes {rounded!r})"


def threshold_to_probability(threshold: int) -> float:
    """The exact probability ``T / 2**32`` (representable exactly as a float64)."""
    return threshold / PROB_ONE


def expansion_ops(threshold: int) -> tuple[bool, ...]:
    """Binary-expansion operations that turn uniform random words into Bernoulli(T/2**32) words.

    With ``T/2**32 = 0.b1 b2 ... b32`` (binary), define r_33 = 0 and, for i = 32 down to 1,
    r_i = x_i OR r_{i+1} if b_i = 1, else x_i AND r_{i+1}, where x_i are independent uniform random
    words. Each bit of r_1 is then 1 with probability exactly T/2**32 (P(r_i)= (b_i + P(r_{i+1}))/2),
    independently across bit positions. Trailing zero digits are skipped (AND with 0 stays 0), so a
    dyadic probability such as 3/4 costs two random words. Returns the ops in application order
    (from the last significant digit to the first), True meaning OR.
    """
    if not 0 <= threshold <= PROB_ONE:
        raise InvalidParameterError("threshold", threshold, f"an integer in [0, {PROB_ONE}]")
    if threshold in (0, PROB_ONE):
        return ()
    digits = [(threshold >> (PROB_BITS - 1 - i)) & 1 == 1 for i in range(PROB_BITS)]
    last = max(i for i, d in enumerate(digits) if d)
    return tuple(reversed(digits[: last + 1]))


class BitVectorSampler:
    """Samples a ``width``-bit integer whose bits are independent Bernoulli(T/2**32), from random bytes.

    ``nbytes`` random bytes are consumed per sample; the caller supplies them (from the OS CSPRNG on the
    per-report path, from the HMAC DRBG for RAPPOR's permanent response), so one system call can serve
    several samplers.
    """

    __slots__ = ("_mask", "_ops", "_word_bytes", "nbytes", "threshold", "width")

    def __init__(self, threshold: int, width: int) -> None:
        if width < 1:
            raise InvalidParameterError("width", width, "an integer >= 1")
        self.threshold = threshold
        self.width = width
        self._ops = expansion_ops(threshold)
        self._word_bytes = (width + 7) // 8
        self._mask = (1 << width) - 1
        self.nbytes = self._word_bytes * len(self._ops)

    def sample(self, buf: bytes, offset: int = 0) -> int:
        """Return the sampled bit vector built from ``buf[offset : offset + self.nbytes]``."""
        if self.threshold == PROB_ONE:
            return self._mask
        r = 0
        wb = self._word_bytes
        pos = offset
        for is_or in self._ops:
            x = int.from_bytes(buf[pos : pos + wb], "little")
            pos += wb
            r = (x | r) if is_or else (x & r)
        return r & self._mask
