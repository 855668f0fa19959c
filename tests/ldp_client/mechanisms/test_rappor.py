"""Tests of the RAPPOR encoders (string, basic, boolean): spec vectors, exact privacy, distributions.

Statistical tests are seeded where the randomness comes from a numpy Generator or from seeded secrets.
Tests of the per-report path draw the IRR from the OS CSPRNG (it cannot be seeded by design); they use
chi-square / z tolerances at alpha = 1e-6, so each such test fails spuriously with probability <= 1e-6.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math
import random
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import mmh3
import numpy as np
import pytest
from scipy import stats

from ldp_client._npbits import pack_bits, unpack_bits
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms import rappor
from ldp_client.mechanisms.rappor import (
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    RapporReport,
    bloom_bits,
    bloom_input,
    bloom_positions,
    cohort_of,
    encode_batch_basic,
    encode_batch_boolean,
    encode_batch_rappor,
    permanent_response,
)
from ldp_client.params import BasicRapporParams, BooleanRapporParams, RapporParams
from ldp_client.secret import ClientSecret

SECRET = bytes(range(32))
ALPHA = 1e-6
DOC = Path(__file__).resolve().parents[3] / "docs" / "rappor-encoding.md"


# ------------------------------------------------------------------ independent reference of spec v1


def _u32(x: int) -> bytes:
    return x.to_bytes(4, "big")


def _lp(b: bytes) -> bytes:
    return _u32(len(b)) + b


def ref_bloom_positions(campaign: str, cohort: int, value: str, k: int, h: int) -> list[int]:
    msg = _lp(campaign.encode()) + _u32(cohort) + _lp(value.encode())
    return [mmh3.hash(msg, seed=i, signed=False) % k for i in range(h)]


def ref_cohort(secret: bytes, m: int) -> int:
    return int.from_bytes(hmac.digest(secret, b"ldp-client/rappor/cohort/v1", "sha256")[:8], "big") % m


def ref_prr(secret: bytes, label: bytes, campaign: str, vb: bytes, k: int, f_t: int, bloom: int) -> int:
    """Section 5 of the spec, written from the text with plain loops."""
    mask = (1 << k) - 1
    if f_t == 0:
        return bloom
    digits = [(f_t >> (32 - i)) & 1 for i in range(1, 33)]  # digits[i-1] = b_i
    d = max(i for i in range(1, 33) if digits[i - 1])
    w = (k + 7) // 8
    seed = label + b"\x00" + _lp(campaign.encode()) + _lp(vb) + _u32(k)
    need = (d + 1) * w
    stream = b"".join(hmac.digest(secret, seed + _u32(j), "sha256") for j in range(-(-need // 32)))
    words = [int.from_bytes(stream[j * w : (j + 1) * w], "little") for j in range(d + 1)]
    r = 0
    for j in range(d):
        i = d - j
        r = (words[j] | r) if digits[i - 1] else (words[j] & r)
    big_r = r & mask
    v = words[d] & mask
    return ((big_r & v) | (~big_r & bloom)) & mask


# ------------------------------------------------------------------------------------ golden vectors

GOLDEN_POSITIONS = [
    ("homepage", 0, "google.com", 16, 2, (13, 10)),
    ("homepage", 7, "google.com", 16, 2, (0, 3)),
    ("homepage", 7, "", 128, 2, (82, 79)),
    ("ünïcode-campaign", 3, "日本語 ✓ 😀", 128, 4, (6, 99, 76, 31)),
    ("x", 0, "y", 33, 3, (2, 22, 27)),
    (
        "homepage",
        63,
        "google.com",
        4096,
        16,
        (2152, 2926, 953, 3887, 1248, 745, 1216, 1650, 283, 3398, 3151, 612, 1143, 1963, 3423, 3170),
    ),
]

# (campaign, value, k, h, m, f, cohort, positions, packed PRR hex or "sha256:...")
GOLDEN_PRR = [
    ("homepage", "google.com", 16, 2, 64, 0.5, 57, (4, 3), "2934"),
    ("homepage", "", 16, 1, 64, 0.5, 57, (3,), "4a09"),
    ("search-engine", "bing.com", 128, 2, 64, 0.5, 57, (109, 125), "129d218012123889c4cacc040e262628"),
    (
        "ünïcode-campaign",
        "日本語 ✓ 😀",
        128,
        4,
        32,
        0.5,
        25,
        (6, 112, 83, 117),
        "090540f10d30002002e9a90d0061e402",
    ),
    ("homepage", "google.com", 128, 2, 64, 0.3, 57, (20, 51), "81089800080a0800000818a101040080"),
    (
        "homepage",
        "google.com",
        4096,
        16,
        128,
        0.5,
        121,
        (1174, 615, 1788, 1976, 165, 582, 897, 3318, 3798, 2098, 3432, 629, 2628, 2245, 3221, 1526),
        "sha256:67ae4ea57ca431a1187516db7230e885adb9c114109b7ba3a6ede4ae3980e03f",
    ),
    (
        "homepage",
        "google.com",
        4096,
        2,
        64,
        0.25,
        57,
        (1812, 1971),
        "sha256:a8a907d4b9d994072bbbce233657d1f10e9e87d0b1d9bd8d8c7c445576cbb557",
    ),
]

GOLDEN_BASIC = {"linux": "15", "mac": "02", "windows": "0d", "android": "08", "ios": "15"}


def _packed_hex(bits: int, k: int) -> str:
    raw = bits.to_bytes((k + 7) // 8, "little")
    return "sha256:" + hashlib.sha256(raw).hexdigest() if k > 128 else raw.hex()


def test_bloom_input_bytes() -> None:
    expected = "00000008686f6d6570616765000000070000000a676f6f676c652e636f6d"
    assert bloom_input("homepage", 7, "google.com").hex() == expected
    assert expected in DOC.read_text(encoding="utf-8")


def test_bloom_input_is_injective_across_field_boundaries() -> None:
    assert bloom_input("ab", 0, "c") != bloom_input("a", 0, "bc")
    assert bloom_input("a", 0, "") != bloom_input("", 0, "a")
    assert bloom_input("a", 1, "b") != bloom_input("a", 256, "b")


@pytest.mark.parametrize(("campaign", "cohort", "value", "k", "h", "positions"), GOLDEN_POSITIONS)
def test_golden_bloom_positions(
    campaign: str, cohort: int, value: str, k: int, h: int, positions: tuple[int, ...]
) -> None:
    assert bloom_positions(campaign, cohort, value, k, h) == positions
    assert tuple(ref_bloom_positions(campaign, cohort, value, k, h)) == positions
    expected_bits = 0
    for j in positions:
        expected_bits |= 1 << j
    assert bloom_bits(campaign, cohort, value, k, h) == expected_bits


@pytest.mark.parametrize(
    ("campaign", "value", "k", "h", "m", "f", "cohort", "positions", "prr_hex"), GOLDEN_PRR
)
def test_golden_prr(
    campaign: str,
    value: str,
    k: int,
    h: int,
    m: int,
    f: float,
    cohort: int,
    positions: tuple[int, ...],
    prr_hex: str,
) -> None:
    params = RapporParams(k=k, h=h, m=m, f=f, p=0.5, q=0.75)
    assert cohort_of(SECRET, m) == cohort == ref_cohort(SECRET, m)
    assert bloom_positions(campaign, cohort, value, k, h) == positions
    prr = permanent_response(SECRET, params, campaign_id=campaign, value=value)
    assert _packed_hex(prr, k) == prr_hex
    bloom = bloom_bits(campaign, cohort, value, k, h)
    ref = ref_prr(SECRET, b"ldp-client/rappor/prr/v1", campaign, value.encode(), k, params.f_threshold, bloom)
    assert ref == prr
    enc = RapporEncoder(params, campaign_id=campaign, secret=ClientSecret.from_bytes(SECRET))
    assert enc.cohort == cohort
    assert enc.permanent_response(value) == prr
    # The table in the written spec is the same.
    assert prr_hex.removeprefix("sha256:") in DOC.read_text(encoding="utf-8")


def test_golden_basic_and_boolean() -> None:
    labels = ["linux", "mac", "windows", "android", "ios"]
    params = BasicRapporParams(domain=labels, f=0.5)
    enc = BasicRapporEncoder(params, campaign_id="os", secret=SECRET)
    for i, label in enumerate(labels):
        prr = enc.permanent_response(label)
        assert prr.to_bytes(1, "little").hex() == GOLDEN_BASIC[label]
        ref = ref_prr(SECRET, b"ldp-client/basic-rappor/prr/v1", "os", _u32(i), 5, params.f_threshold, 1 << i)
        assert ref == prr
    enc3 = BasicRapporEncoder(BasicRapporParams(domain=3, f=0.5), campaign_id="os", secret=SECRET)
    assert [enc3.permanent_response(i) for i in range(3)] == [5, 2, 1]
    benc = BooleanRapporEncoder(BooleanRapporParams(f=0.5), campaign_id="flag", secret=SECRET)
    assert (benc.permanent_response(False), benc.permanent_response(True)) == (0, 1)
    f_t = BooleanRapporParams(f=0.5).f_threshold
    assert ref_prr(SECRET, b"ldp-client/boolean-rappor/prr/v1", "flag", b"\x00", 1, f_t, 0) == 0
    assert ref_prr(SECRET, b"ldp-client/boolean-rappor/prr/v1", "flag", b"\x01", 1, f_t, 1) == 1


def test_random_secrets_match_reference() -> None:
    """Beyond the table: the encoder agrees with the from-the-text reference on seeded random inputs."""
    rng = np.random.default_rng(2024)
    for trial in range(60):
        secret = rng.bytes(32)
        k = int(rng.choice([1, 2, 7, 8, 9, 31, 64, 100, 128, 257, 1000]))
        h = min(int(rng.integers(1, 17)), k)  # h <= k (more hashes than bits is refused)
        m = int(rng.integers(1, 300))
        f = float(rng.choice([0.0, 0.5, 0.25, 0.1, 0.37, 0.999]))
        params = RapporParams(k=k, h=h, m=m, f=f, p=0.25, q=0.75, allow_f_zero=True)
        value = "".join(chr(int(c)) for c in rng.integers(32, 0x2FFF, size=int(rng.integers(0, 12))))
        campaign = f"campaign-{trial}"
        cohort = ref_cohort(secret, m)
        bloom = 0
        for j in ref_bloom_positions(campaign, cohort, value, k, h):
            bloom |= 1 << j
        expected = ref_prr(
            secret, b"ldp-client/rappor/prr/v1", campaign, value.encode(), k, params.f_threshold, bloom
        )
        enc = RapporEncoder(params, campaign_id=campaign, secret=secret)
        assert enc.cohort == cohort
        assert enc.permanent_response(value) == expected


# ---------------------------------------------------------------------------- determinism and memo


def test_prr_deterministic_across_instances_and_distinct_across_inputs() -> None:
    params = RapporParams(k=128, h=2, m=64)
    a = RapporEncoder(params, campaign_id="c", secret=SECRET)
    b = RapporEncoder(params, campaign_id="c", secret=ClientSecret.from_bytes(SECRET))  # "after a restart"
    values = ["a", "b", "google.com", "日本"]
    assert [a.permanent_response(v) for v in values] == [b.permanent_response(v) for v in values]
    other_secret = RapporEncoder(params, campaign_id="c", secret=bytes(range(1, 33)))
    other_campaign = RapporEncoder(params, campaign_id="d", secret=SECRET)
    for v in values:
        assert a.permanent_response(v) != other_secret.permanent_response(v)
        assert a.permanent_response(v) != other_campaign.permanent_response(v)
    assert len({a.permanent_response(v) for v in values}) == len(values)


def test_memo_is_bounded_lru_and_eviction_is_harmless() -> None:
    params = RapporParams(k=64, h=2, m=8)
    enc = RapporEncoder(params, campaign_id="c", secret=SECRET, memo_size=8)
    first = {str(i): enc.permanent_response(str(i)) for i in range(50)}
    info = enc.memo_info()
    assert info.maxsize == 8
    assert info.currsize == 8
    for i in range(50):
        enc.encode(str(i))
        assert enc.permanent_response(str(i)) == first[str(i)]
    assert enc.memo_info().currsize <= 8
    # Hits for a repeated value.
    before = enc.memo_info().hits
    for _ in range(5):
        enc.encode("49")
    assert enc.memo_info().hits >= before + 5


def test_memo_size_capped_by_bit_volume() -> None:
    big = BasicRapporParams(domain=1 << 20, f=0.5)
    enc = BasicRapporEncoder(big, campaign_id="c", secret=SECRET, memo_size=100_000)
    assert enc.memo_info().maxsize == (1 << 27) // (1 << 20)


def test_str_subclass_is_reduced_to_plain_str() -> None:
    class Weird(str):
        def __hash__(self) -> int:
            return 0

    enc = RapporEncoder(RapporParams(k=32, h=2, m=4), campaign_id="c", secret=SECRET)
    assert enc.permanent_response(Weird("abc")) == enc.permanent_response("abc")
    assert enc.encode(Weird("abc")).cohort == enc.cohort


# ------------------------------------------------------------------------------- exact privacy


def _bit_probs_prr(f_t: int) -> tuple[Fraction, Fraction]:
    """P(PRR bit = 1 | Bloom bit = 1), P(PRR bit = 1 | Bloom bit = 0): 1 - F/2**33 and F/2**33."""
    half_f = Fraction(f_t, 2 * PROB_ONE)
    return 1 - half_f, half_f


def _bit_probs_report(f_t: int, p_t: int, q_t: int) -> tuple[Fraction, Fraction]:
    """(q*, p*) from the quantized thresholds, exactly."""
    one, zero = _bit_probs_prr(f_t)
    p = Fraction(p_t, PROB_ONE)
    q = Fraction(q_t, PROB_ONE)
    return one * q + (1 - one) * p, zero * q + (1 - zero) * p


def _dist(bloom: int, k: int, probs: tuple[Fraction, Fraction]) -> list[Fraction]:
    """Exact distribution over the 2**k outputs (index = output bits) of independent bits with
    P(bit i = 1) = probs[0] if Bloom bit i is set else probs[1]."""
    out = []
    for y in range(1 << k):
        pr = Fraction(1)
        for i in range(k):
            p1 = probs[0] if (bloom >> i) & 1 else probs[1]
            pr *= p1 if (y >> i) & 1 else 1 - p1
        out.append(pr)
    return out


def _max_log_ratio(dists: list[list[Fraction]]) -> float:
    worst = 0.0
    for a, b in itertools.permutations(dists, 2):
        for pa, pb in zip(a, b, strict=True):
            if pa == 0 and pb == 0:
                continue
            if pb == 0:
                return math.inf
            if pa > 0:
                worst = max(worst, math.log(pa / pb))
    return worst


def _reachable_blooms(k: int, h: int) -> list[int]:
    """Every Bloom filter a value can have: 1..h bits set (fewer than h on hash collisions)."""
    return [b for b in range(1, 1 << k) if 1 <= b.bit_count() <= h]


NOISE = [(0.5, 0.5, 0.75), (0.0, 0.25, 0.75), (0.3, 0.4, 0.9), (0.75, 0.0, 1.0), (0.1, 0.2, 0.8)]


@pytest.mark.parametrize(("f", "p", "q"), NOISE)
@pytest.mark.parametrize(("k", "h"), [(1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (4, 2)])
def test_exact_privacy_rappor(f: float, p: float, q: float, k: int, h: int) -> None:
    """P(y|x) <= e^eps P(y|x') for all reachable Bloom filters x, x' and all 2**k outputs y, with eps the
    params' epsilon_inf for the PRR and epsilon_one for one report; and the bound is attained when k
    leaves room for two disjoint h-bit filters (the params' epsilon is tight, not loose)."""
    params = RapporParams(k=k, h=h, m=4, f=f, p=p, q=q, allow_f_zero=True)
    blooms = _reachable_blooms(k, h)
    # Actual strings land on reachable filters.
    for v in ("a", "b", "google.com", "日本語"):
        for c in range(4):
            assert bloom_bits("camp", c, v, k, h) in blooms
    prr = [_dist(b, k, _bit_probs_prr(params.f_threshold)) for b in blooms]
    one = [
        _dist(b, k, _bit_probs_report(params.f_threshold, params.p_threshold, params.q_threshold))
        for b in blooms
    ]
    for dists, eps in ((prr, params.epsilon_inf), (one, params.epsilon_one)):
        for d in dists:
            assert sum(d) == 1
        worst = _max_log_ratio(dists)
        if math.isinf(eps):
            continue
        assert worst <= eps * (1 + 1e-12) + 1e-12
        if k >= 2 * h and len(blooms) > 1:
            assert worst == pytest.approx(eps, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("f", "p", "q"), NOISE)
def test_exact_privacy_basic_and_boolean(f: float, p: float, q: float) -> None:
    basic = BasicRapporParams(domain=3, f=f, p=p, q=q, allow_f_zero=True)
    boolean = BooleanRapporParams(f=f, p=p, q=q, allow_f_zero=True)
    for params, k, blooms in ((basic, 3, [1, 2, 4]), (boolean, 1, [0, 1])):
        prr = [_dist(b, k, _bit_probs_prr(params.f_threshold)) for b in blooms]
        one = [
            _dist(b, k, _bit_probs_report(params.f_threshold, params.p_threshold, params.q_threshold))
            for b in blooms
        ]
        for dists, eps in ((prr, params.epsilon_inf), (one, params.epsilon_one)):
            worst = _max_log_ratio(dists)
            if math.isinf(eps):
                continue
            assert worst <= eps * (1 + 1e-12) + 1e-12
            assert worst == pytest.approx(eps, rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------------- goodness of fit


def _chi2_pvalue(counts: list[int] | np.ndarray, probs: list[Fraction]) -> float:
    """Chi-square goodness of fit; cells with expected count < 5 are pooled into one cell."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    expected = np.array([float(p) for p in probs]) * n
    small = expected < 5
    obs = list(counts[~small])
    exp = list(expected[~small])
    if small.any():
        obs.append(counts[small].sum())
        exp.append(expected[small].sum())
    obs_a = np.array(obs)
    exp_a = np.array(exp)
    nonzero = exp_a > 0
    assert np.all(obs_a[~nonzero] == 0), "an impossible output occurred"
    if nonzero.sum() <= 1:
        return 1.0  # a deterministic output (e.g. f = 0 PRR): the check above is the whole test
    stat = float((((obs_a - exp_a) ** 2)[nonzero] / exp_a[nonzero]).sum())
    return float(stats.chi2.sf(stat, nonzero.sum() - 1))


GOF_PARAMS = [
    dict(k=4, h=2, f=0.5, p=0.5, q=0.75),
    dict(k=3, h=1, f=0.3, p=0.2, q=0.85),
    dict(k=4, h=2, f=0.0, p=0.25, q=0.75, allow_f_zero=True),
]


@pytest.mark.statistical
@pytest.mark.parametrize("kw", GOF_PARAMS)
def test_gof_prr_over_seeded_secrets(kw: dict[str, float]) -> None:
    """The HMAC-derived PRR, over many seeded secrets, has the exact PRR distribution (chi-square)."""
    params = RapporParams(m=1, **kw)  # type: ignore[arg-type]
    k, h = params.k, params.h
    rng = np.random.default_rng(11)
    n = 20_000
    counts = Counter(
        permanent_response(rng.bytes(32), params, campaign_id="gof", value="v") for _ in range(n)
    )
    bloom = bloom_bits("gof", 0, "v", k, h)
    probs = _dist(bloom, k, _bit_probs_prr(params.f_threshold))
    assert _chi2_pvalue([counts[y] for y in range(1 << k)], probs) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("kw", GOF_PARAMS)
def test_gof_per_report_irr_csprng(kw: dict[str, float]) -> None:
    """Repeated reports of one value (fixed PRR, fresh CSPRNG IRR): each bit Bernoulli(q) where the PRR bit
    is 1 and Bernoulli(p) where it is 0. CSPRNG: false-failure rate 1e-6."""
    params = RapporParams(m=4, **kw)  # type: ignore[arg-type]
    k = params.k
    enc = RapporEncoder(params, campaign_id="gof", secret=SECRET)
    prr = enc.permanent_response("v")
    n = 20_000
    counts = Counter(enc.encode("v").bits for _ in range(n))
    q = Fraction(params.q_threshold, PROB_ONE)
    p = Fraction(params.p_threshold, PROB_ONE)
    assert _chi2_pvalue([counts[y] for y in range(1 << k)], _dist(prr, k, (q, p))) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("kw", GOF_PARAMS)
def test_gof_full_report_fresh_users(kw: dict[str, float]) -> None:
    """One report per fresh (seeded) secret: PRR then CSPRNG IRR has the exact one-report distribution
    (bits Bernoulli(q*) / Bernoulli(p*)). CSPRNG: false-failure rate 1e-6."""
    params = RapporParams(m=1, **kw)  # type: ignore[arg-type]
    k, h = params.k, params.h
    rng = np.random.default_rng(12)
    n = 20_000
    counts = Counter(
        RapporEncoder(params, campaign_id="gof", secret=rng.bytes(32)).encode("v").bits for _ in range(n)
    )
    bloom = bloom_bits("gof", 0, "v", k, h)
    probs = _dist(bloom, k, _bit_probs_report(params.f_threshold, params.p_threshold, params.q_threshold))
    assert _chi2_pvalue([counts[y] for y in range(1 << k)], probs) > ALPHA


def _packed_to_index(bits: np.ndarray) -> np.ndarray:
    """Packed rows (little bit order, <= 16 bits) -> integer outputs."""
    out = np.zeros(bits.shape[0], dtype=np.int64)
    for j in range(bits.shape[1]):
        out |= bits[:, j].astype(np.int64) << (8 * j)
    return out


@pytest.mark.statistical
@pytest.mark.parametrize("kw", GOF_PARAMS)
def test_gof_batch_rappor(kw: dict[str, float]) -> None:
    """Seeded batch: per (label, cohort) the outputs have the exact one-report distribution; cohorts drawn
    by the batch are uniform."""
    params = RapporParams(m=3, **kw)  # type: ignore[arg-type]
    k, h = params.k, params.h
    labels = ["a", "bb", "ccc"]
    n = 60_000
    rng = np.random.default_rng(13)
    values = rng.integers(0, 3, size=n)
    cohorts, bits = encode_batch_rappor(params, campaign_id="gof", values=values, labels=labels, rng=rng)
    assert cohorts.dtype == np.uint32 and bits.dtype == np.uint8 and bits.shape == (n, 1)
    assert _chi2_pvalue(np.bincount(cohorts, minlength=3), [Fraction(1, 3)] * 3) > ALPHA
    ys = _packed_to_index(bits)
    rates = _bit_probs_report(params.f_threshold, params.p_threshold, params.q_threshold)
    pvalues = []
    for li, label in enumerate(labels):
        for c in range(3):
            sel = (values == li) & (cohorts == c)
            probs = _dist(bloom_bits("gof", c, label, k, h), k, rates)
            pvalues.append(_chi2_pvalue(np.bincount(ys[sel], minlength=1 << k), probs))
    assert min(pvalues) > ALPHA / len(pvalues)  # Bonferroni over the 9 groups


@pytest.mark.statistical
def test_gof_batch_basic_and_boolean() -> None:
    rng = np.random.default_rng(14)
    n = 30_000
    basic = BasicRapporParams(domain=3, f=0.3, p=0.2, q=0.85)
    values = rng.integers(0, 3, size=n)
    bits = encode_batch_basic(basic, values, rng)
    assert bits.shape == (n, 1)
    ys = _packed_to_index(bits)
    rates = _bit_probs_report(basic.f_threshold, basic.p_threshold, basic.q_threshold)
    for x in range(3):
        probs = _dist(1 << x, 3, rates)
        assert _chi2_pvalue(np.bincount(ys[values == x], minlength=8), probs) > ALPHA / 5
    boolean = BooleanRapporParams(f=0.5, p=0.25, q=0.75)
    bvals = rng.integers(0, 2, size=n).astype(bool)
    bbits = encode_batch_boolean(boolean, bvals, rng)
    assert bbits.shape == (n, 1)
    rates = _bit_probs_report(boolean.f_threshold, boolean.p_threshold, boolean.q_threshold)
    for x in (0, 1):
        probs = _dist(x, 1, rates)
        assert _chi2_pvalue(np.bincount(bbits[bvals == bool(x), 0], minlength=2), probs) > ALPHA / 5


@pytest.mark.statistical
def test_gof_per_report_basic_and_boolean_csprng() -> None:
    """CSPRNG per-report path (false-failure rate <= 1e-6 per assertion, Bonferroni-adjusted)."""
    basic = BasicRapporParams(domain=["x", "y", "z"], f=0.3, p=0.2, q=0.85)
    enc = BasicRapporEncoder(basic, campaign_id="gof", secret=SECRET)
    q = Fraction(basic.q_threshold, PROB_ONE)
    p = Fraction(basic.p_threshold, PROB_ONE)
    for label in ("x", "z"):
        prr = enc.permanent_response(label)
        counts = Counter(enc.encode(label) for _ in range(20_000))
        assert _chi2_pvalue([counts[y] for y in range(8)], _dist(prr, 3, (q, p))) > ALPHA / 3
    boolean = BooleanRapporParams(f=0.5, p=0.25, q=0.75)
    benc = BooleanRapporEncoder(boolean, campaign_id="gof", secret=SECRET)
    prr = benc.permanent_response(True)
    counts = Counter(benc.encode(True) for _ in range(20_000))
    q = Fraction(boolean.q_threshold, PROB_ONE)
    p = Fraction(boolean.p_threshold, PROB_ONE)
    assert _chi2_pvalue([counts[0], counts[1]], _dist(prr, 1, (q, p))) > ALPHA / 3


def _z_bonferroni(items: int) -> float:
    return max(5.0, float(stats.norm.isf(ALPHA / (2 * items))))


@pytest.mark.statistical
def test_per_bit_rates_k128_per_report() -> None:
    """k = 128: each report bit's frequency over repeated reports is within z (Bonferroni over 128 bits) of
    q (PRR bit 1) or p (PRR bit 0). CSPRNG: false-failure rate 1e-6."""
    params = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
    enc = RapporEncoder(params, campaign_id="rates", secret=SECRET)
    prr = enc.permanent_response("google.com")
    n = 20_000
    packed = np.frombuffer(
        b"".join(enc.encode("google.com").to_bytes(128) for _ in range(n)), dtype=np.uint8
    ).reshape(n, 16)
    ones = unpack_bits(packed, 128).sum(axis=0)
    rate = np.array([params.q_effective if (prr >> i) & 1 else params.p_effective for i in range(128)])
    sd = np.sqrt(n * rate * (1 - rate))
    assert np.all(np.abs(ones - n * rate) <= _z_bonferroni(128) * sd)


@pytest.mark.statistical
def test_per_bit_rates_k128_batch() -> None:
    params = RapporParams(k=128, h=2, m=64, f=0.5, p=0.5, q=0.75)
    n = 50_000
    rng = np.random.default_rng(15)
    cohorts_in = np.full(n, 5, dtype=np.int64)
    cohorts, bits = encode_batch_rappor(
        params,
        campaign_id="rates",
        values=np.zeros(n, dtype=np.int64),
        labels=["google.com"],
        rng=rng,
        cohorts=cohorts_in,
    )
    assert np.all(cohorts == 5)
    ones = unpack_bits(bits, 128).sum(axis=0)
    bloom = bloom_bits("rates", 5, "google.com", 128, 2)
    rate = np.array(
        [params.prob_one_if_set if (bloom >> i) & 1 else params.prob_one_if_clear for i in range(128)]
    )
    sd = np.sqrt(n * rate * (1 - rate))
    assert np.all(np.abs(ones - n * rate) <= _z_bonferroni(128) * sd)


# ----------------------------------------------------------------- exact (noise-free) batch checks


def test_batch_bloom_is_exact_without_noise() -> None:
    """With f = 0, p = 0, q = 1 a report is its Bloom filter: the batch Bloom table must match
    bloom_bits exactly, in both the dense and the sorting code paths."""
    params = RapporParams(k=33, h=3, m=64, f=0.0, p=0.0, q=1.0, allow_f_zero=True)
    rng = np.random.default_rng(3)
    for n_labels in (5, 70_000):  # 70_000 * 64 > 2**22: the np.unique path
        labels = [f"label-{i}-ü" for i in range(n_labels)]
        values = rng.integers(0, n_labels, size=500)
        cohorts, bits = encode_batch_rappor(
            params, campaign_id="exact", values=values, labels=labels, rng=rng
        )
        assert bits.shape == (500, 5)
        for row in range(500):
            expected = bloom_bits("exact", int(cohorts[row]), labels[int(values[row])], 33, 3)
            assert int.from_bytes(bits[row].tobytes(), "little") == expected
    enc = RapporEncoder(params, campaign_id="exact", secret=SECRET)
    assert enc.encode("label-1-ü").bits == bloom_bits("exact", enc.cohort, "label-1-ü", 33, 3)


def test_batch_basic_and_boolean_exact_without_noise() -> None:
    rng = np.random.default_rng(4)
    basic = BasicRapporParams(domain=19, f=0.0, p=0.0, q=1.0, allow_f_zero=True)
    values = rng.integers(0, 19, size=200)
    bits = encode_batch_basic(basic, values, rng)
    expected = np.zeros((200, 19), dtype=np.uint8)
    expected[np.arange(200), values] = 1
    assert np.array_equal(bits, pack_bits(expected))
    boolean = BooleanRapporParams(f=0.0, p=0.0, q=1.0, allow_f_zero=True)
    bvals = rng.integers(0, 2, size=200)
    assert np.array_equal(encode_batch_boolean(boolean, bvals, rng)[:, 0], bvals)
    assert np.array_equal(encode_batch_boolean(boolean, bvals.astype(bool), rng)[:, 0], bvals)
    benc = BooleanRapporEncoder(boolean, campaign_id="b", secret=SECRET)
    assert (benc.encode(False), benc.encode(True)) == (0, 1)
    enc = BasicRapporEncoder(basic, campaign_id="b", secret=SECRET)
    assert [enc.encode(i) for i in range(19)] == [1 << i for i in range(19)]


def test_batch_is_reproducible_with_a_seed() -> None:
    params = RapporParams(k=64, h=2, m=16)
    labels = ["a", "b", "c"]
    values = np.array([0, 1, 2, 2, 1, 0])
    a = encode_batch_rappor(
        params, campaign_id="c", values=values, labels=labels, rng=np.random.default_rng(9)
    )
    b = encode_batch_rappor(
        params, campaign_id="c", values=values, labels=labels, rng=np.random.default_rng(9)
    )
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_empty_batch() -> None:
    params = RapporParams(k=13, h=2, m=4)
    cohorts, bits = encode_batch_rappor(
        params,
        campaign_id="c",
        values=np.zeros(0, dtype=np.int64),
        labels=["a"],
        rng=np.random.default_rng(0),
    )
    assert cohorts.shape == (0,) and bits.shape == (0, 2)


# ------------------------------------------------------------------------------ randomness policy


def test_per_report_path_ignores_global_random_state(monkeypatch: pytest.MonkeyPatch) -> None:
    params = RapporParams(k=128, h=2, m=64)
    enc = RapporEncoder(params, campaign_id="c", secret=SECRET)
    benc = BasicRapporEncoder(BasicRapporParams(domain=70), campaign_id="c", secret=SECRET)

    def draw() -> list[int]:
        random.seed(0)
        np.random.seed(0)  # noqa: NPY002 - the point is that this global state is ignored
        return [enc.encode("v").bits for _ in range(4)] + [benc.encode(3) for _ in range(4)]

    assert draw() != draw()  # equal only if 8 CSPRNG draws of >= 70 bits all repeat

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("global random state used")

    for name in ("random", "getrandbits", "randbytes", "randint", "choice", "seed"):
        monkeypatch.setattr(random, name, forbidden)
    for name in ("random", "rand", "randint", "bytes", "default_rng", "seed"):
        monkeypatch.setattr(np.random, name, forbidden)
    enc2 = RapporEncoder(params, campaign_id="c", secret=ClientSecret.generate())
    enc2.encode("v")
    enc2.encode("w")
    BooleanRapporEncoder(BooleanRapporParams(), campaign_id="c", secret=SECRET).encode(True)


def test_import_does_not_import_numpy() -> None:
    code = (
        "import sys\n"
        "from ldp_client.mechanisms.rappor import RapporEncoder, BasicRapporEncoder, BooleanRapporEncoder\n"
        "from ldp_client.secret import ClientSecret\n"
        "from ldp_client.params import RapporParams, BasicRapporParams, BooleanRapporParams\n"
        "s = ClientSecret.generate()\n"
        "RapporEncoder(RapporParams(), campaign_id='c', secret=s).encode('x').to_bytes(128)\n"
        "BasicRapporEncoder(BasicRapporParams(domain=3), campaign_id='c', secret=s).encode(1)\n"
        "BooleanRapporEncoder(BooleanRapporParams(), campaign_id='c', secret=s).encode(True)\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------------------------------ any k and h


@pytest.mark.parametrize(
    ("k", "h"), [(1, 1), (16, 16), (2, 2), (33, 3), (64, 16), (513, 2), (4096, 16), (4096, 1)]
)
@pytest.mark.parametrize("f", [0.5, 0.3])
def test_any_k_and_h(k: int, h: int, f: float) -> None:
    params = RapporParams(k=k, h=h, m=7, f=f, p=0.35, q=0.65)
    enc = RapporEncoder(params, campaign_id="wide", secret=SECRET)
    for value in ("a", "ü" * 300, ""):
        report = enc.encode(value)
        assert 0 <= report.bits < (1 << k)
        assert len(report.to_bytes(k)) == (k + 7) // 8
        assert RapporReport.from_bytes(report.to_bytes(k), k=k, cohort=report.cohort) == report
        positions = bloom_positions("wide", enc.cohort, value, k, h)
        assert len(positions) == h and all(0 <= j < k for j in positions)
        bloom = bloom_bits("wide", enc.cohort, value, k, h)
        ref = ref_prr(
            SECRET, b"ldp-client/rappor/prr/v1", "wide", value.encode(), k, params.f_threshold, bloom
        )
        assert enc.permanent_response(value) == ref
    _, bits = encode_batch_rappor(
        params,
        campaign_id="wide",
        values=np.array([0, 1, 0]),
        labels=["a", "b"],
        rng=np.random.default_rng(1),
    )
    assert bits.shape == (3, (k + 7) // 8)
    if k % 8:
        assert np.all(bits[:, -1] >> (k % 8) == 0)


def test_report_to_bytes_bit_order() -> None:
    r = RapporReport(cohort=0, bits=(1 << 0) | (1 << 9) | (1 << 32))
    assert r.to_bytes(33) == bytes([1, 2, 0, 0, 1])
    with pytest.raises(InvalidReportError, match="bits="):
        r.to_bytes(32)
    with pytest.raises(InvalidParameterError, match="k="):
        r.to_bytes(0)
    with pytest.raises(InvalidReportError, match="bits="):
        RapporReport.from_bytes(bytes([1, 2, 0, 0, 2]), k=33, cohort=0)  # padding bit set
    with pytest.raises(InvalidReportError, match="bits="):
        RapporReport.from_bytes(bytes(4), k=33, cohort=0)
    with pytest.raises(InvalidReportError, match="cohort="):
        RapporReport.from_bytes(bytes(5), k=33, cohort=-1)


# ------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("bad", [123, None, b"bytes", 1.5, "\ud800", "ok\udfffno", ["a"]])
def test_encode_rejects_bad_values(bad: object) -> None:
    enc = RapporEncoder(RapporParams(k=16, h=2, m=4), campaign_id="c", secret=SECRET)
    with pytest.raises(DomainError, match="value="):
        enc.encode(bad)  # type: ignore[arg-type]
    with pytest.raises(DomainError, match="value="):
        bloom_positions("c", 0, bad, 16, 2)  # type: ignore[arg-type]
    assert enc.memo_info().currsize == 0  # nothing was memoized


def test_basic_and_boolean_reject_out_of_domain() -> None:
    benc = BasicRapporEncoder(BasicRapporParams(domain=["x", "y"]), campaign_id="c", secret=SECRET)
    for bad in ("w", 0, None):
        with pytest.raises(DomainError, match="value="):
            benc.encode(bad)  # type: ignore[arg-type]
    ienc = BasicRapporEncoder(BasicRapporParams(domain=4), campaign_id="c", secret=SECRET)
    for bad in (4, -1, "1", True, 1.0):
        with pytest.raises(DomainError, match="value="):
            ienc.encode(bad)  # type: ignore[arg-type]
    boolenc = BooleanRapporEncoder(BooleanRapporParams(), campaign_id="c", secret=SECRET)
    for bad in (1, 0, "True", None, np.bool_(True)):
        with pytest.raises(DomainError, match="value="):
            boolenc.encode(bad)  # type: ignore[arg-type]


def test_constructor_rejects_bad_arguments() -> None:
    params = RapporParams(k=16, h=2, m=4)
    with pytest.raises(InvalidParameterError, match="campaign_id="):
        RapporEncoder(params, campaign_id=5, secret=SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="campaign_id="):
        RapporEncoder(params, campaign_id="bad\ud800", secret=SECRET)
    with pytest.raises(InvalidParameterError, match="secret="):
        RapporEncoder(params, campaign_id="c", secret=bytes(31))
    with pytest.raises(InvalidParameterError, match="secret="):
        RapporEncoder(params, campaign_id="c", secret="not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="params="):
        RapporEncoder(BooleanRapporParams(), campaign_id="c", secret=SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="params="):
        BasicRapporEncoder(params, campaign_id="c", secret=SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="params="):
        BooleanRapporEncoder(params, campaign_id="c", secret=SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="memo_size="):
        RapporEncoder(params, campaign_id="c", secret=SECRET, memo_size=0)
    with pytest.raises(InvalidParameterError, match="m="):
        cohort_of(SECRET, 0)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("c", 0, "v", 0, 2), "k="),
        (("c", 0, "v", 4097, 2), "k="),
        (("c", 0, "v", 16, 0), "h="),
        (("c", 0, "v", 16, 17), "h="),
        (("c", -1, "v", 16, 2), "cohort="),
        (("c", 1 << 16, "v", 16, 2), "cohort="),
        ((7, 0, "v", 16, 2), "campaign_id="),
    ],
)
def test_bloom_positions_rejects_bad_arguments(args: tuple[object, ...], field: str) -> None:
    with pytest.raises(InvalidParameterError, match=field):
        bloom_positions(*args)  # type: ignore[arg-type]


def test_batch_rejects_bad_arguments() -> None:
    params = RapporParams(k=16, h=2, m=4)
    rng = np.random.default_rng(0)
    ok = np.array([0, 1])
    with pytest.raises(DomainError, match="values="):
        encode_batch_rappor(params, campaign_id="c", values=np.array([0, 2]), labels=["a", "b"], rng=rng)
    with pytest.raises(DomainError, match="values="):
        encode_batch_rappor(params, campaign_id="c", values=np.array([-1]), labels=["a", "b"], rng=rng)
    with pytest.raises(InvalidParameterError, match="values="):
        encode_batch_rappor(params, campaign_id="c", values=np.array([0.0]), labels=["a", "b"], rng=rng)
    with pytest.raises(InvalidParameterError, match="values="):
        encode_batch_rappor(params, campaign_id="c", values=np.zeros((2, 2), int), labels=["a"], rng=rng)
    with pytest.raises(DomainError, match="cohorts="):
        encode_batch_rappor(
            params, campaign_id="c", values=ok, labels=["a", "b"], rng=rng, cohorts=np.array([0, 4])
        )
    with pytest.raises(InvalidParameterError, match="cohorts="):
        encode_batch_rappor(
            params, campaign_id="c", values=ok, labels=["a", "b"], rng=rng, cohorts=np.array([0])
        )
    with pytest.raises(InvalidParameterError, match="labels="):
        encode_batch_rappor(params, campaign_id="c", values=ok, labels="ab", rng=rng)
    with pytest.raises(InvalidParameterError, match="labels="):
        encode_batch_rappor(params, campaign_id="c", values=ok, labels=[], rng=rng)
    with pytest.raises(DomainError, match="labels="):
        encode_batch_rappor(params, campaign_id="c", values=ok, labels=["a", "\ud800"], rng=rng)
    with pytest.raises(InvalidParameterError, match="campaign_id="):
        encode_batch_rappor(params, campaign_id=None, values=ok, labels=["a", "b"], rng=rng)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="params="):
        encode_batch_rappor(BooleanRapporParams(), campaign_id="c", values=ok, labels=["a", "b"], rng=rng)  # type: ignore[arg-type]
    with pytest.raises(DomainError, match="values="):
        encode_batch_basic(BasicRapporParams(domain=3), np.array([3]), rng)
    with pytest.raises(InvalidParameterError, match="params="):
        encode_batch_basic(params, ok, rng)  # type: ignore[arg-type]
    with pytest.raises(DomainError, match="values="):
        encode_batch_boolean(BooleanRapporParams(), np.array([2]), rng)
    with pytest.raises(InvalidParameterError, match="values="):
        encode_batch_boolean(BooleanRapporParams(), np.array([0.5]), rng)


def test_module_exports() -> None:
    for name in rappor.__all__:
        assert hasattr(rappor, name)
