"""Bounded-input Laplace: discrete Laplace (two-sided geometric) noise on a grid over [lo, hi].

(Ghosh, Roughgarden, Sundararajan, STOC 2009; Canonne, Kamath, Steinke, NeurIPS 2020.) The position s
(:mod:`ldp_client.mechanisms.numeric.base`) is rounded (randomized, 64-bit coin) to one of the grid points
``i = 0..K``; the code is ``j = clamp(i + Z, -R, K + R)`` (shifted by R) with ``P(Z = z)`` proportional to
``alpha^|z|``, ``alpha = A/2**32``, from an integer table of weights summing to exactly 2**64 (sampled by
inverse CDF with one 64-bit word). R is the first distance where alpha^R <= 2**-20; the table's two end
entries carry the geometric tails. epsilon is computed from the integer table (maximum ratio over every
output and every pair of grid inputs, including the clamped ends) and is about ``K ln(1/alpha)``. The
clamped end codes decode to the conditional mean of the unclamped output (``-R - alpha/(1-alpha)``, by the
memorylessness of the geometric tail), so clamping adds no bias. Var(t_hat) = (4/K**2)(2 alpha/(1-alpha)**2
+ f (1-f)), about 8/eps**2, f the rounding fraction.

The per-report encoder reads 16 bytes: bytes 0-7 the grid rounding coin, bytes 8-15 the noise index by
inverse CDF of the table. Wire: ``Campaign.laplace`` (lo, hi, out_of_range, grid, decay), uint32 codes in
``laplace_codes``, ``Report.laplace_code``; the accumulator counts the two clamped end codes apart.

Importing this module does not import numpy.
"""

from __future__ import annotations

import bisect
import functools
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ldp_client._prob import quantize_probability, rounding_note, threshold_to_probability
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.base import (
    DEFAULT_LAPLACE_GRID,
    M64,
    TWO32,
    TWO64,
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
    u64,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.spec import WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = ["SPEC", "LaplaceEncoder", "LaplaceParams", "LaplaceSpec", "LaplaceTable", "laplace_table"]

# The clamp distance R is where alpha^R <= 2**-_LAPLACE_TAIL_BITS; the integer weight recurrence runs with
# _LAPLACE_HP_BITS bits below 2**-64 so its rounding never reaches the 64-bit weights.
_LAPLACE_TAIL_BITS = 20
_LAPLACE_HP_BITS = 96
_LAPLACE_MAX_TABLE = 1 << 20
_LAPLACE_MAX_GRID = 1 << 20


@dataclass(frozen=True)
class LaplaceTable:
    """The integer noise table of :class:`LaplaceParams` (built once per (grid, decay), cached).

    Attributes:
        grid: K.
        decay_threshold: A (alpha = A / 2**32).
        reach: R, the clamp distance (outputs j are in [-R, K + R]).
        weights: w(|z|) for |z| = 0..R+K-1 (integers), then the tail weight at |z| = R + K (the mass of
            every |z| >= R + K, at each end). Sum over z of the table = 2**64 exactly.
        cumulative: ``array('Q')`` of the 2(R+K) partial sums of the table over z = -(R+K) .. R+K-1: the
            sampled table index is ``bisect_right(cumulative, u)`` for a uniform 64-bit u.
        epsilon: ln of the largest ratio P(j | i) / P(j | i') over outputs j and grid inputs i, i'.
    """

    grid: int
    decay_threshold: int
    reach: int
    weights: tuple[int, ...]
    cumulative: array[int]
    epsilon: float

    @property
    def half_width(self) -> int:
        """R + K: the table covers z in [-(R+K), R+K]."""
        return self.reach + self.grid

    def weight(self, z: int) -> int:
        """The table weight of noise z (the tail weight at |z| = R + K)."""
        return self.weights[abs(z)]


class _LaplaceLimitError(Exception):
    """Internal: a (grid, decay) pair has no valid noise table. The callers turn this into a message about
    the user's own parameters (epsilon, grid, decay), never about internal thresholds.

    ``kind`` is ``"size"`` (the table would need over 2**20 entries: too little privacy loss per grid
    step, i.e. epsilon too small for the grid) or ``"underflow"`` (the smallest noise weights round to 0
    in 64 bits: epsilon too large).
    """

    def __init__(self, kind: Literal["size", "underflow"]) -> None:
        super().__init__(kind)
        self.kind = kind


def _laplace_reach_estimate(grid: int, alpha: float) -> float:
    """About R: the first z with alpha^z <= 2**-20 (float estimate, for limits and messages only)."""
    if alpha <= 0.0:
        return 1.0
    return max(1.0, math.ceil(_LAPLACE_TAIL_BITS * math.log(2.0) / -math.log(alpha) - 1e-9))


def _laplace_fits(grid: int, epsilon: float) -> bool:
    """About whether the table at ``grid`` and alpha = e^(-epsilon/grid) stays within 2**20 entries."""
    alpha = math.exp(-epsilon / grid)
    return grid + _laplace_reach_estimate(grid, alpha) <= (_LAPLACE_MAX_TABLE - 1) // 2


def _laplace_representable(grid: int, epsilon: float) -> bool:
    """About whether the smallest weights of the table are >= 1: the last regular weight
    2**64 (1-alpha)/(1+alpha) alpha^(R+K-1) and the tail 2**64 alpha^(R+K)/(1+alpha)."""
    alpha = math.exp(-epsilon / grid)
    reach = _laplace_reach_estimate(grid, alpha)
    last = 64.0 + math.log2((1.0 - alpha) / (1.0 + alpha)) + (reach + grid - 1) * math.log2(alpha)
    tail = 64.0 + (reach + grid) * math.log2(alpha) - math.log2(1.0 + alpha)
    return min(last, tail) >= 0.5


def _laplace_min_epsilon() -> float:
    """About the smallest epsilon laplace supports (at the smallest grid, 2 steps; 2**20-entry table)."""
    lo, hi = 1e-9, 1.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _laplace_fits(2, mid) else (mid, hi)
    return hi


def _laplace_max_grid(epsilon: float) -> int:
    """About the largest grid whose noise table fits in 2**20 entries at ``epsilon`` (1 if none)."""
    lo, hi = 1, _LAPLACE_MAX_GRID
    if _laplace_fits(hi, epsilon):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _laplace_fits(mid, epsilon) else (lo, mid)
    return lo


def _laplace_max_epsilon(grid: int) -> float:
    """About the largest epsilon whose noise table at ``grid`` is representable with 64-bit weights."""
    # The tail weight needs alpha^(R+K) >= 2**-64, so epsilon < 64 ln 2 (about 44.4) at any grid.
    lo, hi = 1e-3, 64.0 * math.log(2.0)
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _laplace_representable(grid, mid) else (lo, mid)
    return lo


def _check_laplace_table(grid: int, decay_threshold: int, decay: float) -> None:
    """Build :func:`laplace_table`, or raise the user-facing error for direct parameters (grid, decay)."""
    try:
        laplace_table(grid, decay_threshold)
    except _LaplaceLimitError as exc:
        eps = grid * -math.log(threshold_to_probability(decay_threshold))
        if exc.kind == "size":
            k_max = _laplace_max_grid(eps)
            fix = (
                f"at that epsilon use a grid of at most about {k_max} steps"
                if k_max >= 2
                else f"laplace needs an epsilon of at least about {_laplace_min_epsilon():.2g}"
            )
            raise InvalidParameterError(
                "decay",
                decay,
                f"a decay further from 1 at grid={grid}: this one means epsilon about {eps:.3g}, so little "
                f"privacy loss per grid step that the noise table would need over 2**20 entries; {fix} "
                "(LaplaceParams.from_epsilon chooses the grid)",
            ) from None
        raise InvalidParameterError(
            "decay",
            decay,
            f"a larger decay at grid={grid}: this one means epsilon about {eps:.3g}, and laplace supports at "
            f"most about {_laplace_max_epsilon(grid):.3g} (less noise is not representable in its 64-bit "
            "noise table)",
        ) from None


@functools.lru_cache(maxsize=16)
def laplace_table(grid: int, decay_threshold: int) -> LaplaceTable:
    """Build the discrete Laplace table for K = ``grid``, alpha = ``decay_threshold`` / 2**32.

    Deterministic integer arithmetic only (so client and server build the same table): a fixed-point
    power sequence a_z ~ alpha^z 2**(64+H) by ``a_{z+1} = floor(a_z A / 2**32)``; R is the first z with
    a_z <= 2**(44+H) (alpha^R <= 2**-20); w(z) = floor(a_z (2**32 - A) / ((2**32 + A) 2**H)), i.e.
    2**64 (1-alpha)/(1+alpha) alpha^z rounded down; the tail weight floor(a_{R+K} 2**32 / ((2**32+A) 2**H))
    (2**64 alpha^(R+K)/(1+alpha), the mass of z >= R+K); and w(0) takes the remainder so the table sums
    to exactly 2**64. Weights are non-increasing in |z|, which the epsilon computation uses.

    Raises:
        _LaplaceLimitError: the table would exceed 2**20 entries, or its tail weight rounds to 0 (the
            parameter classes turn this into a message about epsilon, grid or decay).

    Why 2**-20: the clamped ends carry the geometric tails and decode to their conditional means, so the
    clamp distance costs no bias; a shorter table keeps its smallest weights (~2**44 (1-alpha)/(1+alpha)
    e^-eps) large, so their rounding adds almost nothing to epsilon (under 1e-6 of it at eps <= 10).
    """
    k, a = grid, decay_threshold
    hp = _LAPLACE_HP_BITS
    one = 1 << (64 + hp)
    stop = 1 << (64 - _LAPLACE_TAIL_BITS + hp)
    num, den = TWO32 - a, (TWO32 + a) << hp
    max_half = (_LAPLACE_MAX_TABLE - 1) // 2
    # Refuse early (without building) a table that cannot fit: alpha^R = 2**-20 at R ~ 20 ln 2 / ln(1/alpha).
    if a < TWO32 and k + _LAPLACE_TAIL_BITS * math.log(2.0) / -math.log(a / TWO32) > max_half * 1.01:
        raise _LaplaceLimitError("size")
    powers = [one]
    cur = one
    found: int | None = None  # R: the first z with a_z <= 2**(44+H), i.e. alpha^z <= 2**-20
    while found is None or len(powers) <= found + k:
        if found is None and cur <= stop:
            found = len(powers) - 1
            continue
        if len(powers) > max_half:
            raise _LaplaceLimitError("size")
        cur = (cur * a) >> 32
        powers.append(cur)
    reach = found
    half = reach + k
    weights = [p * num // den for p in powers[:half]]
    tail = (powers[half] << 32) // den
    weights.append(tail)
    weights[0] = 0
    weights[0] = TWO64 - 2 * sum(weights)
    # Every weight must be >= 1: a zero weight is an impossible output for some inputs (infinite epsilon).
    # The weights fall with |z|, and the last regular one is the smallest (the tail holds more mass).
    if weights[0] < weights[1] or weights[half - 1] < 1 or tail < 1:
        raise _LaplaceLimitError("underflow")
    cumulative = array("Q")
    total = 0
    for z in range(-half, half):
        total += weights[abs(z)]
        cumulative.append(total)
    eps = _laplace_epsilon(weights, k, reach)
    return LaplaceTable(
        grid=k, decay_threshold=a, reach=reach, weights=tuple(weights), cumulative=cumulative, epsilon=eps
    )


def _laplace_epsilon(w: Sequence[int], k: int, reach: int) -> float:
    """ln of max_j max_{i,i'} P(j|i)/P(j|i') for the table, from its integers (see LaplaceParams).

    Interior outputs j in (-R, K+R): P(j|i) = w(|j - i|) over the window z in [j-K, j]; w is unimodal, so
    the ratio is w(0)/w(K) when the window holds 0 (j in [0, K]) and w(d)/w(d+K) for d = j - K in
    [1, R-1] (and symmetrically). End output -R: P = sum_{z <= -R-i} w(z), largest/smallest at i = 0/K:
    (sum_{m >= R} w(m)) / w_tail-inclusive sum from R+K, with w(R+K) the tail weight.
    """
    best_num, best_den = w[0], w[k]
    for d in range(1, reach):
        a, b = w[d], w[d + k]
        if a * best_den > best_num * b:
            best_num, best_den = a, b
    tail_from_reach = sum(w[reach:])  # sum_{m >= R} (the last weight is the tail mass beyond R + K)
    tail_end = w[reach + k]
    if tail_from_reach * best_den > best_num * tail_end:
        best_num, best_den = tail_from_reach, tail_end
    return log_ratio_up(best_num, best_den)


def _laplace_epsilon_error(
    requested: object, eps: float, grid: int, grid_given: bool, kind: Literal["size", "underflow"]
) -> InvalidParameterError:
    """The message of a from_epsilon request laplace cannot meet, in the user's terms (epsilon, grid)."""
    if kind == "underflow":
        top = _laplace_max_epsilon(grid)
        default = "" if grid_given else " (the default)"
        return InvalidParameterError(
            "epsilon",
            requested,
            f"at most about {top:.3g} for laplace at grid={grid}{default} (less noise is not representable "
            "in its 64-bit noise table); use a smaller epsilon",
        )
    k_max = _laplace_max_grid(eps)
    if grid_given and k_max >= 2:
        return InvalidParameterError(
            "grid",
            grid,
            f"at most about {k_max} grid steps at epsilon={requested!r} (so little privacy loss per step "
            "needs a noise table of over 2**20 entries); use a smaller grid or a larger epsilon",
        )
    return InvalidParameterError(
        "epsilon",
        requested,
        f"at least about {_laplace_min_epsilon():.2g} for laplace (a smaller epsilon needs a noise table of "
        "over 2**20 entries even at the smallest grid, 2 steps)",
    )


def _auto_grid(epsilon: float) -> int:
    """The default K: 1024, smaller when the table (about 2 (22.2 K/eps + K) entries) would not fit."""
    per_k = 2.0 * (_LAPLACE_TAIL_BITS * math.log(2.0) / epsilon + 1.0) * 1.05
    return max(2, min(DEFAULT_LAPLACE_GRID, int(_LAPLACE_MAX_TABLE / per_k)))


@dataclass(frozen=True, kw_only=True)
class LaplaceParams(RangeParams):
    """Bounded-input Laplace as discrete Laplace noise on a grid of K steps over [lo, hi] (module docstring).

    Args:
        lo, hi: the declared range.
        grid: K, grid steps across [lo, hi] (inputs are rounded to K+1 points, outputs lie on the same
            spacing), 2 <= K <= 2**20.
        decay: alpha in (0, 1), quantized to A/2**32: P(Z = z) is proportional to alpha^|z| in grid steps.
            epsilon is about K ln(1/alpha), computed exactly from the integer table. Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "laplace"
    grid: int = DEFAULT_LAPLACE_GRID
    decay: float
    decay_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        check_int("grid", self.grid, 2, _LAPLACE_MAX_GRID)
        a = quantize_probability("decay", self.decay)
        if not 0 < a < TWO32:
            raise InvalidParameterError(
                "decay", self.decay, "a number in (0, 1)" + rounding_note("decay", self.decay, a)
            )
        object.__setattr__(self, "decay_threshold", a)
        _check_laplace_table(self.grid, a, self.decay)  # build (and validate) it now, not on a report

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        grid: int | None = None,
        out_of_range: OutOfRange = "clamp",
    ) -> LaplaceParams:
        """The largest alpha (least noise) whose table's exact epsilon is <= ``epsilon``.

        ``grid`` defaults to 1024 steps, fewer when epsilon is so small that the table would exceed 2**20
        entries. Starts at A = ceil(2**32 e^(-eps/K)) and raises A (more noise) by the excess that the
        integer rounding of the table adds, until the table's epsilon is at most the request.
        """
        eps = check_epsilon(epsilon)
        k = _auto_grid(eps) if grid is None else check_int("grid", grid, 2, _LAPLACE_MAX_GRID)
        target = eps
        a = 0
        for _ in range(64):
            a = max(a, math.ceil(TWO32 * math.exp(-target / k)))
            if a >= TWO32:
                raise _laplace_epsilon_error(epsilon, eps, k, grid is not None, "size")
            try:
                got = laplace_table(k, a).epsilon
            except _LaplaceLimitError as exc:
                raise _laplace_epsilon_error(epsilon, eps, k, grid is not None, exc.kind) from None
            if got <= eps:
                break
            # Ask for less by the excess (at least one step of A) and retry.
            target -= got - eps
            a += 1
        else:  # pragma: no cover - the excess shrinks geometrically
            raise InvalidParameterError("epsilon", epsilon, "a value the laplace table can meet")
        params = cls(lo=lo, hi=hi, grid=k, decay=threshold_to_probability(a), out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def table(self) -> LaplaceTable:
        return laplace_table(self.grid, self.decay_threshold)

    @property
    def reach(self) -> int:
        """R: outputs are grid points j in [-R, K + R] (codes j + R)."""
        return self.table.reach

    @property
    def epsilon(self) -> float:
        return self.table.epsilon

    @property
    def alpha(self) -> Fraction:
        return Fraction(self.decay_threshold, TWO32)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        k, r = self.grid, self.reach
        a = self.alpha
        overshoot = a / (1 - a)  # mean of the geometric overshoot beyond a clamp (memoryless)
        last = k + 2 * r
        return NumericLayout(
            num_codes=last + 1,
            offset=Fraction(-r, k),
            scale=Fraction(1, k),
            specials=((0, (-r - overshoot) / k), (last, (k + r + overshoot) / k)),
        )

    def sample_index(self, word: int) -> int:
        """Noise z for a uniform 64-bit word (inverse CDF of the integer table)."""
        return bisect.bisect_right(self.table.cumulative, word) - self.table.half_width

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = (2 alpha/(1-alpha)^2 + f(1-f)) / K^2: discrete Laplace variance plus the input
        rounding (f = frac(s K)); the table's integer rounding and the clamped tails change it by < 1e-9."""
        import numpy as np

        a = float(self.alpha)
        k = float(self.grid)
        pos = np.asarray(s, dtype=np.float64) * k
        f = pos - np.floor(pos)
        return np.asarray((2.0 * a / (1.0 - a) ** 2 + f * (1.0 - f)) / (k * k))

    @property
    def max_variance_s(self) -> float:
        a = float(self.alpha)
        return (2.0 * a / (1.0 - a) ** 2 + 0.25) / float(self.grid) ** 2


# -------------------------------------------------------------------------------------------- encoder


class LaplaceEncoder(OneDimEncoder):
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
        if (r & M64) < int((pos - i) * TWO64F):
            i += 1
        # Table index m <-> noise z = m - (R + K); code = clamp(i + z, -R, K + R) + R.
        code = i + bisect.bisect_right(self._cum, r >> 64) - self._grid
        if code < 0:
            return 0
        return self._last if code > self._last else code

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        i = round_up(s * self._gridf, rng)
        cum = np.frombuffer(self._cum, dtype=np.uint64)
        m = np.searchsorted(cum, u64(rng, s.shape[0]), side="right").astype(np.int64)
        code = i + m - self._grid
        np.clip(code, 0, self._last, out=code)
        return code.astype(np.uint32)


def exact_distribution(params: LaplaceParams, s: float) -> dict[int, Fraction]:
    """P(code | position s), exactly, from the integer table (every one of the K + 2R + 1 codes)."""
    table = params.table
    k, r, half = params.grid, table.reach, table.half_width
    base, up = rounding(s * float(k))
    total = Fraction(1 << 64)
    dist: dict[int, Fraction] = {}
    for i, w in ((base, 1 - up), (base + 1, up)):
        if w == 0:
            continue
        for z in range(-half, half + 1):
            code = min(max(i + z, -r), k + r) + r
            dist[code] = dist.get(code, Fraction(0)) + w * Fraction(table.weight(z)) / total
    return dist


class LaplaceSpec(OneDimSpec[LaplaceParams]):
    """Bounded-input discrete Laplace for every layer: ``Campaign.laplace``, uint32 ``laplace_codes``,
    ``Report.laplace_code``; u32 journal rows; ``moments`` of one attribute with K + 2R + 1 codes, the two
    clamped ends counted apart."""

    name: ClassVar[str] = LaplaceParams.name
    params_type: ClassVar[type[Any]] = LaplaceParams
    wire: ClassVar[WireNames] = WireNames(campaign="laplace", batch="laplace_codes", report="laplace_code")
    message_type: ClassVar[type[Message]] = campaign_pb2.LaplaceParams
    direct_fields: ClassVar[tuple[str, ...]] = ("grid", "decay")
    epsilon_fields: ClassVar[tuple[str, ...]] = ("grid",)

    def new_encoder(self, params: LaplaceParams) -> LaplaceEncoder:
        return LaplaceEncoder(params)

    def distribution(self, params: LaplaceParams, s: float) -> dict[int, Fraction]:
        return exact_distribution(params, s)

    def examples(self) -> tuple[LaplaceParams, ...]:
        return (
            LaplaceParams.from_epsilon(0.0, 1.0, 4.0, grid=2),
            LaplaceParams(lo=-10.0, hi=10.0, grid=4, decay=0.25, out_of_range="reject"),
        )


SPEC = LaplaceSpec()
"""Bounded-input Laplace, as :mod:`ldp_client.registry` lists it."""
