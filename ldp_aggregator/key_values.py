"""Key-value estimation (issue 18): each key's frequency and mean value from PCKV reports.

Gu, Li, Cheng, Xiong, Cao, "PCKV: Locally Differentially Private Correlated Key-Value Data Collection with
Optimized Utility", USENIX Security 2020, §5 (estimation). A campaign's :class:`KeyValueCounts` gives, per
key k, n1 (reports <k, +1>) and n2 (reports <k, -1>) of n reports; padding l, key probability a, value
probability b, q = (1 - a) / (d' - 1). With F_k users holding k, S_k the sum of their values mapped to
[-1, 1], p1 = q + (a - q) / l and c = a (2 b - 1) / l (ldp_client.mechanisms.pckv):

    E[n1 + n2] = n q + F_k (a - q) / l        E[n1 - n2] = c S_k

so F_hat = l (n1 + n2 - n q) / (a - q) and S_hat = (n1 - n2) / c are unbiased (PCKV's frequency estimator
and the sum behind its mean estimator), and the mean m_hat = S_hat / F_hat is a ratio estimator (consistent,
bias O(1/n); PCKV's "improved" estimator adds only the clipping into [-1, 1], shown here beside as
``mean_clipped``). Exact variances over independent users (Y = sign . [key = k], Y^2 = [key = k]):

    Var[n1 + n2] = F p1 (1 - p1) + (n - F) q (1 - q)
    Var[n1 - n2] = F p1 + (n - F) q - c^2 sum_u v_u^2
    Cov(n1 + n2, n1 - n2) = c (1 - p1) S

and by the delta method Var[m_hat] ~ (Var[S_hat] - 2 m Cov(S_hat, F_hat) + m^2 Var[F_hat]) / F^2. The
unknown sum of squared values is replaced by its lower bound S^2 / F (Cauchy-Schwarz; exact when a key's
holders share one value), which over-states Var[n1 - n2] by at most c^2 (sum v^2 - S^2 / F): conservative.
Plug-in estimates stand for F, S (F clipped into [0, n], S^2 / F into [0, F]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.layouts import KeyValueCounts

__all__ = [
    "KeyValueEstimate",
    "KeyValueEstimates",
    "campaign_key_values",
    "estimate_key_values",
    "key_values_to_dict",
    "key_values_to_proto",
]


@dataclass(frozen=True, slots=True)
class KeyValueEstimate:
    """One key's estimates (module docstring); ``mean*`` in the declared range's units."""

    key: str
    frequency: float
    frequency_std_error: float
    frequency_ci_low: float
    frequency_ci_high: float
    count: float
    mean: float
    mean_std_error: float
    mean_ci_low: float
    mean_ci_high: float
    mean_clipped: float


@dataclass(frozen=True, slots=True)
class KeyValueEstimates:
    """Every key's estimates, in domain order, from ``n`` reports at ``confidence``."""

    items: tuple[KeyValueEstimate, ...]
    n: int
    confidence: float


@dataclass(frozen=True, slots=True)
class _Arrays:
    """The vectorised estimates (count and mapped-sum scale) behind :class:`KeyValueEstimates`."""

    count: NDArray[np.float64]
    count_var: NDArray[np.float64]
    mean: NDArray[np.float64]  # in [-1, 1] units (NaN where the count is not positive)
    mean_var: NDArray[np.float64]


def _estimate_arrays(kv: KeyValueCounts) -> _Arrays:
    """F_hat, Var[F_hat], m_hat and the delta-method Var[m_hat] of every key (module docstring)."""
    n, pad, a, b, q = kv.n, kv.padding, kv.a, kv.b, kv.q
    n1 = np.asarray(kv.positive, dtype=np.float64)
    n2 = np.asarray(kv.negative, dtype=np.float64)
    p1 = q + (a - q) / pad
    beta = pad / (a - q)
    c = a * (2.0 * b - 1.0) / pad
    count = beta * (n1 + n2 - n * q)
    s_hat = (n1 - n2) / c
    f = np.clip(count, 0.0, float(n))
    var_c = f * p1 * (1.0 - p1) + (n - f) * q * (1.0 - q)
    count_var = beta * beta * var_c
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(count > 0, s_hat / count, np.nan)
        m = np.clip(np.nan_to_num(mean), -1.0, 1.0)
        s = m * f
        sum_sq = np.where(f > 0, np.minimum(s * s / np.where(f > 0, f, 1.0), f), 0.0)
        var_d = f * p1 + (n - f) * q - c * c * sum_sq
        var_s = var_d / (c * c)
        cov_sf = beta * (1.0 - p1) * s
        mean_var = np.where(
            count > 0, (var_s - 2.0 * m * cov_sf + m * m * count_var) / (count * count), np.nan
        )
    return _Arrays(count=count, count_var=count_var, mean=mean, mean_var=np.maximum(mean_var, 0.0))


def estimate_key_values(kv: KeyValueCounts, confidence: float = 0.95) -> KeyValueEstimates:
    """Each key's frequency and mean value with standard errors and normal intervals (module docstring).

    Raises:
        InvalidParameterError: ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    arr = _estimate_arrays(kv)
    n = max(kv.n, 1)
    half = (kv.hi - kv.lo) / 2.0
    freq = arr.count / n
    freq_se = np.sqrt(arr.count_var) / n
    mean_x = kv.lo + (arr.mean + 1.0) * half
    mean_se = np.sqrt(arr.mean_var) * half
    items = tuple(
        KeyValueEstimate(
            key=label,
            frequency=float(freq[i]),
            frequency_std_error=float(freq_se[i]),
            frequency_ci_low=float(freq[i] - z * freq_se[i]),
            frequency_ci_high=float(freq[i] + z * freq_se[i]),
            count=float(arr.count[i]),
            mean=float(mean_x[i]),
            mean_std_error=float(mean_se[i]),
            mean_ci_low=float(mean_x[i] - z * mean_se[i]),
            mean_ci_high=float(mean_x[i] + z * mean_se[i]),
            mean_clipped=float(min(max(mean_x[i], kv.lo), kv.hi)) if math.isfinite(mean_x[i]) else math.nan,
        )
        for i, label in enumerate(kv.labels)
    )
    return KeyValueEstimates(items=items, n=kv.n, confidence=confidence)


def campaign_key_values(params: Any, acc: Any, confidence: float = 0.95) -> KeyValueEstimates | None:
    """The key-value estimates of a campaign's accumulator, or None: its mechanism collects none."""
    kv = registry.spec_for(params).key_value_counts(params, acc)
    return None if kv is None else estimate_key_values(kv, confidence)


def key_values_to_proto(msg: Any, est: KeyValueEstimates) -> None:
    """Append the estimates to an ``EstimateResponse.key_values`` (field 59)."""
    for it in est.items:
        msg.key_values.add(
            key=it.key,
            frequency=it.frequency,
            frequency_std_error=it.frequency_std_error,
            frequency_ci_low=it.frequency_ci_low,
            frequency_ci_high=it.frequency_ci_high,
            count=it.count,
            mean=it.mean,
            mean_std_error=it.mean_std_error,
            mean_ci_low=it.mean_ci_low,
            mean_ci_high=it.mean_ci_high,
            mean_clipped=it.mean_clipped,
        )


_FIELDS = (
    "frequency",
    "frequency_std_error",
    "frequency_ci_low",
    "frequency_ci_high",
    "count",
    "mean",
    "mean_std_error",
    "mean_ci_low",
    "mean_ci_high",
    "mean_clipped",
)


def key_values_to_dict(msg: Any) -> dict[str, Any]:
    """``{"key_values": [...]}`` of an ``EstimateResponse`` (NaN as None, for JSON), or {} without any."""
    if not len(msg.key_values):
        return {}
    rows = []
    for kv in msg.key_values:
        row: dict[str, Any] = {"key": kv.key}
        for name in _FIELDS:
            x = getattr(kv, name)
            row[name] = x if math.isfinite(x) else None
        rows.append(row)
    return {"key_values": rows}
