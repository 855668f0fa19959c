"""The three RAPPOR variants for every layer (:mod:`ldp_client.spec`): string, basic and boolean RAPPOR.

* **string RAPPOR** (``rappor``, :data:`RAPPOR_SPEC`, kind RAPPOR): a report is the device's cohort and k
  bits (``ReportBatch.rappor``: a uint32 cohort column and packed bit rows; journal row: u32 cohort, then
  ceil(k/8) bytes); the ``bits`` accumulator keeps per cohort the reports and the ones of each bit (m x k),
  and the server estimates candidate strings from them (regression, decoding).
* **basic RAPPOR** (``basic-rappor``, :data:`BASIC_SPEC`, kind SUPPORT): one-hot over a declared domain of
  d values, packed rows of d bits (``basic_bits``); ``bits`` accumulator (1, d). Value v is supported by a
  report with bit v set.
* **boolean RAPPOR** (``boolean-rappor``, :data:`BOOLEAN_SPEC`, kind SUPPORT): one bit (``boolean_bits``,
  one byte per report); ``bits`` accumulator (1, 1); items "false" and "true".

The bit rates: a report bit is 1 with ``prob_one_if_set`` where the value's Bloom (or one-hot) bit is set
and ``prob_one_if_clear`` where it is clear. So for basic and boolean RAPPOR, in the Support contract's terms,
an item's holders support it with p* = ``prob_one_if_set`` and everyone else with q* =
``prob_one_if_clear`` (boolean's "false" is supported by a clear bit: p* = 1 - ``prob_one_if_clear``,
q* = 1 - ``prob_one_if_set``), and the estimates carry the longitudinal bound ``epsilon_inf``.

Importing this module does not import numpy; the batch, simulation and server methods do when called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    U32_LE,
    RowField,
    as_array,
    as_int,
    check_bit_rows,
    check_count,
    check_indices,
    check_length,
    check_padding,
    decode_bit_rows,
    domain_from_proto,
    domain_to_proto,
    packed_value,
)
from ldp_client.domain import Domain, DomainLike
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._oracle import domain_items
from ldp_client.mechanisms.rappor.batch import encode_batch_basic, encode_batch_boolean, encode_batch_rappor
from ldp_client.mechanisms.rappor.encoding import (
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    RapporReport,
    basic_memo_identity,
    bloom_bits,
    boolean_memo_identity,
    string_memo_identity,
)
from ldp_client.mechanisms.rappor.params import (
    BasicRapporParams,
    BooleanRapporParams,
    RapporParams,
)
from ldp_client.mechanisms.rappor.spec_base import (
    CohortBits,
    PackedRowsSpec,
    RapporFamilySpec,
    bit_outputs,
    bits_layout,
    client_secret,
    exact_bit_rates,
    f_zero_opt_in,
    noise_fields,
    rows_array,
)
from ldp_client.spec import (
    BitsView,
    Kind,
    Layout,
    MakeArgs,
    SecretSource,
    SumSampler,
    Support,
    WireNames,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2

__all__ = [
    "BASIC_SPEC",
    "BOOLEAN_SPEC",
    "RAPPOR_SPEC",
    "BasicRapporSpec",
    "BooleanRapporSpec",
    "RapporSpec",
    "exact_bit_rates",
]

_EXAMPLE_CAMPAIGN: Final = "example"
# Candidate inputs tried (in order) when looking for two strings that show string RAPPOR's worst case.
_SEARCH_LIMIT: Final = 10_000
# The sum runner hashes every (cohort, label) once for all repeats up to this many hashes (else per repeat).
_MAX_POSITION_TABLE: Final = 1 << 22
# Basic RAPPOR: report patterns are counted (a paired campaign's joint table) up to this many bits.
_MAX_PATTERN_BITS: Final = 12


# ------------------------------------------------------------------------------------- string RAPPOR


def _rappor_value(field: str, report: object, params: RapporParams) -> tuple[int, bytes]:
    missing = object()
    cohort, bits = getattr(report, "cohort", missing), getattr(report, "bits", missing)
    if cohort is missing or bits is missing:
        raise InvalidReportError(field, report, "a RapporReport(cohort, bits)")
    allowed = f"a cohort in [0, {params.m - 1}]"
    c = as_int(f"{field}.cohort", cohort, allowed)
    if not 0 <= c < params.m:
        raise InvalidReportError(f"{field}.cohort", c, allowed)
    return c, packed_value(f"{field}.bits", bits, params.k)


class RapporSpec(RapporFamilySpec[RapporParams]):
    """String RAPPOR (module docstring): Bloom filters in cohorts, candidate strings estimated by the server.

    Wire: ``Campaign.rappor`` (k, h, m, f, p, q, allow_f_zero), ``ReportBatch.rappor`` (``cohorts``: n
    little-endian uint32 below m; ``bits``: n rows of ceil(k/8) bytes, zero padding), ``Report.rappor``
    (cohort, bits). Batch columns ``(cohorts uint32 (n,), bits uint8 (n, ceil(k/8)))``.
    """

    name: ClassVar[str] = RapporParams.name
    params_type: ClassVar[type[Any]] = RapporParams
    kind: ClassVar[Kind] = Kind.RAPPOR
    wire: ClassVar[WireNames] = WireNames(campaign="rappor", batch="rappor", report="rappor")
    estimates_candidates: ClassVar[bool] = True
    message_name: ClassVar[str] = "RapporParams"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> RapporParams:
        return self._make(epsilon, domain, fields)  # type: ignore[no-any-return]

    def make_args(self, params: RapporParams) -> MakeArgs:
        return MakeArgs(fields={"k": params.k, "h": params.h, "m": params.m, **noise_fields(params)})

    def params_to_proto(self, params: RapporParams) -> campaign_pb2.RapporParams:
        return campaign_pb2.RapporParams(
            k=params.k, h=params.h, m=params.m, f=params.f, p=params.p, q=params.q,
            allow_f_zero=f_zero_opt_in(params),
        )  # fmt: skip

    def params_from_proto(self, msg: campaign_pb2.RapporParams) -> RapporParams:
        # An f of 0 is refused when parameters are made, but a campaign on the wire already exists: an
        # unset f means f = 0, and decoding it must describe it (epsilon_inf = inf), not fail, with or
        # without the message's allow_f_zero (campaigns stored before that field existed have none).
        # Devices cap it with Reporter(max_epsilon_inf=...); creating a campaign is checked by
        # check_new_campaign. So the object reads as opted in, and params_to_proto then sends
        # allow_f_zero = true with every f = 0: an opted-in campaign round-trips.
        return RapporParams(k=msg.k, h=msg.h, m=msg.m, f=msg.f, p=msg.p, q=msg.q, allow_f_zero=True)

    def encoder(
        self, params: RapporParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return RapporEncoder(params, campaign_id=campaign_id, secret=client_secret(secret, self.name)).encode

    def memo_identity(self, params: RapporParams, value: Any) -> bytes:
        return string_memo_identity(value)

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: RapporParams, columns: Any) -> None:
        import numpy as np

        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError("rappor", type(columns).__name__, "a (cohorts, bits) tuple of arrays")
        cohorts = as_array("rappor.cohorts", columns[0], "integers", 1)
        if not np.issubdtype(cohorts.dtype, np.integer):
            raise InvalidReportError("rappor.cohorts", str(cohorts.dtype), "an integer dtype")
        n = cohorts.shape[0]
        check_count("count", n)
        check_indices(cohorts, params.m, "rappor.cohorts", "a cohort")
        bits = check_bit_rows("rappor.bits", columns[1], n, params.k)
        msg.count = n
        msg.rappor.cohorts = cohorts.astype(U32_LE).tobytes()
        msg.rappor.bits = np.ascontiguousarray(bits).tobytes()

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: RapporParams, n: int) -> Any:
        import numpy as np

        cols = msg.rappor
        check_length("rappor.cohorts", cols.cohorts, 4 * n, f"4 * count for count={n} little-endian uint32")
        nbytes = params.num_bytes
        check_length("rappor.bits", cols.bits, n * nbytes, f"count * ceil(k/8) = {n} * {nbytes}")
        cohorts = np.frombuffer(cols.cohorts, dtype=U32_LE)
        check_indices(cohorts, params.m, "rappor.cohorts", "a cohort")
        bits = np.frombuffer(cols.bits, dtype=np.uint8).reshape(n, nbytes)
        check_padding(bits, params.k, "rappor.bits")
        return cohorts.astype(np.uint32, copy=False), bits

    def report_to_proto(self, msg: reports_pb2.Report, params: RapporParams, output: Any) -> None:
        msg.rappor.cohort, msg.rappor.bits = _rappor_value("report", output, params)

    def report_from_proto(self, msg: reports_pb2.Report, params: RapporParams) -> Any:
        import numpy as np

        if msg.rappor.cohort >= params.m:
            raise InvalidReportError("rappor.cohort", msg.rappor.cohort, f"a cohort in [0, {params.m - 1}]")
        bits = decode_bit_rows(msg.rappor.bits, 1, params.k, "rappor.bits", name_row=False)
        return np.array([msg.rappor.cohort], dtype=np.uint32), bits

    def batch_from_reports(self, params: RapporParams, reports: Sequence[Any]) -> Any:
        import numpy as np

        pairs = [_rappor_value(f"reports[{i}]", r, params) for i, r in enumerate(reports)]
        cohorts = np.array([c for c, _ in pairs], dtype=np.uint32)
        return cohorts, rows_array([b for _, b in pairs], params.num_bytes)

    def row_fields(self, params: RapporParams) -> tuple[RowField, ...]:
        return (RowField(("rappor", "cohorts"), 4), RowField(("rappor", "bits"), params.num_bytes))

    def row_packer(self, params: RapporParams) -> Callable[[Any], bytes]:
        nbytes = params.num_bytes
        return lambda r: r.cohort.to_bytes(4, "little") + r.bits.to_bytes(nbytes, "little")

    def row_unpacker(self, params: RapporParams) -> Callable[[bytes], Any]:
        return lambda row: CohortBits(int.from_bytes(row[:4], "little"), int.from_bytes(row[4:], "little"))

    def encode_batch(
        self,
        params: RapporParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch_rappor(params, campaign_id=campaign_id, values=values, labels=labels, rng=rng)

    def encode_batch_shared(
        self,
        params: RapporParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
        device_words: NDArray[np.uint64],
    ) -> Any:
        import numpy as np

        # The device's cohort is its secret's HMAC prefix mod m: the word mod m (docs/rappor-encoding.md §4).
        cohorts = (device_words % np.uint64(params.m)).astype(np.uint32)
        return encode_batch_rappor(
            params, campaign_id=campaign_id, values=values, labels=labels, rng=rng, cohorts=cohorts
        )

    def sum_sampler(self, params: RapporParams) -> SumSampler | None:
        tables: dict[tuple[str, tuple[str, ...]], Any] = {}

        def sample(
            true_counts: NDArray[np.int64],
            rng: np.random.Generator,
            *,
            campaign_id: str,
            labels: Sequence[str],
        ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
            from ldp_client.mechanisms.rappor.sampling import bloom_position_table, sample_rappor_counts

            key = (campaign_id, tuple(labels))
            table = tables.get(key)
            if table is None and params.m * len(labels) <= _MAX_POSITION_TABLE:
                # Hash every (cohort, label) once for all the repeats of a run instead of once per repeat.
                table = tables[key] = bloom_position_table(params, campaign_id=campaign_id, labels=labels)
            ones, reports = sample_rappor_counts(
                params,
                campaign_id=campaign_id,
                labels=labels,
                true_counts=true_counts,
                rng=rng,
                position_table=table,
            )
            return reports, ones

        return sample

    def layout(self, params: RapporParams) -> Layout:
        return bits_layout(params.m, params.k)

    def layout_batch(self, params: RapporParams, columns: Any) -> Any:
        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError("reports", type(columns).__name__, "a (cohorts, bits) tuple for rappor")
        return columns

    def campaign_inputs(self, params: RapporParams, campaign_id: str) -> tuple[Any, ...]:
        """Two strings whose Bloom filters in one cohort have h bits each and no bit in common: the pair
        that reaches epsilon (the first such pair of ``value-0``, ``value-1``, ...)."""
        return _worst_pair(params, campaign_id)

    def inputs(self, params: RapporParams) -> tuple[Any, ...]:
        return self.campaign_inputs(params, _EXAMPLE_CAMPAIGN)

    def campaign_outputs(
        self, params: RapporParams, value: Any, campaign_id: str
    ) -> Mapping[Hashable, Fraction]:
        """Every report (cohort, bits) of a device with a uniformly random secret: the cohort uniform on
        [0, m) (the secret's HMAC prefix mod m, its bias of at most m/2**64 ignored), then each bit
        independently 1 with the exact rate of its Bloom bit in that cohort."""
        rates = exact_bit_rates(params)
        weight = Fraction(1, params.m)
        out: dict[Hashable, Fraction] = {}
        for cohort in range(params.m):
            bloom = bloom_bits(campaign_id, cohort, value, params.k, params.h)
            for s, prob in bit_outputs(bloom, params.k, rates, weight).items():
                out[RapporReport(cohort=cohort, bits=s)] = prob
        return out

    def exact_outputs(self, params: RapporParams, value: Any) -> Mapping[Hashable, Fraction]:
        """:meth:`campaign_outputs` for a campaign called ``example`` (string RAPPOR's Bloom filters depend
        on the campaign id)."""
        return self.campaign_outputs(params, value, _EXAMPLE_CAMPAIGN)

    def examples(self) -> tuple[RapporParams, ...]:
        return (
            RapporParams(k=4, h=2, m=2),
            RapporParams(k=3, h=1, m=1, f=0.25, p=0.25, q=0.75),
        )


@functools.lru_cache(maxsize=32)
def _worst_pair(params: RapporParams, campaign_id: str) -> tuple[str, str]:
    if 2 * params.h > params.k:
        raise InvalidParameterError(
            "h", params.h, f"at most k/2 = {params.k // 2} for two disjoint Bloom filters of h bits"
        )
    seen: list[dict[int, int]] = []  # per candidate: cohort -> Bloom bits (only filters of h distinct bits)
    for i in range(_SEARCH_LIMIT):
        value = f"value-{i}"
        filters = {}
        for cohort in range(params.m):
            bits = bloom_bits(campaign_id, cohort, value, params.k, params.h)
            if bits.bit_count() == params.h:
                filters[cohort] = bits
        for j, other in enumerate(seen):
            if any(c in other and other[c] & bits == 0 for c, bits in filters.items()):
                return f"value-{j}", value
        seen.append(filters)
    raise InvalidParameterError(  # pragma: no cover - needs hashes far from uniform
        "params", params, f"two strings with disjoint Bloom filters among the first {_SEARCH_LIMIT}"
    )


# -------------------------------------------------------------------------------------- basic RAPPOR


class BasicRapporSpec(PackedRowsSpec[BasicRapporParams]):
    """Basic RAPPOR (module docstring): one-hot over a declared domain, then PRR and IRR.

    Wire: ``Campaign.basic_rappor`` (domain, f, p, q, allow_f_zero), ``ReportBatch.basic_bits`` (n packed
    rows of ceil(d/8) bytes), ``Report.basic_bits``. Batch columns: uint8 (n, ceil(d/8)).
    """

    name: ClassVar[str] = BasicRapporParams.name
    params_type: ClassVar[type[Any]] = BasicRapporParams
    wire: ClassVar[WireNames] = WireNames(campaign="basic_rappor", batch="basic_bits", report="basic_bits")
    takes_domain: ClassVar[bool] = True
    message_name: ClassVar[str] = "BasicRapporParams"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> BasicRapporParams:
        return self._make(epsilon, domain, fields)  # type: ignore[no-any-return]

    def make_args(self, params: BasicRapporParams) -> MakeArgs:
        dom = params.domain
        return MakeArgs(
            domain=dom.labels if dom.labels is not None else dom.size, fields=noise_fields(params)
        )

    def params_to_proto(self, params: BasicRapporParams) -> campaign_pb2.BasicRapporParams:
        return campaign_pb2.BasicRapporParams(
            domain=domain_to_proto(params.domain), f=params.f, p=params.p, q=params.q,
            allow_f_zero=f_zero_opt_in(params),
        )  # fmt: skip

    def params_from_proto(self, msg: campaign_pb2.BasicRapporParams) -> BasicRapporParams:
        # As RapporSpec.params_from_proto: a stored f of 0 reads as opted in.
        return BasicRapporParams(
            domain=domain_from_proto(msg.domain), f=msg.f, p=msg.p, q=msg.q, allow_f_zero=True
        )

    def encoder(
        self, params: BasicRapporParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return BasicRapporEncoder(
            params, campaign_id=campaign_id, secret=client_secret(secret, self.name)
        ).encode

    def memo_identity(self, params: BasicRapporParams, value: Any) -> bytes:
        return basic_memo_identity(params, value)

    def encode_batch(
        self,
        params: BasicRapporParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch_basic(params, values, rng)

    def _set_counts(self, true_counts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        from ldp_client.mechanisms.rappor.sampling import basic_rappor_set_counts

        return basic_rappor_set_counts(true_counts)

    def items(self, params: BasicRapporParams) -> tuple[str, ...]:
        return domain_items(params.domain)  # built once per domain, as the frequency oracles' items

    def input_value(self, params: BasicRapporParams, index: int) -> Any:
        return params.domain.value(index)

    def support_rates(self, params: BasicRapporParams) -> tuple[float, float]:
        return params.prob_one_if_set, params.prob_one_if_clear

    def support(self, params: BasicRapporParams, acc: BitsView, candidates: Sequence[str] = ()) -> Support:
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=self.items(params),
            counts=acc.ones[0],
            n=acc.n,
            p_star=p_star,
            q_star=q_star,
            epsilon_inf=params.epsilon_inf,
        )

    def report_likelihood(
        self, params: BasicRapporParams, columns: Any
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import numpy as np

        bits, offset, a1, a0 = self._ones_likelihood(params, columns)
        return bits.astype(np.float64) * (a1 - a0) + a0, offset

    def report_patterns(self, params: BasicRapporParams) -> int | None:
        return 1 << params.k if params.k <= _MAX_PATTERN_BITS else None

    def pattern_index(self, params: BasicRapporParams, columns: Any) -> NDArray[np.int64]:
        import numpy as np

        # At most 12 bits: at most 2 bytes per row, little-endian.
        rows = np.asarray(columns, dtype=np.uint8)
        out = rows[:, 0].astype(np.int64)
        if rows.shape[1] > 1:
            out |= rows[:, 1].astype(np.int64) << 8
        return out

    def pattern_columns(self, params: BasicRapporParams, patterns: NDArray[np.int64]) -> Any:
        import numpy as np

        both = np.stack([patterns & 0xFF, patterns >> 8], axis=1).astype(np.uint8)
        return np.ascontiguousarray(both[:, : params.num_bytes])

    def examples(self) -> tuple[BasicRapporParams, ...]:
        return (
            BasicRapporParams(domain=Domain.of(3)),
            BasicRapporParams(domain=Domain.of(("a", "b")), f=0.25, p=0.25, q=0.75),
        )

    def exact_outputs(self, params: BasicRapporParams, value: Any) -> Mapping[Hashable, Fraction]:
        return cast(
            Mapping[Hashable, Fraction],
            bit_outputs(1 << params.domain.index(value), params.k, exact_bit_rates(params)),
        )


# ------------------------------------------------------------------------------------ boolean RAPPOR

_BOOLEAN_ITEMS: Final = ("false", "true")


class BooleanRapporSpec(PackedRowsSpec[BooleanRapporParams]):
    """Boolean RAPPOR (module docstring): the value is the one bit, then PRR and IRR.

    Wire: ``Campaign.boolean_rappor`` (f, p, q, allow_f_zero), ``ReportBatch.boolean_bits`` (one byte per
    report, 0 or 1), ``Report.boolean_bits``. Batch columns: uint8 (n, 1). Population value 1 is True.
    """

    name: ClassVar[str] = BooleanRapporParams.name
    params_type: ClassVar[type[Any]] = BooleanRapporParams
    wire: ClassVar[WireNames] = WireNames(
        campaign="boolean_rappor", batch="boolean_bits", report="boolean_bits"
    )
    fixed_domain_size: ClassVar[int | None] = 2
    message_name: ClassVar[str] = "BooleanRapporParams"

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> BooleanRapporParams:
        return self._make(epsilon, domain, fields)  # type: ignore[no-any-return]

    def make_args(self, params: BooleanRapporParams) -> MakeArgs:
        return MakeArgs(fields=noise_fields(params))

    def params_to_proto(self, params: BooleanRapporParams) -> campaign_pb2.BooleanRapporParams:
        return campaign_pb2.BooleanRapporParams(
            f=params.f, p=params.p, q=params.q, allow_f_zero=f_zero_opt_in(params)
        )

    def params_from_proto(self, msg: campaign_pb2.BooleanRapporParams) -> BooleanRapporParams:
        # As RapporSpec.params_from_proto: a stored f of 0 reads as opted in.
        return BooleanRapporParams(f=msg.f, p=msg.p, q=msg.q, allow_f_zero=True)

    def encoder(
        self, params: BooleanRapporParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        key = client_secret(secret, self.name)
        return BooleanRapporEncoder(params, campaign_id=campaign_id, secret=key).encode

    def memo_identity(self, params: BooleanRapporParams, value: Any) -> bytes:
        return boolean_memo_identity(value)

    def encode_batch(
        self,
        params: BooleanRapporParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        return encode_batch_boolean(params, values == 1, rng)

    def _set_counts(self, true_counts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        from ldp_client.mechanisms.rappor.sampling import boolean_rappor_set_counts

        return boolean_rappor_set_counts(true_counts)

    def items(self, params: BooleanRapporParams) -> tuple[str, ...]:
        return _BOOLEAN_ITEMS

    def input_value(self, params: BooleanRapporParams, index: int) -> Any:
        return (False, True)[index]

    def support_rates(self, params: BooleanRapporParams) -> tuple[tuple[float, float], tuple[float, float]]:
        if_set, if_clear = params.prob_one_if_set, params.prob_one_if_clear
        # "false" is supported by a clear bit, "true" by a set one.
        return (1.0 - if_clear, if_set), (1.0 - if_set, if_clear)

    def support(self, params: BooleanRapporParams, acc: BitsView, candidates: Sequence[str] = ()) -> Support:
        import numpy as np

        n = acc.n
        ones = acc.ones[0, 0]
        p_star, q_star = self.support_rates(params)
        return Support(
            labels=_BOOLEAN_ITEMS,
            counts=np.array([n - ones, ones]),
            n=n,
            p_star=p_star,
            q_star=q_star,
            epsilon_inf=params.epsilon_inf,
        )

    def report_likelihood(
        self, params: BooleanRapporParams, columns: Any
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        import numpy as np

        bits, offset, a1, a0 = self._ones_likelihood(params, columns)
        s = bits[:, 0].astype(np.float64)
        return np.stack([np.zeros(s.size), s * a1 + (1.0 - s) * a0], axis=1), offset

    def report_patterns(self, params: BooleanRapporParams) -> int | None:
        return 2

    def pattern_index(self, params: BooleanRapporParams, columns: Any) -> NDArray[np.int64]:
        import numpy as np

        return (np.asarray(columns, dtype=np.uint8)[:, 0] & 1).astype(np.int64)

    def pattern_columns(self, params: BooleanRapporParams, patterns: NDArray[np.int64]) -> Any:
        import numpy as np

        return patterns.astype(np.uint8).reshape(-1, 1)

    def examples(self) -> tuple[BooleanRapporParams, ...]:
        return (BooleanRapporParams(), BooleanRapporParams(f=0.25, p=0.25, q=0.75))

    def exact_outputs(self, params: BooleanRapporParams, value: Any) -> Mapping[Hashable, Fraction]:
        return cast(Mapping[Hashable, Fraction], bit_outputs(int(bool(value)), 1, exact_bit_rates(params)))


RAPPOR_SPEC = RapporSpec()
"""String RAPPOR, as :mod:`ldp_client.registry` lists it."""
BASIC_SPEC = BasicRapporSpec()
"""Basic RAPPOR, as :mod:`ldp_client.registry` lists it."""
BOOLEAN_SPEC = BooleanRapporSpec()
"""Boolean RAPPOR, as :mod:`ldp_client.registry` lists it."""
