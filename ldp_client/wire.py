"""The entry point of every conversion between ldp_client objects and the ``ldp.v1`` protobuf messages.

Every function looks the mechanism up in :mod:`ldp_client.registry`: its spec converts with its codec
methods (``spec.params_to_proto``, ``spec.batch_from_proto``, ...; built from :mod:`ldp_client.codecs`),
and this module adds what is common (ids, counts, the payload member).

* Parameters: :func:`params_to_proto` / :func:`params_from_proto` map each frozen parameter dataclass of
  :mod:`ldp_client.params` to the member of the ``Campaign.mechanism`` oneof with the same fields;
  :func:`campaign_to_proto` / :func:`campaign_from_proto` handle the whole campaign.
* Batches: :func:`batch_to_proto` / :func:`batch_from_proto` map the numpy report columns of the shared
  contract to the columnar ``ReportBatch`` (one ``bytes`` field per column, little-endian, packed bits in
  little bit order: bit i of a row is ``(row[i // 8] >> (i % 8)) & 1``, see ``docs/rappor-encoding.md``).
* Single reports: :func:`report_to_proto` / :func:`report_from_proto`, and :func:`batch_from_reports`
  to turn per-report encoder outputs into batch columns on the device.

Decoding is the server's trust boundary, so :func:`batch_from_proto` and :func:`report_from_proto` check
everything a report could get wrong (ids, payload kind, byte lengths, index and cohort ranges, padding
bits) and raise :class:`~ldp_client.errors.InvalidReportError` naming the field and value before any
column is returned; a batch is accepted or rejected whole. The checks are vectorised (one numpy pass per
column), never a Python loop per report, and the returned columns are zero-copy views of the message's
bytes where the layout allows (so they may be read-only).

Batch columns (the shared contract), for n reports:

==================  =====================================================================
mechanism           columns
==================  =====================================================================
rr                  ``bool`` array (n,), True = "yes"
grr                 ``int64`` array (n,) of indices in [0, d)
rappor              ``(cohorts uint32 (n,), bits uint8 (n, ceil(k/8)))``
basic-rappor        ``uint8`` array (n, ceil(d/8))
boolean-rappor      ``uint8`` array (n, 1), each 0 or 1
oue, sue, ss        ``uint8`` array (n, ceil(d/8)), little bit order (ss: exactly k bits per row)
olh, blh            ``(a uint64 (n,), b uint64 (n,), buckets uint32 (n,))``
hr                  ``int64`` array (n,) of indices in [0, K)
set-valued          the columns of its inner oracle
==================  =====================================================================

Importing this module does not import numpy (the device's reporter uses the campaign functions and
:func:`report_to_proto`); the batch functions, which return or take numpy columns, import it when called.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, cast

from ldp_client import registry
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.accounting.shuffle import ShufflerDeclaration
from ldp_client.codecs import check_count
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.numeric.codec import NumericMessage
from ldp_client.mechanisms.paired import PairedColumns
from ldp_client.params import MechanismParams
from ldp_client.spec import MechanismSpec

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from ldp_client.mechanisms.numeric.codec import NumericColumns

__all__ = [
    "MAX_ID_LENGTH",
    "BatchColumns",
    "CampaignInfo",
    "ColumnsLike",
    "DiscoveryRoundInfo",
    "ParamsMessage",
    "RapporReportLike",
    "batch_field",
    "batch_from_proto",
    "batch_from_reports",
    "batch_to_proto",
    "campaign_from_proto",
    "campaign_to_proto",
    "check_f_zero_opt_in",
    "delta",
    "epsilon_inf",
    "mechanism_field",
    "params_from_proto",
    "params_to_proto",
    "report_from_proto",
    "report_to_proto",
    "set_params",
]

#: Longest campaign, batch or report id, in Unicode code points (Python's ``len``; not UTF-16 units, not
#: bytes). The unit is part of the wire contract (docs/wire-protocol.md).
MAX_ID_LENGTH: Final = 128
"""Longest campaign id, batch id or report id, in characters."""

ParamsMessage: TypeAlias = (
    campaign_pb2.BinaryRRParams
    | campaign_pb2.GRRParams
    | campaign_pb2.RapporParams
    | campaign_pb2.BasicRapporParams
    | campaign_pb2.BooleanRapporParams
    | NumericMessage
    | campaign_pb2.UnaryEncodingParams
    | campaign_pb2.LocalHashingParams
    | campaign_pb2.SubsetSelectionParams
    | campaign_pb2.HadamardResponseParams
    | campaign_pb2.SetValuedParams
    | campaign_pb2.PairedParams
)
# The column aliases are strings so that they name numpy types without importing numpy at run time.
BatchColumns: TypeAlias = (
    "NDArray[np.bool_] | NDArray[np.int64] | NDArray[np.uint8] | tuple[NDArray[np.uint32], NDArray[np.uint8]]"
    " | NumericColumns | tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.uint32]] | PairedColumns"
)
"""Report columns of a batch as decoded; see the module docstring for the layout of each mechanism."""
ColumnsLike: TypeAlias = (
    "NDArray[Any] | tuple[NDArray[Any], NDArray[Any]] | tuple[NDArray[Any], NDArray[Any], NDArray[Any]]"
)
"""Columns accepted by :func:`batch_to_proto`: as :data:`BatchColumns`, but any integer dtype for indices."""


class RapporReportLike(Protocol):
    """A string-RAPPOR report as the per-report encoder returns it (``RapporReport``)."""

    @property
    def cohort(self) -> int: ...

    @property
    def bits(self) -> int: ...


# Oneof member of Campaign.mechanism, ReportBatch.payload and Report.value for each mechanism name
# (ldp_client.params `name`). The three oneofs use the same field numbers for the same mechanism. Registered
# mechanisms (ldp_client.registry) name their own members (spec.wire); the tables list them too, first.
_MECHANISM_FIELD: Final[dict[str, str]] = {s.name: s.wire.campaign for s in registry.SPECS}
_BATCH_FIELD: Final[dict[str, str]] = {s.name: s.wire.batch for s in registry.SPECS}
_REPORT_FIELD: Final[dict[str, str]] = {s.name: s.wire.report for s in registry.SPECS}
_MECHANISM_CHOICES: Final = ", ".join(_MECHANISM_FIELD.values())


def _spec(params: object) -> MechanismSpec[Any]:
    """The registered spec of ``params``, or InvalidParameterError naming their type and the mechanisms."""
    spec = registry.find(params)
    if spec is None:
        raise InvalidParameterError(
            "params",
            type(params).__name__,
            "a parameter object of ldp_client.params (" + _MECHANISM_CHOICES + ")",
        )
    return spec


def _check_id(field: str, value: object, error: type[InvalidParameterError | InvalidReportError]) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH:
        raise error(field, value, f"a string of 1 to {MAX_ID_LENGTH} Unicode code points")
    return value


# ------------------------------------------------------------------------------------------ parameters


def mechanism_field(params: MechanismParams) -> str:
    """The ``Campaign.mechanism`` oneof member for ``params`` (e.g. ``"basic_rappor"``)."""
    return _spec(params).wire.campaign


def batch_field(params: MechanismParams) -> str:
    """The ``ReportBatch.payload`` member of ``params``' reports (a set-valued campaign's is its inner
    oracle's), e.g. ``"grr_indices"``."""
    return _spec(params).wire_names(params).batch


def epsilon_inf(params: MechanismParams) -> float:
    """Longitudinal epsilon bound over unlimited reports of one unchanging value.

    RAPPOR variants memoize the permanent randomized response, so repeated reports reveal at most eps_inf
    (Erlingsson et al., CCS 2014, Theorem 1). rr and grr draw fresh noise per report: there is no bound
    (k reports of one value cost k * epsilon by composition), reported as +infinity.
    """
    return _spec(params).epsilon_inf(params)


def delta(params: MechanismParams) -> float:
    """The delta of one report: 0 for pure epsilon-LDP mechanisms (the spec's ``delta``)."""
    return _spec(params).delta(params)


def params_to_proto(params: MechanismParams) -> tuple[str, ParamsMessage]:
    """``(oneof member name, message)`` of ``Campaign.mechanism`` for ``params``.

    Probabilities travel as the doubles the parameters were created with; both sides re-derive the same
    32-bit thresholds from them (:func:`ldp_client._prob.quantize_probability`), so
    ``params_from_proto`` returns an equal object.
    """
    spec = _spec(params)
    return spec.wire.campaign, cast(ParamsMessage, spec.params_to_proto(params))


def set_params(campaign: campaign_pb2.Campaign, params: MechanismParams) -> None:
    """Set ``campaign``'s mechanism oneof to ``params`` (replacing any other member)."""
    field, message = params_to_proto(params)
    getattr(campaign, field).CopyFrom(message)


def params_from_proto(campaign: campaign_pb2.Campaign) -> MechanismParams:
    """The validated parameter object of ``campaign``'s mechanism.

    Raises:
        InvalidParameterError: no mechanism set, or a parameter out of range; the field is named by its
            proto path, e.g. ``"rappor.k"`` or ``"grr.domain.labels"``.
    """
    which = campaign.WhichOneof("mechanism")
    spec = registry.find_member(which)
    if spec is None or which is None:
        raise InvalidParameterError("mechanism", which, f"exactly one of {_MECHANISM_CHOICES}")
    try:
        return spec.params_from_proto(getattr(campaign, which))  # type: ignore[no-any-return]
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{which}.{exc.field}", exc.value, exc.allowed) from exc


def check_f_zero_opt_in(campaign: campaign_pb2.Campaign) -> None:
    """Refuse what a NEW campaign may not set though a stored one may: its mechanism's
    ``spec.check_new_campaign`` (a RAPPOR f that quantizes to 0 without the message's ``allow_f_zero``).

    An unset f reads as 0, so without this check a campaign with no permanent randomized response
    (epsilon_inf = inf: repeated reports of one value reveal it) would be created silently. The server
    calls it on ``CreateCampaign`` only (after :func:`campaign_from_proto` validated the parameters);
    stored campaigns and campaigns read from the wire are never refused for it. Paired campaigns are
    checked side by side.

    Raises:
        InvalidParameterError: named by the proto path of f (``rappor.f``, ``paired.first.basic_rappor.f``),
            with its value, the recommended values and how to opt in.
    """
    which = campaign.WhichOneof("mechanism")
    spec = registry.find_member(which)
    if spec is None or which is None:  # no member (refused by campaign_from_proto), or nothing to check
        return
    try:
        spec.check_new_campaign(getattr(campaign, which))
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{which}.{exc.field}", exc.value, exc.allowed) from exc


# ------------------------------------------------------------------------------------------- campaigns


@dataclass(frozen=True, kw_only=True)
class DiscoveryRoundInfo:
    """One closed round of an adaptive discovery campaign (``Campaign.discovery_rounds``, issue 16).

    ``kept`` holds the published prefixes as (length, bits) pairs, highest estimate first."""

    round: int
    reports: int
    tested: int
    threshold: float
    kept: tuple[tuple[int, int], ...]

    def to_proto(self) -> campaign_pb2.DiscoveryRound:
        return campaign_pb2.DiscoveryRound(
            round=self.round,
            reports=self.reports,
            tested=self.tested,
            threshold=self.threshold,
            kept=[
                campaign_pb2.DiscoveryPrefix(length=n, bits=b.to_bytes((b.bit_length() + 7) >> 3, "big"))
                for n, b in self.kept
            ],
        )

    @classmethod
    def from_proto(cls, msg: campaign_pb2.DiscoveryRound) -> DiscoveryRoundInfo:
        return cls(
            round=msg.round,
            reports=msg.reports,
            tested=msg.tested,
            threshold=msg.threshold,
            kept=tuple((p.length, int.from_bytes(p.bits, "big")) for p in msg.kept),
        )


def _check_rounds(info: CampaignInfo) -> None:
    """An adaptive discovery campaign's round state: round r after r closed rounds numbered 0..r-1, each
    keeping at least one prefix; nothing for any other campaign."""
    rounds = info.discovery_rounds
    if not getattr(info.params, "adaptive", False):
        if info.discovery_round or rounds:
            raise InvalidParameterError(
                "discovery_round",
                info.discovery_round,
                "0 and no discovery_rounds (not an adaptive campaign)",
            )
        return
    levels = registry.spec_for(info.params).discovery_levels(info.params)
    if not 0 <= info.discovery_round <= levels or len(rounds) != info.discovery_round:
        raise InvalidParameterError(
            "discovery_round",
            info.discovery_round,
            f"a round in [0, {levels}] after as many closed discovery_rounds (got {len(rounds)})",
        )
    for i, r in enumerate(rounds):
        if not isinstance(r, DiscoveryRoundInfo) or r.round != i or not r.kept:
            raise InvalidParameterError(
                f"discovery_rounds[{i}]", r, f"round {i} with the prefixes it kept (at least one)"
            )


@dataclass(frozen=True, kw_only=True)
class CampaignInfo:
    """A campaign as the analyst defines it: what :func:`campaign_from_proto` validates and returns.

    The server-filled ``epsilon`` and ``epsilon_inf`` of the message are not kept: they follow from
    ``params`` (``params.epsilon``, :func:`epsilon_inf`).
    """

    campaign_id: str
    params: MechanismParams
    description: str = ""
    candidates: tuple[str, ...] = ()
    created_unix_ms: int = 0
    closed: bool = False
    shuffler: ShufflerDeclaration | None = None
    """Issue 17: the shuffler the deployment routes reports through (``Campaign.shuffler``), or None."""
    discovery_round: int = 0
    """Issue 16, adaptive discovery campaigns: the round collecting now (``Campaign.discovery_round``)."""
    discovery_rounds: tuple[DiscoveryRoundInfo, ...] = ()
    """Issue 16, adaptive discovery campaigns: the closed rounds (``Campaign.discovery_rounds``)."""

    def __post_init__(self) -> None:
        _check_id("campaign_id", self.campaign_id, InvalidParameterError)
        _spec(self.params)
        if not isinstance(self.description, str):
            raise InvalidParameterError("description", self.description, "a string")
        object.__setattr__(self, "candidates", _check_candidates(self.candidates))
        if isinstance(self.created_unix_ms, bool) or not isinstance(self.created_unix_ms, int):
            raise InvalidParameterError("created_unix_ms", self.created_unix_ms, "an integer (ms since 1970)")
        if not -(1 << 63) <= self.created_unix_ms < 1 << 63:
            raise InvalidParameterError("created_unix_ms", self.created_unix_ms, "a signed 64-bit integer")
        if not isinstance(self.closed, bool):
            raise InvalidParameterError("closed", self.closed, "a bool")
        if self.shuffler is not None and not isinstance(self.shuffler, ShufflerDeclaration):
            raise InvalidParameterError("shuffler", self.shuffler, "a ShufflerDeclaration or None")
        if self.shuffler is not None and delta(self.params) > 0.0:
            # Amplification by shuffling is computed for pure epsilon-LDP reports (Feldman-McMillan-Talwar's
            # pure case); claiming it for an (epsilon, delta) mechanism would overstate the guarantee.
            raise InvalidParameterError(
                "shuffler",
                f"{self.params.name} (delta={delta(self.params):.3g})",
                "no shuffler for an (epsilon, delta)-LDP mechanism: amplification is computed for pure"
                " epsilon-LDP reports only",
            )
        object.__setattr__(self, "discovery_rounds", tuple(self.discovery_rounds))
        _check_rounds(self)


def _check_candidates(candidates: Iterable[str]) -> tuple[str, ...]:
    if isinstance(candidates, str | bytes):
        raise InvalidParameterError("candidates", candidates, "a sequence of strings, not one string")
    out = tuple(candidates)
    seen: set[str] = set()
    for i, c in enumerate(out):
        if not isinstance(c, str):
            raise InvalidParameterError(f"candidates[{i}]", c, "a string")
        if c in seen:
            raise InvalidParameterError(f"candidates[{i}]", c, "distinct candidates (this one is repeated)")
        seen.add(c)
    return out


def campaign_to_proto(
    *,
    campaign_id: str,
    params: MechanismParams,
    description: str = "",
    candidates: Iterable[str] = (),
    created_unix_ms: int = 0,
    closed: bool = False,
    shuffler: ShufflerDeclaration | None = None,
    discovery_round: int = 0,
    discovery_rounds: Iterable[DiscoveryRoundInfo] = (),
) -> campaign_pb2.Campaign:
    """A ``Campaign`` message, with ``epsilon`` and ``epsilon_inf`` filled from ``params``."""
    info = CampaignInfo(
        campaign_id=campaign_id,
        params=params,
        description=description,
        candidates=_check_candidates(candidates),
        created_unix_ms=created_unix_ms,
        closed=closed,
        shuffler=shuffler,
        discovery_round=discovery_round,
        discovery_rounds=tuple(discovery_rounds),
    )
    msg = campaign_pb2.Campaign(
        id=info.campaign_id,
        description=info.description,
        candidates=info.candidates,
        created_unix_ms=info.created_unix_ms,
        closed=info.closed,
        epsilon=info.params.epsilon,
        epsilon_inf=epsilon_inf(info.params),
    )
    if info.shuffler is not None:  # unset otherwise: a campaign without one keeps its bytes
        msg.shuffler.batch_reports = info.shuffler.batch_reports
        msg.shuffler.delta = info.shuffler.delta
    set_params(msg, info.params)
    if info.discovery_round:  # unset otherwise: every other campaign keeps its bytes
        msg.discovery_round = info.discovery_round
        msg.discovery_rounds.extend(r.to_proto() for r in info.discovery_rounds)
    return msg


def campaign_from_proto(msg: campaign_pb2.Campaign) -> CampaignInfo:
    """Validate a ``Campaign`` message (for example from ``CreateCampaign``) into a :class:`CampaignInfo`.

    Raises:
        InvalidParameterError: bad id, repeated candidates, invalid mechanism parameters (named by
            their proto path, e.g. ``"rappor.k"``), or a shuffler with fewer than 2 reports per batch or a
            delta outside (0, 1).
    """
    shuffler = None
    if msg.HasField("shuffler"):
        shuffler = ShufflerDeclaration(batch_reports=msg.shuffler.batch_reports, delta=msg.shuffler.delta)
    return CampaignInfo(
        campaign_id=msg.id,
        params=params_from_proto(msg),
        description=msg.description,
        candidates=tuple(msg.candidates),
        created_unix_ms=msg.created_unix_ms,
        closed=msg.closed,
        shuffler=shuffler,
        discovery_round=msg.discovery_round,
        discovery_rounds=tuple(DiscoveryRoundInfo.from_proto(r) for r in msg.discovery_rounds),
    )


# ------------------------------------------------------------------------------------------- batches


def _check_batch_header(
    msg: reports_pb2.ReportBatch, params: MechanismParams, campaign_id: str | None
) -> tuple[int, str]:
    """(count, payload member) of a batch whose ids, count and payload kind are checked."""
    _check_id("campaign_id", msg.campaign_id, InvalidReportError)
    if campaign_id is not None and msg.campaign_id != campaign_id:
        raise InvalidReportError(
            "campaign_id", msg.campaign_id, f"{campaign_id!r} (the campaign the batch is submitted to)"
        )
    _check_id("batch_id", msg.batch_id, InvalidReportError)
    if msg.count < 1:
        raise InvalidReportError("count", msg.count, "a report count >= 1")
    expected = batch_field(params)
    which = msg.WhichOneof("payload")
    if which != expected:
        raise InvalidReportError("payload", which, f"{expected!r} for a {params.name} campaign")
    return msg.count, expected


def batch_from_proto(
    msg: reports_pb2.ReportBatch, params: MechanismParams, *, campaign_id: str | None = None
) -> BatchColumns:
    """Validate a ``ReportBatch`` against its campaign's ``params`` and decode it into numpy columns.

    Args:
        msg: the batch as received.
        params: the campaign's parameters (from :func:`params_from_proto` of the stored campaign).
        campaign_id: if given, ``msg.campaign_id`` must equal it.

    Returns:
        The columns of the shared contract (module docstring); zero-copy, possibly read-only views of the
        message's bytes where the dtype allows.

    Raises:
        InvalidReportError: naming the field and value: empty or over-long ids, campaign id mismatch,
            ``count`` 0, a payload kind other than the campaign's mechanism, a byte length that disagrees
            with ``count`` (``len(rr_answers)``, ``len(grr_indices)``, ``len(rappor.cohorts)``,
            ``len(rappor.bits)``, ...), the first grr index >= d or cohort >= m with its position, or the
            first row with a non-zero padding bit.
    """
    spec = _spec(params)
    n, _ = _check_batch_header(msg, params, campaign_id)
    return spec.batch_from_proto(msg, params, n)  # type: ignore[no-any-return]


def batch_to_proto(
    *, campaign_id: str, batch_id: str, params: MechanismParams, columns: ColumnsLike
) -> reports_pb2.ReportBatch:
    """Encode report columns (module docstring) into a ``ReportBatch``.

    The columns are checked with the same rules as :func:`batch_from_proto` (shape, dtype, ranges,
    padding), so a batch this function builds is one the server accepts.

    Raises:
        InvalidReportError: ids, shapes, dtypes or values that do not fit ``params``.
    """
    spec = _spec(params)
    _check_id("campaign_id", campaign_id, InvalidReportError)
    _check_id("batch_id", batch_id, InvalidReportError)
    msg = reports_pb2.ReportBatch(campaign_id=campaign_id, batch_id=batch_id)
    spec.batch_to_proto(msg, params, columns)
    return msg


# ------------------------------------------------------------------------------------ single reports


def report_to_proto(
    *,
    campaign_id: str,
    report_id: str,
    params: MechanismParams,
    report: bool | int | RapporReportLike,
) -> reports_pb2.Report:
    """Encode one per-report encoder output into a ``Report``.

    ``report`` is what the mechanism's ``encode`` returns: rr a bool; grr an index; rappor a
    ``RapporReport(cohort, bits)``; basic-rappor an int of d bits; boolean-rappor 0 or 1.
    """
    spec = _spec(params)
    _check_id("campaign_id", campaign_id, InvalidReportError)
    _check_id("report_id", report_id, InvalidReportError)
    msg = reports_pb2.Report(campaign_id=campaign_id, report_id=report_id)
    spec.report_to_proto(msg, params, report)
    return msg


def report_from_proto(
    msg: reports_pb2.Report, params: MechanismParams, *, campaign_id: str | None = None
) -> BatchColumns:
    """Validate a single ``Report`` and decode it into the columns of a batch of one report.

    The server handles a single report exactly like a batch of one (same accumulators, same store path),
    so this returns batch columns with n = 1. Same checks as :func:`batch_from_proto`.

    Raises:
        InvalidReportError: naming the field and value (``report_id``, ``value``, ``grr_index``,
            ``rappor.cohort``, ``len(rappor.bits)``, ``basic_bits[0]``, ...).
    """
    spec = _spec(params)
    _check_report_header(msg, spec.wire_names(params).report, params.name, campaign_id)
    return spec.report_from_proto(msg, params)  # type: ignore[no-any-return]


def _check_report_header(msg: reports_pb2.Report, expected: str, name: str, campaign_id: str | None) -> None:
    """The ids of a single report, and its value member ``expected`` (that of a ``name`` campaign)."""
    _check_id("campaign_id", msg.campaign_id, InvalidReportError)
    if campaign_id is not None and msg.campaign_id != campaign_id:
        raise InvalidReportError(
            "campaign_id", msg.campaign_id, f"{campaign_id!r} (the campaign the report is submitted to)"
        )
    _check_id("report_id", msg.report_id, InvalidReportError)
    which = msg.WhichOneof("value")
    if which != expected:
        raise InvalidReportError("value", which, f"{expected!r} for a {name} campaign")


def batch_from_reports(
    params: MechanismParams, reports: Sequence[bool | int | RapporReportLike]
) -> BatchColumns:
    """Columns (module docstring) from per-report encoder outputs, on the device before sending.

    Loops over the reports (a device batches at most a few thousand); the server never calls this.

    Raises:
        InvalidReportError: no reports, or ``reports[i]`` (or ``reports[i].cohort``/``.bits``) does not fit
            ``params``.
    """
    spec = _spec(params)
    check_count("reports", len(reports))
    return spec.batch_from_reports(params, reports)  # type: ignore[no-any-return]
