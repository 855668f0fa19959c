"""What a decode returns (:class:`DecodeResult`) and the checks of the options every decoder takes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ldp_client.accounting.shuffle import ShuffleAmplification
from ldp_client.errors import InvalidParameterError

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "CORRECTIONS",
    "Correction",
    "DecodeResult",
    "ResidualDiagnostics",
    "check_alpha",
    "check_correction",
    "check_selection_z",
]

Correction = Literal["bonferroni", "bh"]
CORRECTIONS: tuple[str, ...] = ("bonferroni", "bh")


@dataclass(frozen=True, kw_only=True)
class ResidualDiagnostics:
    """Goodness of fit of the refit model on the R whitened bit rows.

    Attributes:
        chi2: sum of squared whitened residuals; ~ chi-square(df) when the dictionary explains the data.
        df: R - (number of free coefficients).
        p_value: P(chi-square(df) >= chi2); small values say strings outside the dictionary (or a wrong
            model) leave signal in the bits.
        max_abs_residual: the largest |whitened residual| over the rows.
        rows: R, the cohort-bit rows used (cohorts with reports times k).
    """

    chi2: float
    df: int
    p_value: float
    max_abs_residual: float
    rows: int


@dataclass(frozen=True, kw_only=True, eq=False)
class DecodeResult:
    """A decoded RAPPOR campaign: one entry per candidate (arrays of length M), and overall figures.

    Counts are on the count scale (estimated reporters holding the value), proportions = count / n.

    Attributes:
        mechanism: ``rappor``, ``basic-rappor`` or ``boolean-rappor``.
        method: ``lasso+nnls`` (string RAPPOR) or ``direct`` (basic and boolean RAPPOR).
        n: number of reports decoded.
        epsilon, epsilon_inf: privacy of the reports (per report, longitudinal).
        confidence: two-sided level of the intervals.
        alpha: level of the detection test; ``correction``: ``bonferroni`` or ``bh``.
        labels: the M candidates (or domain labels).
        count, proportion, std_error, ci_low, ci_high: per candidate (count scale except proportion).
        z: estimate / std_error (the one-step score z for candidates at 0); p_value: one-sided p-value.
        selected: kept by the LASSO and positive in the refit (always True for ``direct``).
        detected: passes the multiple-testing rule at ``alpha``.
        allocated_mass: sum of the proportions of detected candidates.
        explained_mass: sum of all estimated proportions; ``unexplained_mass`` = 1 - explained_mass is the
            mass the candidates do not explain, with standard error ``unexplained_mass_se``.
        threshold_z, threshold_proportion, threshold_count: the detection threshold for this N and these
            parameters (package docstring).
        selection_lambda: the LASSO penalty in z units (None for ``direct``).
        residuals: fit diagnostics (None for ``direct``).
        warnings: what the caller should know (dictionary larger than identifiable, aliased candidates,
            a singular refit, empty cohorts, ...).
    """

    mechanism: str
    method: str
    n: int
    epsilon: float
    epsilon_inf: float
    confidence: float
    alpha: float
    correction: str
    labels: tuple[str, ...]
    count: NDArray[np.float64]
    proportion: NDArray[np.float64]
    std_error: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    z: NDArray[np.float64]
    p_value: NDArray[np.float64]
    selected: NDArray[np.bool_]
    detected: NDArray[np.bool_]
    allocated_mass: float
    explained_mass: float
    unexplained_mass: float
    unexplained_mass_se: float
    threshold_z: float
    threshold_proportion: float
    threshold_count: float
    selection_lambda: float | None
    residuals: ResidualDiagnostics | None
    warnings: tuple[str, ...]
    shuffle: ShuffleAmplification | None = None
    """Issue 17: the central guarantee of one shuffled batch when the campaign declares a shuffler (set by
    ``decode_campaign``; None otherwise)."""

    @property
    def n_detected(self) -> int:
        return int(self.detected.sum())

    @property
    def n_selected(self) -> int:
        return int(self.selected.sum())

    def index(self, label: str) -> int:
        """Position of ``label`` among the candidates; raises KeyError if absent."""
        try:
            return self.labels.index(label)
        except ValueError:
            raise KeyError(label) from None

    def row(self, label: str) -> dict[str, Any]:
        """Everything about one candidate, as plain Python values."""
        i = self.index(label)
        return {
            "label": label,
            "count": float(self.count[i]),
            "proportion": float(self.proportion[i]),
            "std_error": float(self.std_error[i]),
            "ci_low": float(self.ci_low[i]),
            "ci_high": float(self.ci_high[i]),
            "z": float(self.z[i]),
            "p_value": float(self.p_value[i]),
            "selected": bool(self.selected[i]),
            "detected": bool(self.detected[i]),
        }


# -------------------------------------------------------------------------------------------- checks


def check_alpha(alpha: object) -> float:
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, int | float)
        or not math.isfinite(alpha)
        or not 0.0 < alpha < 1.0
    ):
        raise InvalidParameterError("alpha", alpha, "a detection level in (0, 1), e.g. 0.05")
    return float(alpha)


def check_correction(correction: object) -> Correction:
    if correction == "bonferroni":
        return "bonferroni"
    if correction == "bh":
        return "bh"
    raise InvalidParameterError("correction", correction, f"one of {', '.join(CORRECTIONS)}")


def check_selection_z(selection_z: object) -> float | None:
    if selection_z is None:
        return None
    if (
        isinstance(selection_z, bool)
        or not isinstance(selection_z, int | float)
        or not math.isfinite(selection_z)
        or selection_z <= 0
    ):
        raise InvalidParameterError("selection_z", selection_z, "None (default: z_{1-5/M}) or a number > 0")
    return float(selection_z)
