"""1BitMean with alpha-point rounding: means of values that change slowly, with memoized bits (Ding,
Kulkarni, Yekhanin, "Collecting Telemetry Data Privately", NeurIPS 2017, §2.1 and §3.1; Windows telemetry).

1BitMean sends one bit, 1 w.p. 1/(e^eps + 1) + (x/m)(e^eps - 1)/(e^eps + 1) for x in [0, m]: here, as ``sr``
(:mod:`ldp_client.mechanisms.numeric.sr`) does, a rounding coin (to lo or hi) and a response coin kept w.p.
p = T / 2**32, so P(1 | position s) = (1 - p) + s (2p - 1) and epsilon = ln(T / (2**32 - T)).

**Memoization with alpha-point rounding** (§3.1): [lo, hi] is cut into s = ``buckets`` steps, grid points
g = 0..s at positions g/s. Once per device (per campaign) alpha is drawn; a value at position x (t = x s,
l = floor(t)) is rounded to the grid point l + 1 if alpha < frac(t), else l: over devices (alpha uniform)
this is unbiased, and for one device a value that moves within a step without crossing alpha keeps its
grid point. The bit of every grid point g is drawn once: 1BitMean at position g/s (round up iff a uniform
integer below s is below g, then keep w.p. p). A report is the memoized bit of the value's grid point: the
same at every report of a value (or of any value rounding to the same point), so repeated reports of a
slowly changing value reveal nothing new. Nothing is stored: alpha is the first two words of the stream
(:mod:`~ldp_client.mechanisms.longitudinal.memo`, label ``ldp-client/onebitmean/memo/v1``, key ``alpha``;
alpha = the 64-bit word (lo | hi << 32) >> 1, compared with floor(frac(t) 2**63) like ``sr``'s rounding), and
point g's bit comes from the stream with key u32be(g) (a uniform below s, then a word below T).

Exactly (the enumeration of the conformance test): P(1 | x) = (1 - u) pi_l + u pi_(l+1) with u =
floor(frac(t) 2**63) / 2**63 and pi_g = (g/s) p + (1 - g/s)(1 - p): between 1 - p and p, so epsilon_1 =
ln(p / (1 - p)); unlimited reports of one value show one memoized bit: epsilon_inf = epsilon_1. E[bit] =
(1 - p) + (2p - 1)(l + u)/s, the position up to its rounding to 2**-63 of a step (as ``sr``'s), so the
estimate s_hat = (b - (1 - p))/(2p - 1) and its variance are ``sr``'s (one report per user).

Wire: ``Campaign.onebitmean`` (``sr``'s fields and ``buckets``), ``ReportBatch.onebitmean_codes`` (one bit
per report, packed), ``Report.onebitmean_code``.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.longitudinal.memo import MemoWords, as_secret, memo_seed, u32be
from ldp_client.mechanisms.numeric.base import TWO63F, OneDimEncoder, OutOfRange, check_rng, u32, u64
from ldp_client.mechanisms.numeric.codec import OneDimSpec
from ldp_client.mechanisms.numeric.sr import SRParams
from ldp_client.spec import SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import NDArray

__all__ = ["ONEBITMEAN_LABEL", "SPEC", "OneBitMeanEncoder", "OneBitMeanParams", "OneBitMeanSpec"]

ONEBITMEAN_LABEL: Final = b"ldp-client/onebitmean/memo/v1"
MAX_BUCKETS: Final = 1 << 16
DEFAULT_BUCKETS: Final = 16
_TWO32: Final = 1 << 32


@dataclass(frozen=True, kw_only=True)
class OneBitMeanParams(SRParams):
    """1BitMean on [lo, hi] with alpha-point rounding to ``buckets`` steps (module docstring); the channel of
    one report is ``sr``'s, whose fields and epsilon it keeps. Use :meth:`from_epsilon`."""

    name: ClassVar[str] = "onebitmean"
    buckets: int = DEFAULT_BUCKETS

    def __post_init__(self) -> None:
        super().__post_init__()
        s = self.buckets
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_BUCKETS:
            raise InvalidParameterError("buckets", s, f"an integer in [1, {MAX_BUCKETS}]")

    @classmethod
    def from_epsilon(
        cls,
        lo: float,
        hi: float,
        epsilon: float,
        *,
        out_of_range: OutOfRange = "clamp",
        buckets: int = DEFAULT_BUCKETS,
    ) -> OneBitMeanParams:
        """``sr``'s threshold at ``epsilon`` (the largest T with ln(T/(2**32 - T)) <= eps, exactly), with
        ``buckets`` steps."""
        sr = SRParams.from_epsilon(lo, hi, epsilon, out_of_range=out_of_range)
        return cls(
            lo=sr.lo,
            hi=sr.hi,
            truth_probability=sr.truth_probability,
            out_of_range=sr.out_of_range,
            buckets=buckets,
        )

    @property
    def epsilon_inf(self) -> float:
        """A value's report is its grid point's memoized bit: unlimited reports cost one report's epsilon."""
        return self.epsilon


def grid_point(params: OneBitMeanParams, s: float, alpha: int) -> int:
    """The grid point of position ``s`` for a device whose 63-bit alpha is ``alpha``: l + [alpha <
    floor(frac(t) 2**63)], t = s buckets."""
    t = s * params.buckets
    low = int(t)
    return low + (1 if alpha < int((t - low) * TWO63F) else 0)


def memoized_alpha(secret: SecretSource, *, campaign_id: str) -> int:
    """The device's 63-bit alpha: words 0 and 1 of the stream (key ``alpha``) as lo | hi << 32, >> 1."""
    words = MemoWords(as_secret(secret).prf, memo_seed(ONEBITMEAN_LABEL, campaign_id, b"alpha"))
    lo = words.word()
    return (lo | (words.word() << 32)) >> 1


def memoized_bit(secret: SecretSource, params: OneBitMeanParams, *, campaign_id: str, point: int) -> int:
    """The memoized bit of grid point ``point``: rounded up iff a uniform integer below s is below the point,
    then kept iff the next word is below T (key u32be(point))."""
    words = MemoWords(as_secret(secret).prf, memo_seed(ONEBITMEAN_LABEL, campaign_id, u32be(point)))
    up = words.below(params.buckets) < point
    keep = words.bernoulli(params.truth_threshold)
    return int(up == keep)


class OneBitMeanEncoder(OneDimEncoder):
    """1BitMean with alpha-point rounding: per report (memoized from the client secret, which it needs) and
    batch (fresh simulated devices from a seeded generator).

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (part of every memoized stream); with ``secret``, for :meth:`encode`.
        secret: the device's client secret (or a function returning it); None for a batch-only encoder.
    """

    __slots__ = ("_alpha", "_memo")

    def __init__(
        self, params: OneBitMeanParams, *, campaign_id: str | None = None, secret: SecretSource | None = None
    ) -> None:
        super().__init__(params, OneBitMeanParams)
        self._alpha: int | None = None
        self._memo: Callable[..., int] | None = None
        if secret is not None and campaign_id is not None:
            device = as_secret(secret)
            self._alpha = memoized_alpha(device, campaign_id=campaign_id)
            self._memo = functools.lru_cache(maxsize=params.buckets + 1)(
                functools.partial(memoized_bit, device, params, campaign_id=campaign_id)
            )

    def encode(self, value: float) -> int:
        """The memoized bit (code 0 or 1) of the grid point ``value`` rounds to with this device's alpha.

        Raises:
            DomainError: ``value`` is not a real number, NaN, infinite, or outside [lo, hi] with ``reject``.
            InvalidParameterError: the encoder was made without a client secret (batch only).
        """
        if self._memo is None or self._alpha is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (onebitmean memoizes from it)"
            )
        return self._memo(point=grid_point(self.params, self._position(value), self._alpha))

    def encode_positions(self, s: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.uint32]:
        """One report per simulated device (its alpha and its grid point's bit drawn from ``rng``, with the
        per-report path's quantized probabilities). For simulation only."""
        import numpy as np

        g = check_rng(rng)
        n = s.shape[0]
        params: OneBitMeanParams = self.params
        t = s * params.buckets
        low = np.floor(t)
        point = low.astype(np.int64) + ((u64(g, n) >> np.uint64(1)) < ((t - low) * TWO63F).astype(np.uint64))
        up = g.integers(0, params.buckets, size=n, dtype=np.int64) < point
        keep = u32(g, n) < np.uint32(params.truth_threshold)
        codes: NDArray[np.uint32] = np.equal(up, keep).astype(np.uint32)
        return codes


def exact_distribution(params: OneBitMeanParams, s: float) -> dict[int, Fraction]:
    """P(code | position s) over devices (alpha and the grid points' bits), exactly: module docstring."""
    t = s * params.buckets
    low = int(t)
    u = Fraction(int((t - low) * TWO63F), 1 << 63)
    keep = Fraction(params.truth_threshold, _TWO32)

    def one(point: int) -> Fraction:
        up = Fraction(point, params.buckets)
        return up * keep + (1 - up) * (1 - keep)

    p1 = (1 - u) * one(low) + (u * one(low + 1) if u else 0)
    return {0: 1 - p1, 1: p1}


class OneBitMeanSpec(OneDimSpec[OneBitMeanParams]):
    """1BitMean with alpha-point rounding for every layer: ``Campaign.onebitmean``, one-bit
    ``onebitmean_codes`` (packed), ``Report.onebitmean_code``; ``sr``'s moments and estimate."""

    name: ClassVar[str] = OneBitMeanParams.name
    params_type: ClassVar[type[Any]] = OneBitMeanParams
    wire: ClassVar[WireNames] = WireNames(
        campaign="onebitmean", batch="onebitmean_codes", report="onebitmean_code"
    )
    message_type: ClassVar[type[Message]] = campaign_pb2.OneBitMeanParams
    direct_fields: ClassVar[tuple[str, ...]] = ("truth_probability", "buckets")
    epsilon_fields: ClassVar[tuple[str, ...]] = ("buckets",)
    packed: ClassVar[bool] = True
    per_device_state: ClassVar[bool] = True

    def new_encoder(self, params: OneBitMeanParams) -> OneBitMeanEncoder:
        return OneBitMeanEncoder(params)

    def epsilon_inf(self, params: OneBitMeanParams) -> float:
        return params.epsilon_inf

    def memo_identity(self, params: OneBitMeanParams, value: Any) -> bytes:
        """The value itself (IEEE 754 bits): the device ledger charges epsilon_inf once per distinct value.

        What is memoized is the bit of the grid point a value rounds to, with the device's alpha; the ledger
        has no alpha (nor the secret), and two values with one floor point may round to different points,
        so it cannot merge them safely: one identity per value over-counts, never under-counts.
        """
        return struct.pack(">d", float(value))

    def needs_secret(self, params: OneBitMeanParams) -> bool:
        return True

    def encoder(
        self, params: OneBitMeanParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, "the device's client secret (onebitmean memoizes from it)"
            )
        return OneBitMeanEncoder(params, campaign_id=campaign_id, secret=secret).encode

    def inputs(self, params: OneBitMeanParams) -> tuple[Any, ...]:
        # The ends, the middle, and a value between grid points (where alpha decides the rounding).
        width = params.hi - params.lo
        return (params.lo, params.lo + width * 0.5, params.lo + width / (3.0 * params.buckets), params.hi)

    def distribution(self, params: OneBitMeanParams, s: float) -> dict[int, Fraction]:
        return exact_distribution(params, s)

    def exact_memoized_outputs(self, params: OneBitMeanParams, value: Any) -> Mapping[Hashable, Fraction]:
        # Unlimited reports of one value show its grid point's one memoized bit (alpha fixed).
        return self.exact_outputs(params, value)

    def largest(self) -> tuple[OneBitMeanParams, ...]:
        wide = 8.98e307  # the widest range with a finite width
        return (OneBitMeanParams(lo=-wide, hi=wide, truth_probability=1.0 - 2.0**-32, buckets=MAX_BUCKETS),)

    def examples(self) -> tuple[OneBitMeanParams, ...]:
        return (
            OneBitMeanParams.from_epsilon(0.0, 1.0, 0.5, buckets=4),
            OneBitMeanParams(lo=100.0, hi=104.0, truth_probability=0.75, buckets=3),
        )


SPEC = OneBitMeanSpec()
"""1BitMean with alpha-point rounding, as :mod:`ldp_client.registry` lists it."""
