"""Randomness for per-report encoders: the operating system's CSPRNG, and nothing else.

Why this is a privacy property and not a style choice: a local-DP report is private only if the noise
is unpredictable to whoever sees the report. Python's :mod:`random` (Mersenne Twister) and numpy's
global generator are seedable and can be reconstructed from a few hundred outputs; an observer who
recovers their state can strip the noise from every report and read the true values. So per-report
client code draws only from :func:`os.urandom` (``getrandom(2)`` on Linux, fork-safe, no state in this
process), and never reads the global ``random`` or ``numpy.random`` state. Seeded
:class:`numpy.random.Generator` objects appear only in the batch ``encode_batch`` functions, which are
for simulation.

Every probability is sampled exactly as the parameters state it:

* a Bernoulli(T/2**32) coin is ``u < T`` for a uniform 32-bit word ``u`` (exactly T of the 2**32 words
  succeed);
* a uniform integer in ``[0, n)`` uses Lemire's multiply-and-reject method (D. Lemire, "Fast random
  integer generation in an interval", ACM TOMACS 29(1), 2019): with a uniform w-bit word x,
  ``m = x * n``; the word is rejected when ``m mod 2**w < 2**w mod n`` and otherwise the result is
  ``m >> w``. Each result is produced by exactly ``floor(2**w / n)`` accepted words, so there is no
  modulo bias; rejection has probability ``(2**w mod n) / 2**w < n / 2**w`` and the modulo is computed
  only in the rare case ``m mod 2**w < n``.

Speed: one ``os.urandom`` call costs a system call (a few hundred nanoseconds), much more than the
arithmetic, so encoders draw all the bytes one report needs in a single call (for example 8 bytes: a
32-bit coin word and a 32-bit word for :func:`uniform_below`) and call the CSPRNG again only on a
rejection.

Words are read from bytes in little-endian order (``int.from_bytes(b, "little")``). The byte source is
the private module attribute ``_source``; tests replace it to feed chosen words and check branch
boundaries exactly. It is not a parameter of any public function, so production code cannot pass a
seeded or predictable source by mistake.
"""

from __future__ import annotations

import os

from ldp_client._prob import PROB_BITS, PROB_ONE
from ldp_client.errors import InvalidParameterError

__all__ = [
    "bernoulli",
    "randbelow",
    "random_bytes",
    "random_u32",
    "random_u64",
    "uniform_below",
]

# The only byte source of per-report randomness (see the module docstring). Looked up at call time so
# tests can substitute it; never exposed as a parameter.
_source = os.urandom

_U64 = 1 << 64


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG.

    Raises:
        InvalidParameterError: ``n`` is not an integer >= 0.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidParameterError("n", n, "an integer >= 0")
    return _source(n)


def random_u32() -> int:
    """A uniform integer in ``[0, 2**32)`` from the OS CSPRNG (4 bytes, little-endian)."""
    return int.from_bytes(_source(4), "little")


def random_u64() -> int:
    """A uniform integer in ``[0, 2**64)`` from the OS CSPRNG (8 bytes, little-endian).

    Encoders split it into two independent 32-bit words: ``r & 0xFFFFFFFF`` (bytes 0-3) and ``r >> 32``
    (bytes 4-7).
    """
    return int.from_bytes(_source(8), "little")


def bernoulli(threshold: int) -> bool:
    """A coin that is True with probability exactly ``threshold / 2**32``: ``u < threshold``.

    Raises:
        InvalidParameterError: ``threshold`` is not an integer in ``[0, 2**32]``.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= PROB_ONE:
        raise InvalidParameterError("threshold", threshold, f"an integer in [0, {PROB_ONE}]")
    return int.from_bytes(_source(4), "little") < threshold


def uniform_below(n: int, word: int, bits: int = PROB_BITS) -> int:
    """An exactly uniform integer in ``[0, n)`` from a uniform ``bits``-bit ``word`` (Lemire's method).

    ``word`` is used first (so an encoder can take it from the same CSPRNG call as its other coins); when
    it falls in the rejection zone, fresh ``bits / 8``-byte words are drawn from the CSPRNG until one is
    accepted. The caller guarantees ``1 <= n <= 2**bits``, ``0 <= word < 2**bits`` and ``bits % 8 == 0``
    (this is the hot path of GRR, so it does not re-validate; :func:`randbelow` is the checked entry).

    Formula: m = word * n; reject if m mod 2**bits < (2**bits - n) mod n; else return floor(m / 2**bits).
    (Lemire, ACM TOMACS 2019.) Each output has exactly floor(2**bits / n) accepting words.
    """
    m = word * n
    mask = (1 << bits) - 1
    low = m & mask
    if low < n:
        # Only here can the word be in the rejection zone, so the (slow) modulo is computed only here.
        reject_below = ((1 << bits) - n) % n
        nbytes = bits >> 3
        while low < reject_below:
            m = int.from_bytes(_source(nbytes), "little") * n
            low = m & mask
    return m >> bits


def randbelow(n: int) -> int:
    """A uniform integer in ``[0, n)`` from the OS CSPRNG, exactly (no modulo bias).

    Uses a 32-bit word when ``n <= 2**32``, a 64-bit word when ``n <= 2**64``, and otherwise a word of
    ``8 * ceil(bit_length(n) / 8)`` bits, always with :func:`uniform_below`'s rejection.

    Raises:
        InvalidParameterError: ``n`` is not an integer >= 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1")
    if n <= PROB_ONE:
        bits = 32
    elif n <= _U64:
        bits = 64
    else:
        bits = 8 * ((n.bit_length() + 7) // 8)
    return uniform_below(n, int.from_bytes(_source(bits >> 3), "little"), bits)
