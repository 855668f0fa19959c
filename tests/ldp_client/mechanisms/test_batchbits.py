"""Exact checks of the dense Bernoulli row sampler's word-wide core, by enumeration."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client._prob import PROB_ONE
from ldp_client.mechanisms._batchbits import bernoulli_rows_dense, top_digit_words


def _all_combinations() -> np.ndarray:
    """words[i] such that position j (0..255) sees x_{i+1} = bit i of j: every combination once."""
    j = np.arange(256)
    words = np.zeros((8, 4), dtype=np.uint64)
    for i in range(8):
        bits = ((j >> i) & 1).astype(np.uint8)
        words[i] = np.packbits(bits, bitorder="little").view("<u8")
    return words


@pytest.mark.parametrize("t1", [0, 1, 2, 96, 127, 128, 200, 255])
def test_top_digits_give_exact_probability_and_one_tie(t1: int) -> None:
    base, tie = top_digit_words(t1, _all_combinations())
    ones = int(np.bitwise_count(base).sum())
    ties = int(np.bitwise_count(tie).sum())
    # Over all 256 equally likely combinations: P(base = 1) = t1/256, and exactly one combination
    # passes r_9 through (where base is 0, so r_1 = r_9 there).
    assert ones == t1
    assert ties == 1
    assert int(np.bitwise_count(base & tie).sum()) == 0


@pytest.mark.statistical
@pytest.mark.parametrize("threshold", [0x60A3_21F7, 0x0000_1234, 0xFF00_0001, 1 << 31])
def test_dense_rows_rate_and_padding(threshold: int) -> None:
    rng = np.random.default_rng(20261121)
    n, d = 4000, 1021  # d not a multiple of 8 or 64: padding must stay zero
    rows = bernoulli_rows_dense(threshold, n, d, rng)
    assert rows.shape == (n, 128)
    assert int(rows[:, -1].max()) < 1 << (d % 8)
    p = threshold / PROB_ONE
    total = n * d
    ones = int(np.bitwise_count(rows).sum())
    # z = 6 from the binomial standard deviation: a false failure has probability < 1e-8.
    assert abs(ones - total * p) < 6 * np.sqrt(total * p * (1 - p)) + 1
