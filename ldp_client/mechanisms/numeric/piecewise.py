"""Wang et al.'s Piecewise and Hybrid mechanisms (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, ICDE 2019).

``piecewise`` ("Piecewise Mechanism"). The output range is cut into G cells; a window of M consecutive
cells (the paper's high-probability interval [l(t), r(t)], M/G = 1/(e^(eps/2) + 1)) starts at
``L = s (G - M)`` (randomized rounding to an integer with a 64-bit coin). With probability ``P = T/2**32``
the code is a uniform cell of the window, otherwise a uniform cell outside it. epsilon =
ln(P (G - M) / ((1 - P) M)). Estimate ``t_hat = (2 c + 1 - G) / (kappa (G - M))`` with
``kappa = P - (1 - P) M / (G - M)`` (unbiased). As G grows the variance tends to the paper's
t^2/(e^(eps/2)-1) + (e^(eps/2)+3)/(3(e^(eps/2)-1)^2).

``hybrid`` ("Hybrid Mechanism"). Piecewise with probability ``alpha`` (32-bit quantized; the paper's
1 - e^(-eps/2) for eps > eps* = 0.61, else 0), otherwise duchi (:mod:`ldp_client.mechanisms.numeric.duchi`),
both at the full epsilon. Codes ``[0, G)`` are piecewise cells, ``G`` and ``G + 1`` duchi's -C and +C.
epsilon = max of the two; Var = alpha Var_PM + (1-alpha) Var_D.

Per-report bytes: piecewise 16 (bytes 0-7 the window-start rounding coin; 8-11: u32 < T -> window; 12-15
a Lemire uniform cell, inside the window or among the G - M outside it); hybrid 20 (bytes 0-3: u32 below
the alpha threshold -> piecewise with bytes 4-19, else duchi with bytes 4-11). A Lemire rejection
(probability below n / 2**32) draws 4 more bytes. Wire: ``Campaign.piecewise`` / ``Campaign.hybrid`` (lo,
hi, out_of_range and the fields of the classes), uint32 codes in ``piecewise_codes`` / ``hybrid_codes``,
``Report.piecewise_code`` / ``hybrid_code``.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client._prob import (
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.base import (
    DEFAULT_CELLS,
    M32,
    M64,
    MAX_CODES,
    TWO32,
    TWO64F,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    RangeParams,
    check_epsilon,
    check_int,
    log_ratio_up,
    report_quantization,
    round_up,
    rounding,
    u32,
    u64,
    uniform_below,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.mechanisms.numeric.duchi import check_low_probability, duchi_threshold, one_probability_word
from ldp_client.spec import WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "HYBRID_EPSILON_STAR",
    "HYBRID_SPEC",
    "PIECEWISE_SPEC",
    "HybridEncoder",
    "HybridParams",
    "HybridSpec",
    "PiecewiseEncoder",
    "PiecewiseParams",
    "PiecewiseSpec",
    "piecewise_design",
]

HYBRID_EPSILON_STAR = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1 / 3)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1 / 3)
    )
    / 27.0
)
"""eps* = 0.6094...: below it the hybrid mechanism is pure duchi (Wang et al., ICDE 2019, Lemma 5)."""


@dataclass(frozen=True, kw_only=True)
class _PiecewiseCore(RangeParams):
    """The piecewise part shared by :class:`PiecewiseParams` and :class:`HybridParams` (not a mechanism:
    the two are separate classes so that ``isinstance`` never confuses them)."""

    cells: int = DEFAULT_CELLS
    window: int
    high_probability: float
    high_threshold: int = field(init=False, repr=False, compare=False)

    def _init_pm(self, max_cells: int) -> None:
        g = check_int("cells", self.cells, 2, max_cells)
        m = check_int("window", self.window, 1, g - 1)
        t = quantize_probability("high_probability", self.high_probability)
        if not (0 < t < TWO32 and t * (g - m) > (TWO32 - t) * m):
            raise InvalidParameterError(
                "high_probability",
                self.high_probability,
                f"a probability in (M/G, 1) = ({m / g!r}, 1) (the window must be more likely than elsewhere)"
                + rounding_note("high_probability", self.high_probability, t),
            )
        object.__setattr__(self, "high_threshold", t)

    @property
    def piecewise_epsilon(self) -> float:
        """ln(P (G - M) / ((1 - P) M)) with P = T/2**32: the ratio of a window cell to an outside cell."""
        g, m, t = self.cells, self.window, self.high_threshold
        return log_ratio_up(t * (g - m), (TWO32 - t) * m)

    @property
    def kappa(self) -> Fraction:
        """kappa = P - (1 - P) M / (G - M): E[c + 1/2 - G/2 | window start L] = kappa (L + M/2 - G/2)."""
        g, m = self.cells, self.window
        p = Fraction(self.high_threshold, TWO32)
        return p - (1 - p) * Fraction(m, g - m)

    def _pm_affine(self) -> tuple[Fraction, Fraction]:
        # t_hat = (2c + 1 - G) / (kappa (G - M)); s_hat = (t_hat + 1)/2.
        g, m = self.cells, self.window
        den = self.kappa * (g - m)
        return (Fraction(1 - g) / den + 1) / 2, 1 / den

    def _pm_variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Exact Var(s_hat | s) of the discretised piecewise mechanism, including the start rounding.

        With v = c + 1/2 - G/2, a window of M cells centred at mu = L + M/2 - G/2 has mean v^2
        mu^2 + (M^2 - 1)/12 and the whole grid sum G (G^2 - 1)/12, so E[v^2 | L] = P (mu^2 + (M^2-1)/12)
        + (1-P) (G (G^2-1)/12 - M (mu^2 + (M^2-1)/12)) / (G - M); averaging over the rounded start adds
        f (1 - f) to mu^2. Var(t_hat) = 4 E[v^2] / (kappa (G-M))^2 - t^2 and Var(s_hat) = Var(t_hat)/4.
        """
        import numpy as np

        g, m = float(self.cells), float(self.window)
        p = threshold_to_probability(self.high_threshold)
        kappa = float(self.kappa)
        sa = np.asarray(s, dtype=np.float64)
        pos = sa * (g - m)
        f = pos - np.floor(pos)
        mu2 = (pos + m / 2.0 - g / 2.0) ** 2 + f * (1.0 - f)
        win = mu2 + (m * m - 1.0) / 12.0
        ev2 = p * win + (1.0 - p) * (g * (g * g - 1.0) / 12.0 - m * win) / (g - m)
        t = 2.0 * sa - 1.0
        var_t = 4.0 * ev2 / (kappa * (g - m)) ** 2 - t * t
        return np.asarray(var_t / 4.0)

    def _pm_max_variance_s(self) -> float:
        # Increasing in mu^2 (positive coefficient): largest at s = 0 or 1; plus the largest rounding term.
        ends = self._pm_variance_s([0.0, 1.0])
        return float(ends.max()) + 0.25 / float((self.kappa * (self.cells - self.window)) ** 2)


def piecewise_design(epsilon: float, cells: int) -> tuple[int, int]:
    """(window M, threshold T) of the piecewise mechanism at ``epsilon`` with G = ``cells``.

    M = round(G / (e^(eps/2) + 1)) (the paper's high-probability interval, of length C - 1 out of 2C
    with C = (e^(eps/2)+1)/(e^(eps/2)-1)), and T = floor(2**32 P) for the P that makes the ratio
    P (G-M) / ((1-P) M) exactly e^eps, so the effective epsilon never exceeds the request: the largest T
    with T (G-M) / ((2**32 - T) M) <= e^eps, decided exactly.
    """
    eps = check_epsilon(epsilon)
    g = check_int("cells", cells, 2, MAX_CODES - 1)
    half = math.exp(min(eps / 2.0, 700.0))
    m = min(max(1, round(g / (half + 1.0))), g - 1)
    # P / (1 - P) = e^eps M / (G - M), computed as 1 / (1 + (G - M) e^-eps / M) to avoid overflow.
    t = largest_threshold(
        lambda x: ratio_within_exp(x * (g - m), (TWO32 - x) * m, eps),
        math.floor(TWO32 / (1.0 + (g - m) * math.exp(-eps) / m)),
        1,
        TWO32 - 1,
    )
    if t == 0 or not t * (g - m) > (TWO32 - t) * m:
        raise InvalidParameterError("epsilon", epsilon, f"a value representable with cells={g}")
    return m, t


@dataclass(frozen=True, kw_only=True)
class PiecewiseParams(_PiecewiseCore):
    """Wang et al.'s Piecewise Mechanism (ICDE 2019) on a grid of G output cells (module docstring).

    Args:
        lo, hi: the declared range.
        cells: G, the number of output cells (codes 0..G-1), 2 <= G <= 2**32 - 2.
        window: M, the cells of the high-probability window, 1 <= M < G.
        high_probability: P, the probability of a code in the window, quantized to T/2**32; it must favour
            the window: P/M > (1-P)/(G-M). epsilon = ln(P (G-M) / ((1-P) M)).
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "piecewise"

    def __post_init__(self) -> None:
        self._init_range()
        self._init_pm(MAX_CODES - 1)

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> PiecewiseParams:
        """Piecewise at ``epsilon`` with G = ``cells``, rounded toward privacy (:func:`piecewise_design`)."""
        eps = check_epsilon(epsilon)
        m, t = piecewise_design(eps, cells)
        params = cls(
            lo=lo,
            hi=hi,
            cells=cells,
            window=m,
            high_probability=threshold_to_probability(t),
            out_of_range=out_of_range,
        )
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        return self.piecewise_epsilon

    @functools.cached_property
    def layout(self) -> NumericLayout:
        offset, scale = self._pm_affine()
        return NumericLayout(num_codes=self.cells, offset=offset, scale=scale)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Exact Var(s_hat | s) (see ``_PiecewiseCore._pm_variance_s``)."""
        return self._pm_variance_s(s)

    @property
    def max_variance_s(self) -> float:
        return self._pm_max_variance_s()


@dataclass(frozen=True, kw_only=True)
class HybridParams(_PiecewiseCore):
    """Wang et al.'s Hybrid Mechanism (ICDE 2019): piecewise w.p. alpha, else duchi, both at epsilon.

    Args:
        lo, hi, cells, window, high_probability: the piecewise part (see :class:`PiecewiseParams`);
            cells <= 2**32 - 3 (codes G and G+1 are duchi's).
        low_probability: the duchi part (see :class:`~ldp_client.mechanisms.numeric.duchi.DuchiParams`).
        mix_probability: alpha, the probability of the piecewise branch (quantized to 2**-32; any value
            in [0, 1], since the branch choice does not depend on the value).
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "hybrid"
    low_probability: float
    mix_probability: float
    low_threshold: int = field(init=False, repr=False, compare=False)
    mix_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        self._init_pm(MAX_CODES - 2)
        object.__setattr__(self, "low_threshold", check_low_probability(self.low_probability))
        object.__setattr__(
            self, "mix_threshold", quantize_probability("mix_probability", self.mix_probability)
        )

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        cells: int = DEFAULT_CELLS,
        out_of_range: OutOfRange = "clamp",
    ) -> HybridParams:
        """Hybrid at ``epsilon``: alpha = 1 - e^(-eps/2) if eps > eps* else 0 (Wang et al., Lemma 5)."""
        eps = check_epsilon(epsilon)
        m, t = piecewise_design(eps, cells)
        low = duchi_threshold(eps, epsilon)
        alpha = 1.0 - math.exp(-eps / 2.0) if eps > HYBRID_EPSILON_STAR else 0.0
        params = cls(
            lo=lo,
            hi=hi,
            cells=cells,
            window=m,
            high_probability=threshold_to_probability(t),
            low_probability=threshold_to_probability(low),
            mix_probability=threshold_to_probability(round(alpha * TWO32)),
            out_of_range=out_of_range,
        )
        report_quantization(eps, params.epsilon)
        return params

    @property
    def duchi_epsilon(self) -> float:
        return log_ratio_up(TWO32 - self.low_threshold, self.low_threshold)

    @property
    def epsilon(self) -> float:
        # The two branches have disjoint codes and a value-independent branch coin, so the ratio of any
        # code's probabilities is that of its branch. A branch that is never taken costs nothing.
        eps = []
        if self.mix_threshold > 0:
            eps.append(self.piecewise_epsilon)
        if self.mix_threshold < TWO32:
            eps.append(self.duchi_epsilon)
        return max(eps)

    @property
    def alpha(self) -> float:
        """The effective probability of the piecewise branch, mix_threshold / 2**32."""
        return threshold_to_probability(self.mix_threshold)

    @property
    def c(self) -> Fraction:
        """Duchi's C = 2**32 / (2**32 - 2L)."""
        return Fraction(TWO32, TWO32 - 2 * self.low_threshold)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        offset, scale = self._pm_affine()
        c = self.c
        g = self.cells
        return NumericLayout(
            num_codes=g + 2, offset=offset, scale=scale, specials=((g, (1 - c) / 2), (g + 1, (1 + c) / 2))
        )

    def one_probability_word(self, s: float) -> int:
        """Duchi branch: the 64-bit threshold of P(+C | s) (as ``DuchiParams.one_probability_word``)."""
        return one_probability_word(self.low_threshold, s)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """alpha Var_PM(s) + (1 - alpha) Var_D(s) (both branches are unbiased)."""
        import numpy as np

        a = self.alpha
        t = 2.0 * np.asarray(s, dtype=np.float64) - 1.0
        c = float(self.c)
        return np.asarray(a * self._pm_variance_s(s) + (1.0 - a) * (c * c - t * t) / 4.0)

    @property
    def max_variance_s(self) -> float:
        a = self.alpha
        c = float(self.c)
        return float(a * self._pm_max_variance_s() + (1.0 - a) * c * c / 4.0)


# ------------------------------------------------------------------------------------------- encoders


class _PiecewiseCoreEncoder(OneDimEncoder):
    __slots__ = ("_cells", "_high", "_outside", "_span", "_window")

    def _init_pm(self, params: PiecewiseParams | HybridParams) -> None:
        self._cells = params.cells
        self._window = params.window
        self._outside = params.cells - params.window
        self._span = float(params.cells - params.window)
        self._high = params.high_threshold

    def _pm(self, s: float, r: int) -> int:
        # r holds 128 random bits: 0-63 rounding coin, 64-95 window coin, 96-127 uniform word.
        pos = s * self._span
        start = int(pos)
        if (r & M64) < int((pos - start) * TWO64F):
            start += 1
        word = r >> 96
        if ((r >> 64) & M32) < self._high:
            return start + uniform_below(self._window, word)
        other = uniform_below(self._outside, word)
        return other + self._window if other >= start else other

    def _pm_batch(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        start = round_up(s * self._span, rng)
        in_window = u32(rng, n) < np.uint32(self._high)
        inside = np.asarray(rng.integers(0, self._window, size=n, dtype=np.int64))
        inside += start
        other = np.asarray(rng.integers(0, self._outside, size=n, dtype=np.int64))
        other += np.where(other >= start, self._window, 0)
        return np.where(in_window, inside, other).astype(np.uint32)


class PiecewiseEncoder(_PiecewiseCoreEncoder):
    """Wang et al.'s piecewise mechanism on G cells: code = the reported cell in [0, G)."""

    __slots__ = ()

    def __init__(self, params: PiecewiseParams) -> None:
        super().__init__(params, PiecewiseParams)
        self._nbytes = 16
        self._init_pm(params)

    def _core(self, s: float, r: int) -> int:
        return self._pm(s, r)

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        return self._pm_batch(s, rng)


class HybridEncoder(_PiecewiseCoreEncoder):
    """Wang et al.'s hybrid mechanism: piecewise cells [0, G), or duchi's G (-C) and G + 1 (+C)."""

    __slots__ = ("_l64", "_mix", "_w64f")

    def __init__(self, params: HybridParams) -> None:
        super().__init__(params, HybridParams)
        self._nbytes = 20
        self._init_pm(params)
        self._mix = params.mix_threshold
        self._l64 = params.low_threshold << 32
        self._w64f = float((TWO32 - 2 * params.low_threshold) << 32)

    def _core(self, s: float, r: int) -> int:
        if (r & M32) < self._mix:
            return self._pm(s, r >> 32)
        return self._cells + (1 if ((r >> 32) & M64) < self._l64 + int(s * self._w64f) else 0)

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        use_pm = u32(rng, n).astype(np.uint64) < np.uint64(self._mix)
        pm = self._pm_batch(s, rng)
        thr = (s * self._w64f).astype(np.uint64) + np.uint64(self._l64)
        duchi = (u64(rng, n) < thr).astype(np.uint32) + np.uint32(self._cells)
        return np.where(use_pm, pm, duchi).astype(np.uint32)


# ------------------------------------------------------------------------------ exact distributions


def _piecewise_distribution(params: PiecewiseParams | HybridParams, s: float) -> dict[int, Fraction]:
    """P(cell | position s) of the piecewise part, exactly (every one of the G cells)."""
    g, m = params.cells, params.window
    high = Fraction(params.high_threshold, TWO32)
    base, up = rounding(s * float(g - m))
    pm = dict.fromkeys(range(g), Fraction(0))
    for start, w in ((base, 1 - up), (base + 1, up)):
        if w == 0:
            continue
        for c in range(g):
            inside = start <= c < start + m
            pm[c] += w * (high / m if inside else (1 - high) / (g - m))
    return pm


def _hybrid_distribution(params: HybridParams, s: float) -> dict[int, Fraction]:
    """P(code | position s) of hybrid: alpha times the piecewise cells, then duchi's two codes."""
    a = Fraction(params.mix_threshold, TWO32)
    p1 = Fraction(params.one_probability_word(s), 1 << 64)
    out = {c: a * v for c, v in _piecewise_distribution(params, s).items()}
    out[params.cells] = (1 - a) * (1 - p1)
    out[params.cells + 1] = (1 - a) * p1
    return out


# ---------------------------------------------------------------------------------------------- specs


class PiecewiseSpec(OneDimSpec[PiecewiseParams]):
    """The piecewise mechanism for every layer: ``Campaign.piecewise``, uint32 ``piecewise_codes``,
    ``Report.piecewise_code``; u32 journal rows; ``moments`` of one attribute with G codes."""

    name: ClassVar[str] = PiecewiseParams.name
    params_type: ClassVar[type[Any]] = PiecewiseParams
    wire: ClassVar[WireNames] = WireNames(
        campaign="piecewise", batch="piecewise_codes", report="piecewise_code"
    )
    message_type: ClassVar[type[Message]] = campaign_pb2.PiecewiseParams
    direct_fields: ClassVar[tuple[str, ...]] = ("cells", "window", "high_probability")
    epsilon_fields: ClassVar[tuple[str, ...]] = ("cells",)

    def new_encoder(self, params: PiecewiseParams) -> PiecewiseEncoder:
        return PiecewiseEncoder(params)

    def distribution(self, params: PiecewiseParams, s: float) -> dict[int, Fraction]:
        return _piecewise_distribution(params, s)

    def examples(self) -> tuple[PiecewiseParams, ...]:
        return (
            PiecewiseParams.from_epsilon(0.0, 1.0, 2.0, cells=8),
            PiecewiseParams(lo=-4.0, hi=4.0, cells=5, window=3, high_probability=0.75, out_of_range="reject"),
        )


class HybridSpec(OneDimSpec[HybridParams]):
    """The hybrid mechanism for every layer: ``Campaign.hybrid``, uint32 ``hybrid_codes`` (cells, then
    duchi's two codes), ``Report.hybrid_code``; u32 journal rows; ``moments`` of one attribute with G + 2
    codes, the last two counted apart."""

    name: ClassVar[str] = HybridParams.name
    params_type: ClassVar[type[Any]] = HybridParams
    wire: ClassVar[WireNames] = WireNames(campaign="hybrid", batch="hybrid_codes", report="hybrid_code")
    message_type: ClassVar[type[Message]] = campaign_pb2.HybridParams
    direct_fields: ClassVar[tuple[str, ...]] = (
        "cells",
        "window",
        "high_probability",
        "low_probability",
        "mix_probability",
    )
    epsilon_fields: ClassVar[tuple[str, ...]] = ("cells",)

    def new_encoder(self, params: HybridParams) -> HybridEncoder:
        return HybridEncoder(params)

    def distribution(self, params: HybridParams, s: float) -> dict[int, Fraction]:
        return _hybrid_distribution(params, s)

    def examples(self) -> tuple[HybridParams, ...]:
        return (
            HybridParams.from_epsilon(0.0, 2.0, 3.0, cells=6),
            HybridParams(
                lo=0.0,
                hi=1.0,
                cells=4,
                window=2,
                high_probability=0.8,
                low_probability=0.25,
                mix_probability=0.5,
            ),
        )


PIECEWISE_SPEC = PiecewiseSpec()
"""The piecewise mechanism, as :mod:`ldp_client.registry` lists it."""
HYBRID_SPEC = HybridSpec()
"""The hybrid mechanism, as :mod:`ldp_client.registry` lists it."""
