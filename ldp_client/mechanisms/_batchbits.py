"""Packed random bit rows for the batch (simulation) encoders of UE and SS. Imports numpy.

Rows use the project's packed layout: ``ceil(d/8)`` bytes, bit i at ``(row[i // 8] >> (i % 8)) & 1``
(numpy ``bitorder="little"``), padding bits 0. Every sampler takes an explicit seeded
``numpy.random.Generator`` (simulation only) and samples exactly the laws stated, with the same 32-bit
quantized thresholds as the per-report encoders (Binomial counts come from numpy's binomial sampler,
exact up to float64 arithmetic, as in :mod:`simulations.sampling`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "adjust_to_counts",
    "as_index_array",
    "bernoulli_rows_dense",
    "bernoulli_rows_sparse",
    "place_uniform_ones",
    "raw_words",
    "set_bit",
    "top_digit_words",
]

# Random key bytes per chunk of the dense sampler (4 MiB: cache-friendly, measured fastest).
_DENSE_CHUNK_BYTES = 1 << 22
_U24 = 1 << 24


def raw_words(rng: np.random.Generator, count: int) -> NDArray[np.uint64]:
    """``count`` uniform 64-bit words straight from the generator's bit generator (its fastest output),
    as little-endian words so that a seed gives the same bytes on every platform."""
    words: NDArray[np.uint64] = rng.bit_generator.random_raw(count).astype("<u8", copy=False)
    return words


def as_index_array(indices: ArrayLike, size: int, field: str = "indices") -> NDArray[np.int64]:
    """Validate a batch of indices (1-D, integer dtype, all in [0, size)) and return it as int64."""
    arr = np.asarray(indices)
    allowed = f"integers in [0, {size - 1}]"
    if arr.ndim != 1:
        raise DomainError(field, f"<array of shape {arr.shape}>", f"a 1-D array of {allowed}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise DomainError(field, f"<array of dtype {arr.dtype}>", allowed)
    if arr.min() < 0 or arr.max() >= size:
        bad = arr[(arr < 0) | (arr >= size)][0]
        raise DomainError(field, bad.item(), allowed)
    return arr.astype(np.int64, copy=False)


def top_digit_words(t1: int, words: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Bits decided by the top 8 binary digits of a threshold, 64 positions per word.

    With t1 = 0.b1...b8 (binary, b1 the most significant) and uniform random words x_1..x_8
    (``words[i - 1]``), the expansion trick of :mod:`ldp_client._prob` gives r_i = x_i OR r_{i+1} if
    b_i = 1, else x_i AND r_{i+1}, so P(r_1 = 1) = t1/256 + P(r_9 = 1)/256. Returns ``base`` (r_1 with
    r_9 = 0) and ``tie``, the positions where every level passed r_{i+1} through unchanged (x_i = 0 under
    an OR, 1 under an AND): r_1 = base | (tie & r_9), and a position ties with probability exactly 2**-8.
    """
    base = np.zeros(words.shape[1:], dtype=np.uint64)
    tie = np.full(words.shape[1:], np.uint64(0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
    for i in range(8, 0, -1):
        x = words[i - 1]
        if (t1 >> (8 - i)) & 1:
            np.bitwise_or(base, x, out=base)
            np.bitwise_and(tie, ~x, out=tie)
        else:
            np.bitwise_and(base, x, out=base)
            np.bitwise_and(tie, x, out=tie)
    return base, tie


def bernoulli_rows_dense(threshold: int, n: int, d: int, rng: np.random.Generator) -> NDArray[np.uint8]:
    """(n, ceil(d/8)) packed rows of independent Bernoulli(threshold / 2**32) bits: 8 random bits per bit.

    With T = t1 2**24 + r, the top 8 digits (t1) are sampled with word-wide bit operations
    (:func:`top_digit_words`); at the 1/256 of positions where they leave the outcome open, a fresh
    uniform 24-bit word decides (1 iff < r). So P(1) = t1/256 + r/2**32 = T/2**32 exactly, for the cost
    of one random byte per bit and a few 64-bit operations per 64 bits.
    """
    nb = (d + 7) // 8
    out = np.empty((n, nb), dtype=np.uint8)
    if threshold >= PROB_ONE:
        out.fill(0xFF)
        if d % 8:
            out[:, -1] = (1 << (d % 8)) - 1
        return out
    t1 = threshold >> 24
    rest = threshold & (_U24 - 1)
    wpr = (nb + 7) // 8  # 64-bit words per row
    rows = max(1, _DENSE_CHUNK_BYTES // (64 * wpr))
    for start in range(0, n, rows):
        r = min(rows, n - start)
        words = raw_words(rng, 8 * r * wpr).reshape(8, r * wpr)
        base, tie = top_digit_words(t1, words)
        if rest:
            # Ties are located through their nonzero bytes: a pass over n d / 8 bytes.
            tie_bytes = tie.view(np.uint8)
            where = np.flatnonzero(tie_bytes)
            if where.size:
                tie_bits = np.unpackbits(tie_bytes[where][:, None], axis=1, bitorder="little")
                byte_idx, bit_idx = np.nonzero(tie_bits)
                win = rng.integers(0, _U24, size=byte_idx.size, dtype=np.uint32) < np.uint32(rest)
                # A byte can hold several winning ties: accumulate their bits with an unbuffered OR.
                np.bitwise_or.at(
                    base.view(np.uint8), where[byte_idx[win]], np.left_shift(1, bit_idx[win]).astype(np.uint8)
                )
        block = base.view(np.uint8).reshape(r, wpr * 8)[:, :nb]
        out[start : start + r] = block
        if d % 8:
            out[start : start + r, -1] &= (1 << (d % 8)) - 1
    return out


def place_uniform_ones(
    rows: NDArray[np.uint8],
    counts: NDArray[np.int64],
    d: int,
    rng: np.random.Generator,
    skip: NDArray[np.int64] | None = None,
) -> None:
    """Set ``counts[r]`` ones in row r at a uniformly random subset of its free positions, in place.

    Free positions: [0, d) minus ``skip[r]`` when given (the positions of ``rows`` must be 0 on entry).
    See :func:`adjust_to_counts`, of which this is the case of empty rows.
    """
    adjust_to_counts(rows, counts, d, rng, skip)


def adjust_to_counts(
    rows: NDArray[np.uint8],
    counts: NDArray[np.int64],
    d: int,
    rng: np.random.Generator,
    skip: NDArray[np.int64] | None = None,
) -> None:
    """Add or remove ones until row r has exactly ``counts[r]`` ones among its free positions, in place.

    Free positions: [0, d) minus ``skip[r]`` when given (that bit must be 0 on entry and stays 0). Each
    round draws, for every row off its count, as many positions as it lacks (or has in excess), uniformly
    and with replacement among its free positions, and sets them (or clears them; repeats and
    already-set/cleared bits are no-ops); rounds continue until every row has its count. Every step is
    equivariant under permutations of the free positions, so if the rows' initial law is exchangeable
    (all zeros, or independent Bernoulli bits) each final row is a uniformly random subset of its size,
    independently across rows.
    """
    nb = rows.shape[1]
    flat = rows.reshape(-1)
    free = d - 1 if skip is not None else d
    target = counts.astype(np.int64, copy=False)
    active = np.arange(rows.shape[0])
    while active.size:
        have = np.bitwise_count(rows[active]).sum(axis=1, dtype=np.int64)
        diff = target[active] - have
        off = diff != 0
        active, diff = active[off], diff[off]
        if not active.size:
            break
        owner = np.repeat(active, np.abs(diff))
        pos = rng.integers(0, free, size=owner.size, dtype=np.int64)
        if skip is not None:
            pos += pos >= skip[owner]
        byte = owner * nb + (pos >> 3)
        mask = np.left_shift(1, pos & 7).astype(np.uint8)
        add = np.repeat(diff > 0, np.abs(diff))
        np.bitwise_or.at(flat, byte[add], mask[add])
        np.bitwise_and.at(flat, byte[~add], ~mask[~add])


def bernoulli_rows_sparse(threshold: int, n: int, d: int, rng: np.random.Generator) -> NDArray[np.uint8]:
    """(n, ceil(d/8)) packed rows of independent Bernoulli(threshold / 2**32) bits, sampled sparsely.

    The number of ones of a row is Binomial(d, T/2**32) and, given it, their positions are a uniform
    subset of that size (:func:`place_uniform_ones`): exactly the law of d independent Bernoulli bits,
    at a cost proportional to the number of ones rather than to d.
    """
    nb = (d + 7) // 8
    out = np.zeros((n, nb), dtype=np.uint8)
    counts = rng.binomial(d, threshold / PROB_ONE, size=n).astype(np.int64)
    place_uniform_ones(out, counts, d, rng)
    return out


def set_bit(rows: NDArray[np.uint8], index: NDArray[np.int64], value: NDArray[np.bool_] | Any) -> None:
    """Set bit ``index[r]`` of row r to ``value[r]`` (in place)."""
    r = np.arange(rows.shape[0])
    byte = index >> 3
    mask = np.left_shift(1, index & 7).astype(np.uint8)
    # One gather and one scatter (each row touches one byte).
    rows[r, byte] = (rows[r, byte] & ~mask) | (mask * np.asarray(value, dtype=np.uint8))
