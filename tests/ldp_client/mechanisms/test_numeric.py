"""Tests of the numeric mechanisms' parameters and encoders (ldp_client.numeric_params, mechanisms.numeric).

Exact tests enumerate the implemented output distributions (from the parameters' integers) and check the
privacy bound for every pair of inputs, unbiasedness and the variance formulas; branch boundaries are
checked by feeding chosen random words; seeded goodness-of-fit tests compare both encoders with the exact
distributions (chi-square at alpha = 1e-6).
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ldp_client import randomness
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning
from ldp_client.mechanisms.numeric import (
    DuchiEncoder,
    HybridEncoder,
    LaplaceEncoder,
    MultidimEncoder,
    PiecewiseEncoder,
    SREncoder,
    exact_distribution,
    numeric_encoder,
)
from ldp_client.numeric_params import (
    HYBRID_EPSILON_STAR,
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    PiecewiseParams,
    SRParams,
    default_k,
    laplace_table,
    make_numeric_params,
    piecewise_design,
)
from ldp_client.params import MECHANISM_NAMES, make_params

ALPHA = 1e-6
# The reported epsilon is a float rounded up by two ulps; compare exact ratios with exp(eps) up to float
# rounding of exp itself.
REL = 1e-12
EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]

OneDim = DuchiParams | SRParams | PiecewiseParams | HybridParams | LaplaceParams


def _small_params() -> list[OneDim]:
    """Parameters small enough to enumerate every code."""
    out: list[OneDim] = []
    for e in (0.5, 1.0, 3.0):
        out.append(DuchiParams.from_epsilon(-1.0, 1.0, e))
        out.append(SRParams.from_epsilon(0.0, 10.0, e))
        out.append(PiecewiseParams.from_epsilon(0.0, 1.0, e, cells=12))
        out.append(HybridParams.from_epsilon(-5.0, 5.0, e, cells=10))
    out.append(HybridParams.from_epsilon(0.0, 1.0, 0.4, cells=10))  # below eps*: pure duchi (alpha = 0)
    out.append(PiecewiseParams(lo=0.0, hi=1.0, cells=7, window=2, high_probability=0.5))
    out.append(LaplaceParams.from_epsilon(0.0, 1.0, 1.0, grid=4))
    out.append(LaplaceParams.from_epsilon(-2.0, 2.0, 3.0, grid=3))
    return out


SMALL = _small_params()


def _inputs(params: OneDim) -> list[float]:
    """Positions covering both rounding neighbours of every grid point and the two ends."""
    grid = (params.cells - params.window) if isinstance(params, PiecewiseParams | HybridParams) else 4
    if isinstance(params, LaplaceParams):
        grid = params.grid
    pts = {0.0, 1.0, 0.5, 1 / 3, 2**-40, 1 - 2**-40}
    pts |= {i / grid for i in range(grid + 1)}
    pts |= {(i + 0.37) / grid for i in range(grid)}
    return sorted(p for p in pts if 0.0 <= p <= 1.0)


def _max_ratio(rows: Sequence[dict[int, Fraction]]) -> Fraction:
    codes = set().union(*rows)
    best = Fraction(1)
    for c in codes:
        probs = [r.get(c, Fraction(0)) for r in rows]
        hi, lo = max(probs), min(probs)
        if hi == 0:  # impossible under every input (hybrid's piecewise codes when alpha = 0)
            continue
        assert lo > 0, f"code {c} impossible under some input: infinite privacy loss"
        best = max(best, hi / lo)
    return best


# ------------------------------------------------------------------------------------ exact privacy


@pytest.mark.parametrize("params", SMALL, ids=repr)
def test_exact_privacy_by_enumeration(params: OneDim) -> None:
    rows = [exact_distribution(params, s) for s in _inputs(params)]
    for r in rows:
        assert sum(r.values()) == 1
        assert min(r.values()) >= 0
    ratio = _max_ratio(rows)
    bound = math.exp(params.epsilon)
    assert float(ratio) <= bound * (1 + REL)
    # Tight: the ends of the range (or the grid) attain the bound.
    assert float(ratio) >= bound * (1 - 1e-9)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("cls", [DuchiParams, SRParams])
def test_two_point_privacy_over_all_inputs(cls: type[DuchiParams | SRParams], eps: float) -> None:
    # P(1 | s) is monotone in s (floor of a non-decreasing product), so the extreme ratios are at s = 0, 1;
    # the bound must hold for all t, t' including rounding: check ends plus many interior positions.
    params = cls.from_epsilon(0.0, 1.0, eps)
    grid = [*np.random.default_rng(5).random(200).tolist(), 0.0, 1.0, 2**-60, 1 - 2**-53]
    rows = [exact_distribution(params, s) for s in grid]
    assert float(_max_ratio(rows)) <= math.exp(params.epsilon) * (1 + REL)
    assert params.epsilon <= eps
    assert params.epsilon >= eps - 1e-6 * max(1.0, eps)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_piecewise_epsilon_formula_matches_enumeration_at_default_cells(eps: float) -> None:
    # At G = 2**20 every code cannot be listed; the distribution has two levels, P/M in the window and
    # (1-P)/(G-M) outside, so the ratio is exactly P (G-M) / ((1-P) M) (the epsilon the class reports).
    p = PiecewiseParams.from_epsilon(0.0, 1.0, eps)
    g, m, t = p.cells, p.window, p.high_threshold
    ratio = Fraction(t, PROB_ONE) / m / (Fraction(PROB_ONE - t, PROB_ONE) / (g - m))
    assert math.isclose(math.log(ratio), p.epsilon, rel_tol=1e-12)
    assert p.epsilon <= eps


def test_multidim_privacy_by_enumeration() -> None:
    base = PiecewiseParams.from_epsilon(0.0, 1.0, 2.5, cells=8)
    params = MultidimParams(ranges=((0.0, 1.0), (-1.0, 1.0)), k=2, base=base)
    assert params.epsilon == pytest.approx(2 * base.epsilon)
    # k = D: every user reports both attributes; P(output) = product of the two base distributions.
    vals = [0.0, 0.4, 1.0]
    rows = []
    for v0 in vals:
        for v1 in vals:
            d0 = exact_distribution(base, v0)
            d1 = exact_distribution(base, (v1 + 1) / 2)
            rows.append({(a, b): pa * pb for a, pa in d0.items() for b, pb in d1.items()})
    codes = set().union(*rows)
    ratio = max(max(r[c] for r in rows) / min(r[c] for r in rows) for c in codes)
    assert float(ratio) <= math.exp(params.epsilon) * (1 + REL)


def test_multidim_k1_privacy_is_the_base_one() -> None:
    base = HybridParams.from_epsilon(0.0, 1.0, 1.0, cells=8)
    params = MultidimParams(ranges=((0.0, 1.0),) * 3, k=1, base=base)
    # Output (attribute a, code c) has probability (1/3) P_base(c | x_a): the 1/3 cancels in every ratio.
    rows = []
    for xs in ([0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.3, 1.0, 0.6]):
        rows.append(
            {(a, c): Fraction(1, 3) * p for a in range(3) for c, p in exact_distribution(base, xs[a]).items()}
        )
    codes = set().union(*rows)
    ratio = max(max(r[c] for r in rows) / min(r[c] for r in rows) for c in codes)
    assert float(ratio) <= math.exp(params.epsilon) * (1 + REL)


def test_laplace_epsilon_is_the_table_maximum() -> None:
    # Brute force over every output and every pair of grid inputs, including the clamped ends.
    params = LaplaceParams.from_epsilon(0.0, 1.0, 2.0, grid=3)
    table = params.table
    k, r, half = params.grid, table.reach, table.half_width
    rows = []
    for i in range(k + 1):
        row: dict[int, int] = {}
        for z in range(-half, half + 1):
            code = min(max(i + z, -r), k + r) + r
            row[code] = row.get(code, 0) + table.weight(z)
        rows.append(row)
    best = max(max(row[c] for row in rows) / Fraction(min(row[c] for row in rows)) for c in rows[0])
    assert math.isclose(math.log(best), params.epsilon, rel_tol=1e-12)
    assert sum(table.weight(z) for z in range(-half, half + 1)) == 1 << 64


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 4.0, 10.0])
def test_laplace_from_epsilon_rounds_toward_privacy(eps: float) -> None:
    params = LaplaceParams.from_epsilon(0.0, 1.0, eps)
    assert params.epsilon <= eps
    # Within the project's tolerance (no PrivacyQuantizationWarning): alpha = A/2**32 moves epsilon in
    # steps of about K 2**-32 = 2.4e-7.
    assert params.epsilon >= eps - 1e-6 * max(1.0, eps)
    a = float(params.alpha)
    # Discrete Laplace variance ~ 8/eps^2 on [-1, 1], i.e. 2/eps^2 on positions.
    assert float(params.variance_s(0.0)) == pytest.approx(2.0 / eps**2, rel=0.01)
    # The table's integer rounding adds a little: alpha is raised to compensate (at most ~1e-4 of eps).
    assert params.grid * math.log(1 / a) == pytest.approx(eps, rel=1e-4)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("cls", [PiecewiseParams, HybridParams])
def test_piecewise_family_rounds_toward_privacy(
    cls: type[PiecewiseParams | HybridParams], eps: float
) -> None:
    params = cls.from_epsilon(0.0, 1.0, eps)
    assert params.epsilon <= eps
    assert params.epsilon >= eps - 1e-6 * max(1.0, eps)


def test_hybrid_mixing_follows_the_paper() -> None:
    assert pytest.approx(0.6094, abs=1e-4) == HYBRID_EPSILON_STAR
    low = HybridParams.from_epsilon(0.0, 1.0, 0.5)
    assert low.mix_threshold == 0
    assert low.epsilon == low.duchi_epsilon  # the piecewise branch is never taken
    high = HybridParams.from_epsilon(0.0, 1.0, 2.0)
    assert high.alpha == pytest.approx(1 - math.exp(-1.0), abs=1e-9)


# ----------------------------------------------------------------------------- unbiasedness, variance


def _moments(params: OneDim, s: float) -> tuple[Fraction, Fraction]:
    dist = exact_distribution(params, s)
    layout = params.layout
    mean = sum(p * layout.s_hat(c) for c, p in dist.items())
    var = sum(p * (layout.s_hat(c) - mean) ** 2 for c, p in dist.items())
    return Fraction(mean), Fraction(var)


@pytest.mark.parametrize("params", SMALL, ids=repr)
def test_exactly_unbiased_and_variance_formula(params: OneDim) -> None:
    for s in _inputs(params):
        mean, var = _moments(params, s)
        # The only bias is the float64 position and the 2**-63/2**-64 rounding coins (module docstring):
        # far below 1e-9 of the range.
        assert abs(float(mean) - s) < 1e-12
        rel = 1e-6 if isinstance(params, LaplaceParams) else 1e-9
        assert float(params.variance_s(s)) == pytest.approx(float(var), rel=rel)
        assert float(var) <= params.max_variance_s * (1 + 1e-9)


def test_laplace_clamped_ends_keep_the_estimate_unbiased() -> None:
    # With the end codes decoded as their conditional means, the bias is far below 1e-9 of the range even
    # at the ends of the range, where clamping is most likely.
    params = LaplaceParams.from_epsilon(0.0, 1.0, 0.5, grid=2)
    for s in (0.0, 1.0, 0.5):
        mean, _ = _moments(params, s)
        assert abs(float(mean) - s) < 1e-12


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_discrete_piecewise_tends_to_the_papers_variance(eps: float) -> None:
    # Wang et al.: Var(t_hat | t) = t^2/(e^(eps/2)-1) + (e^(eps/2)+3)/(3(e^(eps/2)-1)^2) on [-1, 1].
    p = PiecewiseParams.from_epsilon(0.0, 1.0, eps)  # G = 2**20 cells
    h = math.exp(eps / 2)
    for t in (-1.0, -0.3, 0.0, 0.8, 1.0):
        paper = t * t / (h - 1) + (h + 3) / (3 * (h - 1) ** 2)
        assert 4 * float(p.variance_s((t + 1) / 2)) == pytest.approx(paper, rel=2e-4)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_worst_case_variances_match_the_reference(eps: float) -> None:
    # ldp-formulas.md §3 worst cases on [-1, 1] (t-scale variance = 4 x position variance).
    e = math.exp(eps)
    duchi = 4 * DuchiParams.from_epsilon(0.0, 1.0, eps).max_variance_s
    assert duchi == pytest.approx(((e + 1) / (e - 1)) ** 2, rel=1e-6)
    sr = 4 * SRParams.from_epsilon(0.0, 1.0, eps).max_variance_s
    assert sr == pytest.approx(((e + 1) / (e - 1)) ** 2, rel=1e-6)
    h = math.exp(eps / 2)
    pm = 4 * float(PiecewiseParams.from_epsilon(0.0, 1.0, eps).variance_s(1.0))
    assert pm == pytest.approx(4 * h / (3 * (h - 1) ** 2), rel=2e-4)
    lap = 4 * float(LaplaceParams.from_epsilon(0.0, 1.0, eps).variance_s(0.0))
    assert lap == pytest.approx(8 / eps**2, rel=1e-3)


# ------------------------------------------------------------------------------ branch boundaries


class WordFeed:
    """A fake byte source returning the given byte strings in order (and recording the sizes asked)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = list(chunks)
        self.sizes: list[int] = []

    def __call__(self, n: int) -> bytes:
        self.sizes.append(n)
        chunk = self.chunks.pop(0)
        assert len(chunk) == n
        return chunk


def _le(*words: tuple[int, int]) -> bytes:
    """Concatenate (value, nbytes) little-endian words."""
    return b"".join(v.to_bytes(n, "little") for v, n in words)


def test_duchi_branch_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    params = DuchiParams.from_epsilon(0.0, 1.0, 1.0)
    enc = DuchiEncoder(params)
    w = params.one_probability_word(0.25)
    feed = WordFeed([_le((w - 1, 8)), _le((w, 8))])
    monkeypatch.setattr(randomness, "_source", feed)
    assert enc.encode(0.25) == 1
    assert enc.encode(0.25) == 0
    assert feed.sizes == [8, 8]


def test_sr_branch_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    params = SRParams.from_epsilon(0.0, 4.0, 1.0)
    enc = SREncoder(params)
    k = int(0.25 * 2.0**63)  # x = 1.0 is position 0.25
    t = params.truth_threshold
    feed = WordFeed(
        [
            _le(((k - 1) << 1, 8), (t - 1, 4)),  # rounds up, kept -> 1
            _le((k << 1, 8), (t - 1, 4)),  # rounds down, kept -> 0
            _le(((k - 1) << 1, 8), (t, 4)),  # rounds up, flipped -> 0
            _le((k << 1 | 1, 8), (t, 4)),  # rounds down (low bit ignored), flipped -> 1
        ]
    )
    monkeypatch.setattr(randomness, "_source", feed)
    assert [enc.encode(1.0) for _ in range(4)] == [1, 0, 0, 1]


def test_piecewise_branch_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    params = PiecewiseParams(lo=0.0, hi=1.0, cells=10, window=3, high_probability=0.75)
    enc = PiecewiseEncoder(params)
    s = 0.55  # start position 0.55 * 7 = 3.85: floor 3, up w.p. 0.85
    up = int((0.55 * 7 - 3) * 2.0**64)
    t = params.high_threshold
    # Lemire words: w -> floor(w n / 2**32), rejected when (w n mod 2**32) < 2**32 mod n (1 for n = 3,
    # 4 for n = 7), so word 0 would be rejected; word 1 is the first accepted one.
    feed = WordFeed(
        [
            _le((up - 1, 8), (t - 1, 4), (1, 4)),  # start 4, window, first cell -> 4
            _le((up, 8), (t - 1, 4), (0xFFFFFFFF, 4)),  # start 3, window, last cell -> 5
            _le((up, 8), (t, 4), (1, 4)),  # start 3, outside, other 0 -> 0
            _le((up, 8), (t, 4), (0xFFFFFFFF, 4)),  # start 3, outside, other 6 -> 6 + 3 = 9
            _le((up - 1, 8), (t, 4), (3 * (1 << 32) // 7 + 2, 4)),  # start 4, outside, other 3 -> 3
            _le((up, 8), (t, 4), (0, 4)),  # word 0 is rejected: one more 4-byte word is drawn ...
            _le((2 * (1 << 32) // 7 + 2, 4)),  # ... other 2 -> 2 (start 3)
        ]
    )
    monkeypatch.setattr(randomness, "_source", feed)
    assert [enc.encode(s) for _ in range(6)] == [4, 5, 0, 9, 3, 2]
    assert feed.sizes == [16] * 6 + [4]


def test_hybrid_branch_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    params = HybridParams.from_epsilon(0.0, 1.0, 2.0, cells=10)
    enc = HybridEncoder(params)
    mix = params.mix_threshold
    w = params.one_probability_word(0.5)
    feed = WordFeed(
        [
            _le((mix, 4), (w - 1, 8), (0, 8)),  # duchi, +C
            _le((mix, 4), (w, 8), (0, 8)),  # duchi, -C
            _le((mix - 1, 4), (0, 8), (0, 4), (1, 4)),  # piecewise: window coin 0 < T, first window cell
        ]
    )
    monkeypatch.setattr(randomness, "_source", feed)
    out = [enc.encode(0.5) for _ in range(3)]
    assert out[:2] == [params.cells + 1, params.cells]
    assert 0 <= out[2] < params.cells


def test_laplace_inverse_cdf_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    params = LaplaceParams.from_epsilon(0.0, 1.0, 1.0, grid=4)
    enc = LaplaceEncoder(params)
    table = params.table
    half, r = table.half_width, table.reach
    cum = table.cumulative
    m = half  # noise z = 0 occupies words [cum[m-1], cum[m])
    feed = WordFeed(
        [
            _le((0, 8), (cum[m - 1], 8)),  # x = 0.5 -> i = 2 exactly; z = 0
            _le((0, 8), (cum[m] - 1, 8)),  # z = 0
            _le((0, 8), (cum[m], 8)),  # z = +1
            _le((0, 8), (0, 8)),  # z = -(R+K): clamped to -R
            _le((0, 8), ((1 << 64) - 1, 8)),  # z = R+K: clamped to K+R
        ]
    )
    monkeypatch.setattr(randomness, "_source", feed)
    out = [enc.encode(0.5) for _ in range(5)]
    assert out == [2 + r, 2 + r, 3 + r, 0, params.grid + 2 * r]


# ---------------------------------------------------------------------------------- goodness of fit


def _chi2(counts: Sequence[int], probs: Sequence[Fraction]) -> float:
    """Chi-square p-value, merging categories with expected counts below 5 into one."""
    n = sum(counts)
    exp = np.array([float(p) * n for p in probs])
    obs = np.array(counts, dtype=np.float64)
    small = exp < 5
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
        if exp[-1] == 0:
            exp, obs = exp[:-1], obs[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _seeded_source(seed: int) -> Callable[[int], bytes]:
    rng = np.random.default_rng(seed)
    return rng.bytes


GOF = [
    DuchiParams.from_epsilon(0.0, 1.0, 1.0),
    SRParams.from_epsilon(0.0, 1.0, 2.0),
    PiecewiseParams.from_epsilon(0.0, 1.0, 1.0, cells=16),
    PiecewiseParams(lo=0.0, hi=1.0, cells=13, window=5, high_probability=0.7),  # Lemire rejection live
    HybridParams.from_epsilon(0.0, 1.0, 2.0, cells=12),
    LaplaceParams.from_epsilon(0.0, 1.0, 2.0, grid=4),
]


@pytest.mark.statistical
@pytest.mark.parametrize("params", GOF, ids=repr)
def test_batch_goodness_of_fit(params: OneDim) -> None:
    rng = np.random.default_rng(20240611)
    enc = numeric_encoder(params)
    n = 200_000
    for s in (0.0, 0.37, 1.0):
        dist = exact_distribution(params, s)
        codes = sorted(dist)
        out = enc.encode_batch(np.full(n, params.lo + s * (params.hi - params.lo)), rng)  # type: ignore[union-attr]
        assert out.dtype == np.uint32
        counts = np.bincount(out, minlength=params.layout.num_codes)
        assert counts.sum() == n
        assert all(counts[c] == 0 for c in range(len(counts)) if c not in dist)
        assert _chi2([int(counts[c]) for c in codes], [dist[c] for c in codes]) > ALPHA


@pytest.mark.statistical
@pytest.mark.parametrize("params", GOF, ids=repr)
def test_per_report_goodness_of_fit(params: OneDim, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CSPRNG is replaced by a seeded byte stream so the test is deterministic; the encoder reads the
    # bytes exactly as it reads os.urandom's.
    monkeypatch.setattr(randomness, "_source", _seeded_source(777))
    enc = numeric_encoder(params)
    n = 40_000
    for s in (0.0, 0.37, 1.0):
        x = params.lo + s * (params.hi - params.lo)
        dist = exact_distribution(params, params.position(x))
        codes = sorted(dist)
        out = [enc.encode(x) for _ in range(n)]
        counts = np.bincount(out, minlength=params.layout.num_codes)
        assert all(counts[c] == 0 for c in range(len(counts)) if c not in dist)
        assert _chi2([int(counts[c]) for c in codes], [dist[c] for c in codes]) > ALPHA


@pytest.mark.statistical
def test_multidim_batch_samples_uniform_subsets_and_base_codes() -> None:
    base = PiecewiseParams.from_epsilon(0.0, 1.0, 2.5, cells=8)
    params = MultidimParams(ranges=((0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 8.0)), k=2, base=base)
    rng = np.random.default_rng(99)
    n = 120_000
    values = np.tile([0.0, 1.0, 4.0, 8.0], (n, 1))  # positions 0, 0.5, 1, 1
    attrs, codes = MultidimEncoder(params).encode_batch(values, rng)
    assert attrs.shape == codes.shape == (n, 2)
    assert (attrs[:, 0] < attrs[:, 1]).all()
    pairs = np.bincount(attrs[:, 0] * 4 + attrs[:, 1], minlength=16)
    observed = [int(pairs[a * 4 + b]) for a in range(4) for b in range(a + 1, 4)]
    assert _chi2(observed, [Fraction(1, 6)] * 6) > ALPHA
    for a, s in enumerate((0.0, 0.5, 1.0, 1.0)):
        got = codes[attrs == a]
        dist = exact_distribution(base, s)
        counts = np.bincount(got, minlength=8)
        assert _chi2([int(counts[c]) for c in range(8)], [dist[c] for c in range(8)]) > ALPHA


@pytest.mark.statistical
def test_multidim_per_report_subsets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(randomness, "_source", _seeded_source(31337))
    base = DuchiParams.from_epsilon(0.0, 1.0, 2.0)
    params = MultidimParams(ranges=((0.0, 1.0),) * 5, k=2, base=base)
    enc = MultidimEncoder(params)
    n = 30_000
    seen = np.zeros(25, dtype=np.int64)
    ones = np.zeros(5, dtype=np.int64)
    for _ in range(n):
        rep = enc.encode([0.0, 0.25, 0.5, 0.75, 1.0])
        assert len(rep) == 2 and rep[0][0] < rep[1][0]
        seen[rep[0][0] * 5 + rep[1][0]] += 1
        for a, c in rep:
            ones[a] += c
    observed = [int(seen[a * 5 + b]) for a in range(5) for b in range(a + 1, 5)]
    assert _chi2(observed, [Fraction(1, 10)] * 10) > ALPHA
    # Each attribute is reported 2n/5 times; its bit is 1 w.p. P(1 | s_a): a binomial z-test at z = 5.
    for a, s in enumerate((0.0, 0.25, 0.5, 0.75, 1.0)):
        p1 = float(exact_distribution(base, s)[1])
        m = int(seen.reshape(5, 5)[a].sum() + seen.reshape(5, 5)[:, a].sum())
        assert abs(ones[a] - m * p1) <= 5 * math.sqrt(m * p1 * (1 - p1))


# ---------------------------------------------------------------- seeded unbiasedness and variance


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["laplace", "duchi", "piecewise", "hybrid", "sr"])
def test_seeded_unbiasedness_and_variance_at_default_sizes(name: str) -> None:
    # Default grid sizes (G = 2**20 cells, K = 1024): mean of the decoded estimates within 5 standard
    # errors of the truth, and the sample variance within 5 of its own standard errors of variance_s.
    params = make_numeric_params(name, epsilon=1.5, fields={"lo": -3.0, "hi": 7.0})
    assert not isinstance(params, MultidimParams)
    rng = np.random.default_rng(4242)
    n = 400_000
    for x in (-3.0, 1.3, 7.0):
        codes = numeric_encoder(params).encode_batch(np.full(n, x), rng)  # type: ignore[union-attr]
        layout = params.layout
        table = np.array([float(layout.s_hat(c)) for c in range(2)]) if layout.num_codes == 2 else None
        if table is not None:
            s_hat = table[codes]
        else:
            s_hat = float(layout.offset) + float(layout.scale) * codes.astype(np.float64)
            for c, v in layout.specials:
                s_hat[codes == c] = float(v)
        s = params.position(x)
        var = float(params.variance_s(s))
        assert abs(s_hat.mean() - s) <= 5 * math.sqrt(var / n)
        # Var of the sample variance ~ (mu4 - var^2)/n; mu4 <= max|s_hat - s|^2 var.
        spread = float(np.max(np.abs(s_hat - s)))
        assert abs(s_hat.var() - var) <= 5 * math.sqrt(spread**2 * var / n) + 1e-12


# --------------------------------------------------------------------------------------- bad inputs


ALL_ENCODERS = [
    numeric_encoder(DuchiParams.from_epsilon(0.0, 1.0, 1.0)),
    numeric_encoder(SRParams.from_epsilon(0.0, 1.0, 1.0)),
    numeric_encoder(PiecewiseParams.from_epsilon(0.0, 1.0, 1.0)),
    numeric_encoder(HybridParams.from_epsilon(0.0, 1.0, 1.0)),
    numeric_encoder(LaplaceParams.from_epsilon(0.0, 1.0, 1.0)),
]


@pytest.mark.parametrize("enc", ALL_ENCODERS, ids=lambda e: e.params.name)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, float("nan"), np.float64("nan")])
def test_nan_and_infinities_always_raise(enc: DuchiEncoder, bad: float) -> None:
    with pytest.raises(DomainError, match="value=") as info:
        enc.encode(bad)
    assert info.value.field == "value"
    with pytest.raises(DomainError, match="finite"):
        enc.encode_batch(np.array([0.5, bad]), np.random.default_rng(0))


@pytest.mark.parametrize("enc", ALL_ENCODERS, ids=lambda e: e.params.name)
@pytest.mark.parametrize("bad", ["0.5", None, True, 1 + 2j, b"1", [0.5]])
def test_non_numbers_raise(enc: DuchiEncoder, bad: object) -> None:
    with pytest.raises(DomainError):
        enc.encode(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["laplace", "duchi", "piecewise", "hybrid", "sr"])
def test_out_of_range_reject_names_the_value(name: str) -> None:
    params = make_numeric_params(name, epsilon=1.0, fields={"lo": 0, "hi": 10, "out_of_range": "reject"})
    enc = numeric_encoder(params)
    for bad in (-0.001, 10.5, 10**400, -(10**400)):
        with pytest.raises(DomainError) as info:
            enc.encode(bad)  # type: ignore[arg-type]
        assert info.value.value == bad
        assert "reject" in str(info.value)
    with pytest.raises(DomainError, match=r"11\.0"):
        enc.encode_batch(np.array([1.0, 11.0, -3.0]), np.random.default_rng(0))  # type: ignore[union-attr]
    enc.encode(0)
    enc.encode(10)  # the ends are in range


@pytest.mark.parametrize("name", ["laplace", "duchi", "piecewise", "hybrid", "sr"])
def test_out_of_range_clamp_equals_the_bound(name: str) -> None:
    params = make_numeric_params(name, epsilon=1.0, fields={"lo": -1, "hi": 1})
    assert not isinstance(params, MultidimParams)
    assert params.position(-5.0) == 0.0 == params.position(-1)
    assert params.position(3) == 1.0 == params.position(1.0)
    assert params.position(10**400) == 1.0
    assert params.positions(np.array([-7.0, 0.0, 9.0])).tolist() == [0.0, 0.5, 1.0]


def test_batch_shape_and_dtype_errors() -> None:
    enc = numeric_encoder(PiecewiseParams.from_epsilon(0.0, 1.0, 1.0))
    rng = np.random.default_rng(0)
    with pytest.raises(DomainError, match="1-D"):
        enc.encode_batch(np.zeros((2, 2)), rng)  # type: ignore[union-attr]
    with pytest.raises(DomainError, match="real numbers"):
        enc.encode_batch(np.array(["a", "b"]), rng)  # type: ignore[union-attr]
    with pytest.raises(InvalidParameterError, match="rng"):
        enc.encode_batch(np.zeros(2), np.random.RandomState(0))  # type: ignore[arg-type,union-attr]
    assert enc.encode_batch(np.zeros(0), rng).shape == (0,)  # type: ignore[union-attr]


def test_multidim_bad_inputs() -> None:
    params = MultidimParams.from_epsilon(((0.0, 1.0), (0.0, 5.0), (-1.0, 1.0)), 1.0, out_of_range="reject")
    enc = MultidimEncoder(params)
    with pytest.raises(DomainError, match="exactly D=3"):
        enc.encode([0.5, 0.5])  # wrong set size
    with pytest.raises(DomainError, match="exactly D=3"):
        enc.encode([0.5, 0.5, 0.5, 0.5])
    with pytest.raises(DomainError, match=r"values\[1\]"):
        enc.encode([0.5, math.nan, 0.5])  # NaN in an attribute, sampled or not
    with pytest.raises(DomainError, match=r"values\[2\]"):
        enc.encode([0.5, 1.0, 1.5])  # out of its own range
    with pytest.raises(DomainError):
        enc.encode("abc")  # type: ignore[arg-type]
    with pytest.raises(DomainError):
        enc.encode(0.5)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    with pytest.raises(DomainError, match="shape"):
        enc.encode_batch(np.zeros((4, 2)), rng)
    with pytest.raises(DomainError, match="finite"):
        enc.encode_batch(np.array([[0.5, 1.0, np.inf]]), rng)
    with pytest.raises(DomainError, match="out_of_range"):
        enc.encode_batch(np.array([[0.5, 6.0, 0.0]]), rng)
    rep = enc.encode([0, 5, -1])  # ints are fine
    assert len(rep) == params.k == 1


def test_param_validation() -> None:
    for kwargs in (
        {"lo": 1.0, "hi": 1.0},
        {"lo": 2.0, "hi": 1.0},
        {"lo": math.nan, "hi": 1.0},
        {"lo": 0.0, "hi": math.inf},
        {"lo": -1e308, "hi": 1e308},
        {"lo": "0", "hi": 1.0},
    ):
        with pytest.raises(InvalidParameterError):
            DuchiParams(low_probability=0.25, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="out_of_range"):
        DuchiParams(lo=0.0, hi=1.0, low_probability=0.25, out_of_range="wrap")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="low_probability"):
        DuchiParams(lo=0.0, hi=1.0, low_probability=0.5)
    with pytest.raises(InvalidParameterError, match="truth_probability"):
        SRParams(lo=0.0, hi=1.0, truth_probability=0.5)
    with pytest.raises(InvalidParameterError, match="window"):
        PiecewiseParams(lo=0.0, hi=1.0, cells=4, window=4, high_probability=0.9)
    with pytest.raises(InvalidParameterError, match="high_probability"):
        PiecewiseParams(lo=0.0, hi=1.0, cells=4, window=2, high_probability=0.5)
    with pytest.raises(InvalidParameterError, match="cells"):
        HybridParams(
            lo=0.0,
            hi=1.0,
            cells=(1 << 32) - 2,
            window=3,
            high_probability=0.9,
            low_probability=0.2,
            mix_probability=0.5,
        )
    with pytest.raises(InvalidParameterError, match="decay"):
        LaplaceParams(lo=0.0, hi=1.0, grid=4, decay=1.0)
    with pytest.raises(InvalidParameterError, match="grid"):
        LaplaceParams(lo=0.0, hi=1.0, grid=1, decay=0.5)
    for bad in (0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            PiecewiseParams.from_epsilon(0.0, 1.0, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="k"):
        MultidimParams(ranges=((0.0, 1.0),), k=2, base=DuchiParams.from_epsilon(0.0, 1.0, 1.0))
    with pytest.raises(InvalidParameterError, match="base"):
        MultidimParams(ranges=((0.0, 1.0),), k=1, base=DuchiParams.from_epsilon(0.0, 2.0, 1.0))
    with pytest.raises(InvalidParameterError, match="base"):
        MultidimParams(ranges=((0.0, 1.0),), k=1, base=SRParams.from_epsilon(0.0, 1.0, 1.0))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match=r"ranges\[1\]"):
        MultidimParams(ranges=((0.0, 1.0), (3.0, 2.0)), k=1, base=DuchiParams.from_epsilon(0.0, 1.0, 1.0))


def test_tiny_epsilon_warns_and_laplace_grid_shrinks() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = LaplaceParams.from_epsilon(0.0, 1.0, 0.02)
    assert p.grid < 1024
    assert p.epsilon <= 0.02
    with pytest.raises(InvalidParameterError, match="grid"):
        LaplaceParams.from_epsilon(0.0, 1.0, 0.001, grid=1024)
    with pytest.warns(PrivacyQuantizationWarning, match="guarantees"):
        p2 = DuchiParams.from_epsilon(0.0, 1.0, 30.0)  # L rounds up to 1: epsilon = ln(2**32 - 1)
    assert p2.epsilon == pytest.approx(math.log(2**32 - 1))


def test_make_params_registry_and_fields() -> None:
    for name in ("laplace", "duchi", "piecewise", "hybrid", "sr", "multidim"):
        assert name in MECHANISM_NAMES
    p = make_params("piecewise", epsilon=2.0, fields={"lo": "0", "hi": "100", "cells": "4096"})
    assert isinstance(p, PiecewiseParams) and p.cells == 4096 and p.hi == 100.0
    p2 = make_params(
        "laplace", epsilon=1.0, fields={"lo": -1, "hi": 1, "grid": "64", "out_of_range": "reject"}
    )
    assert isinstance(p2, LaplaceParams) and p2.grid == 64 and p2.out_of_range == "reject"
    direct = make_params("duchi", fields={"lo": 0, "hi": 1, "low_probability": "0.25"})
    assert isinstance(direct, DuchiParams) and direct.epsilon == pytest.approx(math.log(3))
    md = make_params("multidim", epsilon=6.0, domain=3, fields={"lo": 0, "hi": 1, "base": "hybrid"})
    assert isinstance(md, MultidimParams) and md.k == default_k(6.0, 3) == 2
    md2 = make_params("multidim", epsilon=1.0, fields={"ranges": "0:1,-5:5", "base": "duchi", "k": "2"})
    assert isinstance(md2, MultidimParams) and md2.ranges == ((0.0, 1.0), (-5.0, 5.0)) and md2.k == 2
    with pytest.raises(InvalidParameterError, match="lo"):
        make_params("sr", epsilon=1.0, fields={"hi": 1})
    with pytest.raises(InvalidParameterError, match="param grid"):
        make_params("duchi", epsilon=1.0, fields={"lo": 0, "hi": 1, "grid": 4})
    with pytest.raises(InvalidParameterError, match="domain"):
        make_params("duchi", epsilon=1.0, domain=4, fields={"lo": 0, "hi": 1})
    with pytest.raises(InvalidParameterError, match="out_of_range"):
        make_params("duchi", epsilon=1.0, fields={"lo": 0, "hi": 1, "out_of_range": "nope"})
    with pytest.raises(InvalidParameterError, match="epsilon"):
        make_params("multidim", domain=2, fields={"lo": 0, "hi": 1})


def test_default_k() -> None:
    assert default_k(1.0, 10) == 1
    assert default_k(5.0, 10) == 2
    assert default_k(30.0, 3) == 3


def test_piecewise_design_window_fraction() -> None:
    for eps in (0.5, 1.0, 2.0, 4.0):
        m, _ = piecewise_design(eps, 1 << 20)
        assert m / (1 << 20) == pytest.approx(1 / (math.exp(eps / 2) + 1), abs=1e-6)


def test_laplace_table_is_deterministic_and_cached() -> None:
    a = laplace_table(16, 4_000_000_000)
    assert a is laplace_table(16, 4_000_000_000)
    laplace_table.cache_clear()
    b = laplace_table(16, 4_000_000_000)
    assert a.weights == b.weights and list(a.cumulative) == list(b.cumulative) and a.epsilon == b.epsilon


def test_decode_gives_the_unbiased_value() -> None:
    p = DuchiParams.from_epsilon(10.0, 20.0, 1.0)
    c = float(p.c)
    assert p.decode(1) == pytest.approx(15.0 + 5.0 * c)
    assert p.decode(0) == pytest.approx(15.0 - 5.0 * c)
    with pytest.raises(InvalidParameterError):
        p.decode(2)


# ------------------------------------------------------------------------------- randomness policy


def test_importing_numeric_encoders_does_not_import_numpy() -> None:
    code = (
        "import sys\n"
        "from ldp_client.mechanisms.numeric import numeric_encoder\n"
        "from ldp_client.numeric_params import PiecewiseParams, LaplaceParams, MultidimParams\n"
        "p = PiecewiseParams.from_epsilon(0.0, 1.0, 1.0)\n"
        "numeric_encoder(p).encode(0.3)\n"
        "numeric_encoder(LaplaceParams.from_epsilon(0.0, 1.0, 1.0, grid=16)).encode(0.3)\n"
        "m = MultidimParams.from_epsilon([(0.0, 1.0)] * 3, 6.0)\n"
        "numeric_encoder(m).encode([0.1, 0.2, 0.3])\n"
        "print('numpy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_one_csprng_call_per_report(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []

    def source(n: int) -> bytes:
        sizes.append(n)
        return b"\x5a" * n  # 0x5a5a...: never in a Lemire rejection zone for these small n

    monkeypatch.setattr(randomness, "_source", source)
    for enc, nbytes in zip(ALL_ENCODERS, (8, 12, 16, 20, 16), strict=True):
        sizes.clear()
        enc.encode(0.5)
        assert sizes == [nbytes]


def test_multidim_by_name_without_epsilon_is_the_inverse_of_make_args() -> None:
    # make_params("multidim", ...) takes the mechanism directly (ranges, k, base and the base's fields), so
    # that every multidim campaign can be written back as parameters by name, whatever built it.
    from ldp_client.registry import spec_named

    spec = spec_named("multidim")
    made = [
        MultidimParams.from_epsilon(((0.0, 1.0), (-3.5, 7.0)), 4.0, base="hybrid", cells=64),
        MultidimParams(ranges=((0.0, 1.0),) * 3, k=2, base=DuchiParams(lo=0.0, hi=1.0, low_probability=0.2)),
    ]
    for params in made:
        args = spec.make_args(params)
        assert args.epsilon is None
        assert make_params("multidim", domain=args.domain, fields=dict(args.fields)) == params
    direct = make_params(
        "multidim",
        fields={"ranges": "0:1,-5:5", "k": "1", "base": "piecewise", "cells": "8", "window": "3",
                "high_probability": "0.6"},
    )  # fmt: skip
    assert isinstance(direct, MultidimParams) and direct.base == PiecewiseParams(
        lo=0.0, hi=1.0, cells=8, window=3, high_probability=0.6
    )
    with pytest.raises(InvalidParameterError) as info:
        make_params("multidim", fields={"ranges": "0:1", "base": "duchi"})
    assert info.value.field == "epsilon" and "low_probability" in info.value.allowed
    with pytest.raises(InvalidParameterError) as info:
        make_params("multidim", fields={"ranges": "0:1", "base": "duchi", "k": 1, "cells": 8})
    assert info.value.field == "param cells"
