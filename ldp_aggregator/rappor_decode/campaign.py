"""Decoding a campaign: any RAPPOR variant (:func:`decode`), a stored campaign (:func:`decode_campaign`),
and the ``DecodeRappor`` messages (to and from protobuf, and the JSON the command line prints)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from ldp_aggregator.accumulators import Accumulator, BitCountAccumulator
from ldp_aggregator.rappor_decode.direct import decode_direct
from ldp_aggregator.rappor_decode.results import Correction, DecodeResult
from ldp_aggregator.rappor_decode.string_decode import decode_rappor
from ldp_aggregator.shuffle_view import campaign_shuffle, shuffle_to_dict, shuffle_to_proto
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.rappor.spec_base import RapporFamilySpec
from ldp_client.spec import Kind, MechanismSpec

if TYPE_CHECKING:
    from ldp_aggregator._proto.ldp.v1 import decode_pb2
    from ldp_client.params import BasicRapporParams, BooleanRapporParams, MechanismParams, RapporParams

__all__ = [
    "correction_from_proto",
    "decode",
    "decode_campaign",
    "decode_response_to_dict",
    "decode_to_proto",
    "decodes",
]


_DECODED: Final = tuple(s.name for s in registry.SPECS if isinstance(s, RapporFamilySpec))
_DECODED_TEXT: Final = ", ".join(_DECODED[:-1]) + " or " + _DECODED[-1]
"""The mechanisms decoded here: the RAPPOR family's (``rappor, basic-rappor or boolean-rappor``)."""


def _family_spec(params: object, allowed: str) -> MechanismSpec[Any]:
    """The spec of a RAPPOR variant's ``params``, or InvalidParameterError (field ``mechanism``)."""
    spec = registry.find(params)
    if not isinstance(spec, RapporFamilySpec):
        raise InvalidParameterError("mechanism", getattr(params, "name", params), allowed)
    return spec


def decodes(params: object) -> bool:
    """Whether :func:`decode` (``Analyst.DecodeRappor``) decodes campaigns with these parameters."""
    return isinstance(registry.find(params), RapporFamilySpec)


def decode(
    params: MechanismParams,
    acc: Accumulator,
    *,
    campaign_id: str,
    candidates: Sequence[str] = (),
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode any RAPPOR variant: string RAPPOR with ``candidates`` (:func:`decode_rappor`), basic and
    boolean RAPPOR directly (:func:`decode_direct`; candidates must then be empty).

    Raises:
        InvalidParameterError: not a RAPPOR campaign, string RAPPOR without candidates, candidates for
            basic/boolean RAPPOR, or bad options.
        InvalidReportError: ``acc`` does not belong to ``params``.
        NoReportsError: the campaign has no reports.
    """
    spec = _family_spec(params, _DECODED_TEXT)
    if spec.kind is Kind.RAPPOR:  # string RAPPOR: estimated against a candidate dictionary
        if not isinstance(acc, BitCountAccumulator):
            raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
        return decode_rappor(
            cast("RapporParams", params),
            acc,
            campaign_id=campaign_id,
            candidates=candidates,
            confidence=confidence,
            alpha=alpha,
            correction=correction,
            selection_z=selection_z,
        )
    # Basic and boolean RAPPOR (kind SUPPORT): every declared value, directly.
    if candidates:
        raise InvalidParameterError(
            "candidates",
            f"{len(candidates)} candidates",
            f"none for {params.name} (its domain is declared: every value is decoded)",
        )
    if not isinstance(acc, BitCountAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, "a BitCountAccumulator")
    return decode_direct(
        cast("BasicRapporParams | BooleanRapporParams", params),
        acc,
        confidence=confidence,
        alpha=alpha,
        correction=correction,
    )


# ------------------------------------------------------------------------------------------------- wire

_CORRECTION_TO_PROTO: dict[str, int] = {"bonferroni": 1, "bh": 2}
_CORRECTION_FROM_PROTO: dict[int, Correction] = {0: "bonferroni", 1: "bonferroni", 2: "bh"}


def correction_from_proto(value: int) -> Correction:
    """The correction named by a ``MultipleTesting`` enum value (unset = Bonferroni)."""
    try:
        return _CORRECTION_FROM_PROTO[int(value)]
    except KeyError:
        raise InvalidParameterError(
            "correction", value, "MULTIPLE_TESTING_BONFERRONI (1) or MULTIPLE_TESTING_BENJAMINI_HOCHBERG (2)"
        ) from None


def decode_to_proto(result: DecodeResult, campaign_id: str) -> decode_pb2.DecodeRapporResponse:
    """The ``DecodeRapporResponse`` message of a decode."""
    from ldp_aggregator._proto.ldp.v1 import decode_pb2

    msg = decode_pb2.DecodeRapporResponse(
        campaign_id=campaign_id,
        mechanism=result.mechanism,
        method=result.method,
        n_reports=result.n,
        epsilon=result.epsilon,
        epsilon_inf=result.epsilon_inf,
        confidence=result.confidence,
        alpha=result.alpha,
        correction=_CORRECTION_TO_PROTO[result.correction],  # type: ignore[arg-type]
        allocated_mass=result.allocated_mass,
        explained_mass=result.explained_mass,
        unexplained_mass=result.unexplained_mass,
        unexplained_mass_se=result.unexplained_mass_se,
        threshold_z=result.threshold_z,
        threshold_proportion=result.threshold_proportion,
        threshold_count=result.threshold_count,
        selection_lambda=result.selection_lambda or 0.0,
        warnings=list(result.warnings),
        n_detected=result.n_detected,
        n_selected=result.n_selected,
    )
    shuffle_to_proto(result.shuffle, msg.shuffle)  # issue 17: the campaign declares a shuffler
    if result.residuals is not None:
        r = result.residuals
        msg.residuals.CopyFrom(
            decode_pb2.DecodeResiduals(
                chi2=r.chi2, df=r.df, p_value=r.p_value, max_abs_residual=r.max_abs_residual, rows=r.rows
            )
        )
    # tolist() once per column: a Python loop over candidates (not reports) builds the messages.
    msg.candidates.extend(
        decode_pb2.CandidateDecode(
            label=lab,
            count=c,
            proportion=p,
            std_error=se,
            ci_low=lo,
            ci_high=hi,
            z=z,
            p_value=pv,
            selected=sel,
            detected=det,
        )
        for lab, c, p, se, lo, hi, z, pv, sel, det in zip(
            result.labels,
            result.count.tolist(),
            result.proportion.tolist(),
            result.std_error.tolist(),
            result.ci_low.tolist(),
            result.ci_high.tolist(),
            result.z.tolist(),
            result.p_value.tolist(),
            result.selected.tolist(),
            result.detected.tolist(),
            strict=True,
        )
    )
    return msg


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def decode_response_to_dict(msg: decode_pb2.DecodeRapporResponse) -> dict[str, Any]:
    """A JSON-ready dict of a ``DecodeRapporResponse`` (same shape over gRPC or from a database file)."""
    out: dict[str, Any] = {
        "campaign_id": msg.campaign_id,
        "mechanism": msg.mechanism,
        "method": msg.method,
        "n_reports": msg.n_reports,
        "epsilon": _num(msg.epsilon),
        "epsilon_inf": _num(msg.epsilon_inf),
        "confidence": msg.confidence,
        "alpha": msg.alpha,
        "correction": _CORRECTION_FROM_PROTO.get(msg.correction, "bonferroni"),
        "n_detected": msg.n_detected,
        "n_selected": msg.n_selected,
        "allocated_mass": msg.allocated_mass,
        "explained_mass": msg.explained_mass,
        "unexplained_mass": msg.unexplained_mass,
        "unexplained_mass_se": msg.unexplained_mass_se,
        "threshold": {
            "z": _num(msg.threshold_z),
            "proportion": _num(msg.threshold_proportion),
            "count": _num(msg.threshold_count),
        },
        "selection_lambda": msg.selection_lambda,
        "warnings": list(msg.warnings),
        "candidates": [
            {
                "label": c.label,
                "count": c.count,
                "proportion": c.proportion,
                "std_error": c.std_error,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "z": _num(c.z),
                "p_value": c.p_value,
                "selected": c.selected,
                "detected": c.detected,
            }
            for c in msg.candidates
        ],
    }
    if msg.HasField("residuals"):
        r = msg.residuals
        out["residuals"] = {
            "chi2": r.chi2,
            "df": r.df,
            "p_value": r.p_value,
            "max_abs_residual": r.max_abs_residual,
            "rows": r.rows,
        }
    shuffled = shuffle_to_dict(msg)  # issue 17: the central guarantee of one shuffled batch
    if shuffled is not None:
        out["shuffle"] = shuffled
    return out


def decode_campaign(
    info: Any,
    acc: Accumulator,
    *,
    candidates: Sequence[str] = (),
    confidence: float = 0.95,
    alpha: float = 0.05,
    correction: Correction = "bonferroni",
    selection_z: float | None = None,
) -> DecodeResult:
    """Decode a stored campaign (a :class:`ldp_client.wire.CampaignInfo`) from its committed accumulator.

    String RAPPOR uses ``candidates`` or, when empty, the campaign's own; basic and boolean RAPPOR decode
    their declared values.

    Raises:
        InvalidParameterError: not a RAPPOR campaign; string RAPPOR with no candidates anywhere, or
            candidates for basic/boolean RAPPOR; bad options.
        NoReportsError: the campaign has no reports yet.
    """
    params = info.params
    spec = _family_spec(params, f"a {_DECODED_TEXT} campaign (use GetEstimate for the others)")
    if spec.kind is Kind.RAPPOR:  # decoded against a dictionary: the request's, else the campaign's
        chosen = tuple(candidates) or tuple(info.candidates)
        if not chosen:
            raise InvalidParameterError(
                "candidates",
                (),
                "at least one candidate string, in the request or the campaign (string RAPPOR is decoded "
                "against a dictionary)",
            )
        candidates = chosen
    result = decode(
        params,
        acc,
        campaign_id=info.campaign_id,
        candidates=candidates,
        confidence=confidence,
        alpha=alpha,
        correction=correction,
        selection_z=selection_z,
    )
    return replace(result, shuffle=campaign_shuffle(info))  # issue 17: None without a shuffler
