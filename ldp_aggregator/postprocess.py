"""Post-processing of frequency estimates: Norm-Sub (projection onto the simplex) and clipping.

Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, "Locally Differentially Private Frequency Estimation with
Consistency", NDSS 2020. The unbiased estimates of :mod:`ldp_aggregator.estimators` can be negative and
need not sum to n. Post-processing makes them consistent at the price of bias, so it is reported as a
separately labelled output *beside* the unbiased estimate, never in its place, and without intervals: the
intervals of the unbiased estimate are the ones to use for inference (the analytic variances do not
apply after post-processing; ``ldp-formulas.md`` §6).

* **Norm-Sub**: repeatedly set negative counts to 0 and shift the positive ones by a common amount until
  they are non-negative and sum to the total. When the positive parts of the counts sum to at least the
  total (the usual case: unbiased counts sum to about n, so their positive parts to more), the shift is
  a subtraction and the fixed point is c'_v = max(c_v - theta, 0) with theta such that sum c' = total,
  i.e. the Euclidean projection of c onto {c' >= 0, sum c' = total} (the constrained least-squares
  estimate). :func:`norm_sub` computes that projection directly by sorting, O(d log d) (Held, Wolfe,
  Crowder 1974; Duchi, Shalev-Shwartz, Singer, Chandra, ICML 2008). In the rare opposite case (positive
  parts summing to less than the total) the projection also lifts the counts just below 0 that lie
  above -|theta|, while the literal iteration (:func:`norm_sub_iterative`) adds the missing mass to the
  positive counts only; the projection is the one reported (it is the least-squares solution).
* **Clip** (Base-Pos, with the upper end): each count clipped to [0, n].

The total is n for single-valued data (every user holds exactly one item). Where users hold a varying
number of items (``spec.items_per_user``: set-valued campaigns, padding and sampling, hold 0 to L), the
total used is the unbiased estimate of the number of items held, sum_v c_v, clipped to [0, L n].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ldp_client import registry
from ldp_client.errors import InvalidParameterError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ldp_aggregator.estimators import FrequencyEstimate
    from ldp_client.params import MechanismParams

__all__ = ["METHODS", "PostprocessedEstimate", "clip", "norm_sub", "norm_sub_iterative", "postprocess"]

METHODS: tuple[str, ...] = ("norm-sub", "clip")


@dataclass(frozen=True, kw_only=True, eq=False)
class PostprocessedEstimate:
    """Post-processed counts, one per item of the estimate, in the same order (biased: no intervals).

    Attributes:
        method: ``"norm-sub"`` or ``"clip"``.
        counts: the post-processed counts.
        total: what the counts sum to for norm-sub (0 for clip).
    """

    method: str
    counts: tuple[float, ...]
    total: float


def _vector(name: str, counts: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameterError(name, getattr(arr, "shape", None), "a non-empty 1-D array of counts")
    if not np.isfinite(arr).all():
        raise InvalidParameterError(name, "a NaN or infinite count", "finite counts")
    return arr


def _total(total: float) -> float:
    if isinstance(total, bool) or not isinstance(total, int | float) or not math.isfinite(total) or total < 0:
        raise InvalidParameterError("total", total, "a finite number >= 0")
    return float(total)


def norm_sub(counts: ArrayLike, total: float) -> NDArray[np.float64]:
    """Norm-Sub = the Euclidean projection of ``counts`` onto {c >= 0, sum c = total}, by sorting.

    With u the counts sorted in decreasing order and rho the largest j (1-based) such that
    u_j - (sum_{i<=j} u_i - total)/j > 0, theta = (sum_{i<=rho} u_i - total)/rho and the result is
    max(c - theta, 0).
    """
    c = _vector("counts", counts)
    t = _total(total)
    if t == 0.0:
        return np.zeros_like(c)
    u = np.sort(c)[::-1]
    css = np.cumsum(u) - t
    j = np.arange(1, c.size + 1, dtype=np.float64)
    positive = u - css / j > 0
    rho = int(np.flatnonzero(positive)[-1])  # u_1 - (u_1 - t) = t > 0, so there is one
    theta = float(css[rho]) / (rho + 1)
    out: NDArray[np.float64] = np.maximum(c - theta, 0.0)
    return out


def norm_sub_iterative(counts: ArrayLike, total: float, *, max_rounds: int = 10_000) -> NDArray[np.float64]:
    """Norm-Sub as Wang et al. state it (zero the negatives, spread the difference over the positives,
    repeat). It equals :func:`norm_sub` whenever the positive parts sum to at least ``total`` (module
    docstring); kept for that comparison. At most d rounds are needed (each round either finishes or
    zeroes at least one more count)."""
    c = _vector("counts", counts).copy()
    t = _total(total)
    if t == 0.0:
        return np.zeros_like(c)
    for _ in range(max_rounds):
        c = np.maximum(c, 0.0)
        positive = c > 0
        if not positive.any():
            c[:] = t / c.size
            positive = np.ones_like(positive)
        c[positive] += (t - c.sum()) / int(positive.sum())
        if (c >= 0).all():
            return c
    raise InvalidParameterError("max_rounds", max_rounds, "enough rounds to converge")  # pragma: no cover


def clip(counts: ArrayLike, n: float) -> NDArray[np.float64]:
    """Each count clipped to [0, n]."""
    return np.clip(_vector("counts", counts), 0.0, _total(n))


def postprocess(estimate: FrequencyEstimate, params: MechanismParams) -> tuple[PostprocessedEstimate, ...]:
    """Norm-Sub and clip of a frequency estimate's counts (module docstring for the total)."""
    counts = np.array([it.count for it in estimate.items], dtype=np.float64)
    n = estimate.n
    fewest, most = registry.spec_for(params).items_per_user(params)
    if fewest == most:  # every user holds exactly that many items (one value each: the total is n)
        total = float(most * n)
    else:  # sets of varying size (set-valued): the estimated total, within what the sizes allow
        total = float(np.clip(counts.sum(), float(fewest * n), float(most * n)))
    upper = float(n)
    projected = norm_sub(counts, total)
    clipped = clip(counts, upper)
    return (
        PostprocessedEstimate(method="norm-sub", counts=tuple(projected.tolist()), total=total),
        PostprocessedEstimate(method="clip", counts=tuple(clipped.tolist()), total=0.0),
    )
