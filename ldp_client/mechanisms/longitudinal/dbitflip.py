"""dBitFlip: histograms over k buckets with memoized bits (Ding, Kulkarni, Yekhanin, "Collecting Telemetry
Data Privately", NeurIPS 2017, §2.2 and §3; deployed in Windows telemetry).

A device samples d of the k buckets once, J = {j_1, ..., j_d} (uniform without replacement), and reports,
for each sampled bucket j, one bit: 1 w.p. p if its value is in bucket j and w.p. 1 - p otherwise, with
p = e^(eps/2) / (e^(eps/2) + 1) (quantized: T / 2**32). The report is (J, the d bits).

**Memoization** (§3, "the responses are memoized"): J and, for every sampled bucket j, both possible bits
(b_j^in, sent when the value is in bucket j, 1 w.p. p; b_j^out, sent when it is not, 1 w.p. 1 - p) are drawn
once from the client secret (:mod:`~ldp_client.mechanisms.longitudinal.memo`, label
``ldp-client/dbitflip/memo/v1``, empty key: J by a partial Fisher-Yates shuffle with Lemire's uniform draws,
then b_j^in and b_j^out per sampled bucket in draw order). So the report of a value is permanent: the same
at every report, whatever the day; and every value outside J gets the same report, so a device whose value
moves among the k - d buckets it did not sample reveals nothing at all. No fresh randomness is drawn per
report.

Privacy, exactly (the enumeration of the conformance test): two values v != v' change the bits of at most
two sampled buckets (both when d >= 2), so the worst ratio is (T / (2**32 - T))^2: epsilon =
2 ln(T / (2**32 - T)); with d = 1 one bucket only: ln(T / (2**32 - T)). Unlimited reports of one value
show the one permanent report: epsilon_inf = epsilon.

Estimation through the one Support estimator: a report supports bucket v when v is in J and its bit is 1,
which happens w.p. p* = (d/k) p for a user in bucket v and q* = (d/k)(1 - p) otherwise, independently
across users; count_hat_v = (C_v - n q*) / (p* - q*) is unbiased (it is DKY's estimator with the expected
number n d / k of devices sampling v in place of the actual one).

Wire: ``Campaign.dbitflip`` (domain, d, bit_probability); ``ReportBatch.dbitflip`` (``DBitFlipColumns``:
``sampled`` and ``bits``, n rows of ceil(k/8) bytes each, little bit order; a sampled row has exactly d bits
set, a bit row only bits its sampled row sets); ``Report.dbitflip`` (one such pair). On the device a report
is the pair of ints (sampled, bits), bit i = bucket i.

Importing this module does not import numpy.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client._prob import (
    PROB_ONE,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    rounding_note,
    threshold_to_probability,
)
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.codecs import (
    RowField,
    as_array,
    check_count,
    check_length,
)
from ldp_client.domain import Domain, DomainLike, check_epsilon, report_quantization
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._oracle import (
    FrequencyOracle,
    OracleSpec,
    as_domain,
    bit_column_counts,
    bits_value,
    check_rows,
)
from ldp_client.mechanisms.longitudinal.common import MemoizedDomainSpec, epsilon_of, probability
from ldp_client.mechanisms.longitudinal.memo import MemoWords, as_secret, memo_seed
from ldp_client.mechanisms.numeric.base import as_int
from ldp_client.spec import SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from google.protobuf.message import Message
    from numpy.typing import NDArray

__all__ = ["DBITFLIP_LABEL", "SPEC", "DBitFlipEncoder", "DBitFlipParams", "DBitFlipSpec", "memoized_state"]

DBITFLIP_LABEL: Final = b"ldp-client/dbitflip/memo/v1"
MAX_BUCKETS: Final = 1 << 16
_HALF: Final = PROB_ONE // 2
# Simulated reports per block of the batch encoder (bounded (block, k) temporaries).
_BLOCK: Final = 1 << 14


@dataclass(frozen=True, kw_only=True)
class DBitFlipParams(FrequencyOracle):
    """dBitFlip over k buckets (the domain): d buckets sampled per device, ``bit_probability`` p the
    probability of a 1 for the device's own bucket (module docstring). Use :meth:`from_epsilon`."""

    name: ClassVar[str] = "dbitflip"
    d: int
    bit_probability: float
    bit_threshold: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_domain(self)
        k = self.domain.size
        if k > MAX_BUCKETS:
            raise InvalidParameterError("domain.size", k, f"at most {MAX_BUCKETS} buckets for dbitflip")
        if isinstance(self.d, bool) or not isinstance(self.d, int) or not 1 <= self.d <= k:
            raise InvalidParameterError("d", self.d, f"an integer in [1, k] = [1, {k}]")
        t = quantize_probability("bit_probability", self.bit_probability)
        if not _HALF < t < PROB_ONE:
            raise InvalidParameterError(
                "bit_probability",
                self.bit_probability,
                "a probability in (1/2, 1)" + rounding_note("bit_probability", self.bit_probability, t),
            )
        object.__setattr__(self, "bit_threshold", t)

    @classmethod
    def from_epsilon(cls, domain: DomainLike, epsilon: float, *, d: int = 1) -> DBitFlipParams:
        """dBitFlip at ``epsilon``: the largest T with m ln(T / (2**32 - T)) <= eps, m = 2 if d >= 2 else 1
        (p = e^(eps/m) / (e^(eps/m) + 1), rounded toward privacy, decided exactly)."""
        eps = check_epsilon(epsilon)
        dom = Domain.of(domain)
        m = 2 if isinstance(d, int) and d >= 2 else 1
        per_bit = eps / m
        t = largest_threshold(
            lambda x: ratio_within_exp(x**m, (PROB_ONE - x) ** m, eps),
            math.floor(PROB_ONE / (1.0 + math.exp(-per_bit))),
            _HALF + 1,
            PROB_ONE - 1,
        )
        if t == 0:
            raise InvalidParameterError("epsilon", epsilon, "a value representable in 32-bit thresholds")
        params = cls(domain=dom, d=d, bit_probability=threshold_to_probability(t))
        report_quantization(eps, params.epsilon)
        return params

    @property
    def differing_buckets(self) -> int:
        """How many sampled buckets two values can both fall in: 2 (1 when d = 1)."""
        return min(self.d, 2)

    @property
    def p_star(self) -> float:
        return float(Fraction(self.d, self.domain.size) * probability(self.bit_threshold))

    @property
    def q_star(self) -> float:
        return float(Fraction(self.d, self.domain.size) * (1 - probability(self.bit_threshold)))

    @property
    def epsilon(self) -> float:
        t = self.bit_threshold
        return epsilon_of(Fraction(t, PROB_ONE - t) ** self.differing_buckets)

    @property
    def epsilon_inf(self) -> float:
        """The report of a value is permanent: unlimited reports of it cost one report's epsilon."""
        return self.epsilon

    @property
    def report_bits(self) -> int:
        return 2 * self.domain.size

    @property
    def num_bytes(self) -> int:
        """Bytes of one packed row: ceil(k/8)."""
        return (self.domain.size + 7) // 8


@dataclass(frozen=True, slots=True)
class MemoState:
    """A device's memoized dBitFlip state: the sampled buckets in draw order and their two bits each."""

    sampled: tuple[int, ...]
    bit_in: tuple[bool, ...]
    bit_out: tuple[bool, ...]


def memoized_state(secret: SecretSource, params: DBitFlipParams, *, campaign_id: str) -> MemoState:
    """The device's memoized state from the stream (label ``DBITFLIP_LABEL``, empty key): a partial
    Fisher-Yates shuffle of 0..k-1 (position i swapped with i + below(k - i), i < d), then per sampled bucket
    in draw order a word below T (b_in) and a word below 2**32 - T (b_out). Deterministic."""
    words = MemoWords(as_secret(secret).prf, memo_seed(DBITFLIP_LABEL, campaign_id, b""))
    k = params.domain.size
    moved: dict[int, int] = {}  # the shuffle's swaps: position -> bucket (the identity elsewhere)
    sampled = []
    for i in range(params.d):
        j = i + words.below(k - i)
        sampled.append(moved.get(j, j))
        moved[j] = moved.get(i, i)
    t = params.bit_threshold
    bit_in, bit_out = [], []
    for _ in sampled:
        bit_in.append(words.bernoulli(t))
        bit_out.append(words.bernoulli(PROB_ONE - t))
    return MemoState(tuple(sampled), tuple(bit_in), tuple(bit_out))


class DBitFlipEncoder:
    """A device's dBitFlip encoder: everything memoized from the client secret at construction.

    Args:
        params: the campaign's parameters.
        campaign_id: the campaign (part of the memoized stream).
        secret: the device's client secret (or a function returning it).
    """

    __slots__ = ("_in_mask", "_out_mask", "_sampled", "params")

    def __init__(self, params: DBitFlipParams, *, campaign_id: str, secret: SecretSource) -> None:
        if not isinstance(params, DBitFlipParams):
            raise InvalidParameterError("params", type(params).__name__, "a DBitFlipParams")
        self.params = params
        state = memoized_state(secret, params, campaign_id=campaign_id)
        self._sampled = sum(1 << j for j in state.sampled)
        self._in_mask = sum(1 << j for j, b in zip(state.sampled, state.bit_in, strict=True) if b)
        self._out_mask = sum(1 << j for j, b in zip(state.sampled, state.bit_out, strict=True) if b)

    def __repr__(self) -> str:
        return f"DBitFlipEncoder(params={self.params!r})"

    def encode(self, value: str | int) -> tuple[int, int]:
        """The permanent report of ``value`` (DomainError outside the domain): (sampled, bits) as ints, bit
        i = bucket i. The bit of the value's own bucket (when sampled) is its b_in, every other its b_out."""
        own = 1 << self.params.domain.index(value)
        if not self._sampled & own:
            return self._sampled, self._out_mask
        return self._sampled, (self._out_mask & ~own) | (self._in_mask & own)


def encode_batch(
    params: DBitFlipParams, indices: Any, rng: np.random.Generator
) -> tuple[NDArray[np.uint8], NDArray[np.uint8]]:
    """One report per simulated device (each with its own memoized state, drawn from ``rng``): packed
    (sampled, bits) rows, each (n, ceil(k/8)). For simulation only. J: the d smallest of k uniform keys (a
    uniform d-subset); bits: a u32 below T (own bucket) or 2**32 - T (any other)."""
    import numpy as np

    from ldp_client._npbits import pack_bits
    from ldp_client.mechanisms._batchbits import as_index_array

    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (for simulation only)")
    k, d = params.domain.size, params.d
    idx = as_index_array(indices, k)
    n = idx.shape[0]
    sampled = np.empty((n, params.num_bytes), dtype=np.uint8)
    bits = np.empty_like(sampled)
    cols = np.arange(k)
    t = params.bit_threshold
    for start in range(0, n, _BLOCK):
        v = idx[start : start + _BLOCK]
        m = v.shape[0]
        keys = rng.random((m, k))
        chosen = np.zeros((m, k), dtype=np.bool_)
        if d == k:
            chosen[:] = True
        else:
            np.put_along_axis(chosen, np.argpartition(keys, d - 1, axis=1)[:, :d], True, axis=1)
        words = rng.integers(0, PROB_ONE, size=(m, k), dtype=np.uint32)
        own = cols[None, :] == v[:, None]
        ones = np.where(own, words < np.uint32(t), words < np.uint32(PROB_ONE - t)) & chosen
        sampled[start : start + m] = pack_bits(chosen)
        bits[start : start + m] = pack_bits(ones)
    return sampled, bits


def _rows(name: str, columns: Any, params: DBitFlipParams) -> tuple[NDArray[np.uint8], NDArray[np.uint8]]:
    """Validated (sampled, bits) rows: uint8 (n, ceil(k/8)) each, zero padding, d bits per sampled row,
    bits only where sampled."""
    import numpy as np

    if not isinstance(columns, tuple) or len(columns) != 2:
        raise InvalidReportError(name, type(columns).__name__, "a (sampled, bits) pair of packed row arrays")
    nb, k = params.num_bytes, params.domain.size
    sampled = as_array(f"{name}.sampled", columns[0], "uint8 packed bit rows", 2)
    bits = as_array(f"{name}.bits", columns[1], "uint8 packed bit rows", 2)
    for c, rows in (("sampled", sampled), ("bits", bits)):
        if rows.dtype != np.uint8 or rows.shape[1] != nb:
            raise InvalidReportError(f"{name}.{c}", f"{rows.dtype}{rows.shape}", f"uint8 of shape (n, {nb})")
    if sampled.shape[0] != bits.shape[0]:
        raise InvalidReportError(
            f"{name}.bits", f"<{bits.shape[0]} rows>", f"{sampled.shape[0]} rows, as sampled"
        )
    check_rows(sampled, k, params.d, f"{name}.sampled")
    check_rows(bits, k, None, f"{name}.bits")
    stray = (bits & ~sampled).any(axis=1)
    if stray.any():
        row = int(np.argmax(stray))
        raise InvalidReportError(
            f"{name}.bits[{row}]", "a bit outside the sampled buckets", "bits only where sampled"
        )
    return sampled, bits


class DBitFlipSpec(MemoizedDomainSpec, OracleSpec[DBitFlipParams]):
    """dBitFlip for every layer: (sampled, bits) rows on the wire, the ``support`` layout (the bits set per
    bucket), Support with p* = (d/k) p and q* = (d/k)(1 - p); module docstring."""

    name: ClassVar[str] = DBitFlipParams.name
    params_type: ClassVar[type[Any]] = DBitFlipParams
    wire: ClassVar[WireNames] = WireNames(campaign="dbitflip", batch="dbitflip", report="dbitflip")
    message_type: ClassVar[type[Message]] = campaign_pb2.DBitFlipParams
    direct_fields: ClassVar[tuple[str, ...]] = ("d", "bit_probability")
    epsilon_fields: ClassVar[Mapping[str, Callable[[object], Any]]] = {"d": functools.partial(as_int, "d")}
    encoder_type: ClassVar[Callable[..., Any]] = DBitFlipEncoder

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: DBitFlipParams, columns: Any) -> None:
        import numpy as np

        sampled, bits = _rows(self.wire.batch, columns, params)
        check_count("count", sampled.shape[0])
        msg.count = sampled.shape[0]
        msg.dbitflip.sampled = np.ascontiguousarray(sampled).tobytes()
        msg.dbitflip.bits = np.ascontiguousarray(bits).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: DBitFlipParams, n: int) -> Any:
        import numpy as np

        nb = params.num_bytes
        out = []
        for c in ("sampled", "bits"):
            raw = getattr(msg.dbitflip, c)
            check_length(f"dbitflip.{c}", raw, n * nb, f"count * ceil(k/8) = {n} * {nb}")
            out.append(np.frombuffer(raw, dtype=np.uint8).reshape(n, nb))
        return _rows(self.wire.batch, (out[0], out[1]), params)

    def report_to_proto(self, msg: reports_pb2.Report, params: DBitFlipParams, output: Any) -> None:
        sampled, bits = _report_value("report", output, params)
        msg.dbitflip.sampled = sampled
        msg.dbitflip.bits = bits

    def report_from_proto(self, msg: reports_pb2.Report, params: DBitFlipParams) -> Any:
        import numpy as np

        nb = params.num_bytes
        rows = []
        for c in ("sampled", "bits"):
            raw = getattr(msg.dbitflip, c)
            check_length(f"dbitflip.{c}", raw, nb, f"ceil(k/8) for k={params.domain.size}")
            rows.append(np.frombuffer(raw, dtype=np.uint8).reshape(1, nb))
        return _rows(self.wire.report, (rows[0], rows[1]), params)

    def batch_from_reports(self, params: DBitFlipParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        pairs = [_report_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        nb = params.num_bytes
        sampled = np.frombuffer(bytearray(b"".join(s for s, _ in pairs)), dtype=np.uint8).reshape(
            len(pairs), nb
        )
        bits = np.frombuffer(bytearray(b"".join(b for _, b in pairs)), dtype=np.uint8).reshape(len(pairs), nb)
        return sampled, bits

    def row_fields(self, params: DBitFlipParams) -> tuple[RowField, ...]:
        nb = params.num_bytes
        return (RowField((self.wire.batch, "sampled"), nb), RowField((self.wire.batch, "bits"), nb))

    def row_packer(self, params: DBitFlipParams) -> Callable[[Any], bytes]:
        nb = params.num_bytes
        return lambda r: r[0].to_bytes(nb, "little") + r[1].to_bytes(nb, "little")

    def row_unpacker(self, params: DBitFlipParams) -> Callable[[bytes], Any]:
        nb = params.num_bytes
        return lambda row: (int.from_bytes(row[:nb], "little"), int.from_bytes(row[nb:], "little"))

    # ------------------------------------------------------------------------------------ simulation

    def encode_batch(
        self,
        params: DBitFlipParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch(params, values, rng)

    # ---------------------------------------------------------------------------------------- server

    def layout_batch(self, params: DBitFlipParams, columns: Any) -> Any:
        sampled, bits = _rows("reports", columns, params)
        return int(sampled.shape[0]), bit_column_counts(bits, params.domain.size)

    # ------------------------------------------------------------------------------ conformance tests

    def examples(self) -> tuple[DBitFlipParams, ...]:
        return (
            DBitFlipParams.from_epsilon(3, 1.0, d=2),
            DBitFlipParams.from_epsilon(("red", "green", "blue", "cyan"), 2.0, d=1),
            DBitFlipParams(domain=Domain.of(4), d=4, bit_probability=0.75),
        )

    def largest(self) -> tuple[DBitFlipParams, ...]:
        return (DBitFlipParams(domain=Domain.of(MAX_BUCKETS), d=MAX_BUCKETS, bit_probability=1.0 - 2.0**-32),)

    def exact_outputs(self, params: DBitFlipParams, value: Any) -> Mapping[Hashable, Fraction]:
        # Every d-subset equally likely, then each sampled bucket's bit: p for the value's own, 1 - p else.
        v = params.domain.index(value)
        p = probability(params.bit_threshold)
        subsets = list(itertools.combinations(range(params.domain.size), params.d))
        out: dict[Hashable, Fraction] = {}
        for subset in subsets:
            mask = sum(1 << j for j in subset)
            for ones in itertools.product((0, 1), repeat=params.d):
                prob = Fraction(1, len(subsets))
                for j, b in zip(subset, ones, strict=True):
                    one = p if j == v else 1 - p
                    prob *= one if b else 1 - one
                out[(mask, sum(b << j for j, b in zip(subset, ones, strict=True)))] = prob
        return out

    def exact_memoized_outputs(self, params: DBitFlipParams, value: Any) -> Mapping[Hashable, Fraction]:
        # The whole report is memoized: unlimited reports of a value show exactly one report.
        return self.exact_outputs(params, value)


def _report_value(field_name: str, report: object, params: DBitFlipParams) -> tuple[bytes, bytes]:
    """One device report (sampled, bits) as its two row byte strings, checked."""
    if not isinstance(report, tuple) or len(report) != 2:
        raise InvalidReportError(field_name, type(report).__name__, "a (sampled, bits) pair of ints")
    k, d = params.domain.size, params.d
    sampled = bits_value(f"{field_name}.sampled", report[0], k, d)
    bits = bits_value(f"{field_name}.bits", report[1], k, None)
    if int(report[1]) & ~int(report[0]):
        raise InvalidReportError(
            f"{field_name}.bits", "a bit outside the sampled buckets", "bits only where sampled"
        )
    return sampled, bits


SPEC = DBitFlipSpec()
"""dBitFlip, as :mod:`ldp_client.registry` lists it."""
