"""Memoized randomness: coins derived deterministically from the client secret, per campaign and key.

A longitudinal mechanism fixes part of its randomness once per device (and value), so that repeating a
report reveals nothing new: Chrome memoizes RAPPOR's permanent randomized response (Erlingsson, Pihur,
Korolova, CCS 2014, §3), Windows memoizes dBitFlip's bits and 1BitMean's bit per rounded value (Ding,
Kulkarni, Yekhanin, "Collecting Telemetry Data Privately", NeurIPS 2017, §3), and L-GRR / L-OSUE memoize
their first round (Arcolezi, Couchot, Bouna, Xiao, "Improving the utility of locally differentially
private protocols for longitudinal and multidimensional frequency estimates", Digital Communications and
Networks, 2022). As with RAPPOR's PRR (:mod:`ldp_client.mechanisms.rappor.encoding`), nothing is stored: the
coins are an HMAC-SHA256 counter-mode stream keyed by the device's :class:`~ldp_client.secret.ClientSecret`,
so they survive restarts and cannot be reset by a crash (a reset would hand an observer fresh coins to
average).

Stream (version v1, ``docs/longitudinal.md``), for a mechanism label L (ASCII, no 0x00 byte), a campaign id
and a key (the bytes naming what is memoized: a value index, a grid point, or empty for per-device state)::

    seed    = L || 0x00 || u32be(len(campaign_utf8)) || campaign_utf8 || u32be(len(key)) || key
    block_j = HMAC-SHA256(secret, seed || u32be(j))             j = 0, 1, 2, ...
    word_i  = bytes 4i..4i+3 of block_0 || block_1 || ..., little-endian

A Bernoulli(T / 2**32) coin is ``word < T``; a uniform integer below n is Lemire's method on the words
(:func:`ldp_client.randomness.uniform_below`'s rule, drawing the next word on a rejection), so every
memoized coin has exactly the probability the exact enumerations of the tests assume. A mechanism's label
and key layout are pinned by golden vectors (``tests/ldp_client/mechanisms/test_longitudinal.py``): a
change between releases would give every device fresh coins.

Importing this module does not import numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ldp_client.errors import InvalidParameterError
from ldp_client.secret import ClientSecret

__all__ = ["MEMO_VERSION", "MemoWords", "as_secret", "campaign_bytes", "memo_seed", "u32be"]

MEMO_VERSION: Final = "v1"
_U32: Final = 1 << 32
_MASK32: Final = _U32 - 1
_WORDS_PER_BLOCK: Final = 8  # a 32-byte HMAC-SHA256 block holds 8 words
_MAX_CAMPAIGN_BYTES: Final = 4 * 128  # 128 code points of UTF-8 (the campaign id's limit)


def u32be(x: int) -> bytes:
    """``x`` as 4 big-endian bytes (lengths and counters of the stream)."""
    return x.to_bytes(4, "big")


def campaign_bytes(campaign_id: object) -> bytes:
    """The campaign id as UTF-8 (InvalidParameterError for anything but a short str)."""
    if not isinstance(campaign_id, str):
        raise InvalidParameterError("campaign_id", type(campaign_id).__name__, "a str")
    try:
        raw = campaign_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParameterError("campaign_id", campaign_id[:40], "valid Unicode text") from None
    if len(raw) > _MAX_CAMPAIGN_BYTES:
        raise InvalidParameterError("campaign_id", campaign_id[:40] + "...", "at most 128 code points")
    return raw


def memo_seed(label: bytes, campaign_id: str, key: bytes) -> bytes:
    """The stream seed of (label, campaign, key), as the module docstring writes it."""
    c = campaign_bytes(campaign_id)
    return label + b"\x00" + u32be(len(c)) + c + u32be(len(key)) + key


def as_secret(secret: object) -> ClientSecret:
    """A :class:`ClientSecret` (or a function returning one, as the spec's ``secret`` argument may be)."""
    value = secret() if callable(secret) and not isinstance(secret, ClientSecret) else secret
    if not isinstance(value, ClientSecret):
        raise InvalidParameterError("secret", type(value).__name__, "the device's ClientSecret")
    return value


class MemoWords:
    """The words of one memoized stream, read in order (blocks are computed on demand).

    Args:
        prf: HMAC-SHA256 keyed by the client secret (:meth:`ClientSecret.prf`).
        seed: :func:`memo_seed` of what is memoized.
    """

    __slots__ = ("_block", "_buffer", "_prf", "_seed")

    def __init__(self, prf: Callable[[bytes], bytes], seed: bytes) -> None:
        self._prf = prf
        self._seed = seed
        self._block = 0
        self._buffer: list[int] = []

    def word(self) -> int:
        """The next uniform 32-bit word."""
        if not self._buffer:
            raw = self._prf(self._seed + u32be(self._block))
            self._block += 1
            # Reversed, so pop() hands the words out in stream order.
            self._buffer = [
                int.from_bytes(raw[4 * i : 4 * i + 4], "little") for i in range(_WORDS_PER_BLOCK)
            ][::-1]
        return self._buffer.pop()

    def bernoulli(self, threshold: int) -> bool:
        """True with probability exactly ``threshold / 2**32`` (one word)."""
        return self.word() < threshold

    def below(self, n: int) -> int:
        """An exactly uniform integer in ``[0, n)``, 1 <= n <= 2**32 (Lemire, ACM TOMACS 2019): m = word n,
        rejected while m mod 2**32 < (2**32 - n) mod n, then floor(m / 2**32)."""
        m = self.word() * n
        if (m & _MASK32) < n:
            reject_below = (_U32 - n) % n
            while (m & _MASK32) < reject_below:
                m = self.word() * n
        return m >> 32
