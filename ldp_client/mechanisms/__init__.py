"""On-device encoders: per-report (OS CSPRNG) and batch (seeded numpy Generator, for simulation).

Importing this package does not import numpy; the batch encoders import it when called.
"""

from ldp_client.mechanisms.grr import GRREncoder
from ldp_client.mechanisms.rappor import (
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    RapporReport,
    bloom_positions,
)
from ldp_client.mechanisms.rr import BinaryRREncoder

__all__ = [
    "BasicRapporEncoder",
    "BinaryRREncoder",
    "BooleanRapporEncoder",
    "GRREncoder",
    "RapporEncoder",
    "RapporReport",
    "bloom_positions",
]
