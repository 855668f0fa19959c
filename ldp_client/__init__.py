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
    HadamardEncoder,
    LocalHashEncoder,
    RapporEncoder,
    RapporReport,
    SetValuedEncoder,
    SubsetSelectionEncoder,
    UnaryEncoder,
)
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BLHParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    HadamardParams,
    MechanismParams,
    OLHParams,
    OUEParams,
    RapporParams,
    SetValuedParams,
    SubsetSelectionParams,
    SUEParams,
    make_params,
)
from ldp_client.secret import ClientSecret

__version__ = "0.1.0"

__all__ = [
    "BLHParams",
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
    "HadamardEncoder",
    "HadamardParams",
    "InvalidParameterError",
    "InvalidReportError",
    "LdpError",
    "LocalHashEncoder",
    "MechanismParams",
    "OLHParams",
    "OUEParams",
    "PrivacyQuantizationWarning",
    "RapporEncoder",
    "RapporParams",
    "RapporReport",
    "SUEParams",
    "SetValuedEncoder",
    "SetValuedParams",
    "StateFileError",
    "SubsetSelectionEncoder",
    "SubsetSelectionParams",
    "UnaryEncoder",
    "__version__",
    "make_params",
]
