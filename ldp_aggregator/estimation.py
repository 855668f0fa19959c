"""What every estimator of the aggregator shares: the error of an empty accumulator and the interval's z.

A leaf module (it imports only the exception tree), so that the estimators of each kind
(:mod:`ldp_aggregator.estimators` for frequencies, :mod:`ldp_aggregator.means` for means) use the same
two definitions without importing one another.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from ldp_client.errors import InvalidParameterError, InvalidReportError

__all__ = ["NoReportsError", "normal_quantile"]


class NoReportsError(InvalidReportError):
    """An estimate was requested from an accumulator with no reports (n_reports = 0)."""

    def __init__(self, n: int = 0) -> None:
        super().__init__("n_reports", n, "at least 1 report (the accumulator is empty)")


def normal_quantile(confidence: float) -> float:
    """z with P(|Z| <= z) = confidence for a standard normal Z (two-sided)."""
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
        or not 0.0 < confidence < 1.0
    ):
        raise InvalidParameterError("confidence", confidence, "a number in (0, 1), e.g. 0.95")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)
