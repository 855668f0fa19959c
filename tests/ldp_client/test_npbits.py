"""Tests of the packed numpy Bernoulli sampler used by the batch (simulation) encoders."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from ldp_client._npbits import bernoulli_packed, pack_bits, packed_bytes, pad_mask, unpack_bits
from ldp_client._prob import PROB_ONE, expansion_ops, quantize_probability
from ldp_client.errors import InvalidParameterError


class _ScriptedWords:
    """A stand-in generator whose successive ``integers`` calls return scripted uint64 words."""

    def __init__(self, words: list[int]) -> None:
        self._words = words
        self.calls = 0

    def integers(self, low: int, high: int, size: int, dtype: Any, endpoint: bool) -> np.ndarray:
        assert (low, high, dtype, endpoint) == (0, 1 << 64, np.uint64, False)
        w = self._words[self.calls]
        self.calls += 1
        return np.full(size, w, dtype=np.uint64)


def _enumerating_words(n_ops: int) -> list[int]:
    """Word j has bit b equal to bit j of b: the 64 bit positions run through every combination of the
    first n_ops words (each combination 64 / 2**n_ops times)."""
    return [sum(((b >> j) & 1) << b for b in range(64)) for j in range(n_ops)]


@pytest.mark.parametrize(
    "threshold", [1 << 31, 3 << 30, 1 << 30, 5 << 29, 7 << 29, 11 << 28, 1 << 27, 0x9C000000, 0xFC000000]
)
def test_expansion_on_words_is_exact(threshold: int) -> None:
    """Exact, no sampling: over all 2**L combinations of the L input words' bits, the fraction of ones is
    exactly threshold / 2**32 (L <= 6 significant binary digits, so the combinations fit in 64 bits)."""
    n_ops = len(expansion_ops(threshold))
    assert n_ops <= 6
    rng = _ScriptedWords(_enumerating_words(n_ops))
    out = bernoulli_packed(threshold, 1, 64, rng)  # type: ignore[arg-type]
    assert rng.calls == n_ops  # dyadic probabilities cost exactly their number of binary digits
    ones = int(np.unpackbits(out).sum())
    assert ones * PROB_ONE == threshold * 64


def test_dyadic_costs_one_or_two_words() -> None:
    for threshold, words in ((1 << 31, 1), (3 << 30, 2), (1 << 30, 2)):
        rng = _ScriptedWords([0] * 4)
        bernoulli_packed(threshold, 10, 128, rng)  # type: ignore[arg-type]
        assert rng.calls == words


@pytest.mark.parametrize("k", [1, 3, 7, 8, 9, 13, 33, 128, 4095])
@pytest.mark.parametrize("threshold", [0, 1, 1 << 31, 3 << 30, PROB_ONE - 1, PROB_ONE])
def test_shape_dtype_and_zero_padding(k: int, threshold: int) -> None:
    rng = np.random.default_rng(7)
    out = bernoulli_packed(threshold, 37, k, rng)
    assert out.shape == (37, packed_bytes(k))
    assert out.dtype == np.uint8
    assert np.all(out[:, -1] & ~np.uint8(pad_mask(k)) == 0)
    bits = unpack_bits(out, k)
    if threshold == 0:
        assert not bits.any()
    if threshold == PROB_ONE:
        assert bits.all()
        assert np.array_equal(pack_bits(np.ones((37, k), dtype=np.uint8)), out)


def test_zero_rows() -> None:
    assert bernoulli_packed(3 << 30, 0, 13, np.random.default_rng(0)).shape == (0, 2)


def test_seeded_output_is_reproducible() -> None:
    a = bernoulli_packed(quantize_probability("p", 0.3), 100, 33, np.random.default_rng(5))
    b = bernoulli_packed(quantize_probability("p", 0.3), 100, 33, np.random.default_rng(5))
    assert np.array_equal(a, b)


_Z = max(5.0, float(stats.norm.isf(1e-6 / 2)))


@pytest.mark.statistical
@pytest.mark.parametrize(
    "prob",
    [0.5, 0.75, 0.25, 0.3, 1 / 3, 0.9, 0.001, 2.0**-32 * 0xABC00000],
)
@pytest.mark.parametrize("k", [1, 13, 128])
def test_bit_rate_matches_threshold(prob: float, k: int) -> None:
    """Total ones among n*k bits is Binomial(n*k, T/2**32): within z = max(5, z_{1e-6}) s.d."""
    t = quantize_probability("p", prob)
    p = t / PROB_ONE
    n = 200_000 // k + 1
    out = bernoulli_packed(t, n, k, np.random.default_rng(1234 + k))
    ones = int(unpack_bits(out, k).sum())
    total = n * k
    sd = math.sqrt(total * p * (1 - p))
    assert abs(ones - total * p) <= _Z * sd


@pytest.mark.statistical
@pytest.mark.parametrize("prob", [0.3, 0.75])
def test_per_position_rate_and_pairwise_independence(prob: float) -> None:
    """Each of the 13 bit positions (odd k: rows straddle 64-bit words) has rate T/2**32 within z
    (Bonferroni over positions), and adjacent positions are uncorrelated: P(both) = p**2."""
    k = 13
    t = quantize_probability("p", prob)
    p = t / PROB_ONE
    n = 100_000
    bits = unpack_bits(bernoulli_packed(t, n, k, np.random.default_rng(99)), k).astype(np.int64)
    z = max(5.0, float(stats.norm.isf(1e-6 / (2 * 2 * k))))
    col = bits.sum(axis=0)
    assert np.all(np.abs(col - n * p) <= z * math.sqrt(n * p * (1 - p)))
    both = (bits[:, :-1] & bits[:, 1:]).sum(axis=0)
    p2 = p * p
    assert np.all(np.abs(both - n * p2) <= z * math.sqrt(n * p2 * (1 - p2)))


def test_pack_unpack_bit_order() -> None:
    k = 19
    m = np.zeros((3, k), dtype=np.uint8)
    m[0, 0] = 1
    m[1, 9] = 1
    m[2, 18] = 1
    packed = pack_bits(m)
    assert packed.shape == (3, 3)
    assert packed[0].tolist() == [1, 0, 0]
    assert packed[1].tolist() == [0, 2, 0]
    assert packed[2].tolist() == [0, 0, 4]
    for row in range(3):
        as_int = int.from_bytes(packed[row].tobytes(), "little")
        assert [(as_int >> i) & 1 for i in range(k)] == m[row].tolist()
    assert np.array_equal(unpack_bits(packed, k), m)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threshold": -1}, "threshold="),
        ({"threshold": PROB_ONE + 1}, "threshold="),
        ({"threshold": True}, "threshold="),
        ({"n": -1}, "n="),
        ({"k": 0}, "k="),
    ],
)
def test_bad_arguments(kwargs: dict[str, int], field: str) -> None:
    args = {"threshold": 1 << 31, "n": 2, "k": 8} | kwargs
    with pytest.raises(InvalidParameterError, match=field):
        bernoulli_packed(args["threshold"], args["n"], args["k"], np.random.default_rng(0))


def test_unpack_rejects_wrong_width() -> None:
    with pytest.raises(InvalidParameterError, match="packed="):
        unpack_bits(np.zeros((2, 3), dtype=np.uint8), 8)
