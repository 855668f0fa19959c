"""The Gaussian mechanism under (epsilon, delta)-LDP (issue 17): its calibration (:mod:`.calibration`:
classical and analytic sigma, :func:`.report.gaussian_report`), the discrete Gaussian's exact sampler and
privacy profile (:mod:`.discrete`), and the registered mechanisms: a bounded number (:mod:`.mechanism`,
``gaussian``) and a vector of bounded L2 norm (:mod:`.vector`, ``gaussian_vector``).

Import the modules themselves (``ldp_client.mechanisms.numeric.gaussian.mechanism``); this package
re-exports their public names. Importing it does not import numpy.
"""

from __future__ import annotations

from ldp_client.mechanisms.numeric.gaussian.calibration import (
    analytic_delta,
    analytic_sigma,
    classical_sigma,
    epsilon_from_zcdp,
    gaussian_calibration,
    zcdp_sigma,
)
from ldp_client.mechanisms.numeric.gaussian.mechanism import (
    SPEC,
    GaussianEncoder,
    GaussianParams,
    GaussianSpec,
)
from ldp_client.mechanisms.numeric.gaussian.report import gaussian_report
from ldp_client.mechanisms.numeric.gaussian.vector import (
    VECTOR_SPEC,
    GaussianVectorEncoder,
    GaussianVectorParams,
    GaussianVectorSpec,
)

__all__ = [
    "SPEC",
    "VECTOR_SPEC",
    "GaussianEncoder",
    "GaussianParams",
    "GaussianSpec",
    "GaussianVectorEncoder",
    "GaussianVectorParams",
    "GaussianVectorSpec",
    "analytic_delta",
    "analytic_sigma",
    "classical_sigma",
    "epsilon_from_zcdp",
    "gaussian_calibration",
    "gaussian_report",
    "zcdp_sigma",
]
