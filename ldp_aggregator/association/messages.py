"""An association as the ``AssociationResponse`` message, and that message as a JSON-ready dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ldp_aggregator.association.results import AssociationResult
from ldp_aggregator.estimators import normal_quantile
from ldp_aggregator.shuffle_view import shuffle_to_dict, shuffle_to_proto

if TYPE_CHECKING:
    from ldp_aggregator._proto.ldp.v1 import decode_pb2


def association_to_proto(result: AssociationResult, campaign_id: str) -> decode_pb2.AssociationResponse:
    """The ``AssociationResponse`` message of a result."""
    from ldp_aggregator._proto.ldp.v1 import decode_pb2

    msg = decode_pb2.AssociationResponse(
        campaign_id=campaign_id,
        n_reports=result.n,
        confidence=result.confidence,
        first_mechanism=result.first_mechanism,
        second_mechanism=result.second_mechanism,
        row_labels=list(result.row_labels),
        col_labels=list(result.col_labels),
        log_likelihood=result.log_likelihood,
        log_likelihood_independent=result.log_likelihood_independent,
        lr_statistic=result.lr_statistic,
        df=result.df,
        p_value=result.p_value,
        iterations=result.iterations,
        converged=result.converged,
        warnings=list(result.warnings),
        epsilon=result.epsilon,
    )
    shuffle_to_proto(result.shuffle, msg.shuffle)  # issue 17: the campaign declares a shuffler
    U, V = result.joint.shape
    msg.cells.extend(
        decode_pb2.AssociationCell(
            row=i,
            col=j,
            proportion=float(result.joint[i, j]),
            std_error=float(result.joint_se[i, j]),
            ci_low=float(result.joint_low[i, j]),
            ci_high=float(result.joint_high[i, j]),
            count=float(result.joint[i, j] * result.n),
        )
        for i in range(U)
        for j in range(V)
    )
    z = normal_quantile(result.confidence)
    for labels, est, se, field in (
        (result.row_labels, result.first, result.first_se, msg.first),
        (result.col_labels, result.second, result.second_se, msg.second),
    ):
        field.extend(
            decode_pb2.MarginalEstimate(
                label=lab,
                proportion=float(p),
                std_error=float(s),
                ci_low=max(0.0, float(p - z * s)),
                ci_high=min(1.0, float(p + z * s)),
                count=float(p * result.n),
            )
            for lab, p, s in zip(labels, est, se, strict=True)
        )
    return msg


def association_response_to_dict(msg: decode_pb2.AssociationResponse) -> dict[str, Any]:
    """A JSON-ready dict of an ``AssociationResponse``."""

    def marg(items: Any) -> list[dict[str, Any]]:
        return [
            {
                "label": m.label,
                "proportion": m.proportion,
                "std_error": m.std_error,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "count": m.count,
            }
            for m in items
        ]

    ncol = len(msg.col_labels)
    out: dict[str, Any] = {
        "campaign_id": msg.campaign_id,
        "n_reports": msg.n_reports,
        "confidence": msg.confidence,
        "epsilon": msg.epsilon,
        "first_mechanism": msg.first_mechanism,
        "second_mechanism": msg.second_mechanism,
        "row_labels": list(msg.row_labels),
        "col_labels": list(msg.col_labels),
        "joint": [
            [c.proportion for c in msg.cells[i * ncol : (i + 1) * ncol]] for i in range(len(msg.row_labels))
        ],
        "joint_std_error": [
            [c.std_error for c in msg.cells[i * ncol : (i + 1) * ncol]] for i in range(len(msg.row_labels))
        ],
        "cells": [
            {
                "row": c.row,
                "col": c.col,
                "proportion": c.proportion,
                "std_error": c.std_error,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "count": c.count,
            }
            for c in msg.cells
        ],
        "first": marg(msg.first),
        "second": marg(msg.second),
        "independence": {
            "lr_statistic": msg.lr_statistic,
            "df": msg.df,
            "p_value": msg.p_value,
            "log_likelihood": msg.log_likelihood,
            "log_likelihood_independent": msg.log_likelihood_independent,
        },
        "iterations": msg.iterations,
        "converged": msg.converged,
        "warnings": list(msg.warnings),
    }
    shuffled = shuffle_to_dict(msg)  # issue 17: the central guarantee of one shuffled batch
    if shuffled is not None:
        out["shuffle"] = shuffled
    return out
