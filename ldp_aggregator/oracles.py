"""Estimates of the issue-6 frequency oracles (OUE, SUE, OLH, BLH, SS, HR and set-valued) from support counts.

All of them share the pure-oracle estimator of :func:`ldp_aggregator.estimators.pure_oracle_arrays`
(Wang, Blocki, Li, Jha, USENIX Security 2017, §4): with n reports, C_v supporting item v, and rates
p* = P(support v | holds v), q* = P(support v | does not),

    count_hat_v = (C_v - n q*) / (p* - q*),
    Var[count_hat_v] = (n q*(1 - q*) + c_v (p* - q*)(1 - p* - q*)) / (p* - q*)^2

(the second term is the item's own frequency term), with the calibrated score interval documented there.

Support counts per mechanism (the rates come from the parameters, i.e. from the quantized thresholds):

* oue, sue, ss, olh, blh: C_v is accumulated at ingest (:mod:`ldp_aggregator.support`).
* hr: the accumulator holds N_j, the number of reports of each index j in [0, K). With the Sylvester
  matrix H (H[r, j] = (-1)^popcount(r & j)), C_v = sum_{j: H[v+1, j] = +1} N_j = (n + (H N)_{v+1}) / 2,
  and H N is a fast Walsh-Hadamard transform (:func:`fwht`): O(K log K) for all d items at once.
* grr (only as the inner oracle of a set-valued campaign): C_v = N_v.
* set-valued (padding and sampling with L = max_items): the inner oracle's support counts of the d real
  items, with p* = q_i + (p_i - q_i)/L and q* = q_i for the inner rates (p_i, q_i): each holder of v reports
  it with probability 1/L. The estimator is then L times the inner estimate, and the variance formula
  above holds with these rates (the report of a holder of v supports v w.p. exactly p*, independently
  across users), so the counts, standard errors and intervals are those of the number of users holding
  each item.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ldp_aggregator.accumulators import Accumulator, CountAccumulator, check_matches
from ldp_aggregator.estimators import FrequencyEstimate, NoReportsError, pure_oracle_estimate
from ldp_aggregator.support import SupportCountAccumulator
from ldp_client.errors import InvalidReportError
from ldp_client.params import (
    FrequencyOracleParams,
    GRRParams,
    HadamardParams,
    InnerOracleParams,
    SetValuedParams,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["estimate_oracle", "fwht", "hadamard_support", "oracle_support"]


def fwht(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """The fast Walsh-Hadamard transform H x of a length-K vector (K a power of two), in Sylvester order.

    (H x)_r = sum_j (-1)^popcount(r & j) x_j, computed with log2 K vectorised butterfly passes
    (x, y) -> (x + y, x - y) over blocks of doubling size; exact in int64 for counts below 2**62 / K.
    """
    out = np.array(values, dtype=np.int64, copy=True)
    k = out.shape[0]
    if k & (k - 1) or out.ndim != 1:
        raise InvalidReportError("values", out.shape, "a 1-D array whose length is a power of two")
    h = 1
    while h < k:
        blocks = out.reshape(-1, 2, h)
        top = blocks[:, 0, :].copy()
        blocks[:, 0, :] += blocks[:, 1, :]
        blocks[:, 1, :] = top - blocks[:, 1, :]
        h *= 2
    return out


def hadamard_support(params: HadamardParams, index_counts: NDArray[np.int64]) -> NDArray[np.int64]:
    """C_v for v in [0, d) from the counts of reported indices: (n + (H N)_{v+1}) / 2 (module docstring)."""
    transformed = fwht(index_counts)
    n = int(index_counts.sum())
    d = params.domain.size
    # n + (H N)_r = 2 * (number of reports in C_{r-1}): always even, so the halving is exact.
    return (n + transformed[1 : d + 1]) // 2


def _as_support(acc: Accumulator) -> SupportCountAccumulator:
    if not isinstance(acc, SupportCountAccumulator):  # unreachable after check_matches; narrows the type
        raise InvalidReportError("accumulator", type(acc).__name__, "a SupportCountAccumulator")
    return acc


def _as_counts(acc: Accumulator) -> CountAccumulator:
    if not isinstance(acc, CountAccumulator):  # unreachable after check_matches; narrows the type
        raise InvalidReportError("accumulator", type(acc).__name__, "a CountAccumulator")
    return acc


def _inner_support(params: InnerOracleParams, acc: Accumulator) -> NDArray[np.int64]:
    if isinstance(params, GRRParams):
        return _as_counts(acc).counts
    if isinstance(params, HadamardParams):
        return hadamard_support(params, _as_counts(acc).counts)
    return _as_support(acc).support


def oracle_support(
    params: FrequencyOracleParams, acc: Accumulator
) -> tuple[int, NDArray[np.int64], float, float]:
    """(n, C_v for the d items, p*, q*) of a campaign's accumulator (module docstring).

    Raises:
        InvalidReportError: ``acc`` is not the accumulator of ``params``.
    """
    check_matches(acc, params)
    d = params.domain.size
    if isinstance(params, SetValuedParams):
        support = _inner_support(params.inner, acc)[:d]
    else:
        support = _inner_support(params, acc)
    return int(acc.n), support, params.p_star, params.q_star


def estimate_oracle(
    params: FrequencyOracleParams, acc: Accumulator, *, confidence: float = 0.95
) -> FrequencyEstimate:
    """Unbiased counts of every domain item with standard errors and intervals (module docstring).

    Raises:
        InvalidReportError: ``acc`` is not the accumulator of ``params``.
        NoReportsError: the accumulator is empty.
        InvalidParameterError: a bad confidence.
    """
    n, support, p_star, q_star = oracle_support(params, acc)
    if n == 0:
        raise NoReportsError(0)
    labels = [params.domain.label(i) for i in range(params.domain.size)]
    items = pure_oracle_estimate(support, n, p_star, q_star, labels, confidence=confidence)
    return FrequencyEstimate(
        mechanism=params.name,
        n=n,
        epsilon=params.epsilon,
        epsilon_inf=None,
        confidence=float(confidence),
        items=items,
    )
