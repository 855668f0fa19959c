"""Stochastic rounding, then randomized response (Ding, Kulkarni, Yekhanin, NeurIPS 2017, 1BitMean).

At position s (:mod:`ldp_client.mechanisms.numeric.base`): round the value to ``hi`` w.p.
``floor(s 2**63)/2**63`` (else ``lo``), then keep the bit w.p. ``p = T/2**32`` (else flip it).
P(1 | s) = 1/(e+1) + s (e-1)/(e+1) as in 1BitMean; epsilon = ln(T / (2**32 - T)). Estimate
``s_hat = (b - (1-p)) / (2p - 1)``; Var(x_hat) = (hi-lo)**2 pi (1 - pi) / (2p - 1)**2 with pi = P(1 | s).
Same channel as duchi, with the randomness split into a rounding coin and a response coin, and Ding et
al.'s parameterization.

The per-report encoder reads 12 bytes: ``(bytes 0-7 >> 1) < floor(s 2**63)`` rounds up, and the u32 of
bytes 8-11 ``>= T`` flips the bit. Wire: ``Campaign.sr`` (``StochasticRoundingParams``: lo, hi,
out_of_range, truth_probability), ``ReportBatch.sr_codes`` (one bit per report, packed), ``Report.sr_code``.

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
    M32,
    M64,
    TWO32,
    TWO63F,
    NumericLayout,
    OneDimEncoder,
    OutOfRange,
    RangeParams,
    check_epsilon,
    log_ratio_up,
    report_quantization,
    u32,
    u64,
)
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.spec import WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import ArrayLike, NDArray

__all__ = ["SPEC", "SREncoder", "SRParams", "SRSpec"]


@dataclass(frozen=True, kw_only=True)
class SRParams(RangeParams):
    """Stochastic rounding + randomized response: Ding et al.'s 1BitMean (NeurIPS 2017) on [lo, hi].

    Args:
        lo, hi: the declared range.
        truth_probability: p, the probability the rounded bit is sent unchanged, quantized to T/2**32 with
            2**31 < T < 2**32; epsilon = ln(T/(2**32 - T)). Use :meth:`from_epsilon`.
        out_of_range: ``"clamp"`` or ``"reject"``.
    """

    name: ClassVar[str] = "sr"
    truth_probability: float
    truth_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._init_range()
        t = quantize_probability("truth_probability", self.truth_probability)
        if not TWO32 // 2 < t < TWO32:
            raise InvalidParameterError(
                "truth_probability",
                self.truth_probability,
                "a probability in (1/2, 1)" + rounding_note("truth_probability", self.truth_probability, t),
            )
        object.__setattr__(self, "truth_threshold", t)

    @classmethod
    def from_epsilon(
        cls, lo: float, hi: float, epsilon: float, *, out_of_range: OutOfRange = "clamp"
    ) -> SRParams:
        """T = floor(2**32 e^eps / (e^eps + 1)), rounded toward privacy: the largest T with
        ln(T / (2**32 - T)) <= eps, decided exactly."""
        eps = check_epsilon(epsilon)
        t = largest_threshold(
            lambda x: ratio_within_exp(x, TWO32 - x, eps),
            math.floor(TWO32 / (1.0 + math.exp(-eps))),
            TWO32 // 2 + 1,
            TWO32 - 1,
        )
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value large enough for 32-bit probabilities")
        params = cls(lo=lo, hi=hi, truth_probability=threshold_to_probability(t), out_of_range=out_of_range)
        report_quantization(eps, params.epsilon)
        return params

    @property
    def epsilon(self) -> float:
        t = self.truth_threshold
        return log_ratio_up(t, TWO32 - t)

    @functools.cached_property
    def layout(self) -> NumericLayout:
        # s_hat = (b - (1 - p)) / (2p - 1) with p = T / 2**32.
        t = self.truth_threshold
        den = Fraction(2 * t - TWO32, TWO32)
        return NumericLayout(num_codes=2, offset=-Fraction(TWO32 - t, TWO32) / den, scale=1 / den)

    def round_word(self, s: float) -> int:
        """The 63-bit threshold k: the value rounds to hi w.p. k / 2**63."""
        return int(s * TWO63F)

    def variance_s(self, s: ArrayLike) -> NDArray[np.float64]:
        """Var(s_hat | s) = pi (1 - pi) / (2p - 1)**2, pi = (1-p) + s (2p - 1) = P(bit = 1 | s)."""
        import numpy as np

        p = threshold_to_probability(self.truth_threshold)
        sa = np.asarray(s, dtype=np.float64)
        pi = (1.0 - p) + sa * (2.0 * p - 1.0)
        return np.asarray(pi * (1.0 - pi) / (2.0 * p - 1.0) ** 2)

    @property
    def max_variance_s(self) -> float:
        p = threshold_to_probability(self.truth_threshold)
        return 0.25 / (2.0 * p - 1.0) ** 2


class SREncoder(OneDimEncoder):
    """Stochastic rounding to lo/hi (63-bit coin), then randomized response (32-bit coin): code 0 or 1."""

    __slots__ = ("_truth",)

    def __init__(self, params: SRParams) -> None:
        super().__init__(params, SRParams)
        self._nbytes = 12
        self._truth = params.truth_threshold

    def _core(self, s: float, r: int) -> int:
        bit = 1 if ((r & M64) >> 1) < int(s * TWO63F) else 0
        if ((r >> 64) & M32) >= self._truth:
            bit ^= 1
        return bit

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        import numpy as np

        n = s.shape[0]
        rounded = (u64(rng, n) >> np.uint64(1)) < (s * TWO63F).astype(np.uint64)
        flip = u32(rng, n) >= np.uint32(self._truth)
        return (rounded ^ flip).astype(np.uint32)


def exact_distribution(params: SRParams, s: float) -> dict[int, Fraction]:
    """P(code | position s), exactly: rounded up w.p. floor(s 2**63)/2**63, then kept w.p. T/2**32."""
    up = Fraction(int(s * TWO63F), 1 << 63)
    keep = Fraction(params.truth_threshold, TWO32)
    p1 = up * keep + (1 - up) * (1 - keep)
    return {0: 1 - p1, 1: p1}


class SRSpec(OneDimSpec[SRParams]):
    """Stochastic rounding for every layer: ``Campaign.sr``, one-bit ``sr_codes`` (packed),
    ``Report.sr_code``; u32 journal rows; ``moments`` of one attribute with 2 codes."""

    name: ClassVar[str] = SRParams.name
    params_type: ClassVar[type[Any]] = SRParams
    wire: ClassVar[WireNames] = WireNames(campaign="sr", batch="sr_codes", report="sr_code")
    message_type: ClassVar[type[Message]] = campaign_pb2.StochasticRoundingParams
    direct_fields: ClassVar[tuple[str, ...]] = ("truth_probability",)
    packed: ClassVar[bool] = True

    def new_encoder(self, params: SRParams) -> SREncoder:
        return SREncoder(params)

    def distribution(self, params: SRParams, s: float) -> dict[int, Fraction]:
        return exact_distribution(params, s)

    def examples(self) -> tuple[SRParams, ...]:
        return (
            SRParams.from_epsilon(0.0, 1.0, 0.5),
            SRParams(lo=100.0, hi=104.0, truth_probability=0.75),
        )


SPEC = SRSpec()
"""Stochastic rounding, as :mod:`ldp_client.registry` lists it."""
