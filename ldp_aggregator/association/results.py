"""What an association returns: :class:`AssociationResult` (and one side's :class:`SideLikelihood`), the
defaults of its options, and :class:`ReportsUnavailableError` (the method:
:mod:`ldp_aggregator.association`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from ldp_client.accounting.shuffle import ShuffleAmplification
from ldp_client.errors import LdpError

if TYPE_CHECKING:
    from numpy.typing import NDArray


OTHER_LABEL: Final = "<other>"
DEFAULT_MAX_VALUES: Final = 10
DEFAULT_MAX_ITERATIONS: Final = 2000
DEFAULT_TOLERANCE: Final = 1e-9


class ReportsUnavailableError(LdpError):
    """The association needs the campaign's raw reports, which were not retained or were purged.

    Mapped to gRPC FAILED_PRECONDITION: retry after collecting with raw retention on.
    """

    def __init__(self, campaign_id: str, why: str) -> None:
        self.campaign_id = campaign_id
        super().__init__(f"campaign_id={campaign_id!r}: {why}")


@dataclass(frozen=True, kw_only=True, eq=False)
class SideLikelihood:
    """One side's per-report log-likelihoods: log P(report r | value v) = log_lik[r, v] + offset[r]."""

    labels: tuple[str, ...]
    log_lik: NDArray[np.float64]
    offset: NDArray[np.float64]


@dataclass(frozen=True, kw_only=True, eq=False)
class AssociationResult:
    """The joint distribution of a paired campaign (the package docstring for the method).

    Attributes:
        n: reports used (the sum of weights).
        row_labels, col_labels: values of the first and second variable.
        joint, joint_se, joint_low, joint_high: (U, V) proportions, standard errors, interval.
        first, first_se, second, second_se: marginal proportions and standard errors.
        log_likelihood, log_likelihood_independent: maximised log-likelihoods (joint, product model).
        lr_statistic, df, p_value: likelihood-ratio test of independence.
        iterations: EM steps of the joint fit; converged: whether it met the tolerance.
        shuffle: issue 17, the central guarantee of one shuffled batch when the campaign declares a
            shuffler (set by ``associate_campaign``; None otherwise).
    """

    n: int
    confidence: float
    first_mechanism: str
    second_mechanism: str
    epsilon: float
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    joint: NDArray[np.float64]
    joint_se: NDArray[np.float64]
    joint_low: NDArray[np.float64]
    joint_high: NDArray[np.float64]
    first: NDArray[np.float64]
    first_se: NDArray[np.float64]
    second: NDArray[np.float64]
    second_se: NDArray[np.float64]
    log_likelihood: float
    log_likelihood_independent: float
    lr_statistic: float
    df: int
    p_value: float
    iterations: int
    converged: bool
    warnings: tuple[str, ...]
    shuffle: ShuffleAmplification | None = None

    def cell(self, row: str, col: str) -> tuple[float, float]:
        """(proportion, standard error) of one cell, by labels; KeyError if absent."""
        try:
            i, j = self.row_labels.index(row), self.col_labels.index(col)
        except ValueError:
            raise KeyError((row, col)) from None
        return float(self.joint[i, j]), float(self.joint_se[i, j])
