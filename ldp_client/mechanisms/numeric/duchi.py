"""Duchi et al.'s one-bit mean mechanism (Duchi, Jordan, Wainwright, JASA 2018, one-dimensional case).

One bit per report at position s (:mod:`ldp_client.mechanisms.numeric.base`): 1 w.p.
``(L 2**32 + floor(s (2**32 - 2L) 2**32)) / 2**64``: from ``L/2**32`` at ``s = 0`` to ``1 - L/2**32`` at
``s = 1``, linear in between with 64-bit resolution. epsilon = ln((2**32 - L) / L). Estimate:
``t_hat = C (2 b - 1)`` with ``C = 2**32 / (2**32 - 2L)``, the paper's ``(e^eps + 1)/(e^eps - 1)`` for the
quantized L. Var(t_hat | t) = C**2 - t**2.

The per-report encoder reads 8 bytes: code 1 iff the little-endian u64 is below W(s). Wire: ``Campaign.duchi``
(lo, hi, out_of_range, low_probability), ``ReportBatch.duchi_codes`` (one bit per report, packed as rr's
answers), ``Report.duchi_code``. The hybrid mechanism (:mod:`ldp_client.mechanisms.numeric.piecewise`) uses
the same branch.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

from ldp_client._prob import (
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    smallest_threshold,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.base import (
    M64,
    TWO32,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    RangeParams,
    check_epsilon,
    log_ratio_up,
    report_quantization,
    u64,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.spec import WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = ["SPEC", "DuchiEncoder", "DuchiParams", "DuchiSpec", "duchi_threshold"]


def duchi_threshold(eps: float, requested: object) -> int:
    """L = ceil(2**32 / (e^eps + 1)): P(1 | lo) rounded up, i.e. the smallest L with ln((2**32-L)/L) <=
    eps, decided exactly."""
    t = smallest_threshold(
        lambda low: ratio_within_exp(TWO32 - low, low, eps),
        math.ceil(TWO32 / (math.exp(min(eps, 700.0)) + 1.0)),
        1,
        TWO32 // 2 - 1,
    )
    if t == 0:
        raise InvalidParameterError("epsilon", requested, "a value large enough for 32-bit probabilities")
    return t


def check_low_probability(value: float) -> int:
    """The threshold L of a ``low_probability`` (0 < L < 2**31), or InvalidParameterError."""
    t = quantize_probability("low_probability", value)
    if not 0 < t < TWO32 // 2:
        raise InvalidParameterError(
            "low_probability",
            value,
            "a probability in (0, 1/2)" + rounding_note("low_probability", value, t),
        )
    return t


def one_probability_word(low_threshold: int, s: float) -> int:
    """The 64-bit threshold W with P(bit = 1 | s) = W / 2**64 (what the encoders compare with)."""
    return (low_threshold << 32) + int(s * float((TWO32 - 2 * low_threshold) << 32))


@dataclass(frozen=True, kw_only=True)
class DuchiParams(RangeParams):
    """Duchi et al.'s one-bit mean mechanism on [lo, hi] (JASA 2018; formula in the module docstring).

    Args:
        lo, hi: the declared range of the value.
        low_probability: P(bit = 1 | x = lo), quantized to L/2**32 with 0 < L < 2**31; epsilon =
            ln((2**32 - L)/L). Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "duchi"
    low_probability: float
    low_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        object.__setattr__(self, "low_threshold", check_low_probability(self.low_probability))

    @classmethod
    def from_epsilon(
        cls, lo: float, hi: float, epsilon: float, *, out_of_range: OutOfRange = "clamp"
    ) -> DuchiParams:
        """L = ceil(2**32 / (e^eps + 1)): P(1|lo) rounded up, so the effective epsilon is <= eps."""
        eps = check_epsilon(epsilon)
        t = duchi_threshold(eps, epsilon)
        params = cls(lo=lo, hi=hi, low_probability=threshold_to_probability(t), out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        t = self.low_threshold
        return log_ratio_up(TWO32 - t, t)

    @property
    def c(self) -> Fraction:
        """C = 2**32 / (2**32 - 2L): the reported magnitude +/-C on the t scale."""
        return Fraction(TWO32, TWO32 - 2 * self.low_threshold)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        # s_hat = (t_hat + 1)/2 with t_hat = C (2b - 1): s_hat = (1 - C)/2 + C b.
        c = self.c
        return NumericLayout(num_codes=2, offset=(1 - c) / 2, scale=c)

    def one_probability_word(self, s: float) -> int:
        """The 64-bit threshold W with P(bit = 1 | s) = W / 2**64 (what the encoders compare with)."""
        return one_probability_word(self.low_threshold, s)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = (C**2 - t**2)/4 (t = 2s - 1); exact up to 2**-52 of the range."""
        import numpy as np

        t = 2.0 * np.asarray(s, dtype=np.float64) - 1.0
        c = float(self.c)
        return np.asarray((c * c - t * t) / 4.0)

    @property
    def max_variance_s(self) -> float:
        c = float(self.c)
        return c * c / 4.0


class DuchiEncoder(OneDimEncoder):
    """Duchi et al.'s one-bit mechanism: code 1 (+C) or 0 (-C)."""

    __slots__ = ("_l64", "_w64f")

    def __init__(self, params: DuchiParams) -> None:
        super().__init__(params, DuchiParams)
        self._nbytes = 8
        self._l64 = params.low_threshold << 32
        self._w64f = float((TWO32 - 2 * params.low_threshold) << 32)

    def _core(self, s: float, r: int) -> int:
        return 1 if (r & M64) < self._l64 + int(s * self._w64f) else 0

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        thr = (s * self._w64f).astype(np.uint64) + np.uint64(self._l64)
        return (u64(rng, s.shape[0]) < thr).astype(np.uint32)


def exact_distribution(params: DuchiParams, s: float) -> dict[int, Fraction]:
    """P(code | position s), exactly: code 1 w.p. W(s)/2**64."""
    p1 = Fraction(params.one_probability_word(s), 1 << 64)
    return {0: 1 - p1, 1: p1}


class DuchiSpec(OneDimSpec[DuchiParams]):
    """Duchi et al.'s mechanism for every layer: ``Campaign.duchi``, one-bit ``duchi_codes`` (packed),
    ``Report.duchi_code``; u32 journal rows; ``moments`` of one attribute with 2 codes."""

    name: ClassVar[str] = DuchiParams.name
    params_type: ClassVar[type[Any]] = DuchiParams
    wire: ClassVar[WireNames] = WireNames(campaign="duchi", batch="duchi_codes", report="duchi_code")
    message_type: ClassVar[type[Message]] = campaign_pb2.DuchiParams
    direct_fields: ClassVar[tuple[str, ...]] = ("low_probability",)
    packed: ClassVar[bool] = True

    def new_encoder(self, params: DuchiParams) -> DuchiEncoder:
        return DuchiEncoder(params)

    def distribution(self, params: DuchiParams, s: float) -> dict[int, Fraction]:
        return exact_distribution(params, s)

    def examples(self) -> tuple[DuchiParams, ...]:
        return (
            DuchiParams.from_epsilon(0.0, 1.0, 1.0),
            DuchiParams(lo=-5.0, hi=5.0, low_probability=0.125, out_of_range="reject"),
        )


SPEC = DuchiSpec()
"""Duchi et al.'s mechanism, as :mod:`ldp_client.registry` lists it."""
