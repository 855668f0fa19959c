"""Range-query accuracy in simulations (issue 18): the ranges asked, and their metrics against the truth.

For a campaign whose spec answers ranges (``spec.range_levels``), every repeat also answers a fixed set of
ranges, drawn once per run from the run's seed: :data:`RANGES_PER_RUN` ranges whose lengths are spread
evenly on a log scale from 1 to D (so short, medium and long ranges all count), each placed uniformly.
The metrics, over repeats and ranges: MSE of the counts against the true counts, MSE over the mean
reported variance (about 1 when the standard errors are right), coverage of the intervals, and the RMSE
per range length class, on the frequency scale (divided by n).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.ranges import campaign_ranges
from ldp_client import registry

__all__ = ["RANGES_PER_RUN", "range_metrics", "range_queries", "range_rows", "takes_ranges"]

RANGES_PER_RUN = 24


def takes_ranges(params: Any) -> bool:
    """Whether the mechanism answers range queries (its spec gives range levels for an empty campaign)."""
    from ldp_aggregator.accumulators import accumulator_for

    return registry.spec_for(params).range_levels(params, accumulator_for(params)) is not None


def range_queries(d: int, seed: int, k: int = RANGES_PER_RUN) -> tuple[tuple[int, int], ...]:
    """``k`` ranges [lo, hi] over positions 0..d-1, lengths log-spaced from 1 to d, seeded."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 18]))
    lengths = np.unique(np.round(np.geomspace(1, d, num=k)).astype(np.int64))
    lengths = np.resize(lengths, k)
    starts = [int(rng.integers(0, d - length + 1)) for length in lengths]
    return tuple((s, s + int(length) - 1) for s, length in zip(starts, lengths, strict=True))


def range_rows(
    params: Any, acc: Any, ranges: Sequence[tuple[int, int]], confidence: float
) -> NDArray[np.float64]:
    """(k, 4): count, std_error, ci_low, ci_high of each range, from the aggregator's range estimator."""
    answers, _ = campaign_ranges(params, acc, ranges, (), confidence)
    return np.array([[a.count, a.std_error, a.ci_low, a.ci_high] for a in answers], dtype=np.float64)


def rows_from_proto(resp: Any) -> NDArray[np.float64]:
    """The same rows from an ``EstimateResponse`` (grpc mode)."""
    return np.array([[r.count, r.std_error, r.ci_low, r.ci_high] for r in resp.ranges], dtype=np.float64)


def range_metrics(
    ranges: Sequence[tuple[int, int]], truth: NDArray[np.int64], rows: NDArray[np.float64], n: int
) -> dict[str, Any]:
    """Metrics of (R, k, 4) answers against the (R, M) true item counts (items in domain order)."""
    cum = np.concatenate([np.zeros((truth.shape[0], 1)), np.cumsum(truth, axis=1)], axis=1)
    true = np.stack([cum[:, hi + 1] - cum[:, lo] for lo, hi in ranges], axis=1)
    est, se, low, high = rows[..., 0], rows[..., 1], rows[..., 2], rows[..., 3]
    err2 = (est - true) ** 2
    lengths = np.array([hi - lo + 1 for lo, hi in ranges])
    by_length = []
    for lo_len, hi_len in ((1, 1), (2, 9), (10, 99), (100, 999), (1000, 1 << 62)):
        sel = (lengths >= lo_len) & (lengths <= hi_len)
        if sel.any():
            by_length.append(
                {
                    "lengths": f"{lo_len}-{hi_len}" if hi_len < 1 << 62 else f">={lo_len}",
                    "ranges": int(sel.sum()),
                    "rmse_frequency": float(np.sqrt(err2[:, sel].mean())) / n,
                    "predicted_rmse_frequency": float(np.sqrt((se[:, sel] ** 2).mean())) / n,
                }
            )
    return {
        "ranges": [[lo, hi] for lo, hi in ranges],
        "mse": float(err2.mean()),
        "mse_over_variance": float(err2.mean() / (se**2).mean()),
        "coverage": float(((low <= true) & (true <= high)).mean()),
        "rmse_frequency": float(np.sqrt(err2.mean())) / n,
        "by_length": by_length,
    }
