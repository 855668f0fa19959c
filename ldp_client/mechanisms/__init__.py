"""On-device encoders: per-report (OS CSPRNG) and batch (seeded numpy Generator, for simulation).

Importing this package does not import numpy; the batch encoders import it when called.
"""

from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.hr import HadamardEncoder
from ldp_client.mechanisms.olh import LocalHashEncoder, LocalHashReport
from ldp_client.mechanisms.rappor import (
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    RapporReport,
    bloom_positions,
)
from ldp_client.mechanisms.rr import BinaryRREncoder
from ldp_client.mechanisms.sets import SetValuedEncoder, oracle_encoder
from ldp_client.mechanisms.ss import SubsetSelectionEncoder
from ldp_client.mechanisms.ue import UnaryEncoder

__all__ = [
    "BasicRapporEncoder",
    "BinaryRREncoder",
    "BooleanRapporEncoder",
    "GRREncoder",
    "HadamardEncoder",
    "LocalHashEncoder",
    "LocalHashReport",
    "RapporEncoder",
    "RapporReport",
    "SetValuedEncoder",
    "SubsetSelectionEncoder",
    "UnaryEncoder",
    "bloom_positions",
    "oracle_encoder",
]
