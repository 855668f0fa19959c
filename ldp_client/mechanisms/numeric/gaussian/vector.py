"""The Gaussian mechanism for a vector of L2 norm at most B under (epsilon, delta)-LDP: discrete Gaussian
noise on each coordinate of a grid.

A vector x of dimension d with ``||x||_2 <= B`` (a longer one is scaled onto the ball with
``out_of_range="clamp"``, or refused with ``"reject"``) has L2 sensitivity 2B. Each coordinate's grid
position ``p_j = x_j K / B`` (K grid steps per B) is rounded to an integer i_j, up with probability
``frac(p_j)`` (a 64-bit coin: unbiased), and the report is ``c_j = clamp(i_j + Y_j, -(K + R), K + R) + K + R``
with Y_j ~ N_Z(0, sigma^2) independent, sampled exactly from the OS CSPRNG (:mod:`.discrete`), and
``R = floor(14 sigma) + 1`` (the clamp is post-processing and moves an expectation by less than 1e-40 of B).
The estimate of x_j is ``(c_j - K - R) B / K``, unbiased, with variance ``(Var Y + f(1 - f)) B^2 / K^2``.

**What is guaranteed.** Rounded vectors satisfy ``||i - p||_2 < sqrt(d)``, so two of them are at most
``Delta = 2K + 2 sqrt(d)`` apart (grid steps). For integer shifts v the Renyi divergence of order alpha of
the product discrete Gaussian is at most ``alpha ||v||^2 / (2 sigma^2)`` (Canonne, Kamath, Steinke,
NeurIPS 2020: a discrete Gaussian's normaliser is largest at integer centres, and Renyi divergences of
independent coordinates add), and it is jointly quasi-convex, so the rounding's mixtures keep it: the
report is ``rho``-zCDP with ``rho = Delta^2 / (2 sigma^2)``. The declared delta then gives epsilon by
:func:`.calibration.epsilon_from_zcdp` (CKS Proposition 12 over every order alpha). This epsilon is an
upper bound, not the exact privacy loss: for d = 1 the scalar mechanism (:mod:`.mechanism`), whose
epsilon is exact, needs about 10% less noise.

The per-report encoder returns a tuple of d codes. Wire: ``Campaign.gaussian_vector`` (dim, bound,
out_of_range, grid, sigma, delta), ``ReportBatch.gaussian_vector_codes`` (n * d little-endian uint32,
report-major), ``Report.gaussian_vector`` (``GaussianVectorCodes``: d codes); the accumulator is
``moments`` of d attributes, each declared in [-B, B].

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import U32_LE, RowField, check_count, check_length
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.numeric.base import (
    MAX_ATTRIBUTES,
    TWO64F,
    NumericLayout,
    OutOfRange,
    as_float,
    as_int,
    check_epsilon,
    check_int,
    check_policy,
    check_rng,
    report_quantization,
    u64,
)
from ldp_client.mechanisms.numeric.codec import (
    POLICY_TO_PROTO,
    as_code_array,
    check_codes,
    code_value,
    moments_of,
    policy_from_proto,
)
from ldp_client.mechanisms.numeric.gaussian.calibration import (
    check_delta,
    epsilon_from_zcdp,
    zcdp_sigma,
)
from ldp_client.mechanisms.numeric.gaussian.discrete import (
    MAX_SIGMA,
    MIN_SIGMA,
    SIGMA_BITS,
    CsprngWords,
    auto_grid,
    batch_discrete_gaussian,
    clamped_distribution,
    sample_discrete_gaussian,
    sigma_quantum,
    tails,
)
from ldp_client.spec import Kind, Layout, MakeArgs, MeanDesign, MechanismSpec, Moments, MomentsView, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.domain import DomainLike
    from ldp_client.spec import SecretSource

__all__ = ["VECTOR_SPEC", "GaussianVectorEncoder", "GaussianVectorParams", "GaussianVectorSpec"]

DEFAULT_VECTOR_GRID = 1024
_MAX_GRID = 1 << 20
_REACH_SIGMAS = 14
_SIGMA_ONE = 1 << SIGMA_BITS
_FIELDS = ("dim", "bound", "out_of_range", "grid", "sigma", "delta")
_EPSILON_FIELDS = ("dim", "bound", "out_of_range", "grid", "delta")


def _check_bound(bound: object) -> float:
    allowed = "a finite number > 0 (the L2 norm bound B of a vector)"
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        raise InvalidParameterError("bound", bound, allowed)
    b = float(bound)
    if not (math.isfinite(b) and b > 0):
        raise InvalidParameterError("bound", bound, allowed)
    return b


def _sensitivity(grid: int, dim: int) -> float:
    """Delta = 2K + 2 sqrt(d): the largest L2 distance of two rounded vectors of the ball, in grid steps."""
    return 2.0 * grid + 2.0 * math.sqrt(dim)


@dataclass(frozen=True, kw_only=True)
class GaussianVectorParams:
    """Discrete Gaussian noise on each coordinate of a vector of L2 norm at most B (module docstring).

    Args:
        dim: d, the vector's dimension, 1..4096.
        bound: B > 0, the declared L2 norm bound (sensitivity 2B).
        grid: K, grid steps per B (the coordinates' grid step is B/K), 2 <= K <= 2**20.
        sigma: the discrete Gaussian's sigma in grid steps, in [0.5, 65536], rounded up to a multiple of
            2**-32 (the value kept). Use :meth:`from_epsilon`.
        delta: the declared delta in [1e-30, 1).
        out_of_range: ``"clamp"`` (a longer vector is scaled onto the ball) or ``"reject"``.
    """

    name: ClassVar[str] = "gaussian_vector"
    dim: int
    bound: float
    grid: int = DEFAULT_VECTOR_GRID
    sigma: float
    delta: float
    out_of_range: OutOfRange = "clamp"
    sigma_q: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_int("dim", self.dim, 1, MAX_ATTRIBUTES)
        object.__setattr__(self, "bound", _check_bound(self.bound))
        check_int("grid", self.grid, 2, _MAX_GRID)
        q = sigma_quantum(self.sigma)
        object.__setattr__(self, "sigma_q", q)
        object.__setattr__(self, "sigma", q / _SIGMA_ONE)
        object.__setattr__(self, "delta", check_delta(self.delta))
        object.__setattr__(self, "out_of_range", check_policy(self.out_of_range))
        if self.epsilon > 500.0:
            raise InvalidParameterError(
                "sigma",
                self.sigma,
                f"more noise: this sigma at grid={self.grid}, dim={self.dim} means an epsilon over 500",
            )

    @classmethod
    def from_epsilon(
        cls,
        dim: int,
        bound: float,
        epsilon: float,
        *,
        delta: float | None = None,
        grid: int | None = None,
        out_of_range: OutOfRange = "clamp",
    ) -> GaussianVectorParams:
        """The smallest sigma whose zCDP epsilon at ``delta`` is <= ``epsilon``
        (:func:`.calibration.zcdp_sigma` for sensitivity 2K + 2 sqrt(d), rounded up to a multiple of
        2**-32). ``grid`` defaults to 1024, or the largest power of two keeping sigma within 8192 grid
        steps."""
        eps = check_epsilon(epsilon)
        if delta is None:
            raise InvalidParameterError(
                "delta", None, "a number in [1e-30, 1): gaussian_vector needs a delta"
            )
        d = check_delta(delta)
        dim_ = check_int("dim", dim, 1, MAX_ATTRIBUTES)
        if grid is None:
            unit = zcdp_sigma(eps, d, 2.0)  # sigma per unit of B, ignoring the rounding's 2 sqrt(d)
            k = auto_grid(unit, DEFAULT_VECTOR_GRID)
        else:
            k = check_int("grid", grid, 2, _MAX_GRID)
        sigma = zcdp_sigma(eps, d, _sensitivity(k, dim_))
        if not MIN_SIGMA <= sigma <= MAX_SIGMA:
            raise InvalidParameterError(
                "grid" if grid is not None else "epsilon",
                grid if grid is not None else epsilon,
                f"a combination with sigma = {sigma:.4g} grid steps in [{MIN_SIGMA}, {MAX_SIGMA:g}] "
                f"(epsilon={eps:g}, delta={d:g}, grid={k}, dim={dim_})",
            )
        q = math.ceil(sigma * _SIGMA_ONE)
        while _epsilon(q, k, dim_, d) > eps:  # the float search's last ulp
            q += 1 + (q >> 40)
        params = cls(dim=dim_, bound=bound, grid=k, sigma=q / _SIGMA_ONE, delta=d, out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def rho(self) -> float:
        """The zCDP parameter Delta^2 / (2 sigma^2) of one report."""
        return _sensitivity(self.grid, self.dim) ** 2 / (2.0 * self.sigma * self.sigma)

    @property
    def epsilon(self) -> float:
        """An epsilon for which the report is (epsilon, delta)-LDP (from rho; an upper bound)."""
        return _epsilon(self.sigma_q, self.grid, self.dim, self.delta)

    @property
    def reach(self) -> int:
        return (_REACH_SIGMAS * self.sigma_q >> SIGMA_BITS) + 1

    @functools.cached_property
    def layout(self) -> NumericLayout:
        """Codes 0 .. 2(K + R); as a position s in [0, 1] of [-B, B]: s_hat = (c - R) / (2K)."""
        k, r = self.grid, self.reach
        return NumericLayout(num_codes=2 * (k + r) + 1, offset=Fraction(-r, 2 * k), scale=Fraction(1, 2 * k))

    @property
    def noise_variance(self) -> float:
        return tails(self.sigma_q).variance

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) of one coordinate at position s of [-B, B]: (Var Y + f(1 - f)) / (4 K^2)."""
        import numpy as np

        k = float(self.grid)
        pos = (2.0 * np.asarray(s, dtype=np.float64) - 1.0) * k
        f = pos - np.floor(pos)
        return np.asarray((self.noise_variance + f * (1.0 - f)) / (4.0 * k * k))

    @property
    def max_variance_s(self) -> float:
        return (self.noise_variance + 0.25) / (4.0 * float(self.grid) ** 2)

    def positions_of(self, value: object) -> list[float]:
        """The grid positions x_j K / B of one vector, after validation (and scaling onto the ball)."""
        allowed = f"{self.dim} finite real numbers with L2 norm <= {self.bound!r}"
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != self.dim:
            raise DomainError("value", value, allowed)
        xs = []
        for j, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise DomainError(f"value[{j}]", v, "a finite real number")
            xs.append(float(v))
        norm = math.sqrt(math.fsum(x * x for x in xs))
        scale = self.grid / self.bound
        if norm > self.bound:
            if self.out_of_range == "reject":
                raise DomainError("value", value, allowed + " (out_of_range='reject')")
            scale *= self.bound / norm
        return [x * scale for x in xs]

    def positions(self, values: ArrayLike) -> NDArray[np.float64]:
        """:meth:`positions_of` for an (n, d) array (vectorised)."""
        import numpy as np

        arr = np.asarray(values)
        if arr.ndim != 2 or arr.shape[1] != self.dim or arr.dtype.kind not in "iuf":
            raise DomainError(
                "values", f"<array of shape {arr.shape}>", f"an (n, {self.dim}) array of numbers"
            )
        x = arr.astype(np.float64)
        if not np.isfinite(x).all():
            raise DomainError("values", float(x[~np.isfinite(x)][0]), "finite real numbers")
        norm = np.sqrt(np.sum(x * x, axis=1))
        over = norm > self.bound
        if over.any() and self.out_of_range == "reject":
            row = int(np.argmax(over))
            raise DomainError(
                "values",
                f"row {row} of norm {float(norm[row])!r}",
                f"vectors of norm <= {self.bound!r} (reject)",
            )
        factor = np.where(over, self.bound / np.where(over, norm, 1.0), 1.0) * (self.grid / self.bound)
        return np.asarray(x * factor[:, None])


@functools.lru_cache(maxsize=256)
def _epsilon(sigma_q: int, grid: int, dim: int, delta: float) -> float:
    sigma = sigma_q / _SIGMA_ONE
    return epsilon_from_zcdp(_sensitivity(grid, dim) ** 2 / (2.0 * sigma * sigma), delta)


# -------------------------------------------------------------------------------------------- encoder


class GaussianVectorEncoder:
    """Per-coordinate rounding and exact discrete Gaussian noise: a tuple of d codes per report."""

    __slots__ = ("_last", "_offset", "_sigma_q", "params")

    def __init__(self, params: GaussianVectorParams) -> None:
        if not isinstance(params, GaussianVectorParams):
            raise InvalidParameterError("params", params, "a GaussianVectorParams")
        self.params = params
        self._offset = params.grid + params.reach
        self._last = 2 * self._offset
        self._sigma_q = params.sigma_q

    def encode(self, value: Sequence[float]) -> tuple[int, ...]:
        """Randomize one vector with the OS CSPRNG. Production path; not seedable by design.

        Raises:
            DomainError: not d finite numbers, or (``reject``) a norm above B.
        """
        words = CsprngWords()
        out = []
        for p in self.params.positions_of(value):
            i = math.floor(p)
            if words.below(1 << 64) < int((p - i) * TWO64F):
                i += 1
            code = i + sample_discrete_gaussian(self._sigma_q, words.below) + self._offset
            out.append(0 if code < 0 else (self._last if code > self._last else code))
        return tuple(out)

    def encode_batch(self, values: ArrayLike, rng: np.random.Generator) -> NDArray[np.uint32]:
        """Randomize an (n, d) array with a seeded numpy Generator. For simulation only: uint32 (n, d)."""
        import numpy as np

        g = check_rng(rng)
        pos = self.params.positions(values)
        base = np.floor(pos)
        up = u64(g, pos.size).reshape(pos.shape) < ((pos - base) * TWO64F).astype(np.uint64)
        noise = batch_discrete_gaussian(self.params.sigma, pos.size, g).reshape(pos.shape)
        code = base.astype(np.int64) + up + noise + self._offset
        np.clip(code, 0, self._last, out=code)
        return code.astype(np.uint32)


# ----------------------------------------------------------------------------------------------- spec


def _codes_value(field_name: str, report: object, d: int, bound: int) -> list[int]:
    """One report: d integer codes in [0, bound)."""
    if isinstance(report, str | bytes) or not isinstance(report, Sequence) or len(report) != d:
        raise InvalidReportError(field_name, report, f"{d} integer codes in [0, {bound - 1}]")
    return [code_value(f"{field_name}[{j}]", c, bound) for j, c in enumerate(report)]


class GaussianVectorSpec(MechanismSpec[GaussianVectorParams]):
    """The vector Gaussian mechanism for every layer (:mod:`ldp_client.spec`; wire in the module docstring).
    Parameters by name: dim, bound, out_of_range, grid, delta and, without epsilon, sigma. Items: the
    coordinates "0".."d-1"; the inputs of exhaustive checks are 0, B e_0, -B e_0 and B (1, .., 1)/sqrt(d)."""

    name: ClassVar[str] = GaussianVectorParams.name
    params_type: ClassVar[type[Any]] = GaussianVectorParams
    kind: ClassVar[Kind] = Kind.MEAN
    takes_range: ClassVar[bool] = False  # an L2 ball (dim, bound), not a range per value
    wire: ClassVar[WireNames] = WireNames(
        campaign="gaussian_vector", batch="gaussian_vector_codes", report="gaussian_vector"
    )

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> GaussianVectorParams:
        if domain is not None:
            raise InvalidParameterError("domain", domain, "nothing: gaussian_vector takes dim and bound")
        allowed = _EPSILON_FIELDS if epsilon is not None else _FIELDS
        given = dict(fields)
        for name, raw in given.items():
            if name not in allowed:
                raise InvalidParameterError(
                    f"param {name}", raw, f"a field of gaussian_vector: {', '.join(allowed)}"
                )
        for name in ("dim", "bound"):
            if name not in given:
                raise InvalidParameterError(
                    name, None, "the vector's dimension (dim) and L2 norm bound (bound)"
                )
        kw: dict[str, Any] = {
            n: (as_int(n, v) if n in ("dim", "grid") else str(v) if n == "out_of_range" else as_float(n, v))
            for n, v in given.items()
        }
        if epsilon is not None:
            return GaussianVectorParams.from_epsilon(kw.pop("dim"), kw.pop("bound"), epsilon, **kw)
        for name in ("sigma", "delta"):
            if name not in kw:
                raise InvalidParameterError("epsilon", None, "an epsilon, or the fields sigma and delta")
        return GaussianVectorParams(**kw)

    def make_args(self, params: GaussianVectorParams) -> MakeArgs:
        return MakeArgs(fields={f: getattr(params, f) for f in _FIELDS})

    def params_to_proto(self, params: GaussianVectorParams) -> campaign_pb2.GaussianVectorParams:
        return campaign_pb2.GaussianVectorParams(
            dim=params.dim,
            bound=params.bound,
            out_of_range=POLICY_TO_PROTO[params.out_of_range],
            grid=params.grid,
            sigma=params.sigma,
            delta=params.delta,
        )

    def params_from_proto(self, msg: campaign_pb2.GaussianVectorParams) -> GaussianVectorParams:
        return GaussianVectorParams(
            dim=msg.dim,
            bound=msg.bound,
            grid=msg.grid,
            sigma=msg.sigma,
            delta=msg.delta,
            out_of_range=policy_from_proto(msg.out_of_range, "out_of_range"),
        )

    def delta(self, params: GaussianVectorParams) -> float:
        return params.delta

    def encoder(
        self, params: GaussianVectorParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return GaussianVectorEncoder(params).encode

    # ----------------------------------------------------------------------------------------- codec

    def batch_to_proto(
        self, msg: reports_pb2.ReportBatch, params: GaussianVectorParams, columns: Any
    ) -> None:
        import numpy as np

        codes = as_code_array(self.wire.batch, columns, 2)
        if codes.shape[1] != params.dim:
            raise InvalidReportError(self.wire.batch, codes.shape, f"an array of shape (n, {params.dim})")
        check_count("count", codes.shape[0])
        check_codes(codes, params.layout.num_codes, self.wire.batch)
        msg.count = codes.shape[0]
        msg.gaussian_vector_codes = np.ascontiguousarray(codes).astype(U32_LE).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: GaussianVectorParams, n: int) -> Any:
        import numpy as np

        d = params.dim
        raw = msg.gaussian_vector_codes
        check_length(
            self.wire.batch, raw, 4 * n * d, f"4 * count * dim for count={n}, dim={d} little-endian uint32"
        )
        codes = np.frombuffer(raw, dtype=U32_LE).reshape(n, d)
        check_codes(codes, params.layout.num_codes, self.wire.batch)
        return codes.astype(np.uint32, copy=False)

    def report_to_proto(self, msg: reports_pb2.Report, params: GaussianVectorParams, output: Any) -> None:
        msg.gaussian_vector.codes.extend(_codes_value("report", output, params.dim, params.layout.num_codes))

    def report_from_proto(self, msg: reports_pb2.Report, params: GaussianVectorParams) -> Any:
        import numpy as np

        codes = np.array(msg.gaussian_vector.codes, dtype=np.int64)
        if codes.size != params.dim:
            raise InvalidReportError("gaussian_vector.codes", f"{codes.size} codes", f"{params.dim} (dim)")
        check_codes(codes, params.layout.num_codes, "gaussian_vector.codes")
        return codes.astype(np.uint32).reshape(1, params.dim)

    def batch_from_reports(self, params: GaussianVectorParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        rows = [
            _codes_value(f"reports[{i}]", r, params.dim, params.layout.num_codes)
            for i, r in enumerate(reports)
        ]
        return np.array(rows, dtype=np.uint32).reshape(len(rows), params.dim)

    def row_fields(self, params: GaussianVectorParams) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), 4 * params.dim),)

    def row_packer(self, params: GaussianVectorParams) -> Callable[[Any], bytes]:
        return lambda codes: b"".join(int(c).to_bytes(4, "little") for c in codes)

    def row_unpacker(self, params: GaussianVectorParams) -> Callable[[bytes], Any]:
        return lambda row: tuple(int.from_bytes(row[i : i + 4], "little") for i in range(0, len(row), 4))

    # ------------------------------------------------------------------------------------ simulation

    def encode_batch(
        self,
        params: GaussianVectorParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        import numpy as np

        x = np.asarray(self.inputs(params), dtype=np.float64)[np.asarray(values)]
        return GaussianVectorEncoder(params).encode_batch(x, rng)

    def encode_values(
        self, params: GaussianVectorParams, values: NDArray[np.float64], rng: np.random.Generator
    ) -> Any:
        return GaussianVectorEncoder(params).encode_batch(values, rng)

    # ---------------------------------------------------------------------------------------- server

    def layout(self, params: GaussianVectorParams) -> Layout:
        return Layout.moments(params.dim, params.layout.num_codes)

    def layout_batch(self, params: GaussianVectorParams, columns: Any) -> Any:
        import numpy as np

        codes = np.asarray(columns)
        if codes.ndim != 2 or codes.shape[1] != params.dim:
            raise InvalidReportError("reports", codes.shape, f"an array of shape (n, {params.dim})")
        attrs = np.broadcast_to(np.arange(params.dim, dtype=np.uint32), codes.shape)
        return codes.ravel(), attrs.ravel(), codes.shape[0]

    def items(self, params: GaussianVectorParams) -> tuple[str, ...]:
        return tuple(str(j) for j in range(params.dim))

    def inputs(self, params: GaussianVectorParams) -> tuple[Any, ...]:
        d, b = params.dim, params.bound
        axis = tuple(b if j == 0 else 0.0 for j in range(d))
        return tuple(
            dict.fromkeys(
                (
                    (0.0,) * d,
                    axis,
                    tuple(-x for x in axis),
                    (b / math.sqrt(d),) * d,
                )
            )
        )

    def input_value(self, params: GaussianVectorParams, index: int) -> Any:
        return self.inputs(params)[index]

    def mean_design(self, params: GaussianVectorParams) -> MeanDesign:
        return MeanDesign(
            labels=self.items(params),
            ranges=((-params.bound, params.bound),) * params.dim,
            scale=Fraction(1),
            variance_s=params.variance_s,
            max_variance_s=lambda: params.max_variance_s,
        )

    def moments(self, params: GaussianVectorParams, acc: MomentsView) -> Moments:
        return moments_of(self.mean_design(params), params.layout, acc)

    # ------------------------------------------------------------------------------ conformance tests

    def largest(self) -> tuple[GaussianVectorParams, ...]:
        # The most coordinates, the largest bound and noise, the smallest delta, and the finest grid whose
        # epsilon stays within 500 at that noise (2**19: about 320).
        return (
            GaussianVectorParams(
                dim=MAX_ATTRIBUTES, bound=1e300, grid=_MAX_GRID >> 1, sigma=MAX_SIGMA, delta=1e-30
            ),
        )

    def examples(self) -> tuple[GaussianVectorParams, ...]:
        return (
            GaussianVectorParams.from_epsilon(1, 2.0, 8.0, delta=1e-3, grid=2),
            GaussianVectorParams(dim=2, bound=1.5, grid=2, sigma=1.25, delta=1e-3, out_of_range="reject"),
        )

    def exact_outputs(self, params: GaussianVectorParams, value: Any) -> Mapping[Hashable, Fraction]:
        """The product over coordinates of each one's exact distribution
        (:func:`.discrete.clamped_distribution`; small parameters only: it lists every tuple of codes)."""
        k, r = params.grid, params.reach
        per = [clamped_distribution(params.sigma, p, -(k + r), k + r) for p in params.positions_of(value)]
        out: dict[Hashable, Fraction] = {}
        for combo in itertools.product(*(d.items() for d in per)):
            prob = Fraction(1)
            for _, q in combo:
                prob *= q
            out[tuple(c for c, _ in combo)] = prob
        return out


VECTOR_SPEC = GaussianVectorSpec()
"""The Gaussian mechanism for a vector of bounded L2 norm, as :mod:`ldp_client.registry` lists it."""
