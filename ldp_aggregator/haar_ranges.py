"""Range queries from Haar-coefficient levels (``haar``; issue 18): estimates, exact weights, variances.

Input: a :class:`ldp_client.layouts.HaarLevels` (the ``haar`` spec's ``range_levels``). Notation and the
client's protocol: :mod:`ldp_client.mechanisms.haar` (Cormode, Kulkarni, Srivastava, VLDB 2019, §5).

1. Coefficients: theta_hat_l = H S_l / (n_l a) (:func:`ldp_client.mechanisms.haar.coefficients`), unbiased
   for the population's theta_l (the level's users are a uniformly random subset).
2. Leaves by the Haar synthesis from the known total 1 (:func:`ldp_client.mechanisms.haar.synthesize`):
   f_x = 2^-h + sum_l s_l(x) theta_{l, node_l(x)} / 2^(h-l+1) (a node of mass M and coefficient theta has
   children (M +- theta)/2), consistent by construction (every node is the sum of its children) and
   unbiased (linear).
3. A range R: share = sum_{x in R} f_x = 2^-h |R| + sum_{l,j} w_{l,j} theta_{l,j} with the exact weights
   w_{l,j} = (|R within node j's left half| - |R within its right half|) / 2^(h-l+1), nonzero for at most
   two nodes per level (those holding R's ends): O(log D) coefficients.
4. Its variance: given the level subsets, nodes are uncorrelated with Var(theta_hat_{l,j}) =
   (1/a^2 - pi_{l,j}) / n_l (pi the node's share, plugged in from the synthesis), so the oracle part is
   sum_{l,j} w_{l,j}^2 (1/a^2 - pi_{l,j}) / n_l; plus the sampling part of the random level subsets with
   g_l(x) = w_{l, node_l(x)} s_l(x), the formula of :mod:`ldp_aggregator.ranges` (step 4 there; Cochran
   1977, §2.8). Count scale N = n; a normal interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator._range_common import EmptyLevelError, sampling_variance
from ldp_client.layouts import HaarLevels
from ldp_client.mechanisms.haar import coefficients, synthesize

__all__ = ["HaarTree", "fit_haar"]


@dataclass(frozen=True)
class HaarTree:
    """The fitted Haar levels: coefficients, node masses, the leaves (shares) and what variances need."""

    labels: tuple[str, ...]
    n: int
    reports: tuple[int, ...]
    bias: float
    theta: tuple[NDArray[np.float64], ...]
    masses: tuple[NDArray[np.float64], ...]
    leaves: NDArray[np.float64]

    def weights(self, r: NDArray[np.float64]) -> list[NDArray[np.float64]]:
        """w_l = d(r . leaves) / d theta_l (step 3): (left-half sum - right-half sum) of r per node over the
        node's width 2^(h-l+1)."""
        size = r.shape[0]
        out = []
        for level in range(1, len(self.theta) + 1):
            m = 1 << (level - 1)
            halves = r.reshape(m, 2, -1).sum(axis=2)
            out.append((halves[:, 0] - halves[:, 1]) / (size // m))
        return out

    def variance(self, r: NDArray[np.float64]) -> float:
        """Var of r . leaves on the share scale (step 4): oracle part plus the level subsets' sampling."""
        w = self.weights(r)
        a2 = self.bias * self.bias
        oracle = sum(
            float(np.dot(wl * wl, np.maximum(1.0 / a2 - ml, 0.0))) / nl
            for wl, ml, nl in zip(w, self.masses, self.reports, strict=True)
        )
        size = r.shape[0]
        sign_rows = []
        for level, wl in enumerate(w, start=1):
            half = size >> level
            sign = np.tile(np.concatenate([np.ones(half), -np.ones(half)]), 1 << (level - 1))
            sign_rows.append(np.repeat(wl, 2 * half) * sign)
        return oracle + sampling_variance(np.stack(sign_rows), self.leaves, self.reports, self.n)


def fit_haar(levels: HaarLevels) -> HaarTree:
    """Coefficients, masses and leaves (steps 1 and 2 of the module docstring).

    Raises:
        InvalidReportError: a level has no report yet.
    """
    for level, rows in enumerate(levels.rows, start=1):
        if int(np.sum(rows)) <= 0:
            raise EmptyLevelError(level)
    theta = coefficients(levels)
    leaves, masses = synthesize(theta)
    return HaarTree(
        labels=levels.labels,
        n=int(levels.n),
        reports=tuple(int(np.sum(r)) for r in levels.rows),
        bias=float(levels.bias),
        theta=tuple(theta),
        masses=tuple(masses),
        leaves=leaves,
    )
