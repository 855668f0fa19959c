"""``gaussian_report``: what an (epsilon, delta) request costs in Gaussian noise, for people and for JSON.

It puts side by side the classical calibration (Dwork-Roth, epsilon < 1 only), the analytic one
(Balle-Wang 2018, the sigma the mechanism starts from) with the exact delta of each sigma
(:mod:`.calibration`), and the discrete Gaussian the registered mechanism really samples for that request
(:class:`.mechanism.GaussianParams.from_epsilon` over a range of the given sensitivity): its sigma and the
epsilon computed from its privacy profile. ``ldp-sim privacy gaussian`` prints it.
"""

from __future__ import annotations

from ldp_client.mechanisms.numeric.gaussian.calibration import (
    check_sensitivity,
    gaussian_calibration,
)
from ldp_client.mechanisms.numeric.gaussian.mechanism import GaussianParams

__all__ = ["gaussian_report"]


def gaussian_report(
    epsilon: float, delta: float, sensitivity: float = 1.0, *, grid: int | None = None
) -> dict[str, object]:
    """Both calibrations and the discrete mechanism for one request, as a JSON-ready dict.

    Keys: those of :func:`.calibration.gaussian_calibration` (``analytic_sigma``, ``analytic_delta``,
    ``classical_sigma``, ``classical_delta``, ``classical_note``, ``ratio``), then ``chosen`` (``"analytic"``:
    the calibration the mechanism uses), ``chosen_sigma`` and ``chosen_delta`` (its exact delta at
    epsilon, <= the request), and ``discrete``: ``grid`` (K), ``sigma_grid_steps``, ``sigma`` (in the
    sensitivity's units, sigma_grid_steps * sensitivity / K), ``noise_std`` (the discrete Gaussian's
    standard deviation, same units), ``epsilon`` (the exact epsilon at the requested delta, <= the request)
    and ``delta``.

    Raises:
        InvalidParameterError: a bad epsilon, delta, sensitivity or grid (named).
    """
    s = check_sensitivity(sensitivity)
    out = gaussian_calibration(epsilon, delta, s)
    out["chosen"] = "analytic"
    out["chosen_sigma"] = out["analytic_sigma"]
    out["chosen_delta"] = out["analytic_delta"]
    params = GaussianParams.from_epsilon(0.0, s, float(epsilon), delta=float(delta), grid=grid)
    out["discrete"] = {
        "grid": params.grid,
        "sigma_grid_steps": params.sigma,
        "sigma": params.sigma_value,
        "noise_std": params.noise_variance**0.5 * s / params.grid,
        "epsilon": params.epsilon,
        "delta": params.delta,
    }
    return out
