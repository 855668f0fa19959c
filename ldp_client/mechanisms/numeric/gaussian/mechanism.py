"""The Gaussian mechanism for a bounded number under (epsilon, delta)-LDP: discrete Gaussian noise on a grid.

The value's position s = (x - lo)/(hi - lo) in [0, 1] (:mod:`ldp_client.mechanisms.numeric.base`) is
rounded to one of the grid points i = 0..K, up with probability frac(s K) (a 64-bit coin: unbiased,
E[i] = s K to 2**-64), and the report is ``j = i + Y`` with Y ~ N_Z(0, sigma^2), the discrete Gaussian
in grid steps, sampled exactly with integer arithmetic from the OS CSPRNG (Canonne, Kamath, Steinke,
NeurIPS 2020; :mod:`.discrete`). The code on the wire is ``clamp(j, -R, K + R) + R`` with
``R = floor(14 sigma) + 1``: P(|Y| > R) < e^-98, so the clamp (post-processing: it cannot weaken
privacy) moves the expectation by less than 1e-40 of the range, and the estimate s_hat = (code - R)/K
is unbiased to that precision. Var(s_hat | s) = (Var Y + f(1 - f)) / K^2, f = frac(s K), Var Y <= sigma^2
(computed numerically).

**What is guaranteed.** Any two values of a device are rounded to grid points at most K apart, so (joint
convexity of the hockey-stick divergence over the two rounding mixtures) the report is (epsilon,
delta)-LDP with ``delta`` the declared one and ``epsilon`` the smallest for which
``max_{Delta=1..K} delta_Z(Delta, epsilon) <= delta``, where delta_Z is the exact privacy profile of the
discrete Gaussian actually sampled (CKS Theorem 7, tails summed numerically over the integer support:
:func:`.discrete.epsilon_for`), found by bisection and rounded up. It is *not* a pure epsilon guarantee
(no finite epsilon holds with delta = 0), and sigma is the discrete Gaussian's parameter, not its exact
standard deviation. ``from_epsilon`` starts from the analytic Gaussian's sigma for sensitivity K
(Balle-Wang 2018, :mod:`.calibration`) and adjusts it (a multiple of 2**-32 grid steps) until the discrete
computation meets the requested epsilon.

The per-report encoder reads its bytes from the OS CSPRNG as the rejection sampler needs them (about 60
bytes). Wire: ``Campaign.gaussian`` (lo, hi, out_of_range, grid, sigma, delta), uint32 codes in
``gaussian_codes``, ``Report.gaussian_code``.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.base import (
    M64,
    TWO64F,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    RangeParams,
    check_epsilon,
    check_int,
    report_quantization,
    round_up,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.mechanisms.numeric.gaussian.calibration import analytic_sigma, check_delta
from ldp_client.mechanisms.numeric.gaussian.discrete import (
    MAX_SIGMA,
    MIN_SIGMA,
    SIGMA_BITS,
    CsprngWords,
    auto_grid,
    batch_discrete_gaussian,
    clamped_distribution,
    epsilon_for,
    sample_discrete_gaussian,
    sigma_quantum,
    tails,
)
from ldp_client.spec import WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = ["SPEC", "GaussianEncoder", "GaussianParams", "GaussianSpec", "exact_distribution"]

DEFAULT_GAUSSIAN_GRID = 1024
"""K when from_epsilon chooses it (fewer steps when sigma would exceed 8192 grid steps)."""
_MAX_GRID = 1 << 20
_REACH_SIGMAS = 14  # clamp distance R = floor(14 sigma) + 1 grid steps
_SIGMA_ONE = 1 << SIGMA_BITS


def _epsilon_or_error(q: int, grid: int, delta: float, field_name: str, value: object) -> float:
    eps = epsilon_for(q, grid, delta)
    if eps is None:
        raise InvalidParameterError(
            field_name,
            value,
            f"more noise: sigma={q / _SIGMA_ONE:.6g} grid steps at grid={grid} and delta={delta:g} would "
            "need an epsilon over 500",
        )
    return eps


@dataclass(frozen=True, kw_only=True)
class GaussianParams(RangeParams):
    """Discrete Gaussian noise on a grid of K steps over [lo, hi] (module docstring).

    Args:
        lo, hi: the declared range (L2 sensitivity hi - lo, K grid steps).
        grid: K, grid steps across [lo, hi], 2 <= K <= 2**20.
        sigma: the discrete Gaussian's sigma in grid steps, in [0.5, 65536]; rounded up to a multiple of
            2**-32 (the value kept is the rounded one). Use :meth:`from_epsilon`.
        delta: the declared delta in [1e-30, 1); epsilon follows from sigma, K and delta.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "gaussian"
    grid: int = DEFAULT_GAUSSIAN_GRID
    sigma: float
    delta: float
    sigma_q: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        check_int("grid", self.grid, 2, _MAX_GRID)
        q = sigma_quantum(self.sigma)
        object.__setattr__(self, "sigma_q", q)
        object.__setattr__(self, "sigma", q / _SIGMA_ONE)
        object.__setattr__(self, "delta", check_delta(self.delta))
        _epsilon_or_error(q, self.grid, self.delta, "sigma", self.sigma)  # now, not on the first report

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        delta: float | None = None,
        grid: int | None = None,
        out_of_range: OutOfRange = "clamp",
    ) -> GaussianParams:
        """The smallest sigma (a multiple of 2**-32 grid steps) whose exact epsilon at ``delta`` is <=
        ``epsilon``.

        ``grid`` defaults to 1024 steps, or the largest power of two that keeps sigma within 8192 steps
        (the rounding's variance, at most 1/(4 K^2), stays negligible beside sigma^2/K^2). Starts at the
        analytic Gaussian's sigma (Balle-Wang) for sensitivity K and bisects on the integer q =
        sigma 2**32 between a value that meets epsilon and one that does not.
        """
        eps = check_epsilon(epsilon)
        if delta is None:
            raise InvalidParameterError("delta", None, "a number in [1e-30, 1): gaussian needs a delta")
        d = check_delta(delta)
        unit = analytic_sigma(eps, d, 1.0)  # sigma per unit of sensitivity (the range)
        k = auto_grid(unit, DEFAULT_GAUSSIAN_GRID) if grid is None else check_int("grid", grid, 2, _MAX_GRID)
        start = unit * k
        if not MIN_SIGMA <= start <= MAX_SIGMA:
            raise InvalidParameterError(
                "grid" if grid is not None else "epsilon",
                grid if grid is not None else epsilon,
                f"a combination with sigma = {start:.4g} grid steps in [{MIN_SIGMA}, {MAX_SIGMA:g}] (the "
                f"analytic calibration at epsilon={eps:g}, delta={d:g}, grid={k}); "
                + ("use a smaller grid" if start > MAX_SIGMA else "use a larger grid or a smaller epsilon"),
            )
        hi_q = math.ceil(start * _SIGMA_ONE)
        lo_q = max(math.ceil(MIN_SIGMA * _SIGMA_ONE), hi_q - (hi_q >> 12))
        while (got := epsilon_for(hi_q, k, d)) is None or got > eps:
            lo_q, hi_q = hi_q, hi_q + (hi_q >> 12) + 1
        low = epsilon_for(lo_q, k, d)
        if low is not None and low <= eps:
            lo_q = math.ceil(MIN_SIGMA * _SIGMA_ONE) - 1  # the discrete one is more private: search lower
        # To 2**-24 of sigma: epsilon then moves by about 6e-8 of itself, below report_quantization's 1e-6.
        while hi_q - lo_q > 1 and hi_q - lo_q > hi_q >> 24:
            mid = (lo_q + hi_q) // 2
            got_mid = epsilon_for(mid, k, d)
            if got_mid is not None and got_mid <= eps:
                hi_q = mid
            else:
                lo_q = mid
        params = cls(lo=lo, hi=hi, grid=k, sigma=hi_q / _SIGMA_ONE, delta=d, out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        """The smallest epsilon with (epsilon, delta)-LDP for the declared delta (module docstring)."""
        eps = epsilon_for(self.sigma_q, self.grid, self.delta)
        return math.inf if eps is None else eps

    @property
    def sensitivity(self) -> float:
        """The L2 sensitivity of the value: hi - lo."""
        return self.hi - self.lo

    @property
    def sigma_value(self) -> float:
        """sigma in the value's units: sigma (hi - lo) / K."""
        return self.sigma * (self.hi - self.lo) / self.grid

    @property
    def reach(self) -> int:
        """R: outputs are grid points j in [-R, K + R] (codes j + R)."""
        return (_REACH_SIGMAS * self.sigma_q >> SIGMA_BITS) + 1

    @functools.cached_property
    def layout(self) -> NumericLayout:
        k, r = self.grid, self.reach
        return NumericLayout(num_codes=k + 2 * r + 1, offset=Fraction(-r, k), scale=Fraction(1, k))

    @property
    def noise_variance(self) -> float:
        """Var Y of the discrete Gaussian in grid steps^2 (numerically, <= sigma^2)."""
        return tails(self.sigma_q).variance

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = (Var Y + f(1 - f)) / K^2, f = frac(s K) (the clamp changes it by < 1e-40)."""
        import numpy as np

        k = float(self.grid)
        pos = np.asarray(s, dtype=np.float64) * k
        f = pos - np.floor(pos)
        return np.asarray((self.noise_variance + f * (1.0 - f)) / (k * k))

    @property
    def max_variance_s(self) -> float:
        return (self.noise_variance + 0.25) / float(self.grid) ** 2


# -------------------------------------------------------------------------------------------- encoder


class GaussianEncoder(OneDimEncoder):
    """Grid rounding and exact discrete Gaussian noise: code = clamp(i + Y, -R, K + R) + R."""

    __slots__ = ("_gridf", "_last", "_reach", "_sigma_q")

    def __init__(self, params: GaussianParams) -> None:
        super().__init__(params, GaussianParams)
        self._gridf = float(params.grid)
        self._reach = params.reach
        self._last = params.grid + 2 * params.reach
        self._sigma_q = params.sigma_q

    def encode(self, value: float) -> int:
        """Randomize one value with the OS CSPRNG (a variable number of bytes). Production path; not
        seedable by design.

        Raises:
            DomainError: ``value`` is not a real number, is NaN or infinite, or is outside [lo, hi] with
                ``out_of_range="reject"`` (it is clamped with ``"clamp"``).
        """
        s = self._position(value)
        words = CsprngWords()
        pos = s * self._gridf
        i = int(pos)
        if words.below(1 << 64) & M64 < int((pos - i) * TWO64F):
            i += 1
        code = i + sample_discrete_gaussian(self._sigma_q, words.below) + self._reach
        if code < 0:
            return 0
        return self._last if code > self._last else code

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        i = round_up(s * self._gridf, rng)
        noise = batch_discrete_gaussian(self.params.sigma, s.shape[0], rng)
        code = i + noise + self._reach
        np.clip(code, 0, self._last, out=code)
        return code.astype(np.uint32)


def exact_distribution(params: GaussianParams, s: float) -> dict[int, Fraction]:
    """P(code | position s) for every code (:func:`.discrete.clamped_distribution`), for tests and small
    parameters."""
    k, r = params.grid, params.reach
    return clamped_distribution(params.sigma, s * float(k), -r, k + r)


class GaussianSpec(OneDimSpec[GaussianParams]):
    """The discrete Gaussian for every layer: ``Campaign.gaussian``, uint32 ``gaussian_codes``,
    ``Report.gaussian_code``; u32 journal rows; ``moments`` of one attribute with K + 2R + 1 codes."""

    name: ClassVar[str] = GaussianParams.name
    params_type: ClassVar[type[Any]] = GaussianParams
    wire: ClassVar[WireNames] = WireNames(campaign="gaussian", batch="gaussian_codes", report="gaussian_code")
    message_type: ClassVar[type[Message]] = campaign_pb2.GaussianParams
    direct_fields: ClassVar[tuple[str, ...]] = ("grid", "sigma", "delta")
    epsilon_fields: ClassVar[tuple[str, ...]] = ("grid", "delta")

    def delta(self, params: GaussianParams) -> float:
        return params.delta

    def new_encoder(self, params: GaussianParams) -> GaussianEncoder:
        return GaussianEncoder(params)

    def distribution(self, params: GaussianParams, s: float) -> dict[int, Fraction]:
        return exact_distribution(params, s)

    def largest(self) -> tuple[GaussianParams, ...]:
        # The widest range, the finest grid, the most noise and the smallest delta (epsilon about 190).
        return (GaussianParams(lo=-1e300, hi=1e300, grid=_MAX_GRID, sigma=MAX_SIGMA, delta=1e-30),)

    def examples(self) -> tuple[GaussianParams, ...]:
        return (
            GaussianParams.from_epsilon(0.0, 1.0, 2.0, delta=1e-3, grid=2),
            GaussianParams(lo=-10.0, hi=10.0, grid=3, sigma=2.5, delta=1e-4, out_of_range="reject"),
        )


SPEC = GaussianSpec()
"""The Gaussian mechanism for a bounded number, as :mod:`ldp_client.registry` lists it."""
