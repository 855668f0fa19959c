"""Encoders of the numeric mechanisms: per-report (OS CSPRNG) and batch (seeded numpy, for simulation).

The mechanisms, their integer designs and their epsilons are described in :mod:`ldp_client.numeric_params`.
Each per-report encoder reads all the random bytes one report needs in ONE ``os.urandom`` call (through
:mod:`ldp_client.randomness`) and turns them into an integer code with exact integer comparisons:

==========  ======  =====================================================================================
mechanism   bytes   use of the bytes (little-endian words)
==========  ======  =====================================================================================
duchi       8       u64 < W(s) -> code 1 (W(s) = L 2**32 + floor(s (2**32 - 2L) 2**32))
sr          12      (bytes 0-7 >> 1) < floor(s 2**63) -> rounded bit 1; bytes 8-11 >= T -> flip the bit
piecewise   16      bytes 0-7: window-start rounding coin; 8-11: u32 < T -> window; 12-15: Lemire uniform
                    cell (inside the window, or among the G - M outside it)
hybrid      20      bytes 0-3: u32 < alpha threshold -> piecewise with bytes 4-19, else duchi with 4-11
laplace     16      bytes 0-7: grid rounding coin; bytes 8-15: noise index by inverse CDF of the table
multidim    k(4+b)  k Lemire words (Floyd's sampling of k distinct attributes), then b bytes per attribute
==========  ======  =====================================================================================

A Lemire rejection (probability below n / 2**32) draws 4 more bytes. The batch encoders draw the same
quantized thresholds from a seeded :class:`numpy.random.Generator` (``uint64``/``uint32`` words and
numpy's unbiased bounded integers), so they sample exactly the same distributions; they are for
simulation only.

:func:`exact_distribution` gives the exact output distribution of a one-dimensional mechanism for one
input position, from the parameters' integers (for tests and small parameters).

Importing this module does not import numpy.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ldp_client import randomness as _rnd
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.numeric_params import (
    DuchiParams,
    HybridParams,
    LaplaceParams,
    MultidimParams,
    NumericParams,
    PiecewiseParams,
    SRParams,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DuchiEncoder",
    "HybridEncoder",
    "LaplaceEncoder",
    "MultidimEncoder",
    "NumericEncoder",
    "PiecewiseEncoder",
    "SREncoder",
    "exact_distribution",
    "numeric_encoder",
]

_M32 = PROB_ONE - 1
_M64 = (1 << 64) - 1
_TWO63F = float(1 << 63)
_TWO64F = float(1 << 64)
_from_bytes = int.from_bytes
_uniform_below = _rnd.uniform_below


def _check_rng(rng: object) -> np.random.Generator:
    import numpy as np

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    return rng


def _u64(rng: np.random.Generator, n: int) -> NDArray[np.uint64]:
    import numpy as np

    return rng.integers(0, 1 << 64, size=n, dtype=np.uint64)


def _u32(rng: np.random.Generator, n: int) -> NDArray[np.uint32]:
    import numpy as np

    return rng.integers(0, PROB_ONE, size=n, dtype=np.uint32)


def _round_up(pos: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.int64]:
    """floor(pos) + [u64 < floor(frac(pos) 2**64)]: randomized rounding with a 64-bit coin (pos >= 0)."""
    import numpy as np

    base = np.floor(pos)
    thr = ((pos - base) * _TWO64F).astype(np.uint64)
    out: NDArray[np.int64] = base.astype(np.int64)
    out += _u64(rng, pos.shape[0]) < thr
    return out


# ----------------------------------------------------------------------------------- one-dimensional


class _OneDim:
    """Shared per-report plumbing: validate the value, read the bytes, call the core."""

    __slots__ = ("_hi", "_lo", "_nbytes", "_reject", "params")
    params: Any
    _nbytes: int
    _lo: float
    _hi: float

    def __init__(self, params: Any, cls: type[Any]) -> None:
        if not isinstance(params, cls):
            raise InvalidParameterError("params", params, f"a {cls.__name__}")
        self.params = params
        self._lo = params.lo
        self._hi = params.hi
        self._reject = params.out_of_range == "reject"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(params={self.params!r})"

    def _position(self, value: object) -> float:
        # Fast path for a float in range; everything else goes through the full validation.
        if type(value) is float and self._lo <= value <= self._hi:
            return (value - self._lo) / (self._hi - self._lo)
        s: float = self.params.position(value)
        return s

    def _core(self, s: float, r: int) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self, value: float) -> int:
        """Randomize one value with the OS CSPRNG. Production path; not seedable by design.

        Returns:
            The integer code of the report (decode it with ``params.decode``).

        Raises:
            DomainError: ``value`` is not a real number, is NaN or infinite, or is outside [lo, hi] with
                ``out_of_range="reject"`` (it is clamped with ``"clamp"``).
        """
        s = self._position(value)
        return self._core(s, _from_bytes(_rnd._source(self._nbytes), "little"))

    def encode_batch(self, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint32]:
        """Randomize a 1-D array of values with a seeded numpy Generator. For simulation only.

        Same quantized probabilities as :meth:`encode` (see the module docstring).

        Returns:
            uint32 codes, shape (n,).

        Raises:
            DomainError: a value that is not finite or (``reject``) out of range, named.
            InvalidParameterError: ``rng`` is not a numpy Generator.
        """
        g = _check_rng(rng)
        s = self.params.positions(values)
        return self.encode_positions(s, g)

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        """:meth:`encode_batch` for validated positions in [0, 1] (used by multidim)."""
        raise NotImplementedError  # pragma: no cover - overridden


class DuchiEncoder(_OneDim):
    """Duchi et al.'s one-bit mechanism: code 1 (+C) or 0 (-C)."""

    __slots__ = ("_l64", "_w64f")

    def __init__(self, params: DuchiParams) -> None:
        super().__init__(params, DuchiParams)
        self._nbytes = 8
        self._l64 = params.low_threshold << 32
        self._w64f = float((PROB_ONE - 2 * params.low_threshold) << 32)

    def _core(self, s: float, r: int) -> int:
        return 1 if (r & _M64) < self._l64 + int(s * self._w64f) else 0

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        thr = (s * self._w64f).astype(np.uint64) + np.uint64(self._l64)
        return (_u64(rng, s.shape[0]) < thr).astype(np.uint32)


class SREncoder(_OneDim):
    """Stochastic rounding to lo/hi (63-bit coin), then randomized response (32-bit coin): code 0 or 1."""

    __slots__ = ("_truth",)

    def __init__(self, params: SRParams) -> None:
        super().__init__(params, SRParams)
        self._nbytes = 12
        self._truth = params.truth_threshold

    def _core(self, s: float, r: int) -> int:
        bit = 1 if ((r & _M64) >> 1) < int(s * _TWO63F) else 0
        if ((r >> 64) & _M32) >= self._truth:
            bit ^= 1
        return bit

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        rounded = (_u64(rng, n) >> np.uint64(1)) < (s * _TWO63F).astype(np.uint64)
        flip = _u32(rng, n) >= np.uint32(self._truth)
        return (rounded ^ flip).astype(np.uint32)


class _PiecewiseCoreEncoder(_OneDim):
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
        if (r & _M64) < int((pos - start) * _TWO64F):
            start += 1
        word = r >> 96
        if ((r >> 64) & _M32) < self._high:
            return start + _uniform_below(self._window, word)
        other = _uniform_below(self._outside, word)
        return other + self._window if other >= start else other

    def _pm_batch(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        start = _round_up(s * self._span, rng)
        in_window = _u32(rng, n) < np.uint32(self._high)
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
        self._w64f = float((PROB_ONE - 2 * params.low_threshold) << 32)

    def _core(self, s: float, r: int) -> int:
        if (r & _M32) < self._mix:
            return self._pm(s, r >> 32)
        return self._cells + (1 if ((r >> 32) & _M64) < self._l64 + int(s * self._w64f) else 0)

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        use_pm = _u32(rng, n).astype(np.uint64) < np.uint64(self._mix)
        pm = self._pm_batch(s, rng)
        thr = (s * self._w64f).astype(np.uint64) + np.uint64(self._l64)
        duchi = (_u64(rng, n) < thr).astype(np.uint32) + np.uint32(self._cells)
        return np.where(use_pm, pm, duchi).astype(np.uint32)


class LaplaceEncoder(_OneDim):
    """Discrete Laplace on a grid: code = j + R for the (clamped) output grid point j in [-R, K + R]."""

    __slots__ = ("_cum", "_grid", "_gridf", "_half", "_last", "_reach")

    def __init__(self, params: LaplaceParams) -> None:
        super().__init__(params, LaplaceParams)
        self._nbytes = 16
        table = params.table
        self._cum = table.cumulative
        self._grid = params.grid
        self._gridf = float(params.grid)
        self._reach = table.reach
        self._half = table.half_width
        self._last = params.grid + 2 * table.reach

    def _core(self, s: float, r: int) -> int:
        pos = s * self._gridf
        i = int(pos)
        if (r & _M64) < int((pos - i) * _TWO64F):
            i += 1
        # Table index m <-> noise z = m - (R + K); code = clamp(i + z, -R, K + R) + R.
        code = i + bisect.bisect_right(self._cum, r >> 64) - self._grid
        if code < 0:
            return 0
        return self._last if code > self._last else code

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        i = _round_up(s * self._gridf, rng)
        cum = np.frombuffer(self._cum, dtype=np.uint64)
        m = np.searchsorted(cum, _u64(rng, s.shape[0]), side="right").astype(np.int64)
        code = i + m - self._grid
        np.clip(code, 0, self._last, out=code)
        return code.astype(np.uint32)


NumericEncoder = DuchiEncoder | SREncoder | PiecewiseEncoder | HybridEncoder | LaplaceEncoder
_BASE_ENCODERS: dict[type, type] = {
    DuchiParams: DuchiEncoder,
    SRParams: SREncoder,
    PiecewiseParams: PiecewiseEncoder,
    HybridParams: HybridEncoder,
    LaplaceParams: LaplaceEncoder,
}


# ------------------------------------------------------------------------------------------ multidim


class MultidimEncoder:
    """Wang et al.'s multi-dimensional collection: k sampled attributes, each with the base mechanism.

    A report is a tuple of k ``(attribute, code)`` pairs with strictly increasing attributes (sorting
    makes the encoding canonical: the order of sampling carries no information anyway).
    """

    __slots__ = ("_base", "_d", "_k", "_per", "_ranges", "params")

    def __init__(self, params: MultidimParams) -> None:
        if not isinstance(params, MultidimParams):
            raise InvalidParameterError("params", params, "a MultidimParams")
        self.params = params
        self._base: DuchiEncoder | PiecewiseEncoder | HybridEncoder = _BASE_ENCODERS[type(params.base)](
            params.base
        )
        self._d = params.d
        self._k = params.k
        self._per = self._base._nbytes
        self._ranges = params.ranges

    def __repr__(self) -> str:
        return f"MultidimEncoder(params={self.params!r})"

    def encode(self, values: Sequence[float]) -> tuple[tuple[int, int], ...]:
        """Randomize one user's D values with the OS CSPRNG. Production path; not seedable by design.

        Every value is validated (sampled or not). k distinct attributes are chosen uniformly with Floyd's
        algorithm (each step an exact Lemire draw), and each is encoded with the base mechanism.

        Returns:
            ``((attribute, code), ...)``: k pairs, attributes strictly increasing.

        Raises:
            DomainError: not a sequence of exactly D numbers, or a value that is NaN, infinite, or out of
                its range with ``out_of_range="reject"`` (named ``values[i]``).
        """
        d, k, per = self._d, self._k, self._per
        pos: Sequence[float]
        if type(values) in (list, tuple) and len(values) == d and self._all_in_range(values):
            pos = values  # positions computed below, for the sampled attributes only
            fast = True
        else:
            pos = self.params.positions_of(values)
            fast = False
        buf = _rnd._source(4 * k + per * k)
        chosen: set[int] = set()
        for step, j in enumerate(range(d - k, d)):
            t = _uniform_below(j + 1, _from_bytes(buf[4 * step : 4 * step + 4], "little"))
            chosen.add(j if t in chosen else t)
        core = self._base._core
        out = []
        off = 4 * k
        ranges = self._ranges
        for a in sorted(chosen):
            s = pos[a]
            if fast:
                lo, hi = ranges[a]
                s = (s - lo) / (hi - lo)
            out.append((a, core(s, _from_bytes(buf[off : off + per], "little"))))
            off += per
        return tuple(out)

    def _all_in_range(self, values: Sequence[object]) -> bool:
        for v, (lo, hi) in zip(values, self._ranges, strict=True):
            if type(v) is not float or not lo <= v <= hi:
                return False
        return True

    def encode_batch(
        self, values: ArrayLike, rng: np.random.Generator
    ) -> tuple[NDArray[np.uint32], NDArray[np.uint32]]:
        """Randomize an (n, D) array of users' values with a seeded numpy Generator. For simulation only.

        Attributes are a uniform k-subset per user (the k smallest of D uniform keys), sorted.

        Returns:
            ``(attributes, codes)``, both uint32 of shape (n, k).

        Raises:
            DomainError: not an (n, D) array, a value that is not finite or (``reject``) out of range.
        """
        import numpy as np

        from ldp_client.numeric_params import positions

        g = _check_rng(rng)
        arr = np.asarray(values)
        if arr.ndim != 2 or arr.shape[1] != self._d:
            raise DomainError(
                "values", f"<array of shape {arr.shape}>", f"an (n, {self._d}) array of numbers"
            )
        lo = np.array([r[0] for r in self.params.ranges])
        hi = np.array([r[1] for r in self.params.ranges])
        s = positions(arr, lo, hi, self.params.reject)
        n, d, k = arr.shape[0], self._d, self._k
        if k == d:
            attrs = np.broadcast_to(np.arange(d, dtype=np.int64), (n, d)).copy()
        elif k == 1:
            attrs = g.integers(0, d, size=(n, 1), dtype=np.int64)
        else:
            attrs = np.argpartition(g.random((n, d)), k - 1, axis=1)[:, :k].astype(np.int64)
            attrs.sort(axis=1)
        picked = np.take_along_axis(s, attrs, axis=1)
        codes = self._base.encode_positions(picked.ravel(), g).reshape(n, k)
        return attrs.astype(np.uint32), codes


def numeric_encoder(params: NumericParams) -> NumericEncoder | MultidimEncoder:
    """The encoder of any numeric mechanism's parameters."""
    if isinstance(params, MultidimParams):
        return MultidimEncoder(params)
    cls = _BASE_ENCODERS.get(type(params))
    if cls is None:
        raise InvalidParameterError("params", type(params).__name__, "parameters of a numeric mechanism")
    enc: NumericEncoder = cls(params)
    return enc


# ------------------------------------------------------------------------------ exact distributions


def _rounding(
    pos: float,
) -> tuple[int, Fraction]:
    """(floor(pos), P(round up)) of the 64-bit randomized rounding the encoders use."""
    base = int(pos)
    return base, Fraction(int((pos - base) * _TWO64F), 1 << 64)


def exact_distribution(
    params: DuchiParams | SRParams | PiecewiseParams | HybridParams | LaplaceParams, s: float
) -> dict[int, Fraction]:
    """P(code | position s) for every code with positive probability, exactly, from the parameters'
    integers and the encoders' arithmetic (module docstring). For tests and small parameters (it lists
    every code: G of them for piecewise, K + 2R + 1 for laplace)."""
    one = Fraction(1)
    if isinstance(params, DuchiParams):
        p1 = Fraction(params.one_probability_word(s), 1 << 64)
        return {0: one - p1, 1: p1}
    if isinstance(params, SRParams):
        up = Fraction(int(s * _TWO63F), 1 << 63)
        keep = Fraction(params.truth_threshold, PROB_ONE)
        p1 = up * keep + (1 - up) * (1 - keep)
        return {0: one - p1, 1: p1}
    if isinstance(params, PiecewiseParams | HybridParams):
        g, m = params.cells, params.window
        high = Fraction(params.high_threshold, PROB_ONE)
        base, up = _rounding(s * float(g - m))
        pm = dict.fromkeys(range(g), Fraction(0))
        for start, w in ((base, 1 - up), (base + 1, up)):
            if w == 0:
                continue
            for c in range(g):
                inside = start <= c < start + m
                pm[c] += w * (high / m if inside else (1 - high) / (g - m))
        if isinstance(params, PiecewiseParams):
            return pm
        a = Fraction(params.mix_threshold, PROB_ONE)
        p1 = Fraction(params.one_probability_word(s), 1 << 64)
        out = {c: a * v for c, v in pm.items()}
        out[g] = (1 - a) * (1 - p1)
        out[g + 1] = (1 - a) * p1
        return out
    if isinstance(params, LaplaceParams):
        table = params.table
        k, r, half = params.grid, table.reach, table.half_width
        base, up = _rounding(s * float(k))
        total = Fraction(1 << 64)
        dist: dict[int, Fraction] = {}
        for i, w in ((base, 1 - up), (base + 1, up)):
            if w == 0:
                continue
            for z in range(-half, half + 1):
                code = min(max(i + z, -r), k + r) + r
                dist[code] = dist.get(code, Fraction(0)) + w * Fraction(table.weight(z)) / total
        return dist
    raise InvalidParameterError("params", type(params).__name__, "one-dimensional numeric parameters")
