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
from ldp_client.mechanisms import (
    BasicRapporEncoder,
    BinaryRREncoder,
    BooleanRapporEncoder,
    GRREncoder,
    RapporEncoder,
    RapporReport,
)
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    MechanismParams,
    RapporParams,
    make_params,
)
from ldp_client.secret import ClientSecret

__version__ = "0.1.0"

__all__ = [
    "BasicRapporEncoder",
    "BasicRapporParams",
    "BinaryRREncoder",
    "BinaryRRParams",
    "BooleanRapporEncoder",
    "BooleanRapporParams",
    "BudgetExceededError",
    "CampaignNotFoundError",
    "ClientSecret",
    "Domain",
    "DomainError",
    "GRREncoder",
    "GRRParams",
    "InvalidParameterError",
    "InvalidReportError",
    "LdpError",
    "MechanismParams",
    "PrivacyQuantizationWarning",
    "RapporEncoder",
    "RapporParams",
    "RapporReport",
    "StateFileError",
    "__version__",
    "make_params",
]
