"""What both range estimators share (:mod:`ldp_aggregator.ranges`, :mod:`ldp_aggregator.haar_ranges`): the
empty-level error and the sampling variance of the random level subsets (formula: ranges.py, step 4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.estimation import NoReportsError
from ldp_client.errors import InvalidReportError

__all__ = ["EmptyLevelError", "sampling_variance"]


class EmptyLevelError(NoReportsError):
    """A level of the hierarchy has no report yet: its nodes, hence the ranges, cannot be estimated."""

    def __init__(self, level: int) -> None:
        InvalidReportError.__init__(
            self, "n_reports", 0, f"at least one report at every level of the tree (level {level} has none)"
        )


def sampling_variance(
    g: NDArray[np.float64], leaves: NDArray[np.float64], reports: Sequence[int], n: int
) -> float:
    """The sampling part of step 4 for disjoint random level subsets of sizes n_l: g (levels, leaves) is
    g_l(x) per leaf, the population distribution f the leaves clipped to [0, 1] and renormalised;
    N/(N-1) sum_l sigma_ll / n_l - Var_pop(sum_l g_l) / (N-1), at least 0."""
    if n <= 1:
        return 0.0
    f = np.clip(leaves, 0.0, None)
    total = f.sum()
    f = f / total if total > 0 else np.full(f.shape, 1.0 / f.size)
    mean = g @ f
    centred = g - mean[:, None]
    cov = (centred * f) @ centred.T
    n_l = np.asarray(reports, dtype=np.float64)
    sampling = n / (n - 1) * float(np.sum(np.diag(cov) / n_l)) - float(cov.sum()) / (n - 1)
    return max(sampling, 0.0)
