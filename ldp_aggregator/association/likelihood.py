"""Each side's per-report likelihoods a_r[u] = P(y_r | u): from the side's spec for sides with fixed
items, and from the candidates' Bloom filters (plus ``<other>``) for a string-RAPPOR side (the formulas:
:mod:`ldp_aggregator.association`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from ldp_aggregator.association.results import OTHER_LABEL, SideLikelihood
from ldp_aggregator.rappor_estimates import rappor_design
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.paired import PairedSide, side_spec
from ldp_client.mechanisms.rappor.params import RapporParams
from ldp_client.spec import Kind

# Values of a grr or basic-RAPPOR side: its likelihood matrix has one column per value.
_MAX_SIDE_VALUES: Final = 64


def _side_values(params: PairedSide) -> tuple[str, ...]:
    """The values of a side with fixed items (rr, grr, basic and boolean RAPPOR), at most 64 of them."""
    values = side_spec(params).items(params)
    if len(values) > _MAX_SIDE_VALUES:
        raise InvalidParameterError(
            "params",
            f"{params.name} over {len(values)} values",
            f"at most {_MAX_SIDE_VALUES} values for association",
        )
    return values


def side_likelihood(
    params: PairedSide, columns: Any, *, campaign_id: str, candidates: Sequence[str] = ()
) -> SideLikelihood:
    """Per-report log-likelihood of every value of one side, from its report columns (vectorised).

    A side of kind SUPPORT gives its items' likelihoods (``spec.report_likelihood``); string RAPPOR (kind
    RAPPOR) those of the candidates and ``<other>`` (:func:`_candidate_likelihood`).

    Args:
        params: the side's mechanism parameters.
        columns: the side's report columns (the format of its mechanism).
        campaign_id: the id the side is encoded under (``paired_side_id``): it keys RAPPOR's hashing.
        candidates: string RAPPOR only: the candidate strings (``<other>`` is appended).
    """
    spec = side_spec(params)
    if spec.kind is Kind.RAPPOR:
        return _candidate_likelihood(params, columns, campaign_id=campaign_id, candidates=candidates)  # type: ignore[arg-type]
    labels = _side_values(params)
    log_lik, offset = spec.report_likelihood(params, columns)
    return SideLikelihood(labels=labels, log_lik=log_lik, offset=offset)


def _candidate_likelihood(
    params: RapporParams, columns: Any, *, campaign_id: str, candidates: Sequence[str]
) -> SideLikelihood:
    """String RAPPOR: one column per candidate (its Bloom filter in the report's cohort), then <other>."""
    ps, qs = params.prob_one_if_clear, params.prob_one_if_set
    a1, a0 = math.log(qs / ps), math.log((1.0 - qs) / (1.0 - ps))
    rows = np.asarray(columns[1], dtype=np.uint8)
    k = params.k
    bits = np.unpackbits(rows, axis=1, count=k, bitorder="little")
    ones = bits.sum(axis=1, dtype=np.int64).astype(np.float64)
    # log P(S | all Bloom bits 0) = ones log p* + (k - ones) log(1 - p*): common to every value.
    offset = ones * math.log(ps) + (k - ones) * math.log(1.0 - ps)
    cands = tuple(candidates)
    if not cands:
        raise InvalidParameterError("candidates", (), "at least one candidate string for a rappor side")
    if OTHER_LABEL in cands:
        raise InvalidParameterError("candidates", OTHER_LABEL, "strings other than the reserved '<other>'")
    cohorts = np.asarray(columns[0], dtype=np.int64)
    pos = rappor_design(params, campaign_id, cands)  # (U, m, h)
    U = len(cands)
    log_lik = np.empty((cohorts.size, U + 1))
    order = np.argsort(cohorts, kind="stable")
    sorted_c = cohorts[order]
    starts = np.flatnonzero(np.r_[True, sorted_c[1:] != sorted_c[:-1]]) if sorted_c.size else np.zeros(0, int)
    ends = np.r_[starts[1:], sorted_c.size]
    cand_idx = np.repeat(np.arange(U), params.h)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        c = int(sorted_c[s])
        B = np.zeros((k, U))
        B[pos[:, c, :].ravel(), cand_idx] = 1.0  # a bit hit by two hashes is set once
        rows_c = order[s:e]
        log_lik[rows_c, :U] = bits[rows_c].astype(np.float64) @ (B * (a1 - a0)) + a0 * B.sum(axis=0)
    b = 1.0 - (1.0 - 1.0 / k) ** params.h
    r_o = b * qs + (1.0 - b) * ps
    o1, o0 = math.log(r_o / ps), math.log((1.0 - r_o) / (1.0 - ps))
    log_lik[:, U] = ones * (o1 - o0) + k * o0
    return SideLikelihood(labels=(*cands, OTHER_LABEL), log_lik=log_lik, offset=offset)
