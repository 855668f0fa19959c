"""Tests of the issue-6 frequency oracles on the client: parameters, exact privacy, samplers, encoders.

Exact privacy is checked by enumerating every output of small parameters with exact rational
probabilities built from the quantized thresholds; the per-report samplers are checked at their branch
boundaries with chosen random bytes (and, where the random input space is small, by enumerating it);
goodness of fit uses chi-square at alpha = 1e-6 with seeded generators.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldp_client import _bytesample, randomness
from ldp_client._oracle_math import (
    best_olh_g,
    best_ss_k,
    hash_bucket_bounds,
    hash_collision_mass,
    local_hashing_q_star,
    oracle_variance,
)
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning
from ldp_client.mechanisms import hr as hr_mod
from ldp_client.mechanisms import olh as olh_mod
from ldp_client.mechanisms import ss as ss_mod
from ldp_client.mechanisms import ue as ue_mod
from ldp_client.mechanisms.hr import HadamardEncoder
from ldp_client.mechanisms.olh import LocalHashEncoder, bucket_of, hash_buckets, support_test_constants
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.mechanisms.ss import SubsetSelectionEncoder
from ldp_client.mechanisms.ue import UnaryEncoder
from ldp_client.params import (
    BLHParams,
    Domain,
    GRRParams,
    HadamardParams,
    OLHParams,
    OUEParams,
    SetValuedParams,
    SubsetSelectionParams,
    SUEParams,
    make_params,
)

ALPHA = 1e-6
FLOAT_TOL = 1e-12
EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]


class ByteFeed:
    """A fake CSPRNG: returns the queued byte strings in order (each request must match its length)."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = list(chunks)
        self.requests: list[int] = []

    def __call__(self, n: int) -> bytes:
        self.requests.append(n)
        chunk = self.chunks.pop(0)
        assert len(chunk) == n, (len(chunk), n)
        return chunk


def _check_ldp(channel: dict[int, dict[object, Fraction]], epsilon: float) -> None:
    """Every row sums to 1 and max over outputs and input pairs of P(y|x)/P(y|x') equals e^epsilon."""
    outputs = set().union(*(row.keys() for row in channel.values()))
    for row in channel.values():
        assert sum(row.values()) == 1
    bound = math.exp(epsilon)
    worst = 0.0
    for y in outputs:
        probs = [row.get(y, Fraction(0)) for row in channel.values()]
        if max(probs) == 0:
            continue
        assert min(probs) > 0, f"output {y!r} impossible under some input: infinite epsilon"
        ratio = float(max(probs) / min(probs))
        assert ratio <= bound * (1 + FLOAT_TOL)
        worst = max(worst, ratio)
    assert worst == pytest.approx(bound, rel=1e-9)


# --------------------------------------------------------------------------------------------- params


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("d", [2, 3, 16, 1024])
def test_from_epsilon_rounds_toward_privacy(d: int, eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        built = [
            OUEParams.from_epsilon(d, eps),
            SUEParams.from_epsilon(d, eps),
            OLHParams.from_epsilon(d, eps),
            BLHParams.from_epsilon(d, eps),
            SubsetSelectionParams.from_epsilon(d, eps),
            HadamardParams.from_epsilon(d, eps),
        ]
    for p in built:
        assert p.epsilon <= eps, p
        assert p.epsilon == pytest.approx(eps, rel=1e-6), p  # and within 32-bit quantization of it


def test_documented_rates() -> None:
    e = math.exp(1.0)
    oue = OUEParams.from_epsilon(10, 1.0)
    assert oue.p_star == 0.5 and oue.q_star == pytest.approx(1 / (e + 1), abs=2**-32)
    sue = SUEParams.from_epsilon(10, 1.0)
    assert sue.p_threshold + sue.q_threshold == PROB_ONE
    assert sue.p_star == pytest.approx(math.exp(0.5) / (math.exp(0.5) + 1), abs=2**-32)
    olh = OLHParams.from_epsilon(10, 2.0)
    assert olh.g in (8, 9)  # e^2 + 1 = 8.39
    assert olh.q_star == pytest.approx(1 / olh.g, rel=1e-15)
    blh = BLHParams.from_epsilon(10, 1.0)
    assert blh.g == 2 and blh.q_star == 0.5
    hr = HadamardParams.from_epsilon(10, 1.0)
    assert hr.order == 16 and hr.q_star == 0.5 and hr.report_bits == 4
    ss = SubsetSelectionParams.from_epsilon(128, 2.0)
    assert ss.variance() == pytest.approx(0.697, abs=1e-3)  # ldp-formulas.md §1.2 table
    assert SubsetSelectionParams.from_epsilon(16, 1.0).variance() == pytest.approx(3.11, abs=5e-3)
    assert oue.report_bits == 10 and olh.report_bits == 128 + math.ceil(math.log2(olh.g))


def test_reference_variances() -> None:
    # n Var* of ldp-formulas.md §1.2 at d = 128.
    table = {
        1.0: {"sue": 3.918, "oue": 3.683, "olh": 3.692, "hr": 4.683, "ss": 3.610},
        2.0: {"sue": 0.921, "oue": 0.724, "olh": 0.725, "hr": 1.724, "ss": 0.697},
        4.0: {"sue": 0.181, "oue": 0.076, "olh": 0.076, "hr": 1.076, "ss": 0.058},
    }
    for eps, row in table.items():
        for name, expected in row.items():
            p = make_params(name, epsilon=eps, domain=128)
            assert p.variance() == pytest.approx(expected, abs=1.5e-3), (name, eps)  # type: ignore[union-attr]


def test_variance_includes_own_frequency_term() -> None:
    p = OUEParams.from_epsilon(10, 1.0)
    ps, qs = p.p_star, p.q_star
    f = 0.3
    assert p.variance(f) == pytest.approx(
        (qs * (1 - qs) + f * (ps - qs) * (1 - ps - qs)) / (ps - qs) ** 2, rel=1e-15
    )
    assert oracle_variance(ps, qs, f) == p.variance(f)


def test_best_k_and_g_are_exact_minima() -> None:
    for d in (4, 16, 128):
        for eps in (0.5, 1.0, 4.0):
            k = best_ss_k(d, eps)
            v = SubsetSelectionParams.from_epsilon(d, eps, k=k).variance()
            for other in range(1, d // 2 + 1):
                assert v <= SubsetSelectionParams.from_epsilon(d, eps, k=other).variance() * (1 + 1e-12)
    for eps in (0.5, 1.0, 2.0, 4.0):
        g = best_olh_g(eps)
        v = OLHParams.from_epsilon(100, eps, g=g).variance()
        for other in range(2, 80):
            assert v <= OLHParams.from_epsilon(100, eps, g=other).variance() * (1 + 1e-12)
    # Large domains use the ternary search: its k agrees with the scan it replaces.
    big = best_ss_k(1 << 17, 1.0)
    assert abs(big - (1 << 17) / (math.e + 1)) < 3


def test_hash_collision_mass_is_exact() -> None:
    for g in (2, 3, 5, 7, 8, 1000):
        sizes = [hash_bucket_bounds(g, y)[1] for y in range(g)]
        assert sum(sizes) == PROB_ONE
        assert hash_collision_mass(g) == Fraction(sum(s * s for s in sizes), PROB_ONE**2)
        assert abs(float(hash_collision_mass(g)) - 1 / g) < g / 2**63
    assert hash_collision_mass(4) == Fraction(1, 4)
    assert local_hashing_q_star(0.7, 2) == 0.5


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: OUEParams(domain=4, p=0.5, q=0.5), "p="),
        (lambda: OUEParams(domain=4, p=0.5, q=0.0), "q="),
        (lambda: SUEParams(domain=4, p=1.0, q=0.2), "p="),
        (lambda: OUEParams(domain=1, p=0.5, q=0.2), "domain="),
        (lambda: OLHParams(domain=4, g=1, truth_probability=0.9), "g="),
        (lambda: OLHParams(domain=4, g=4, truth_probability=0.25), "truth_probability="),
        (lambda: OLHParams(domain=4, g=4, truth_probability=float("nan")), "truth_probability="),
        (lambda: BLHParams(domain=4, g=3, truth_probability=0.9), "g="),
        (lambda: SubsetSelectionParams(domain=4, k=4, truth_probability=0.9), "k="),
        (lambda: SubsetSelectionParams(domain=4, k=0, truth_probability=0.9), "k="),
        (lambda: SubsetSelectionParams(domain=4, k=2, truth_probability=0.5), "truth_probability="),
        (lambda: HadamardParams(domain=4, truth_probability=0.5), "truth_probability="),
        (lambda: HadamardParams(domain=4, truth_probability=True), "truth_probability="),
        (lambda: SetValuedParams(domain=4, max_items=0, inner=GRRParams.from_epsilon(4, 1.0)), "max_items="),
        (
            lambda: SetValuedParams(domain=4, max_items=2, inner=GRRParams.from_epsilon(5, 1.0)),
            "inner.domain=",
        ),
        (lambda: SetValuedParams(domain=4, max_items=2, inner="oue"), "inner="),
        (lambda: OUEParams.from_epsilon(4, float("nan")), "epsilon="),
        (lambda: OUEParams.from_epsilon(4, -1.0), "epsilon="),
        (lambda: OLHParams.from_epsilon(4, 1.0, g=1), "g="),
        (lambda: SubsetSelectionParams.from_epsilon(4, 1.0, k=7), "k="),
    ],
)
def test_invalid_parameters_are_named(factory: Callable[[], object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        factory()


def test_make_params_names_and_fields() -> None:
    assert make_params("oue", epsilon=1.0, domain=8) == OUEParams.from_epsilon(8, 1.0)
    assert make_params("oue", domain=8, fields={"q": "0.25"}) == OUEParams(domain=8, q=0.25)
    assert make_params("olh", epsilon=2.0, domain=8, fields={"g": "5"}).g == 5  # type: ignore[union-attr]
    assert isinstance(make_params("blh", epsilon=1.0, domain=8), BLHParams)
    assert make_params("ss", epsilon=1.0, domain=8, fields={"k": 3}).k == 3  # type: ignore[union-attr]
    assert make_params("hr", domain=8, fields={"truth_probability": 0.75}) == HadamardParams(
        domain=8, truth_probability=0.75
    )
    sv = make_params("set-valued", epsilon=1.0, domain=8, fields={"max_items": "3", "inner": "grr"})
    assert isinstance(sv, SetValuedParams) and isinstance(sv.inner, GRRParams)
    assert sv.inner.domain.size == 11
    auto = make_params("auto", epsilon=1.0, domain=128)
    assert isinstance(auto, SubsetSelectionParams)
    with pytest.raises(InvalidParameterError, match="param g"):
        make_params("oue", epsilon=1.0, domain=8, fields={"g": 2})
    with pytest.raises(InvalidParameterError, match="domain="):
        make_params("olh", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="max_items="):
        make_params("set-valued", epsilon=1.0, domain=8)
    with pytest.raises(InvalidParameterError, match="inner="):
        make_params("set-valued", epsilon=1.0, domain=8, fields={"max_items": 2, "inner": "rappor"})
    with pytest.raises(InvalidParameterError, match="param k"):
        make_params("ss", epsilon=1.0, domain=8, fields={"k": "three"})


# ------------------------------------------------------------------------------- exact privacy (channels)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("cls", [OUEParams, SUEParams])
@pytest.mark.parametrize("d", [2, 3, 4])
def test_unary_channel_is_epsilon_ldp(cls: type[OUEParams], d: int, eps: float) -> None:
    params = cls.from_epsilon(d, eps)
    channel = {x: {y: ue_mod.exact_report_probability(params, x, y) for y in range(1 << d)} for x in range(d)}
    _check_ldp(channel, params.epsilon)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize(("d", "k"), [(3, 1), (4, 1), (4, 2), (5, 2), (6, 3), (6, 5)])
def test_subset_selection_channel_is_epsilon_ldp(d: int, k: int, eps: float) -> None:
    params = SubsetSelectionParams.from_epsilon(d, eps, k=k)
    subsets = [sum(1 << i for i in c) for c in itertools.combinations(range(d), k)]
    channel = {x: {y: ss_mod.exact_report_probability(params, x, y) for y in subsets} for x in range(d)}
    _check_ldp(channel, params.epsilon)
    # The rates the estimator uses follow from the channel.
    for x in range(d):
        for v in range(d):
            support = sum(channel[x][y] for y in subsets if (y >> v) & 1)
            assert float(support) == pytest.approx(params.p_star if v == x else params.q_star, rel=1e-12)


def _hr_channel(params: HadamardParams, monkeypatch: pytest.MonkeyPatch) -> dict[int, dict[object, Fraction]]:
    """The encoder's exact law, by running it on every j word and both coin branches (u = 0, u = T)."""
    T = params.truth_threshold
    k = params.order
    enc = HadamardEncoder(params)
    channel: dict[int, dict[object, Fraction]] = {}
    for x in range(params.domain.size):
        row: dict[object, Fraction] = {}
        for u, weight in ((0, Fraction(T, PROB_ONE)), (T, Fraction(PROB_ONE - T, PROB_ONE))):
            words = [(u | (j << 32)).to_bytes(8, "little") for j in range(k)]
            monkeypatch.setattr(randomness, "_source", ByteFeed(words))
            for _ in range(k):
                y = enc.encode_index(x)
                row[y] = row.get(y, Fraction(0)) + weight / k
        channel[x] = row
    return channel


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("d", [1 + 1, 3, 5, 7, 8])
def test_hadamard_encoder_law_is_exact_and_epsilon_ldp(
    d: int, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = HadamardParams.from_epsilon(d, eps)
    channel = _hr_channel(params, monkeypatch)
    for x, row in channel.items():
        for y in range(params.order):
            assert row.get(y, Fraction(0)) == hr_mod.exact_report_probability(params, x, y)
    _check_ldp(channel, params.epsilon)
    for x in range(d):
        for v in range(d):
            support = sum(p for y, p in channel[x].items() if hr_mod.in_support(v, y))  # type: ignore[arg-type]
            assert support == (Fraction(params.truth_threshold, PROB_ONE) if v == x else Fraction(1, 2))


@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0])
@pytest.mark.parametrize("g", [2, 3, 5])
def test_local_hashing_channel_given_seed_is_epsilon_ldp(
    g: int, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = OLHParams.from_epsilon(6, eps, g=g)
    enc = LocalHashEncoder(params)
    T = params.truth_threshold
    rng = np.random.default_rng(3)
    for a, b in rng.integers(0, 2**63, size=(20, 2)).tolist():
        # Given the seed: the encoder reports its own bucket on u < T, and on u >= T each other bucket for
        # exactly floor(2**32/(g-1)) of the "other" words (Lemire), i.e. uniformly.
        per = PROB_ONE // (g - 1)
        for x in range(6):
            own = bucket_of(a, b, x, g)
            tail = [o * per for o in range(g - 1)]
            draws = [0] + [T] * len(tail)
            feed = ByteFeed(
                [
                    (a | (b << 64) | (u << 128) | (w << 160)).to_bytes(24, "little")
                    for u, w in zip(draws, [0, *tail], strict=True)
                ]
            )
            monkeypatch.setattr(randomness, "_source", feed)
            reports = [enc.encode_index(x) for _ in draws]
            assert reports[0] == (a, b, own)
            assert sorted(r.bucket for r in reports[1:]) == [y for y in range(g) if y != own]
        channel = {
            x: {y: olh_mod.exact_report_probability(params, x, a, b, y) for y in range(g)} for x in range(6)
        }
        for row in channel.values():
            assert sum(row.values()) == 1
        bound = math.exp(params.epsilon) * (1 + FLOAT_TOL)
        for y in range(g):
            probs = [channel[x][y] for x in range(6)]
            assert float(max(probs) / min(probs)) <= bound


def test_multiply_add_shift_is_strongly_universal_at_small_width() -> None:
    # The 64-bit family h(x) = ((a x + b) mod 2**64) >> 32 is Dietzfelbinger's multiply-add-shift with
    # w = 24 key bits, l = 32 output bits, wbar = 64 >= w + l - 1. Exhaustively at w = 3, l = 3, wbar = 5:
    # for every pair of keys, the pair of hash values is uniform over the 64 pairs.
    w, bits, wbar = 3, 3, 5
    for x, y in itertools.combinations(range(1 << w), 2):
        joint = Counter(
            ((((a * x + b) % (1 << wbar)) >> (wbar - bits)), (((a * y + b) % (1 << wbar)) >> (wbar - bits)))
            for a in range(1 << wbar)
            for b in range(1 << wbar)
        )
        assert len(joint) == 1 << (2 * bits) and set(joint.values()) == {(1 << (2 * wbar)) >> (2 * bits)}


def test_server_support_test_matches_buckets() -> None:
    rng = np.random.default_rng(5)
    for g in (2, 3, 7, 56):
        a = rng.integers(0, 2**64, size=300, dtype=np.uint64, endpoint=False)
        b = rng.integers(0, 2**64, size=300, dtype=np.uint64, endpoint=False)
        y = rng.integers(0, g, size=300)
        values = np.arange(50, dtype=np.uint64)
        b_prime, limit = support_test_constants(b, y, g)
        fast = (a[:, None] * values[None, :] + b_prime[:, None]) < limit[:, None]
        slow = hash_buckets(a[:, None], b[:, None], values[None, :], g) == y[:, None].astype(np.uint64)
        np.testing.assert_array_equal(fast, slow)
        for i in range(5):
            for v in range(50):
                assert bucket_of(int(a[i]), int(b[i]), v, g) == int(
                    hash_buckets(a[i], b[i], np.uint64(v), g)[0]
                )


def test_set_valued_channel_is_epsilon_ldp() -> None:
    # Padding and sampling: P(report | S) = (1/L) sum over slots of P_inner(report | padded item).
    d, L = 3, 2
    params = SetValuedParams.from_epsilon(d, 1.0, max_items=L, inner="grr")
    inner = params.inner
    assert isinstance(inner, GRRParams)
    D = d + L
    p = Fraction(inner.truth_threshold, PROB_ONE)
    q = (1 - p) / (D - 1)
    sets = [()] + [(v,) for v in range(d)] + list(itertools.combinations(range(d), 2))
    channel: dict[int, dict[object, Fraction]] = {}
    for i, s in enumerate(sets):
        padded = [s[j] if j < len(s) else d + j for j in range(L)]
        channel[i] = {y: sum((p if y == item else q) for item in padded) / L for y in range(D)}
    _check_ldp_upper(channel, params.epsilon)


def _check_ldp_upper(channel: dict[int, dict[object, Fraction]], epsilon: float) -> None:
    for row in channel.values():
        assert sum(row.values()) == 1
    outputs = set().union(*(row.keys() for row in channel.values()))
    for y in outputs:
        probs = [row[y] for row in channel.values()]
        assert float(max(probs) / min(probs)) <= math.exp(epsilon) * (1 + FLOAT_TOL)


# ---------------------------------------------------------------------------------- per-report samplers


def test_byte_bernoulli_branch_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    T = (70 << 24) | 0x123456  # t1 = 70, r = 0x123456
    s = _bytesample.ByteBernoulli(T, 4)
    spare = s.nbytes - 4
    keys = bytes([69, 70, 70, 71])
    ties = (0x123455).to_bytes(3, "little") + (0x123456).to_bytes(3, "little")
    monkeypatch.setattr(randomness, "_source", ByteFeed([keys + ties + bytes(spare - 6)]))
    # key 69 < 70: 1; key 70 with word r - 1 < r: 1; key 70 with word r: 0; key 71: 0.
    assert s.sample() == 0b0011
    # Every first byte: below t1 is 1, above is 0 (ties resolved by their word).
    s1 = _bytesample.ByteBernoulli(T, 256)
    tie_words = (0).to_bytes(3, "little")  # one tie (key 70), resolved to 1
    monkeypatch.setattr(
        randomness, "_source", ByteFeed([bytes(range(256)) + tie_words + bytes(s1.nbytes - 259)])
    )
    assert s1.sample() == (1 << 71) - 1
    # The spare runs out: more bytes are read (64 words of 3 bytes).
    s2 = _bytesample.ByteBernoulli(T, 4)
    s2._spare = 6  # room for two ties only
    feed = ByteFeed([bytes([70] * 4) + bytes([0xFF] * 6), bytes(192)])
    monkeypatch.setattr(randomness, "_source", feed)
    s2_out = s2.sample()
    assert feed.requests == [10, 192]
    assert s2_out == 0b1100  # the first two ties read 0xFFFFFF >= r: 0; the last two read 0 < r: 1


def test_byte_bernoulli_extremes() -> None:
    assert _bytesample.ByteBernoulli(0, 9).sample() == 0
    assert _bytesample.ByteBernoulli(PROB_ONE, 9).sample() == (1 << 9) - 1
    assert _bytesample.ByteBernoulli(1 << 31, 5).nbytes == 5  # dyadic: no tie bytes needed
    with pytest.raises(InvalidParameterError, match="threshold="):
        _bytesample.ByteBernoulli(PROB_ONE + 1, 3)
    with pytest.raises(InvalidParameterError, match="width="):
        _bytesample.ByteBernoulli(5, 0)


def test_uniform_subset_is_exactly_uniform_by_enumeration(monkeypatch: pytest.MonkeyPatch) -> None:
    # m = 2, k = 1: all 65536 key pairs. A strict order picks the smaller key; a tie (256 pairs) draws one
    # of the two uniformly with the first spare 32-bit word: Lemire over 2 takes the high bit of the word.
    counts: Counter[int] = Counter()
    pad = bytes(_bytesample.SUBSET_SPARE - 4)
    for k0, k1 in itertools.product(range(256), repeat=2):
        words = (0, PROB_ONE - 1) if k0 == k1 else (0,)
        for word in words:
            buf = bytes([k0, k1]) + word.to_bytes(4, "little") + pad
            monkeypatch.setattr(randomness, "_source", ByteFeed([buf]))
            counts[_bytesample.uniform_subset(2, 1)] += 2 // len(words)
    assert counts == {0b01: 65536, 0b10: 65536}


def test_uniform_subset_sizes_and_errors() -> None:
    for m, k in ((1, 0), (1, 1), (7, 3), (100, 1), (100, 99), (1023, 386)):
        assert _bytesample.uniform_subset(m, k).bit_count() == k
        assert _bytesample.uniform_subset(m, k) >> m == 0
    with pytest.raises(InvalidParameterError, match="k="):
        _bytesample.uniform_subset(3, 4)
    with pytest.raises(InvalidParameterError, match="m="):
        _bytesample.uniform_subset(0, 0)


def _chi2_pvalue(observed: Counter[object], expected: dict[object, float]) -> float:
    keys = list(expected)
    obs = np.array([observed.get(k, 0) for k in keys], dtype=float)
    exp = np.array([expected[k] for k in keys], dtype=float)
    assert sum(observed.values()) == obs.sum(), "an output outside the support"
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.statistical
def test_uniform_subset_goodness_of_fit() -> None:
    n = 20_000
    draws = Counter(_bytesample.uniform_subset(6, 3) for _ in range(n))
    expected = {sum(1 << i for i in c): 1.0 for c in itertools.combinations(range(6), 3)}
    assert _chi2_pvalue(draws, expected) > ALPHA


# ------------------------------------------------------------------------ encoders: goodness of fit


def _per_report_fit(encoder: Callable[[int], object], x: int, law: dict[object, Fraction], n: int) -> None:
    observed = Counter(encoder(x) for _ in range(n))
    assert _chi2_pvalue(observed, {k: float(v) for k, v in law.items() if v > 0}) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("cls", [OUEParams, SUEParams])
def test_unary_per_report_fit(cls: type[OUEParams]) -> None:
    params = cls.from_epsilon(4, 1.0)
    enc = UnaryEncoder(params)
    for x in (0, 3):
        law = {y: ue_mod.exact_report_probability(params, x, y) for y in range(16)}
        _per_report_fit(enc.encode_index, x, law, 20_000)


@pytest.mark.statistical
def test_subset_selection_per_report_fit() -> None:
    params = SubsetSelectionParams.from_epsilon(5, 1.0, k=2)
    enc = SubsetSelectionEncoder(params)
    subsets = [sum(1 << i for i in c) for c in itertools.combinations(range(5), 2)]
    for x in (0, 4):
        _per_report_fit(
            enc.encode_index, x, {y: ss_mod.exact_report_probability(params, x, y) for y in subsets}, 20_000
        )


@pytest.mark.statistical
def test_hadamard_per_report_fit() -> None:
    params = HadamardParams.from_epsilon(5, 1.0)
    enc = HadamardEncoder(params)
    for x in (0, 4):
        law = {y: hr_mod.exact_report_probability(params, x, y) for y in range(params.order)}
        _per_report_fit(enc.encode_index, x, law, 20_000)


@pytest.mark.statistical
@pytest.mark.parametrize("g", [2, 5])
def test_local_hashing_per_report_support_rates(g: int) -> None:
    # Over fresh seeds: the report supports x w.p. p* and any v != x w.p. q* (exact S of the family).
    params = OLHParams.from_epsilon(40, 1.5, g=g)
    enc = LocalHashEncoder(params)
    n = 40_000
    own = other = 0
    for _ in range(n):
        r = enc.encode_index(7)
        own += bucket_of(r.a, r.b, 7, g) == r.bucket
        other += bucket_of(r.a, r.b, 31, g) == r.bucket
    for hits, rate in ((own, params.p_star), (other, params.q_star)):
        assert stats.binomtest(hits, n, rate).pvalue > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["oue", "sue", "ss", "hr"])
def test_batch_encoders_fit_exact_law(name: str) -> None:
    d = 4 if name != "ss" else 5
    params = make_params(name, epsilon=1.0, domain=d)
    enc = oracle_encoder(params)  # type: ignore[arg-type]
    rng = np.random.default_rng(2024)
    n = 200_000
    for x in (0, d - 1):
        out = enc.encode_batch(np.full(n, x), rng)
        if name == "hr":
            observed = Counter(out.tolist())
            law = {y: hr_mod.exact_report_probability(params, x, y) for y in range(params.order)}  # type: ignore[arg-type]
        else:
            ints = out[:, 0].astype(np.int64)
            observed = Counter(ints.tolist())
            mod = ue_mod if name in ("oue", "sue") else ss_mod
            law = {y: mod.exact_report_probability(params, x, y) for y in range(1 << d)}  # type: ignore[arg-type]
        assert _chi2_pvalue(observed, {k: float(v) for k, v in law.items() if v > 0}) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_unary_batch_rates_at_large_domain(eps: float) -> None:
    # d = 1024 exercises the dense (eps 0.5) and the sparse (eps 4) batch samplers.
    params = OUEParams.from_epsilon(1024, eps)
    assert ue_mod.sparse_or_dense(params) == ("dense" if eps < 1 else "sparse")
    n = 20_000
    x = np.random.default_rng(1).integers(0, 1024, size=n)
    rows = UnaryEncoder(params).encode_batch(x, np.random.default_rng(2))
    bits = np.unpackbits(rows, axis=1, bitorder="little")
    own = int(bits[np.arange(n), x].sum())
    noise = int(bits.sum()) - own
    assert stats.binomtest(own, n, params.p_star).pvalue > ALPHA
    assert stats.binomtest(noise, n * 1023, params.q_star).pvalue > ALPHA
    # Rows are independent Bernoulli vectors: the count of ones per row is Binomial(1023, q) + coin.
    per_row = bits.sum(axis=1) - bits[np.arange(n), x]
    hist = np.bincount(per_row, minlength=1024)
    expected = stats.binom.pmf(np.arange(1024), 1023, params.q_star) * n
    keep = expected > 5
    obs = np.append(hist[keep], hist[~keep].sum())
    exp = np.append(expected[keep], n - expected[keep].sum())
    assert stats.chisquare(obs, exp).pvalue > ALPHA


@pytest.mark.statistical
def test_subset_selection_batch_large_k_uses_complement() -> None:
    params = SubsetSelectionParams.from_epsilon(9, 1.0, k=7)
    rows = SubsetSelectionEncoder(params).encode_batch(np.full(50_000, 2), np.random.default_rng(9))
    ints = rows[:, 0].astype(np.int64) | (rows[:, 1].astype(np.int64) << 8)
    assert set(np.bitwise_count(ints).tolist()) == {7}
    subsets = [sum(1 << i for i in c) for c in itertools.combinations(range(9), 7)]
    law = {y: float(ss_mod.exact_report_probability(params, 2, y)) for y in subsets}
    assert _chi2_pvalue(Counter(ints.tolist()), law) > ALPHA


@pytest.mark.statistical
def test_subset_selection_batch_dense_start_is_uniform() -> None:
    # k = 34 > 32 starts from dense Bernoulli rows and corrects the counts: the left-out values (the
    # complement, 1 or 2 of the 35 others) must be uniform.
    d, k, x = 36, 34, 5
    params = SubsetSelectionParams.from_epsilon(d, 1.0, k=k)
    rows = SubsetSelectionEncoder(params).encode_batch(np.full(200_000, x), np.random.default_rng(12))
    bits = np.unpackbits(rows, axis=1, count=d, bitorder="little").astype(bool)
    assert set(bits.sum(axis=1).tolist()) == {k}
    left_out = [tuple(np.flatnonzero(~row).tolist()) for row in bits]
    law = {}
    for y in itertools.combinations(range(d), d - k):
        mask = sum(1 << i for i in range(d) if i not in y)
        law[y] = float(ss_mod.exact_report_probability(params, x, mask))
    assert _chi2_pvalue(Counter(left_out), {y: v for y, v in law.items() if v > 0}) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("g", [2, 6])
def test_local_hashing_batch_support_rates(g: int) -> None:
    params = OLHParams.from_epsilon(100, 2.0, g=g)
    n = 100_000
    a, b, y = LocalHashEncoder(params).encode_batch(np.full(n, 11), np.random.default_rng(4))
    assert a.dtype == np.uint64 and b.dtype == np.uint64 and y.dtype == np.uint32
    own = int((hash_buckets(a, b, np.uint64(11), g) == y).sum())
    other = int((hash_buckets(a, b, np.uint64(60), g) == y).sum())
    assert stats.binomtest(own, n, params.p_star).pvalue > ALPHA
    assert stats.binomtest(other, n, params.q_star).pvalue > ALPHA


# ------------------------------------------------------------------------------------------ set values


def test_set_valued_encoder_pads_and_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    params = SetValuedParams.from_epsilon(["a", "b", "c"], 2.0, max_items=3, inner="grr")
    enc = SetValuedEncoder(params)
    inner = params.inner
    assert isinstance(inner, GRRParams)
    # Slot word 0 -> slot 0; words near 2**32 -> slot 2; the inner coin 0 is truthful.
    truthful = bytes(8)
    for slot_word, expected in ((1, 0), (PROB_ONE - 1, 3 + 2)):  # word 0 is Lemire-rejected for n = 3
        feed = ByteFeed([slot_word.to_bytes(4, "little"), truthful])
        monkeypatch.setattr(randomness, "_source", feed)
        assert enc.encode(["a"]) == expected  # slot 2 of {"a"} is the dummy 3 + 2
    feed = ByteFeed([(PROB_ONE - 1).to_bytes(4, "little"), truthful])
    monkeypatch.setattr(randomness, "_source", feed)
    assert enc.encode(["c", "b", "a"]) == 0  # slot 2 is "a"


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (["a", "a"], "repeated"),
        (["a", "b", "c", "d"], "max_items"),
        (["z"], "values="),
        ("ab", "values="),
        ([1.5], "values="),
        ([float("nan")], "values="),
        (3, "values="),
    ],
)
def test_set_valued_rejects_bad_sets(values: object, match: str) -> None:
    params = SetValuedParams.from_epsilon(["a", "b", "c", "d"], 1.0, max_items=3, inner="oue")
    with pytest.raises(DomainError, match=match):
        SetValuedEncoder(params).encode(values)  # type: ignore[arg-type]


def test_set_valued_batch_validation_and_law() -> None:
    params = SetValuedParams.from_epsilon(4, 1.0, max_items=2, inner="hr")
    enc = SetValuedEncoder(params)
    rng = np.random.default_rng(0)
    for bad, match in (
        (np.array([[0, 0]]), "distinct"),
        (np.array([[0, 4]]), "sets="),
        (np.array([[-2, 1]]), "sets="),
        (np.array([0, 1]), "sets="),
        (np.array([[0.5, 1.0]]), "sets="),
        (np.array([[0, 1, 2]]), "sets="),
    ):
        with pytest.raises(DomainError, match=match):
            enc.encode_batch(bad, rng)
    sets = np.array([[1, -1]] * 40_000 + [[-1, -1]] * 40_000)
    items = enc.padded_items(sets, rng)
    assert set(items[:40_000].tolist()) == {1, 5} and set(items[40_000:].tolist()) == {4, 5}
    assert stats.binomtest(int((items[:40_000] == 1).sum()), 40_000, 0.5).pvalue > ALPHA


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("name", ["oue", "sue", "olh", "blh", "ss", "hr"])
def test_encoders_reject_bad_values(name: str) -> None:
    params = make_params(name, epsilon=1.0, domain=["x", "y", "z"])
    enc = oracle_encoder(params)  # type: ignore[arg-type]
    for bad in ("w", 0, None, float("nan"), b"x"):
        with pytest.raises(DomainError, match="value="):
            enc.encode(bad)  # type: ignore[arg-type]
    for bad_index in (-1, 3, True, 1.0, float("nan")):
        with pytest.raises(DomainError, match="index="):
            enc.encode_index(bad_index)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    for bad_batch, match in (
        (np.array([0, 3]), "indices=3"),
        (np.array([-1]), "indices=-1"),
        (np.array([0.0, 1.0]), "dtype"),
        (np.array([[0, 1]]), "shape"),
        (np.array([np.nan]), "dtype"),
    ):
        with pytest.raises(DomainError, match=match):
            enc.encode_batch(bad_batch, rng)
    with pytest.raises(InvalidParameterError, match="rng="):
        enc.encode_batch(np.array([0]), 42)  # type: ignore[arg-type]
    assert enc.encode_batch(np.array([], dtype=np.int64), rng) is not None


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (UnaryEncoder, HadamardParams.from_epsilon(3, 1.0)),
        (LocalHashEncoder, OUEParams.from_epsilon(3, 1.0)),
        (SubsetSelectionEncoder, OUEParams.from_epsilon(3, 1.0)),
        (HadamardEncoder, OUEParams.from_epsilon(3, 1.0)),
        (SetValuedEncoder, OUEParams.from_epsilon(3, 1.0)),
    ],
)
def test_encoders_reject_wrong_params(cls: Callable[[object], object], params: object) -> None:
    with pytest.raises(InvalidParameterError, match="params="):
        cls(params)


def test_importing_encoders_does_not_import_numpy() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import ldp_client.mechanisms.ue, ldp_client.mechanisms.olh, ldp_client.mechanisms.ss, "
        "ldp_client.mechanisms.hr, ldp_client.mechanisms.sets, ldp_client.auto; "
        "p = ldp_client.params.OUEParams.from_epsilon(5, 1.0); "
        "ldp_client.mechanisms.ue.UnaryEncoder(p).encode(2); "
        "print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("name", "sizes"),
    [("oue", None), ("sue", None), ("olh", [24]), ("blh", [24]), ("ss", [4 + 1023 + 32]), ("hr", [8])],
)
def test_one_csprng_read_per_report(
    name: str, sizes: list[int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    enc = oracle_encoder(make_params(name, epsilon=1.0, domain=1024))  # type: ignore[arg-type]
    calls: list[int] = []

    def source(n: int) -> bytes:
        calls.append(n)
        return os.urandom(n)

    monkeypatch.setattr(randomness, "_source", source)
    enc.encode(5)
    # One read per report, plus rare top-ups: more tie words than the spare holds (ss, ue noise).
    if sizes is None:  # unary encoding: the coin of bit x, the noise keys and tie words
        noise = enc._noise  # type: ignore[union-attr]
        assert calls[0] == 4 + noise.nbytes and len(calls) <= 2
    else:
        assert calls[: len(sizes)] == sizes and len(calls) <= len(sizes) + 1


def test_per_report_outputs_have_the_contract_types() -> None:
    d = 10
    oue = UnaryEncoder(OUEParams.from_epsilon(d, 1.0)).encode(3)
    assert type(oue) is int and 0 <= oue < 1 << d
    ss = SubsetSelectionEncoder(SubsetSelectionParams.from_epsilon(d, 1.0)).encode(3)
    assert ss.bit_count() == SubsetSelectionParams.from_epsilon(d, 1.0).k
    r = LocalHashEncoder(OLHParams.from_epsilon(d, 1.0)).encode(3)
    assert 0 <= r.a < 2**64 and 0 <= r.b < 2**64 and 0 <= r.bucket < OLHParams.from_epsilon(d, 1.0).g
    j = HadamardEncoder(HadamardParams.from_epsilon(d, 1.0)).encode(3)
    assert 0 <= j < 16
    assert Domain.of(d).size == d
    assert len(os.urandom(1)) == 1


@pytest.mark.parametrize(("d", "g"), [(2, 2), (3, 2), (6, 2), (3, 4), (5, 4), (3, 8)])
def test_balanced_seed_sample_pairs_values_like_the_whole_family(d: int, g: int) -> None:
    # The exhaustive checks condition local hashing on this seed sample: every value's bucket uniform, and
    # any two values in one bucket for exactly 1/g of the seeds (the family's collision mass for g = 2**r).
    seeds = olh_mod.balanced_seeds(d, g)
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= a < 1 << 64 and 0 <= b < 1 << 64 for a, b in seeds)
    assert hash_collision_mass(g) == Fraction(1, g)
    buckets = [[bucket_of(a, b, x, g) for x in range(d)] for a, b in seeds]
    for x in range(d):
        assert Counter(row[x] for row in buckets) == dict.fromkeys(range(g), len(seeds) // g)
        for v in range(x + 1, d):
            assert Fraction(sum(row[x] == row[v] for row in buckets), len(seeds)) == Fraction(1, g)
    with pytest.raises(InvalidParameterError, match="power of two"):
        olh_mod.balanced_seeds(3, 3)
