"""The Gaussian mechanism under (epsilon, delta)-LDP (issue 17): its calibration (:mod:`.calibration`:
classical and analytic sigma, :func:`.report.gaussian_report`), the discrete Gaussian's exact sampler and
privacy profile (:mod:`.discrete`), and the registered mechanism for a bounded number (:mod:`.mechanism`).

Import the modules themselves (``ldp_client.mechanisms.numeric.gaussian.mechanism``); this package
re-exports their public names. Importing it does not import numpy.
"""

from __future__ import annotations

from ldp_client.mechanisms.numeric.gaussian.calibration import (
    analytic_delta,
    analytic_sigma,
    classical_sigma,
    gaussian_calibration,
)
from ldp_client.mechanisms.numeric.gaussian.mechanism import (
    SPEC,
    GaussianEncoder,
    GaussianParams,
    GaussianSpec,
)
from ldp_client.mechanisms.numeric.gaussian.report import gaussian_report

__all__ = [
    "SPEC",
    "GaussianEncoder",
    "GaussianParams",
    "GaussianSpec",
    "analytic_delta",
    "analytic_sigma",
    "classical_sigma",
    "gaussian_calibration",
    "gaussian_report",
]
