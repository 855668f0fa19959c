"""The paired mechanism's spec: parameters, wire, journal rows, accumulator layout and the conformance
hooks, each by composing the two sides' own specs (:data:`SIDE_SPECS`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.codecs import RowField
from ldp_client.domain import Domain, DomainLike
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.paired.core import (
    _BY_MEMBER,
    _BY_NAME,
    MAX_JOINT_CELLS,
    SIDES,
    PairedEncoder,
    PairedParams,
    PairedReport,
    PairedSide,
    encode_batch_paired,
    paired_side_id,
    side_spec,
)
from ldp_client.mechanisms.rappor.params import BasicRapporParams, BooleanRapporParams, RapporParams
from ldp_client.mechanisms.rr import BinaryRRParams
from ldp_client.spec import Kind, Layout, MakeArgs, MechanismSpec, SecretSource, WireNames

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["SPEC", "PairedSpec"]


def _copy_member(dst: Any, src: Any, member: str) -> None:
    value = getattr(src, member)
    if hasattr(value, "CopyFrom"):
        getattr(dst, member).CopyFrom(value)
    else:
        setattr(dst, member, value)


def _side_error(exc: InvalidParameterError | InvalidReportError, side: str) -> InvalidReportError:
    return InvalidReportError(f"paired.{side}.{exc.field}", exc.value, exc.allowed)


def _pair(report: object) -> tuple[Any, Any]:
    first = getattr(report, "first", None)
    second = getattr(report, "second", None)
    if first is not None and second is not None:
        return first, second
    if isinstance(report, Sequence) and not isinstance(report, str | bytes) and len(report) == 2:
        return report[0], report[1]
    raise InvalidReportError("report", report, "a PairedReport(first, second) or a (first, second) pair")


def _side_domain(domain: object) -> object:
    """A side's ``first.domain`` field: a size, or comma-separated labels."""
    text = str(domain)
    return int(text) if text.isdigit() else [x.strip() for x in text.split(",")]


class PairedSpec(MechanismSpec[PairedParams]):
    """Paired campaigns for every layer (module docstring), each side through its own spec.

    Wire: ``Campaign.paired`` (a ``PairedSide`` per side: the side's own member), ``ReportBatch.paired``
    (``PairedSideColumns`` per side: the side's own payload member, ``count`` rows each), ``Report.paired``
    (``PairedSideReport`` per side). Journal row: the first side's row, then the second's. Accumulator:
    ``paired`` (both sides' layouts, and the joint pattern table when both sides have at most a few
    possible reports and the table at most 65,536 cells). The server estimates the association
    (``ldp_aggregator.association``), not per-item frequencies.
    """

    name: ClassVar[str] = PairedParams.name
    params_type: ClassVar[type[Any]] = PairedParams
    kind: ClassVar[Kind] = Kind.PAIRED
    wire: ClassVar[WireNames] = WireNames(campaign="paired", batch="paired", report="paired")
    # A string-RAPPOR side takes its cohort and permanent response from the secret: one client per user.
    per_device_state: ClassVar[bool] = True

    # ----------------------------------------------------------------------------------- parameters

    def make(
        self, *, epsilon: float | None, domain: DomainLike | None, fields: dict[str, object]
    ) -> PairedParams:
        """``first``/``second`` name the mechanisms; ``first.NAME`` and ``second.NAME`` set their fields
        (``first.epsilon``, ``first.domain`` = a size or comma-separated labels, and any field of the side's
        mechanism)."""
        if epsilon is not None or domain is not None:
            raise InvalidParameterError(
                "epsilon" if epsilon is not None else "domain",
                epsilon if epsilon is not None else domain,
                "nothing at the top level for paired: use first.epsilon / second.domain etc.",
            )
        sides: dict[str, PairedSide] = {}
        for side in SIDES:
            mech = fields.get(side)
            spec = _BY_NAME.get(mech) if isinstance(mech, str) else None
            if spec is None:
                raise InvalidParameterError(
                    f"param {side}", mech, "one of rr, grr, rappor, basic-rappor, boolean-rappor"
                )
            sub: dict[str, object] = {}
            side_eps: float | None = None
            side_domain: Any = None
            prefix = side + "."
            for name, raw in fields.items():
                if not name.startswith(prefix):
                    continue
                key = name[len(prefix) :]
                if key == "epsilon":
                    try:
                        side_eps = float(raw)  # type: ignore[arg-type]
                    except (TypeError, ValueError):
                        raise InvalidParameterError(f"param {name}", raw, "a number") from None
                elif key in ("domain", "labels"):
                    side_domain = _side_domain(raw)
                else:
                    sub[key] = raw
            try:
                sides[side] = spec.make(epsilon=side_eps, domain=side_domain, fields=sub)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{side}.{exc.field}", exc.value, exc.allowed) from exc
        unknown = [n for n in fields if n not in SIDES and not n.startswith(("first.", "second."))]
        if unknown:
            raise InvalidParameterError(
                f"param {unknown[0]}",
                fields[unknown[0]],
                "first, second, first.NAME or second.NAME for paired",
            )
        return PairedParams(first=sides["first"], second=sides["second"])

    def make_args(self, params: PairedParams) -> MakeArgs:
        fields: dict[str, object] = {}
        for side, side_params in zip(SIDES, params.sides, strict=True):
            args = side_spec(side_params).make_args(side_params)
            fields[side] = side_params.name
            if args.epsilon is not None:
                fields[f"{side}.epsilon"] = args.epsilon
            if isinstance(args.domain, tuple):
                fields[f"{side}.domain"] = ",".join(args.domain)
            elif args.domain is not None:
                fields[f"{side}.domain"] = args.domain
            fields.update((f"{side}.{name}", value) for name, value in args.fields.items())
        return MakeArgs(fields=fields)

    def params_to_proto(self, params: PairedParams) -> campaign_pb2.PairedParams:
        msg = campaign_pb2.PairedParams()
        for side, side_params in zip(SIDES, params.sides, strict=True):
            spec = side_spec(side_params)
            getattr(getattr(msg, side), spec.wire.campaign).CopyFrom(spec.params_to_proto(side_params))
        return msg

    def params_from_proto(self, msg: campaign_pb2.PairedParams) -> PairedParams:
        sides: list[Any] = []
        for side in SIDES:
            side_msg = getattr(msg, side)
            member = side_msg.WhichOneof("mechanism")
            spec = _BY_MEMBER.get(member) if member is not None else None
            if spec is None:
                raise InvalidParameterError(
                    f"{side}.mechanism", member, "one of rr, grr, rappor, basic_rappor, boolean_rappor"
                )
            try:
                sides.append(spec.params_from_proto(getattr(side_msg, member)))
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{side}.{member}.{exc.field}", exc.value, exc.allowed) from exc
        return PairedParams(first=sides[0], second=sides[1])

    def epsilon_inf(self, params: PairedParams) -> float:
        return params.epsilon_inf

    def check_new_campaign(self, msg: campaign_pb2.PairedParams) -> None:
        for side in SIDES:
            side_msg = getattr(msg, side)
            member = side_msg.WhichOneof("mechanism")
            spec = _BY_MEMBER.get(member) if member is not None else None
            if spec is None:  # params_from_proto refuses it first
                continue
            try:
                spec.check_new_campaign(getattr(side_msg, member))
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{side}.{member}.{exc.field}", exc.value, exc.allowed) from exc

    # ---------------------------------------------------------------------------------------- device

    def needs_secret(self, params: PairedParams) -> bool:
        return any(side_spec(s).needs_secret(s) for s in params.sides)

    def encoder(
        self, params: PairedParams, *, campaign_id: str, secret: SecretSource | None
    ) -> Callable[[Any], Any]:
        return PairedEncoder(params, campaign_id=campaign_id, secret=secret).encode

    def memo_identity(self, params: PairedParams, value: Any) -> bytes | None:
        # Both sides memoized (RAPPOR): the pair's permanent responses are those of its two values, so the
        # pair of their identities (length-prefixed). A new pair with one known side is charged both
        # sides' epsilon_inf again: an over-count, never an under-count.
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
            raise DomainError("value", value, "a pair (first_value, second_value)")
        parts = []
        for side, side_params, v in zip(SIDES, params.sides, value, strict=True):
            try:
                identity = side_spec(side_params).memo_identity(side_params, v)
            except DomainError as exc:
                raise DomainError(f"{side}.{exc.field}", exc.value, exc.allowed) from exc
            if identity is None:
                return None
            parts.append(len(identity).to_bytes(4, "big") + identity)
        return b"".join(parts)

    # ----------------------------------------------------------------------------------------- codec

    def batch_to_proto(self, msg: reports_pb2.ReportBatch, params: PairedParams, columns: Any) -> None:
        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "paired", type(columns).__name__, "a (first columns, second columns) pair"
            )
        count: int | None = None
        for side, side_params, cols in zip(SIDES, params.sides, columns, strict=True):
            spec = side_spec(side_params)
            tmp = reports_pb2.ReportBatch(campaign_id=msg.campaign_id, batch_id=msg.batch_id)
            try:
                spec.batch_to_proto(tmp, side_params, cols)
            except (InvalidParameterError, InvalidReportError) as exc:
                raise _side_error(exc, side) from exc
            if count is not None and tmp.count != count:
                raise InvalidReportError(
                    "paired.second.count",
                    tmp.count,
                    f"{count} rows, as many as the first side (one per device)",
                )
            count = tmp.count
            _copy_member(getattr(msg.paired, side), tmp, spec.wire.batch)
        msg.count = count or 0

    def batch_from_proto(self, msg: reports_pb2.ReportBatch, params: PairedParams, n: int) -> Any:
        out: list[Any] = []
        for side, side_params in zip(SIDES, params.sides, strict=True):
            spec = side_spec(side_params)
            cols = getattr(msg.paired, side)
            expected = spec.wire.batch
            which = cols.WhichOneof("payload")
            if which != expected:
                raise InvalidReportError(
                    f"paired.{side}.payload", which, f"{expected!r} for a {side_params.name} side"
                )
            tmp = reports_pb2.ReportBatch(campaign_id=msg.campaign_id, batch_id=msg.batch_id, count=n)
            _copy_member(tmp, cols, which)
            try:
                out.append(spec.batch_from_proto(tmp, side_params, n))
            except (InvalidParameterError, InvalidReportError) as exc:
                raise _side_error(exc, side) from exc
        return out[0], out[1]

    def report_to_proto(self, msg: reports_pb2.Report, params: PairedParams, output: Any) -> None:
        for side, side_params, value in zip(SIDES, params.sides, _pair(output), strict=True):
            spec = side_spec(side_params)
            tmp = reports_pb2.Report(campaign_id=msg.campaign_id, report_id=msg.report_id)
            try:
                spec.report_to_proto(tmp, side_params, value)
            except (InvalidParameterError, InvalidReportError) as exc:
                raise _side_error(exc, side) from exc
            _copy_member(getattr(msg.paired, side), tmp, spec.wire.report)

    def report_from_proto(self, msg: reports_pb2.Report, params: PairedParams) -> Any:
        out: list[Any] = []
        for side, side_params in zip(SIDES, params.sides, strict=True):
            spec = side_spec(side_params)
            value = getattr(msg.paired, side)
            expected = spec.wire.report
            which = value.WhichOneof("value")
            if which != expected:
                raise InvalidReportError(
                    f"paired.{side}.value", which, f"{expected!r} for a {side_params.name} side"
                )
            tmp = reports_pb2.Report(campaign_id=msg.campaign_id, report_id=msg.report_id)
            _copy_member(tmp, value, which)
            try:
                out.append(spec.report_from_proto(tmp, side_params))
            except (InvalidParameterError, InvalidReportError) as exc:
                raise _side_error(exc, side) from exc
        return out[0], out[1]

    def batch_from_reports(self, params: PairedParams, reports: Sequence[Any]) -> Any:
        pairs = [_pair(r) for r in reports]
        out: list[Any] = []
        for i, (side, side_params) in enumerate(zip(SIDES, params.sides, strict=True)):
            try:
                out.append(side_spec(side_params).batch_from_reports(side_params, [p[i] for p in pairs]))
            except (InvalidParameterError, InvalidReportError) as exc:
                raise _side_error(exc, side) from exc
        return out[0], out[1]

    def row_fields(self, params: PairedParams) -> tuple[RowField, ...]:
        return tuple(
            RowField(("paired", side, *f.path), f.width, f.packed)
            for side, side_params in zip(SIDES, params.sides, strict=True)
            for f in side_spec(side_params).row_fields(side_params)
        )

    def row_packer(self, params: PairedParams) -> Callable[[Any], bytes]:
        # A PairedReport's two rows, first then second.
        pack_first = side_spec(params.first).row_packer(params.first)
        pack_second = side_spec(params.second).row_packer(params.second)
        return lambda r: pack_first(r.first) + pack_second(r.second)

    def row_unpacker(self, params: PairedParams) -> Callable[[bytes], Any]:
        first_spec = side_spec(params.first)
        cut = sum(f.width for f in first_spec.row_fields(params.first))
        first = first_spec.row_unpacker(params.first)
        second = side_spec(params.second).row_unpacker(params.second)
        return lambda row: (first(row[:cut]), second(row[cut:]))

    # ------------------------------------------------------------------------------------ simulation

    def encode_batch(
        self,
        params: PairedParams,
        values: NDArray[np.int64],
        rng: np.random.Generator,
        *,
        campaign_id: str,
        labels: Sequence[str],
    ) -> Any:
        """Population value i is the pair ``campaign_inputs(params, campaign_id)[i]`` (``labels`` are not
        used: each side's values are its own inputs); simulations of paired campaigns with populations of
        their own (``simulations.association``) call :func:`encode_batch_paired`."""
        import numpy as np

        side_inputs = [
            side_spec(s).campaign_inputs(s, paired_side_id(campaign_id, side))
            for side, s in zip(SIDES, params.sides, strict=True)
        ]
        per_first = len(side_inputs[1])
        idx = np.asarray(values, dtype=np.int64)
        return encode_batch_paired(
            params,
            campaign_id=campaign_id,
            first_values=idx // per_first,
            second_values=idx % per_first,
            rng=rng,
            first_labels=[str(x) for x in side_inputs[0]],
            second_labels=[str(x) for x in side_inputs[1]],
        )

    # ---------------------------------------------------------------------------------------- server

    def joint_shape(self, params: PairedParams) -> tuple[int, int] | None:
        """(rows, cols) of the joint pattern table, or None when a side has too many possible reports."""
        a = side_spec(params.first).report_patterns(params.first)
        b = side_spec(params.second).report_patterns(params.second)
        if a is None or b is None or a * b > MAX_JOINT_CELLS:
            return None
        return a, b

    def layout(self, params: PairedParams) -> Layout:
        first, second = (side_spec(s).layout(s) for s in params.sides)
        return Layout.paired(first, second, self.joint_shape(params))

    def layout_batch(self, params: PairedParams, columns: Any) -> Any:
        """``(first input, second input, joint)``: each side's standard input, and ``joint`` None or a
        function giving each report's cell of the joint table, called once both sides have accepted the
        batch (a report pattern is read only from validated columns)."""
        if not isinstance(columns, tuple) or len(columns) != 2:
            raise InvalidReportError(
                "reports", type(columns).__name__, "a (first columns, second columns) pair for paired"
            )
        batches = []
        for side, side_params, cols in zip(SIDES, params.sides, columns, strict=True):
            try:
                batches.append(side_spec(side_params).layout_batch(side_params, cols))
            except InvalidReportError as exc:
                raise InvalidReportError(f"paired.{side}.{exc.field}", exc.value, exc.allowed) from exc
        shape = self.joint_shape(params)
        if shape is None:
            return batches[0], batches[1], None
        cols_ = shape[1]

        def cells() -> NDArray[np.int64]:
            a = side_spec(params.first).pattern_index(params.first, columns[0])
            b = side_spec(params.second).pattern_index(params.second, columns[1])
            return a * cols_ + b

        return batches[0], batches[1], cells

    # ------------------------------------------------------------------------------ conformance tests

    def campaign_inputs(self, params: PairedParams, campaign_id: str) -> tuple[Any, ...]:
        """Every pair of the two sides' inputs (first side major)."""
        per_side = [
            side_spec(s).campaign_inputs(s, paired_side_id(campaign_id, side))
            for side, s in zip(SIDES, params.sides, strict=True)
        ]
        return tuple(itertools.product(*per_side))

    def inputs(self, params: PairedParams) -> tuple[Any, ...]:
        return self.campaign_inputs(params, _EXAMPLE_CAMPAIGN)

    def campaign_outputs(
        self, params: PairedParams, value: Any, campaign_id: str
    ) -> Mapping[Hashable, Fraction]:
        """The product of the sides' output distributions: the sides draw their randomness independently
        given the values, except that two string-RAPPOR sides with the same m share the device's cohort
        (then the joint law is not a product, and this raises)."""
        cohorts = [s.m for s in params.sides if isinstance(s, RapporParams)]
        if len(cohorts) == 2 and cohorts[0] == cohorts[1]:
            raise InvalidParameterError(
                "params", "two string-RAPPOR sides with the same m", "sides whose outputs are independent"
            )
        dists = [
            side_spec(s).campaign_outputs(s, v, paired_side_id(campaign_id, side))
            for side, s, v in zip(SIDES, params.sides, value, strict=True)
        ]
        return {
            PairedReport(first=a, second=b): pa * pb
            for (a, pa), (b, pb) in itertools.product(dists[0].items(), dists[1].items())
        }

    def exact_outputs(self, params: PairedParams, value: Any) -> Mapping[Hashable, Fraction]:
        """:meth:`campaign_outputs` for a campaign called ``example``."""
        return self.campaign_outputs(params, value, _EXAMPLE_CAMPAIGN)

    def examples(self) -> tuple[PairedParams, ...]:
        return (
            PairedParams(first=BinaryRRParams.two_coin(), second=GRRParams.from_epsilon(3, 1.0)),
            PairedParams(
                first=BooleanRapporParams(f=0.25, p=0.25, q=0.75),
                second=BasicRapporParams(domain=Domain.of(2)),
            ),
            PairedParams(first=RapporParams(k=4, h=2, m=2), second=BinaryRRParams(truth_probability=0.3)),
        )


_EXAMPLE_CAMPAIGN: Final = "example"

SPEC = PairedSpec()
"""Paired campaigns, as :mod:`ldp_client.registry` lists it."""
