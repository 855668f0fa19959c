"""Packed Bernoulli bit matrices with numpy, for the batch (simulation) encoders only.

Imports numpy, so no per-report encoder imports this module. The bit layout is the project's packed
report layout (``docs/rappor-encoding.md``): row r holds ``ceil(k/8)`` bytes and bit i of the row is
``(row[i // 8] >> (i % 8)) & 1`` (numpy ``bitorder="little"``); the unused high bits of the last byte are 0.

Sampling uses the same 32-bit quantized probabilities as the per-report path, with the binary-expansion
construction of :func:`ldp_client._prob.expansion_ops` applied to whole uint64 words of the generator
output, so every bit is exactly Bernoulli(T / 2**32) and a dyadic probability such as 1/2 or 3/4 costs one
or two random words per 64 bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ldp_client._prob import PROB_ONE, expansion_ops
from ldp_client.errors import InvalidParameterError

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "bernoulli_packed",
    "pack_bits",
    "packed_bytes",
    "pad_mask",
    "random_words",
    "unpack_bits",
]

_U64_END = 1 << 64


def packed_bytes(k: int) -> int:
    """Bytes per packed row of k bits: ceil(k/8)."""
    return (k + 7) // 8


def pad_mask(k: int) -> int:
    """Mask of the used bits of the last byte of a packed k-bit row (0xFF when 8 divides k)."""
    r = k % 8
    return 0xFF if r == 0 else (1 << r) - 1


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidParameterError("k", k, "an integer >= 1")


def random_words(rng: np.random.Generator, count: int) -> NDArray[np.uint64]:
    """``count`` independent uniform 64-bit words from ``rng`` (full range, so no rejection sampling)."""
    return rng.integers(0, _U64_END, size=count, dtype=np.uint64, endpoint=False)


def bernoulli_packed(threshold: int, n: int, k: int, rng: np.random.Generator) -> NDArray[np.uint8]:
    """An (n, ceil(k/8)) packed matrix whose n*k bits are independent Bernoulli(threshold / 2**32).

    For simulation: ``rng`` is an explicit, seedable generator.

    With ``threshold/2**32 = 0.b1 b2 ... b32`` in binary, start from r = 0 and for i from the last nonzero
    digit down to 1 set r = x_i | r (b_i = 1) or r = x_i & r (b_i = 0), x_i fresh uniform words; each bit
    of r is then 1 with probability exactly threshold/2**32 (see :func:`ldp_client._prob.expansion_ops`).
    The n*ceil(k/8) bytes are laid out contiguously over ceil(n*ceil(k/8)/8) words, so no random bits
    are wasted; the padding bits of each row are cleared afterwards.

    Args:
        threshold: Integer in [0, 2**32].
        n: Number of rows (>= 0).
        k: Bits per row (>= 1).
        rng: The generator.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 <= threshold <= PROB_ONE:
        raise InvalidParameterError("threshold", threshold, f"an integer in [0, {PROB_ONE}]")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidParameterError("n", n, "an integer >= 0")
    _check_k(k)
    nb = packed_bytes(k)
    total = n * nb
    if threshold == 0:
        return np.zeros((n, nb), dtype=np.uint8)
    if threshold == PROB_ONE:
        out = np.full((n, nb), 0xFF, dtype=np.uint8)
    else:
        nwords = (total + 7) // 8
        ops = expansion_ops(threshold)
        # The first op is always OR (the last nonzero digit), applied to r = 0: r = x.
        r = random_words(rng, nwords)
        for is_or in ops[1:]:
            x = random_words(rng, nwords)
            if is_or:
                np.bitwise_or(r, x, out=r)
            else:
                np.bitwise_and(r, x, out=r)
        # Fixed little-endian byte view, so a seed gives the same bits on every platform.
        out = r.astype("<u8", copy=False).view(np.uint8)[:total].reshape(n, nb)
    if k % 8:
        out[:, -1] &= np.uint8(pad_mask(k))
    return out


def pack_bits(bits: NDArray[np.generic]) -> NDArray[np.uint8]:
    """Pack an (n, k) 0/1 matrix into (n, ceil(k/8)) bytes, bit i of a row at byte i//8, bit i%8."""
    arr = np.asarray(bits)
    if arr.ndim != 2:
        raise InvalidParameterError("bits", arr.shape, "a 2-D (n, k) array")
    return np.packbits(arr.astype(bool, copy=False), axis=1, bitorder="little")


def unpack_bits(packed: NDArray[np.uint8], k: int) -> NDArray[np.uint8]:
    """Inverse of :func:`pack_bits`: (n, ceil(k/8)) bytes -> (n, k) matrix of 0/1 (uint8)."""
    _check_k(k)
    arr = np.asarray(packed)
    if arr.ndim != 2 or arr.dtype != np.uint8 or arr.shape[1] != packed_bytes(k):
        raise InvalidParameterError(
            "packed", (arr.shape, str(arr.dtype)), f"a uint8 array of shape (n, {packed_bytes(k)})"
        )
    return np.unpackbits(arr, axis=1, count=k, bitorder="little")
