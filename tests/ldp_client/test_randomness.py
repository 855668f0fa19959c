"""Tests of the CSPRNG primitives: exact (enumeration, chosen words) wherever possible."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable

import pytest
from scipy import stats

from ldp_client import randomness
from ldp_client._prob import PROB_ONE
from ldp_client.errors import InvalidParameterError

ALPHA = 1e-6


class _Redraw(Exception):
    """Raised by the fake source to mark that uniform_below rejected its word and asked for another."""


class WordFeed:
    """A fake byte source that returns chosen words (little-endian, ``size`` bytes each) in order."""

    def __init__(self, words: Iterable[int], size: int) -> None:
        self.chunks = [w.to_bytes(size, "little") for w in words]
        self.requests: list[int] = []

    def __call__(self, n: int) -> bytes:
        self.requests.append(n)
        if not self.chunks:
            raise AssertionError("the code under test drew more random bytes than the test supplied")
        chunk = self.chunks.pop(0)
        assert len(chunk) == n, f"asked for {n} bytes, the test prepared {len(chunk)}"
        return chunk


def _redraw(n: int) -> bytes:
    raise _Redraw


def test_default_source_is_os_urandom() -> None:
    # The privacy argument rests on this: no seedable generator behind the per-report encoders.
    assert randomness._source is os.urandom


def test_random_bytes_lengths() -> None:
    for n in (0, 1, 8, 33):
        b = randomness.random_bytes(n)
        assert isinstance(b, bytes)
        assert len(b) == n


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8", None])
def test_random_bytes_rejects_bad_n(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="n="):
        randomness.random_bytes(bad)  # type: ignore[arg-type]


def test_words_are_little_endian_and_in_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(randomness, "_source", WordFeed([0x01020304], 4))
    assert randomness.random_u32() == 0x01020304
    monkeypatch.setattr(randomness, "_source", WordFeed([(7 << 32) | 5], 8))
    assert randomness.random_u64() == (7 << 32) | 5
    monkeypatch.undo()
    assert all(0 <= randomness.random_u32() < 1 << 32 for _ in range(100))
    assert all(0 <= randomness.random_u64() < 1 << 64 for _ in range(100))


@pytest.mark.parametrize("threshold", [1, 1 << 31, 3 << 30, PROB_ONE - 1])
def test_bernoulli_boundary(monkeypatch: pytest.MonkeyPatch, threshold: int) -> None:
    # u = T-1 is a success, u = T is a failure: exactly T of the 2**32 words succeed.
    feed = WordFeed([threshold - 1, threshold, 0, PROB_ONE - 1], 4)
    monkeypatch.setattr(randomness, "_source", feed)
    assert randomness.bernoulli(threshold) is True
    assert randomness.bernoulli(threshold) is False
    assert randomness.bernoulli(threshold) is True
    assert randomness.bernoulli(threshold) is False
    assert feed.requests == [4, 4, 4, 4]


def test_bernoulli_extremes() -> None:
    assert not any(randomness.bernoulli(0) for _ in range(200))
    assert all(randomness.bernoulli(PROB_ONE) for _ in range(200))


@pytest.mark.parametrize("bad", [-1, PROB_ONE + 1, 0.5, True, None])
def test_bernoulli_rejects_bad_threshold(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="threshold="):
        randomness.bernoulli(bad)  # type: ignore[arg-type]


def _enumerate_uniform_below(monkeypatch: pytest.MonkeyPatch, n: int, bits: int) -> tuple[Counter[int], int]:
    """Feed every ``bits``-bit word once; count each output and the words that were rejected."""
    monkeypatch.setattr(randomness, "_source", _redraw)
    counts: Counter[int] = Counter()
    rejected = 0
    for word in range(1 << bits):
        try:
            counts[randomness.uniform_below(n, word, bits)] += 1
        except _Redraw:
            rejected += 1
    return counts, rejected


@pytest.mark.parametrize("n", range(1, 257))
def test_uniform_below_is_exactly_uniform_8_bit(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    # Over all 2**8 words: every output in [0, n) has exactly floor(256/n) accepting words and exactly
    # 256 mod n words are rejected (and redrawn). Same code path as the 32-bit words used in production.
    counts, rejected = _enumerate_uniform_below(monkeypatch, n, 8)
    assert sorted(counts) == list(range(n))
    assert set(counts.values()) == {256 // n}
    assert rejected == 256 % n


@pytest.mark.parametrize("n", [3, 1000, 40_000, 65_535, 65_536])
def test_uniform_below_is_exactly_uniform_16_bit(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    counts, rejected = _enumerate_uniform_below(monkeypatch, n, 16)
    assert len(counts) == n
    assert set(counts.values()) == {65_536 // n}
    assert rejected == 65_536 % n


def test_uniform_below_redraws_from_the_csprng_on_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    # n = 3: 2**32 mod 3 = 1, so the only rejected 32-bit word is x = 0 (3x mod 2**32 < 1).
    feed = WordFeed([0, PROB_ONE - 1], 4)
    monkeypatch.setattr(randomness, "_source", feed)
    assert randomness.uniform_below(3, 0) == 2
    assert feed.requests == [4, 4]  # two redraws: the first redrawn word (0) is rejected again
    # A power of two never rejects and never draws.
    monkeypatch.setattr(randomness, "_source", _redraw)
    assert randomness.uniform_below(4, 0) == 0
    assert randomness.uniform_below(4, PROB_ONE - 1) == 3


@pytest.mark.parametrize(
    ("n", "nbytes"), [(1, 4), (7, 4), (PROB_ONE, 4), (PROB_ONE + 1, 8), (1 << 64, 8), ((1 << 64) + 1, 9)]
)
def test_randbelow_word_size(monkeypatch: pytest.MonkeyPatch, n: int, nbytes: int) -> None:
    feed = WordFeed([(1 << (8 * nbytes)) - 1], nbytes)
    monkeypatch.setattr(randomness, "_source", feed)
    # The largest word maps to the largest value (and is never rejected).
    assert randomness.randbelow(n) == n - 1
    assert feed.requests == [nbytes]


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "5", None])
def test_randbelow_rejects_bad_n(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="n="):
        randomness.randbelow(bad)  # type: ignore[arg-type]


def test_randbelow_range() -> None:
    assert all(randomness.randbelow(1) == 0 for _ in range(50))
    big = (1 << 100) + 12345
    assert all(0 <= randomness.randbelow(big) < big for _ in range(200))


@pytest.mark.statistical
def test_randbelow_goodness_of_fit() -> None:
    # The CSPRNG cannot be seeded, so this test is random: at alpha = 1e-6 it fails spuriously with
    # probability 1e-6 per run. Exactness is already proven by the enumeration tests above.
    n, draws = 7, 70_000
    counts = Counter(randomness.randbelow(n) for _ in range(draws))
    observed = [counts[i] for i in range(n)]
    assert stats.chisquare(observed).pvalue > ALPHA


def test_randomness_does_not_import_numpy_or_random() -> None:
    code = (
        "import sys; import ldp_client.randomness as r; r.randbelow(10); r.random_u64(); "
        "print('numpy' in sys.modules, 'random' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
