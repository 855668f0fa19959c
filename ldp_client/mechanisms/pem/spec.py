"""Prefix extension for every layer: the wire codec, the journal rows and :data:`SPEC` (the method: the
package docstring)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeVar

from ldp_client._prob import PROB_ONE
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.codecs import (
    as_int,
    check_indices,
)
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms._level_rows import (
    LevelRowsCodec,
    check_seed,
    level_columns,
)
from ldp_client.mechanisms.pem.core import (
    _FIELDS,
    PEMEncoder,
    PEMParams,
    PEMReport,
    Prefix,
    _bucket,
    _from_bytes,
    _label_keys,
    _make,
    bucket_limit,
    group_of,
    level_candidates,
    prefix_digest,
    prefix_of,
    support_counts,
    symbol_bits,
    tree_alphabet,
    value_bytes,
)
from ldp_client.spec import (
    Kind,
    Layout,
    MakeArgs,
    MechanismSpec,
    ParamsLike,
    SecretSource,
    Support,
    WireNames,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client._proto.ldp.v1 import reports_pb2
    from ldp_client.secret import ClientSecret

__all__ = ["SPEC", "PEMSpec", "PrefixTreeSpec", "TreeParams"]


# ------------------------------------------------------------------------------------------------ codec


def _report_value(field: str, report: object, params: PEMParams) -> tuple[int, int, int, int]:
    missing = object()
    parts = [getattr(report, name, missing) for name in ("group", "a", "b", "bucket")]
    if any(p is missing for p in parts):
        raise InvalidReportError(field, report, "a PEMReport(group, a, b, bucket)")
    group = as_int(f"{field}.group", parts[0], f"a group in [0, {params.groups - 1}]")
    if not 0 <= group < params.groups:
        raise InvalidReportError(f"{field}.group", group, f"a group in [0, {params.groups - 1}]")
    a, b = check_seed(field, parts[1], parts[2])
    limit = bucket_limit(params)
    y = as_int(f"{field}.bucket", parts[3], f"a bucket in [0, {limit - 1}]")
    if not 0 <= y < limit:
        raise InvalidReportError(f"{field}.bucket", y, f"a bucket in [0, {limit - 1}]")
    return group, a, b, y


def _check_values(columns: Sequence[Any], params: PEMParams, field: str) -> None:
    groups, _a, _b, y = columns
    check_indices(groups, params.groups, f"{field}.groups", "a group")
    check_indices(y, bucket_limit(params), f"{field}.buckets", "a bucket")


# ------------------------------------------------------------------------------------------------- spec

# A fixed sample of seeds for the exhaustive checks (public randomness, independent of the value): the
# distribution conditioned on it.
_SAMPLE_SEEDS: Final = tuple(
    (
        _from_bytes(hashlib.sha256(b"ldp-pem-test-seed-a" + bytes((i,))).digest()[:8], "little"),
        _from_bytes(hashlib.sha256(b"ldp-pem-test-seed-b" + bytes((i,))).digest()[:8], "little"),
    )
    for i in range(8)
)


class TreeParams(ParamsLike, Protocol):
    """What :class:`PrefixTreeSpec` reads of its parameters."""

    @property
    def max_length(self) -> int: ...

    @property
    def top_k(self) -> int: ...

    def prefix_bits(self, level: int) -> int: ...


TP = TypeVar("TP", bound=TreeParams)


class PrefixTreeSpec(MechanismSpec[TP]):
    """What the discovery mechanisms over pem's prefix tree share (pem, treehist): their parameters by
    name and on the wire (the fields ``param_fields``, message ``params_message``), the device's secret,
    the candidates' prefixes and labels and the values the exhaustive checks use."""

    kind: ClassVar[Kind] = Kind.DISCOVERY
    per_device_state: ClassVar[bool] = True
    reports_per_device: ClassVar[int | None] = 1  # user-level epsilon: one report per device
    param_fields: ClassVar[tuple[str, ...]]
    params_message: ClassVar[Any]

    def _make(self, *, epsilon: float | None, fields: dict[str, object]) -> TP:
        raise NotImplementedError

    def make(self, *, epsilon: float | None, domain: Any, fields: dict[str, object]) -> TP:
        if domain is not None:
            raise InvalidParameterError(
                "domain",
                domain,
                f"none for {self.name} (it discovers the values: give max_length, the longest in bytes)",
            )
        return self._make(epsilon=epsilon, fields=dict(fields))

    def make_args(self, params: TP) -> MakeArgs:
        return MakeArgs(fields={name: getattr(params, name) for name in self.param_fields})

    def params_to_proto(self, params: TP) -> Any:
        return self.params_message(**{name: getattr(params, name) for name in self.param_fields})

    def params_from_proto(self, msg: Any) -> TP:
        made: TP = self.params_type(**{name: getattr(msg, name) for name in self.param_fields})
        return made

    def needs_secret(self, params: TP) -> bool:
        return True

    def _device_encoder(self, params: TP, campaign_id: str, secret: ClientSecret) -> Callable[[Any], Any]:
        raise NotImplementedError

    def encoder(self, params: TP, *, campaign_id: str, secret: SecretSource | None) -> Callable[[Any], Any]:
        if secret is None:
            raise InvalidParameterError(
                "secret", None, f"the device's client secret ({self.name} derives its group from it)"
            )
        return self._device_encoder(params, campaign_id, secret if not callable(secret) else secret())

    def discovery_top_k(self, params: TP) -> int:
        return params.top_k

    def discovery_prefix(self, params: TP, level: int, value: Any) -> Hashable:
        return prefix_of(params, level, value_bytes(params, value))

    def discovery_label(self, params: TP, candidate: Hashable) -> str:
        prefix = Prefix(*candidate)  # type: ignore[misc]
        alphabet = tree_alphabet(params)
        if alphabet:  # the digits of the whole value's bits, most significant first
            sym = symbol_bits(params)
            mask = (1 << sym) - 1
            shifts = [sym * (params.max_length - 1 - i) for i in range(prefix.length)]
            return "".join(alphabet[min((prefix.bits >> k) & mask, len(alphabet) - 1)] for k in shifts)
        data = prefix.bits.to_bytes(params.max_length, "big")[: prefix.length]
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("utf-8", errors="backslashreplace")

    def items(self, params: TP) -> tuple[str, ...]:
        return tuple(str(v) for v in self.inputs(params))

    def inputs(self, params: TP) -> tuple[Any, ...]:
        """Three values of different lengths and bytes (a 1-byte campaign: three different bytes)."""
        alphabet = tree_alphabet(params)
        if alphabet:  # over a declared alphabet: three values of its first, second and last characters
            x, y, z = alphabet[0], alphabet[1], alphabet[-1]
            return (x, y, z) if params.max_length == 1 else (x, x + y, z * params.max_length)
        if params.max_length == 1:
            return ("a", "b", "\x00")
        return ("a", "ab", "b" * params.max_length)

    def input_value(self, params: TP, index: int) -> Any:
        return self.inputs(params)[index]


class PEMSpec(LevelRowsCodec, PrefixTreeSpec[PEMParams]):
    """Prefix extension for every layer (:mod:`ldp_client.spec`; module docstring).

    Wire: ``Campaign.pem`` (``PrefixExtensionParams``); batch columns ``groups`` (u16), ``a``, ``b`` (u64),
    ``buckets`` (u32) of ``ReportBatch.pem``; ``Report.pem`` one (group, a, b, bucket). Journal row: u16
    group, u64 a, u64 b, u32 bucket. Accumulator: ``counts`` of reports per level; the discovery reads the
    raw reports.
    """

    name: ClassVar[str] = PEMParams.name
    params_type: ClassVar[type[Any]] = PEMParams
    wire: ClassVar[WireNames] = WireNames(campaign="pem", batch="pem", report="pem")
    level_field: ClassVar[str] = "groups"
    report_type: ClassVar[Callable[..., Any]] = PEMReport
    param_fields: ClassVar[tuple[str, ...]] = (
        *_FIELDS,
        "truth_probability",
        "verification_share",
        "alphabet",
        "adaptive",
    )
    params_message: ClassVar[Any] = campaign_pb2.PrefixExtensionParams

    def _make(self, *, epsilon: float | None, fields: dict[str, object]) -> PEMParams:
        return _make(epsilon=epsilon, fields=fields)

    def make_args(self, params: PEMParams) -> MakeArgs:
        """The fields; the options only when they differ from their defaults (none, bytes)."""
        fields: dict[str, object] = {name: getattr(params, name) for name in (*_FIELDS, "truth_probability")}
        if params.verification_share:
            fields["verification_share"] = params.verification_share
        if params.alphabet:
            fields["alphabet"] = params.alphabet
        if params.adaptive:
            fields["rounds"] = "adaptive"
        return MakeArgs(fields=fields)

    def _device_encoder(
        self, params: PEMParams, campaign_id: str, secret: ClientSecret
    ) -> Callable[[Any], Any]:
        if params.adaptive:  # the round collecting and its candidates come from the server's campaign
            raise InvalidParameterError(
                "params",
                "pem with rounds=adaptive",
                "the server's campaign to encode against (reporter.campaign.encoder_for with info=)",
            )
        return PEMEncoder(params, group=group_of(params, campaign_id, secret)).encode

    # -------------------------------------------------------------------------------- codec

    def report_value(self, field: str, report: object, params: PEMParams) -> tuple[int, int, int, int]:
        return _report_value(field, report, params)

    def check_level_values(self, columns: Sequence[Any], params: PEMParams, field: str) -> None:
        _check_values(columns, params, field)

    def report_from_proto(self, msg: reports_pb2.Report, params: PEMParams) -> Any:

        r = msg.pem
        if r.group >= params.groups:
            raise InvalidReportError("pem.group", r.group, f"a group in [0, {params.groups - 1}]")
        if r.bucket >= bucket_limit(params):
            raise InvalidReportError("pem.bucket", r.bucket, f"a bucket in [0, {bucket_limit(params) - 1}]")
        return level_columns([(r.group, r.a, r.b, r.bucket)])

    # --------------------------------------------------------------------------- simulation

    def encode_batch(
        self,
        params: PEMParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Simulated users (seeded ``rng`` only): a uniform level each (what their secrets give), then the
        per-report law of local hashing on the level's prefix digest, vectorised."""
        import numpy as np

        from ldp_client.mechanisms._batchbits import raw_words
        from ldp_client.mechanisms.olh import hash_buckets

        idx = np.asarray(values, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (int(idx.min()) < 0 or int(idx.max()) >= len(labels))):
            raise DomainError("values", f"shape {idx.shape}", f"indices into the {len(labels)} labels")
        keys_table = _label_keys(params, tuple(labels))
        n = idx.shape[0]
        groups = np.asarray(rng.integers(0, params.levels, size=n, dtype=np.int64))
        if params.verifies:  # the verification group: u32 draws below its threshold, as group_of's
            verify = rng.integers(0, PROB_ONE, size=n, dtype=np.uint64) < params.verification_threshold
            groups[verify] = params.levels
        keys = keys_table[idx, groups]
        a = raw_words(rng, n).astype(np.uint64)
        b = raw_words(rng, n).astype(np.uint64)
        own = hash_buckets(a, b, keys, params.g).astype(np.int64)
        truthful = rng.integers(0, PROB_ONE, size=n, dtype=np.uint32) < np.uint32(params.truth_threshold)
        other = np.asarray(rng.integers(0, params.g - 1, size=n, dtype=np.int64))
        other = other + (other >= own)
        buckets = np.where(truthful, own, other).astype(np.uint32)
        return groups.astype(np.uint16), a, b, buckets

    # ------------------------------------------------------------------------------- server

    def layout(self, params: PEMParams) -> Layout:
        return Layout.counts(params.groups)

    def layout_batch(self, params: PEMParams, columns: Any) -> Any:
        groups, _a, _b, _y = self.checked_columns(columns, params, "reports")
        return groups.astype("int64")

    def discovery_levels(self, params: PEMParams) -> int:
        return params.groups

    def discovery_candidates(
        self, params: PEMParams, level: int, kept: Sequence[Hashable]
    ) -> tuple[Hashable, ...]:
        if level == params.levels:  # verification: the values the last discovery level kept
            return tuple(Prefix(*p) for p in kept)  # type: ignore[misc]
        return level_candidates(params, level, [Prefix(*p) for p in kept])  # type: ignore[misc]

    def discovery_same_value(
        self, params: PEMParams, level: int, candidate: Hashable
    ) -> tuple[tuple[int, Hashable], ...]:
        """The earlier levels whose prefix already held all 8 ell bits of this candidate's value (a
        complete value: the bits after it are padding), with the candidate cut to their length. None at
        the verification level: its estimates must not depend on the reports that chose the values."""
        if level >= params.levels:
            return ()
        prefix = Prefix(*candidate)  # type: ignore[misc]
        s = params.prefix_bits(level)
        whole = params.symbol_bits * prefix.length
        return tuple(
            (lv, Prefix(prefix.length, prefix.bits >> (s - params.prefix_bits(lv))))
            for lv in range(level)
            if params.prefix_bits(lv) >= whole
        )

    def discovery_support(
        self, params: PEMParams, columns: Any, level: int, candidates: Sequence[Hashable]
    ) -> Support:
        import numpy as np

        groups, a, b, y = self.checked_columns(columns, params, "reports")
        mine = groups == level
        s = params.prefix_bits(level)
        keys = np.array([prefix_digest(level, s, Prefix(*c)) for c in candidates], dtype=np.uint64)  # type: ignore[misc]
        counts = support_counts(a[mine], b[mine], y[mine], keys, params.g)
        return Support(
            labels=tuple(str(i) for i in range(len(candidates))),
            counts=counts,
            n=int(np.count_nonzero(mine)),
            p_star=params.p_star,
            q_star=params.q_star,
        )

    # ------------------------------------------------------------------------------- tests

    def examples(self) -> tuple[PEMParams, ...]:
        return (
            PEMParams(max_length=1, start_bits=4, step_bits=4, top_k=3, g=4, truth_probability=0.5),
            PEMParams(max_length=2, start_bits=3, step_bits=5, top_k=4, g=2, truth_probability=0.7),
            PEMParams.from_epsilon(2.0, max_length=3, top_k=4, step_bits=6),
            PEMParams(
                max_length=2,
                start_bits=2,
                step_bits=1,
                top_k=3,
                g=3,
                truth_probability=0.6,
                verification_share=0.25,
                alphabet="012",
            ),
            PEMParams.from_epsilon(1.0, max_length=2, top_k=3, verification_share=0.125),
        )

    def exact_outputs(self, params: PEMParams, value: Any) -> Mapping[Hashable, Fraction]:
        """Over the device's group (uniform over secrets) and a fixed sample of seeds: the distribution
        conditioned on the seed sample (public randomness independent of the value)."""
        data = value_bytes(params, value)
        out: dict[Hashable, Fraction] = {}
        for group in range(params.groups):
            weight = _group_probability(params, group) / len(_SAMPLE_SEEDS)
            key = prefix_digest(group, params.prefix_bits(group), prefix_of(params, group, data))
            for a, b in _SAMPLE_SEEDS:
                own = _bucket(a, b, key, params.g)
                for y in range(params.g):
                    out[PEMReport(group, a, b, y)] = weight * self._bucket_probability(params, own, y)
        return out

    def exact_output_probability(self, params: PEMParams, value: Any, output: Any) -> Fraction:
        """P(output | value) given the output's group and seed (the group's own probability is the same
        for every value)."""
        if not isinstance(output, PEMReport) or not (
            0 <= output.group < params.groups and 0 <= output.bucket < params.g
        ):
            return Fraction(0)
        data = value_bytes(params, value)
        key = prefix_digest(
            output.group, params.prefix_bits(output.group), prefix_of(params, output.group, data)
        )
        own = _bucket(output.a, output.b, key, params.g)
        return _group_probability(params, output.group) * self._bucket_probability(params, own, output.bucket)

    @staticmethod
    def _bucket_probability(params: PEMParams, own: int, bucket: int) -> Fraction:
        p = Fraction(params.truth_threshold, PROB_ONE)
        return p if bucket == own else (1 - p) / (params.g - 1)


def _group_probability(params: PEMParams, group: int) -> Fraction:
    """P(group) over secrets: v = the verification threshold / 2**32 for group G, (1 - v)/G for a level
    (group_of's modulo bias, below G/2**64, neglected as for every keyed draw)."""
    v = Fraction(params.verification_threshold, PROB_ONE)
    return v if group == params.levels else (1 - v) / params.levels


SPEC = PEMSpec()
"""Prefix extension, as :mod:`ldp_client.registry` lists it."""
