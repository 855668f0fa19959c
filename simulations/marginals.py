"""Marginal accuracy in simulations (issue 18): a marginal campaign's items are its chosen marginals' cells.

For a campaign whose spec answers marginals (``spec.marginal_tables``; ``calm``), the population's values
are records of the full joint (joint indices, row-major), and the simulation's items are the cells of every
chosen marginal, in the campaign's order (labels ``a=x|b=y``): their true counts are the population's
projections, and every repeat estimates them through :func:`ldp_aggregator.marginals.campaign_marginals`
(the Analyst's estimator: consistent, with standard errors). The run's metrics (MSE, MSE over the mean
reported variance, coverage) are then those of the marginal cells, and :func:`marginal_metrics` adds them
per marginal, on the frequency scale too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import accumulator_for
from ldp_aggregator.marginals import campaign_marginals
from ldp_client import registry

__all__ = [
    "marginal_items",
    "marginal_metrics",
    "marginal_queries",
    "marginal_rows",
    "rows_from_proto",
    "takes_marginals",
]


def takes_marginals(params: Any) -> bool:
    """Whether the mechanism answers marginals (its spec gives marginal tables for an empty campaign)."""
    return registry.spec_for(params).marginal_tables(params, accumulator_for(params)) is not None


def marginal_queries(params: Any) -> list[tuple[str, ...]]:
    """The campaign's chosen marginals, as attribute names (the queries a run answers)."""
    tables = registry.spec_for(params).marginal_tables(params, accumulator_for(params))
    assert tables is not None
    return [tuple(tables.attributes[a] for a in m) for m in tables.marginals]


def marginal_items(params: Any) -> tuple[tuple[str, ...], tuple[NDArray[np.int64], ...], int]:
    """(item labels, per marginal the item of every joint value, joint size D) of a marginal campaign."""
    tables = registry.spec_for(params).marginal_tables(params, accumulator_for(params))
    assert tables is not None
    sizes = [len(lab) for lab in tables.labels]
    grids = np.indices(sizes).reshape(len(sizes), -1)
    labels: list[str] = []
    value_items = []
    for m in tables.marginals:
        cell = np.zeros(grids.shape[1], dtype=np.int64)
        for a in m:
            cell = cell * sizes[a] + grids[a]
        value_items.append(cell + len(labels))
        shape = [sizes[a] for a in m]
        for c in range(int(np.prod(shape))):
            idx = np.unravel_index(c, shape)
            labels.append(
                "|".join(
                    f"{tables.attributes[a]}={tables.labels[a][int(k)]}" for a, k in zip(m, idx, strict=True)
                )
            )
    return tuple(labels), tuple(value_items), int(np.prod(sizes))


def marginal_rows(params: Any, acc: Any, confidence: float) -> NDArray[np.float64]:
    """(items, 4): count, std_error, ci_low, ci_high of every chosen marginal's cells, from the Analyst's
    marginal estimator."""
    answers = campaign_marginals(params, acc, marginal_queries(params), confidence)
    return np.array(
        [[c.count, c.std_error, c.ci_low, c.ci_high] for a in answers for c in a.cells], dtype=np.float64
    )


def rows_from_proto(resp: Any) -> NDArray[np.float64]:
    """The same rows from an ``EstimateResponse`` (grpc mode)."""
    return np.array(
        [[c.count, c.std_error, c.ci_low, c.ci_high] for m in resp.marginals for c in m.cells],
        dtype=np.float64,
    )


def marginal_metrics(
    params: Any,
    truth: NDArray[np.int64],
    est: NDArray[np.float64],
    se: NDArray[np.float64],
    low: NDArray[np.float64],
    high: NDArray[np.float64],
    n: int,
) -> dict[str, Any]:
    """Per chosen marginal and pooled over them: MSE, MSE / mean variance, coverage, RMSE of the shares;
    arrays (R, items) in :func:`marginal_items` order."""
    queries = marginal_queries(params)
    tables = registry.spec_for(params).marginal_tables(params, accumulator_for(params))
    assert tables is not None
    err2 = (est - truth) ** 2
    hit = (low <= truth) & (truth <= high)
    out = []
    start = 0
    for q, m in zip(queries, tables.marginals, strict=True):
        cells = int(np.prod([len(tables.labels[a]) for a in m]))
        sl = slice(start, start + cells)
        start += cells
        out.append(
            {
                "attributes": list(q),
                "cells": cells,
                "mse": float(err2[:, sl].mean()),
                "mse_over_variance": float(err2[:, sl].mean() / (se[:, sl] ** 2).mean()),
                "coverage": float(hit[:, sl].mean()),
                "rmse_frequency": float(np.sqrt(err2[:, sl].mean())) / n,
            }
        )
    return {
        "mse": float(err2.mean()),
        "mse_over_variance": float(err2.mean() / (se**2).mean()),
        "coverage": float(hit.mean()),
        "rmse_frequency": float(np.sqrt(err2.mean())) / n,
        "marginals": out,
    }
