"""Quantized probabilities and exact Bernoulli sampling from random bytes (pure Python, no numpy).

Every probability a mechanism samples with is a 32-bit dyadic rational ``T / 2**32``. Sampling is exact
for that value: a Bernoulli(T/2**32) bit is ``u < T`` for a uniform 32-bit ``u``, and a whole vector of
independent Bernoulli(T/2**32) bits is built from uniform random words with the binary expansion of T
(see :class:`BitVectorSampler`). Because the code samples with exactly ``T/2**32``, privacy guarantees
are computed from that value, never from the float that was requested.
"""

from __future__ import annotations

import math

from ldp_client.errors import InvalidParameterError

__all__ = [
    "PROB_BITS",
    "PROB_ONE",
    "BitVectorSampler",
    "expansion_ops",
    "quantize_probability",
    "rounding_note",
    "threshold_to_probability",
]

PROB_BITS = 32
PROB_ONE = 1 << PROB_BITS


def quantize_probability(field: str, value: float, *, lo: float = 0.0, hi: float = 1.0) -> int:
    """Validate ``value`` in ``[lo, hi]`` and return the nearest threshold ``T`` with ``T/2**32 ≈ value``.

    Dyadic inputs such as 0.5 or 0.75 are represented exactly; any other value moves by at most 2**-33.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidParameterError(field, value, f"a number in [{lo}, {hi}]")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidParameterError(field, value, f"a finite number in [{lo}, {hi}]")
    return round(value * PROB_ONE)


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
