"""Accuracy metrics of frequency estimates against the truth (pure functions over arrays).

Conventions: everything is on the *count* scale (estimated number of users per item, not fractions).
``truth`` has shape (D,) or (R, D) and ``estimates`` shape (R, D) or (D,), for R repeats (independent
simulations) of D items; a (D,) truth is the same for every repeat. Per-repeat metrics return an array of
shape (R,); :func:`compute_metrics` averages them over repeats into a :class:`Metrics`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.params import MechanismParams
from ldp_client.spec import Kind

__all__ = [
    "Detection",
    "Metrics",
    "compute_metrics",
    "coverage",
    "detection",
    "interval_warning",
    "max_abs_error",
    "mse",
    "mse_over_variance",
    "per_item_error",
    "per_item_mse",
    "total_variation",
]


def _float_array(name: str, x: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iuf" or arr.ndim not in (1, 2) or arr.size == 0:
        raise InvalidParameterError(
            name,
            f"<array shape={arr.shape} dtype={arr.dtype}>",
            "a non-empty numeric array of shape (D,) or (R, D)",
        )
    out = np.atleast_2d(arr.astype(np.float64, copy=False))
    if not np.all(np.isfinite(out)):
        raise InvalidParameterError(name, "non-finite entries", "finite numbers")
    return out


def _aligned(**arrays: ArrayLike) -> list[NDArray[np.float64]]:
    """Validate and broadcast (D,)/(R, D) arrays to one common (R, D) shape."""
    converted = [_float_array(name, a) for name, a in arrays.items()]
    try:
        return [np.asarray(a) for a in np.broadcast_arrays(*converted)]
    except ValueError:
        shapes = ", ".join(f"{n}{np.shape(a)}" for n, a in arrays.items())
        raise InvalidParameterError(
            "shapes", shapes, "arrays of shape (D,) or (R, D) with equal D and R"
        ) from None


def per_item_error(truth: ArrayLike, estimates: ArrayLike) -> NDArray[np.float64]:
    """estimate - truth for every (repeat, item): shape (R, D)."""
    t, e = _aligned(truth=truth, estimates=estimates)
    return e - t


def per_item_mse(truth: ArrayLike, estimates: ArrayLike) -> NDArray[np.float64]:
    """Mean over repeats of (estimate - truth)^2, per item: shape (D,)."""
    err = per_item_error(truth, estimates)
    return np.asarray(np.mean(err * err, axis=0))


def mse(truth: ArrayLike, estimates: ArrayLike) -> float:
    """Mean squared error over all (repeat, item) pairs: mean of (estimate - truth)^2."""
    err = per_item_error(truth, estimates)
    return float(np.mean(err * err))


def mse_over_variance(truth: ArrayLike, estimates: ArrayLike, variance: ArrayLike) -> float:
    """MSE divided by the mean theoretical variance of the estimator (given, shape (D,) or (R, D)).

    For an unbiased estimator with the stated variance this is 1 up to sampling error: MSE is the mean
    over (repeat, item) of the squared error, whose expectation is the mean variance.
    """
    t, e, v = _aligned(truth=truth, estimates=estimates, variance=variance)
    mean_var = float(np.mean(v))
    if mean_var <= 0:
        raise InvalidParameterError("variance", mean_var, "a positive mean variance")
    err = e - t
    return float(np.mean(err * err)) / mean_var


def total_variation(truth: ArrayLike, estimates: ArrayLike) -> NDArray[np.float64]:
    """Total variation distance, per repeat, between the true and the estimated distributions: shape (R,).

    For each repeat: P = truth / sum(truth); Q = max(estimate, 0) / sum(max(estimate, 0)) (negative
    estimates are clipped to 0, then the estimate is renormalised to sum to 1); TV = (1/2) sum_v |P_v - Q_v|,
    in [0, 1]. If every clipped estimate is 0 there is no estimated distribution, and TV is taken as 1,
    its maximum.
    """
    t, e = _aligned(truth=truth, estimates=estimates)
    if np.any(t < 0):
        raise InvalidParameterError("truth", "negative entries", "non-negative counts")
    t_sum = t.sum(axis=1, keepdims=True)
    if np.any(t_sum <= 0):
        raise InvalidParameterError("truth", "a repeat with no users", "a positive total per repeat")
    p = t / t_sum
    clipped = np.clip(e, 0.0, None)
    c_sum = clipped.sum(axis=1, keepdims=True)
    empty = c_sum[:, 0] <= 0
    q = clipped / np.where(c_sum > 0, c_sum, 1.0)
    tv = 0.5 * np.abs(p - q).sum(axis=1)
    tv[empty] = 1.0
    return np.asarray(tv)


def max_abs_error(truth: ArrayLike, estimates: ArrayLike) -> NDArray[np.float64]:
    """Per repeat, the largest |estimate - truth| over items (the l-infinity error): shape (R,)."""
    return np.asarray(np.max(np.abs(per_item_error(truth, estimates)), axis=1))


def coverage(truth: ArrayLike, ci_low: ArrayLike, ci_high: ArrayLike) -> float:
    """Fraction of (repeat, item) pairs whose interval contains the truth: ci_low <= truth <= ci_high."""
    t, lo, hi = _aligned(truth=truth, ci_low=ci_low, ci_high=ci_high)
    return float(np.mean((lo <= t) & (t <= hi)))


@dataclass(frozen=True, kw_only=True)
class Detection:
    """Candidate-decoding outcome per repeat (each field has shape (R,))."""

    detected: NDArray[np.int64]
    false_positives: NDArray[np.int64]
    false_negatives: NDArray[np.int64]
    allocated_mass: NDArray[np.float64]


def detection(
    truth: ArrayLike,
    detected: ArrayLike,
    estimates: ArrayLike,
    *,
    n_users: ArrayLike | None = None,
    present_threshold: float = 0.0,
) -> Detection:
    """Detected candidates, false positives and negatives, and the estimated mass of what was detected.

    An item is *present* when its true count exceeds ``present_threshold`` (default: any user at all).
    Per repeat: detected = number of detected items; false positives = detected items that are not
    present; false negatives = present items not detected; allocated mass = sum over detected items of
    estimate / n_users, the share of users the decoder attributes to what it reported (n_users defaults
    to the sum of the truth, i.e. the truth covers every user).

    Args:
        truth: true counts, (D,) or (R, D).
        detected: booleans, (D,) or (R, D): the decoder reported the item.
        estimates: estimated counts, (D,) or (R, D).
        n_users: users per repeat, scalar or (R,); defaults to truth.sum(axis=-1).
        present_threshold: true count above which an item counts as present.
    """
    det_arr = np.asarray(detected)
    if det_arr.dtype != np.bool_:
        raise InvalidParameterError(
            "detected",
            f"<array shape={det_arr.shape} dtype={det_arr.dtype}>",
            "a boolean array of shape (D,) or (R, D)",
        )
    t, e, dmask = _aligned(truth=truth, estimates=estimates, detected=det_arr.astype(np.float64))
    det = dmask > 0.5
    present = t > present_threshold
    if n_users is None:
        n = t.sum(axis=1)
    else:
        n = np.broadcast_to(np.asarray(n_users, dtype=np.float64), (t.shape[0],))
    if np.any(n <= 0):
        raise InvalidParameterError("n_users", n_users, "a positive number of users per repeat")
    return Detection(
        detected=det.sum(axis=1).astype(np.int64),
        false_positives=(det & ~present).sum(axis=1).astype(np.int64),
        false_negatives=(~det & present).sum(axis=1).astype(np.int64),
        allocated_mass=np.asarray(np.where(det, e, 0.0).sum(axis=1) / n),
    )


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """Summary of R repeats of D items; per-repeat quantities are averaged over repeats.

    Attributes:
        n_repeats: R.
        n_items: D.
        mse: mean over (repeat, item) of (estimate - truth)^2.
        mse_over_variance: mse / mean theoretical variance, when the variance was given.
        total_variation: mean over repeats of :func:`total_variation`.
        max_abs_error: mean over repeats of the per-repeat maximum |estimate - truth|.
        coverage: fraction of (repeat, item) intervals containing the truth, when intervals were given.
        detected, false_positives, false_negatives, allocated_mass: means over repeats of
            :func:`detection`, when detections were given.
    """

    n_repeats: int
    n_items: int
    mse: float
    mse_over_variance: float | None = None
    total_variation: float
    max_abs_error: float
    coverage: float | None = None
    detected: float | None = None
    false_positives: float | None = None
    false_negatives: float | None = None
    allocated_mass: float | None = None

    def to_dict(self) -> dict[str, int | float | None]:
        """Plain JSON-ready dict (ints and floats, None where not computed)."""
        return dict(asdict(self))


def compute_metrics(
    truth: ArrayLike,
    estimates: ArrayLike,
    *,
    variance: ArrayLike | None = None,
    ci_low: ArrayLike | None = None,
    ci_high: ArrayLike | None = None,
    detected: ArrayLike | None = None,
    n_users: ArrayLike | None = None,
    present_threshold: float = 0.0,
) -> Metrics:
    """All metrics at once; the optional ones are computed when their inputs are given."""
    t, e = _aligned(truth=truth, estimates=estimates)
    if (ci_low is None) != (ci_high is None):
        raise InvalidParameterError("ci_low/ci_high", "only one given", "both interval bounds or neither")
    det = None
    if detected is not None:
        det = detection(t, detected, e, n_users=n_users, present_threshold=present_threshold)
    return Metrics(
        n_repeats=int(e.shape[0]),
        n_items=int(e.shape[1]),
        mse=mse(t, e),
        mse_over_variance=None if variance is None else mse_over_variance(t, e, variance),
        total_variation=float(np.mean(total_variation(t, e))),
        max_abs_error=float(np.mean(max_abs_error(t, e))),
        coverage=None if ci_low is None or ci_high is None else coverage(t, ci_low, ci_high),
        detected=None if det is None else float(np.mean(det.detected)),
        false_positives=None if det is None else float(np.mean(det.false_positives)),
        false_negatives=None if det is None else float(np.mean(det.false_negatives)),
        allocated_mass=None if det is None else float(np.mean(det.allocated_mass)),
    )


MIN_EXPECTED_SUPPORTS = 10.0
"""Below this many expected false supports per item (n q*) ``ldp-sim`` warns about the intervals.

Why 10: it is the usual rule for the normal approximation to a binomial count (n q >= 10), and the exact
coverage of the project's 95% score interval (ldp_aggregator.estimators.pure_oracle_arrays; every outcome
of the support count enumerated, GRR d = 37, eps = 0.7, counts 0 to n/2) bears it out: mean coverage
0.972 at n q* = 5.3 (n = 200), 0.966 at 13, 0.960 at 26, 0.958 at 53 and 0.951 at n q* = 980. Below 10
the continuity correction that keeps the interval at or above 95% everywhere makes it visibly
conservative, and a single run's errors are skewed (a Poisson count of mean < 10 has skewness > 0.3).
"""


def _support_rates(params: MechanismParams) -> list[tuple[float, float]]:
    """(p*, q*) of each kind of item of a pure frequency oracle; [] where the score interval is not used
    (string RAPPOR, numeric and paired mechanisms)."""
    spec = registry.spec_for(params)  # its Support rates (kind SUPPORT only)
    if spec.kind is not Kind.SUPPORT:
        return []
    p_star, q_star = spec.support_rates(params)
    if np.ndim(p_star) == 0 and np.ndim(q_star) == 0:
        return [(float(p_star), float(q_star))]  # type: ignore[arg-type]
    items = len(spec.items(params))
    p_items = np.broadcast_to(np.asarray(p_star, dtype=np.float64), (items,)).tolist()
    q_items = np.broadcast_to(np.asarray(q_star, dtype=np.float64), (items,)).tolist()
    return list(zip(p_items, q_items, strict=True))


def interval_warning(params: MechanismParams, n: int) -> str | None:
    """One line when the normal approximation behind the intervals is poor for ``n`` reports, else None.

    The support count of an item nobody holds is binomial(n, q*) (after orienting p* > q*; the count of
    non-supports, n (1 - q*), matters the same way): the warning fires when n min(q*, 1 - q*) is below
    :data:`MIN_EXPECTED_SUPPORTS` (see there for why).
    """
    rates = _support_rates(params)
    if not rates or n <= 0:
        return None
    smallest = math.inf
    for p_star, q_star in rates:
        # Oriented so that supports are rarer for non-holders (p* > q*): count non-supports otherwise.
        q = 1.0 - q_star if p_star < q_star else q_star
        smallest = min(smallest, n * min(q, 1.0 - q))
    if smallest >= MIN_EXPECTED_SUPPORTS:
        return None
    needed = math.ceil(n * MIN_EXPECTED_SUPPORTS / smallest) if smallest > 0 else None
    more = f"; at least {needed:,} users avoid this" if needed is not None else ""
    return (
        f"warning: only {smallest:.3g} false supports expected per item (n q* < {MIN_EXPECTED_SUPPORTS:g}): "
        f"the normal approximation behind the intervals is poor, so they are conservative (coverage above "
        f"the nominal level) and one run's errors are skewed{more}"
    )
