"""Exact tests of the quantized Bernoulli bit-vector sampler (no sampling: full enumeration)."""

from __future__ import annotations

import itertools

import pytest

from ldp_client._prob import PROB_ONE, BitVectorSampler, expansion_ops, quantize_probability
from ldp_client.errors import InvalidParameterError


def _exact_one_probability(threshold: int) -> float:
    """P(bit = 1) of the expansion sampler, by enumerating every value of its random input bits."""
    ops = expansion_ops(threshold)
    if not ops:
        return threshold / PROB_ONE
    ones = 0
    for bits in itertools.product((0, 1), repeat=len(ops)):
        r = 0
        for is_or, x in zip(ops, bits, strict=True):
            r = (x | r) if is_or else (x & r)
        ones += r
    return ones / 2 ** len(ops)


@pytest.mark.parametrize("threshold", [1 << 31, 3 << 30, 1 << 30, 5 << 28, 0, PROB_ONE, 0xABC00000])
def test_expansion_gives_exact_probability(threshold: int) -> None:
    assert _exact_one_probability(threshold) == threshold / PROB_ONE


def test_dyadic_three_quarters_costs_two_words() -> None:
    assert len(expansion_ops(3 << 30)) == 2
    assert BitVectorSampler(3 << 30, 128).nbytes == 32


def test_sampler_width_and_extremes() -> None:
    assert BitVectorSampler(PROB_ONE, 13).sample(b"") == (1 << 13) - 1
    assert BitVectorSampler(0, 13).sample(b"") == 0
    s = BitVectorSampler(1 << 31, 12)
    assert s.sample(b"\xff\xff") == 0xFFF


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1, 1.1, "0.5", True])
def test_quantize_rejects_bad_values(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="p="):
        quantize_probability("p", bad)  # type: ignore[arg-type]
