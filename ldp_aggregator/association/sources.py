"""Where a paired campaign's reports come from: the joint pattern table of its accumulator for small sides,
or its retained raw reports (identical reports merged with a weight) with a string-RAPPOR side, and
:func:`associate_campaign`, which estimates a stored campaign's association from them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ldp_aggregator.association.em import check_em_options, estimate_association
from ldp_aggregator.association.likelihood import side_likelihood
from ldp_aggregator.association.results import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_VALUES,
    DEFAULT_TOLERANCE,
    OTHER_LABEL,
    AssociationResult,
    ReportsUnavailableError,
)
from ldp_aggregator.estimators import NoReportsError, _check_candidates
from ldp_aggregator.paired_accumulator import PairedAccumulator
from ldp_aggregator.shuffle_view import campaign_shuffle
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.paired import PairedParams, paired_side_id, side_spec
from ldp_client.mechanisms.rappor.params import RapporParams
from ldp_client.spec import Kind

if TYPE_CHECKING:
    from numpy.typing import NDArray


_SIDES: Final = ("first", "second")


def _concat(parts: list[Any]) -> Any:
    """Batch columns (an array, or a tuple of arrays) of several batches, one after the other."""
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(len(parts[0])))
    return np.concatenate(parts)


def columns_from_payloads(
    params: PairedParams, campaign_id: str, payloads: Iterable[bytes]
) -> tuple[Any, Any, int]:
    """Both sides' report columns from a paired campaign's raw payloads (ReportBatch or Report bytes).

    Each payload is validated again by :mod:`ldp_client.wire` (the store kept what was accepted).

    Returns:
        (first columns, second columns, number of reports).
    """
    from ldp_client import wire
    from ldp_client._proto.ldp.v1 import reports_pb2

    firsts: list[Any] = []
    seconds: list[Any] = []
    n = 0
    for raw in payloads:
        batch = reports_pb2.ReportBatch.FromString(raw)
        if batch.count:
            cols = wire.batch_from_proto(batch, params, campaign_id=campaign_id)
            rows = batch.count
        else:  # a single report (Collector.SubmitReport) is stored as its Report message
            cols = wire.report_from_proto(reports_pb2.Report.FromString(raw), params, campaign_id=campaign_id)
            rows = 1
        if not isinstance(cols, tuple) or len(cols) != 2:  # unreachable for a paired campaign
            raise InvalidReportError("payload", type(cols).__name__, "paired columns")
        firsts.append(cols[0])
        seconds.append(cols[1])
        n += rows
    if n == 0:
        return None, None, 0
    return _concat(firsts), _concat(seconds), n


def _key_bytes(cols: Any) -> NDArray[np.uint8]:
    """Each report's bytes in its batch columns (every column's row, little-endian, side by side)."""
    arrays = cols if isinstance(cols, tuple) else (cols,)
    parts = []
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        parts.append(a.view(np.uint8).reshape(a.shape[0], -1))
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


def _take(cols: Any, idx: NDArray[np.intp]) -> Any:
    """The rows ``idx`` of batch columns (an array, or a tuple of arrays)."""
    if isinstance(cols, tuple):
        return tuple(np.asarray(c)[idx] for c in cols)
    return np.asarray(cols)[idx]


def _merge_identical(first: Any, second: Any) -> tuple[Any, Any, NDArray[np.float64]]:
    """Identical paired reports merged into one row with a weight (exact for the likelihood)."""
    keys = np.ascontiguousarray(np.concatenate([_key_bytes(first), _key_bytes(second)], axis=1))
    void = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
    _, index, counts = np.unique(void, return_index=True, return_counts=True)
    return _take(first, index), _take(second, index), counts.astype(np.float64)


def _rappor_values(
    side_params: RapporParams,
    acc: Any,
    side_id: str,
    candidates: Sequence[str],
    max_values: int,
    side: str,
    warns: list[str],
) -> tuple[str, ...]:
    """The candidates a string-RAPPOR side keeps: the largest marginal estimates (full decoder)."""
    from ldp_aggregator.rappor_decode import decode_rappor

    dec = decode_rappor(side_params, acc, campaign_id=side_id, candidates=candidates)
    order = np.argsort(-dec.proportion, kind="stable")
    chosen = [int(i) for i in order if dec.proportion[i] > 0][:max_values]
    if not chosen:
        chosen = [int(i) for i in np.argsort(-dec.z, kind="stable")[:1]]
        warns.append(f"{side}: no candidate has a positive marginal estimate; kept {dec.labels[chosen[0]]!r}")
    dropped = int(np.count_nonzero(dec.proportion > 0)) - len(chosen)
    if dropped > 0:
        warns.append(
            f"{side}: kept the {len(chosen)} largest of {len(chosen) + dropped} candidates with a positive "
            f"marginal estimate (max_values); the others count as {OTHER_LABEL!r}"
        )
    return tuple(dec.labels[i] for i in chosen)


def associate_campaign(
    info: Any,
    acc: Any,
    payloads: Callable[[], Iterable[bytes]] | None,
    *,
    first_candidates: Sequence[str] = (),
    second_candidates: Sequence[str] = (),
    confidence: float = 0.95,
    max_values: int = DEFAULT_MAX_VALUES,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tolerance: float = DEFAULT_TOLERANCE,
) -> AssociationResult:
    """The association of a stored paired campaign (a :class:`ldp_client.wire.CampaignInfo`).

    Reports come from the accumulator's joint pattern table when both sides are small, otherwise from
    ``payloads()`` (the store's retained raw reports). A string-RAPPOR side is decoded against its
    candidates (the request's, else the campaign's), keeping the ``max_values`` largest marginal estimates
    plus ``<other>``.

    Raises:
        InvalidParameterError: not a paired campaign, candidates for a side that is not string RAPPOR, no
            candidates for one that is, bad options.
        NoReportsError: no reports.
        ReportsUnavailableError: raw reports are needed but none were retained.
    """
    params = info.params
    if not isinstance(params, PairedParams):
        raise InvalidParameterError(
            "mechanism", getattr(params, "name", params), "a paired campaign (two variables per report)"
        )
    if not isinstance(acc, PairedAccumulator):
        raise InvalidReportError("accumulator", type(acc).__name__, "a PairedAccumulator")
    if isinstance(max_values, bool) or not isinstance(max_values, int) or not 1 <= max_values <= 1000:
        raise InvalidParameterError("max_values", max_values, "an integer in [1, 1000]")
    # Issue 13: every option of the request is checked before the data, so an empty campaign gives the same
    # answer to a bad request as one with reports.
    check_em_options(confidence, max_iterations, tolerance)
    requested = (tuple(first_candidates), tuple(second_candidates))
    for side, side_params, req in zip(_SIDES, params.sides, requested, strict=True):
        if req and side_spec(side_params).kind is not Kind.RAPPOR:
            raise InvalidParameterError(
                f"{side}_candidates", f"{len(req)} candidates", f"none for a {side_params.name} side"
            )
        if req:
            _check_candidates(req)
    if acc.n == 0:
        raise NoReportsError(0)
    cid = info.campaign_id
    warns: list[str] = []
    side_cands: list[tuple[str, ...]] = []
    for side, side_params, req, side_acc in zip(
        _SIDES, params.sides, requested, (acc.first, acc.second), strict=True
    ):
        if side_spec(side_params).kind is Kind.RAPPOR:
            cands = req or tuple(info.candidates)
            if not cands:
                raise InvalidParameterError(
                    f"{side}_candidates",
                    (),
                    "candidate strings for the string-RAPPOR side (request or campaign)",
                )
            side_cands.append(
                _rappor_values(
                    side_params,  # type: ignore[arg-type]
                    side_acc,
                    paired_side_id(cid, side),
                    cands,
                    max_values,
                    side,
                    warns,
                )
            )
        else:
            if req:
                raise InvalidParameterError(
                    f"{side}_candidates", f"{len(req)} candidates", f"none for a {side_params.name} side"
                )
            side_cands.append(())
    weights: NDArray[np.float64] | None
    if acc.joint is not None:
        rows, cols = np.nonzero(acc.joint)
        first_cols = side_spec(params.first).pattern_columns(params.first, rows.astype(np.int64))
        second_cols = side_spec(params.second).pattern_columns(params.second, cols.astype(np.int64))
        weights = acc.joint[rows, cols].astype(np.float64)
    else:
        if payloads is None:
            raise ReportsUnavailableError(
                cid, "a string-RAPPOR side needs the raw reports, which are not available"
            )
        first_cols, second_cols, n_raw = columns_from_payloads(params, cid, payloads())
        if n_raw == 0:
            raise ReportsUnavailableError(
                cid,
                f"{acc.n} reports were counted but none was retained (run the server with raw retention on, "
                "and do not purge them, to estimate an association with a string-RAPPOR side)",
            )
        if n_raw < acc.n:
            warns.append(
                f"only {n_raw} of the {acc.n} reports were retained (purged?); the estimate uses them"
            )
        first_cols, second_cols, weights = _merge_identical(first_cols, second_cols)
    sides = [
        side_likelihood(p, c, campaign_id=paired_side_id(cid, side), candidates=cands)
        for side, p, c, cands in zip(_SIDES, params.sides, (first_cols, second_cols), side_cands, strict=True)
    ]
    result = estimate_association(
        params,
        sides[0],
        sides[1],
        weights=weights,
        confidence=confidence,
        max_iterations=max_iterations,
        tolerance=tolerance,
        warnings=warns,
    )
    return replace(result, shuffle=campaign_shuffle(info))  # issue 17: None without a shuffler
