"""What the three RAPPOR specs share (:mod:`ldp_client.mechanisms.rappor.spec`): the exact bit rates, f, p, q
on the wire, the f = 0 opt-in of a new campaign, the client secret, and (basic and boolean RAPPOR) reports
that are rows of packed bits in the ``bits`` layout with one cohort.

Importing this module does not import numpy; the batch, simulation and server methods do when called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple

from ldp_client._prob import PROB_ONE, quantize_probability
from ldp_client.codecs import (
    RowField,
    check_bit_rows,
    check_count,
    decode_bit_rows,
    packed_value,
)
from ldp_client.domain import DomainLike, make_by_fields
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.rappor.params import (
    RapporNoiseParams,
)
from ldp_client.secret import ClientSecret
from ldp_client.spec import (
    Kind,
    Layout,
    MechanismSpec,
    P,
    SecretSource,
    SumSampler,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "CohortBits",
    "PackedRowsSpec",
    "RapporFamilySpec",
    "bit_outputs",
    "bits_layout",
    "client_secret",
    "exact_bit_rates",
    "f_zero_opt_in",
    "noise_fields",
    "rows_array",
]


bits_layout: Final = functools.lru_cache(maxsize=256)(Layout.bits)
"""``Layout.bits(m, k)``, one object per shape: a Layout is immutable, and the ingest path asks for it once
per report (making one costs about 0.5 us, 3% of a single report's decode and increment)."""


def exact_bit_rates(params: RapporNoiseParams) -> tuple[Fraction, Fraction]:
    """(P(report bit 1 | Bloom bit 1), P(report bit 1 | Bloom bit 0)) exactly, from the quantized thresholds.

    The permanent response keeps the Bloom bit unless a Bernoulli(F/2**32) coin says to randomize it, then a
    fair coin: PRR = 1 w.p. 1 - F/2**33 over a set bit and F/2**33 over a clear one. The instantaneous
    response reports 1 w.p. Q/2**32 over a set PRR bit and P/2**32 over a clear one (CCS 2014, §3).
    """
    half_f = Fraction(params.f_threshold, 2 * PROB_ONE)
    q = Fraction(params.q_threshold, PROB_ONE)
    p = Fraction(params.p_threshold, PROB_ONE)
    return (1 - half_f) * q + half_f * p, half_f * q + (1 - half_f) * p


def bit_outputs(
    bloom: int, k: int, rates: tuple[Fraction, Fraction], weight: Fraction = Fraction(1)
) -> dict[int, Fraction]:
    """P(report bits = s) for every k-bit s, given the Bloom bits, times ``weight`` (small k only)."""
    if_set, if_clear = rates
    out: dict[int, Fraction] = {}
    for s in range(1 << k):
        prob = weight
        for i in range(k):
            one = if_set if (bloom >> i) & 1 else if_clear
            prob *= one if (s >> i) & 1 else 1 - one
        out[s] = prob
    return out


class CohortBits(NamedTuple):
    """A string-RAPPOR report read back from a journal row (``cohort``, ``bits`` like RapporReport)."""

    cohort: int
    bits: int


def client_secret(secret: SecretSource | None, name: str) -> ClientSecret:
    if secret is None:
        raise InvalidParameterError("secret", None, f"a ClientSecret (the {name} mechanism needs one)")
    return secret if isinstance(secret, ClientSecret) else secret()


def f_zero_opt_in(params: RapporNoiseParams) -> bool:
    """The wire's ``allow_f_zero``: sent only where it means something (f quantized to 0, opted in).

    With any f > 0 it stays unset, so those messages keep their bytes whatever the object's flag says.
    """
    return params.allow_f_zero and params.f_threshold == 0


def noise_fields(params: RapporNoiseParams) -> dict[str, object]:
    fields: dict[str, object] = {"f": params.f, "p": params.p, "q": params.q}
    if params.allow_f_zero:
        fields["allow_f_zero"] = True
    return fields


def rows_array(rows: list[bytes], nbytes: int) -> NDArray[np.uint8]:
    import numpy as np

    # A bytearray buffer, so the rows are writable like any other client-side array.
    return np.frombuffer(bytearray(b"".join(rows)), dtype=np.uint8).reshape(len(rows), nbytes)


def _unpack_int_row(row: bytes) -> int:
    return int.from_bytes(row, "little")


class RapporFamilySpec(MechanismSpec[P]):
    """What the three variants share: f, p, q on the wire, the f = 0 opt-in, a client secret, and the
    ``bits`` accumulator."""

    per_device_state: ClassVar[bool] = True
    message_name: ClassVar[str]
    """The ``Campaign.mechanism`` member's message type, named in errors."""

    def epsilon_inf(self, params: P) -> float:
        return float(params.epsilon_inf)  # type: ignore[attr-defined]

    def check_new_campaign(self, msg: Any) -> None:
        # An unset f reads as 0, so without this a campaign with no permanent randomized response
        # (epsilon_inf = inf: repeated reports of one value reveal it) would be created silently.
        if quantize_probability("f", msg.f) == 0 and not msg.allow_f_zero:
            raise InvalidParameterError(
                "f",
                msg.f,
                "a probability in (0, 1) when creating a campaign: f = 0 (also an unset f) turns off the "
                "permanent randomized response, so repeated reports of one value reveal it "
                "(epsilon_inf = inf); use the recommended f = 0.5 (or 0.25 for less noise), or opt in "
                f"explicitly with allow_f_zero = true in its {self.message_name} message (Python: "
                "allow_f_zero=True; ldp-aggregator campaign create: --param allow_f_zero=true)",
            )

    def needs_secret(self, params: P) -> bool:
        return True

    def _make(self, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]) -> Any:
        # The RAPPOR variants: their init fields by name, never epsilon.
        return make_by_fields(
            self.params_type,
            self.name,
            epsilon=epsilon,
            domain=domain,
            fields=fields,
            takes_domain=self.takes_domain,
            from_epsilon=None,
        )


class PackedRowsSpec(RapporFamilySpec[P]):
    """Basic and boolean RAPPOR: reports are k packed bits (``wire.batch`` rows; one cohort)."""

    kind: ClassVar[Kind] = Kind.SUPPORT

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: P, columns: Any) -> None:
        import numpy as np

        field = self.wire.batch
        k = params.k  # type: ignore[attr-defined]
        bits = check_bit_rows(field, columns, None, k)
        check_count("count", bits.shape[0])
        msg.count = bits.shape[0]
        setattr(msg, field, np.ascontiguousarray(bits).tobytes())

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: P, n: int) -> Any:
        field = self.wire.batch
        return decode_bit_rows(getattr(msg, field), n, params.k, field)  # type: ignore[attr-defined]

    def report_to_proto(self, msg: reports_pb2.Report, params: P, output: Any) -> None:
        setattr(msg, self.wire.report, packed_value("report", output, params.k))  # type: ignore[attr-defined]

    def report_from_proto(self, msg: reports_pb2.Report, params: P) -> Any:
        field = self.wire.report
        return decode_bit_rows(getattr(msg, field), 1, params.k, field, name_row=False)  # type: ignore[attr-defined]

    def batch_from_reports(self, params: P, reports: Sequence[Any]) -> Any:
        k, nbytes = params.k, params.num_bytes  # type: ignore[attr-defined]
        return rows_array([packed_value(f"reports[{i}]", r, k) for i, r in enumerate(reports)], nbytes)

    def row_fields(self, params: P) -> tuple[RowField, ...]:
        return (RowField((self.wire.batch,), params.num_bytes),)  # type: ignore[attr-defined]

    def row_packer(self, params: P) -> Callable[[Any], bytes]:
        nbytes = params.num_bytes  # type: ignore[attr-defined]
        return lambda r: r.to_bytes(nbytes, "little")

    def row_unpacker(self, params: P) -> Callable[[bytes], Any]:
        return _unpack_int_row

    def layout(self, params: P) -> Layout:
        return bits_layout(1, params.k)  # type: ignore[attr-defined]

    def layout_batch(self, params: P, columns: Any) -> Any:
        return None, columns

    def _set_counts(self, true_counts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        raise NotImplementedError

    def sum_sampler(self, params: P) -> SumSampler | None:
        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
            from ldp_client.mechanisms.rappor.sampling import sample_rappor_bits

            set_counts, reports = self._set_counts(true_counts)
            return reports, sample_rappor_bits(params, set_counts, reports, rng)  # type: ignore[arg-type]

        return sample

    def _ones_likelihood(
        self, params: P, columns: Any
    ) -> tuple[NDArray[np.uint8], NDArray[np.float64], float, float]:
        """(unpacked bits (n, k), log P(bits | all Bloom bits 0), a1, a0): a set Bloom bit adds a1 to the
        log-likelihood of a report bit 1 and a0 to that of a 0."""
        import math

        import numpy as np

        if_set, if_clear = params.prob_one_if_set, params.prob_one_if_clear  # type: ignore[attr-defined]
        a1, a0 = math.log(if_set / if_clear), math.log((1.0 - if_set) / (1.0 - if_clear))
        k = params.k  # type: ignore[attr-defined]
        bits = np.unpackbits(np.asarray(columns, dtype=np.uint8), axis=1, count=k, bitorder="little")
        ones = bits.sum(axis=1, dtype=np.int64).astype(np.float64)
        # log P(S | all Bloom bits 0) = ones log c + (k - ones) log(1 - c): common to every value.
        offset = ones * math.log(if_clear) + (k - ones) * math.log(1.0 - if_clear)
        return bits, offset, a1, a0
