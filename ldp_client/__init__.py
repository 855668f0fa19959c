"""ldp_client: on-device local differential privacy randomizers and a gRPC reporter.

Importing this package (or any per-report encoder) does not import numpy; only the batch/simulation
encoders (``encode_batch``) do, lazily.
"""

from ldp_client.errors import (
    BudgetExceededError,
    CampaignNotFoundError,
    DomainError,
    InvalidParameterError,
    InvalidReportError,
    LdpError,
    PrivacyQuantizationWarning,
    StateFileError,
)
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    MechanismParams,
    RapporParams,
)

__version__ = "0.1.0"

__all__ = [
    "BasicRapporParams",
    "BinaryRRParams",
    "BooleanRapporParams",
    "BudgetExceededError",
    "CampaignNotFoundError",
    "Domain",
    "DomainError",
    "GRRParams",
    "InvalidParameterError",
    "InvalidReportError",
    "LdpError",
    "MechanismParams",
    "PrivacyQuantizationWarning",
    "RapporParams",
    "StateFileError",
    "__version__",
]
