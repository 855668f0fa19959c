"""RAPPOR (Erlingsson, Pihur, Korolova, CCS 2014): string RAPPOR, basic (one-hot) and boolean (one bit).

One mechanism family in one package:

* :mod:`~ldp_client.mechanisms.rappor.params`: the parameter classes (f, p, q; k, h, m; the epsilons and
  the bit rates ``prob_one_if_set`` / ``prob_one_if_clear``);
* :mod:`~ldp_client.mechanisms.rappor.encoding`: the per-report encoders (Bloom filter, cohort, permanent
  and instantaneous randomized response; OS CSPRNG and the client secret), byte for byte as
  ``docs/rappor-encoding.md`` specifies;
* :mod:`~ldp_client.mechanisms.rappor.batch`: the batch encoders, for simulation (seeded numpy Generator);
* :mod:`~ldp_client.mechanisms.rappor.sampling`: exact sampling of the sums, for the sum runner (numpy);
* :mod:`~ldp_client.mechanisms.rappor.spec`: the three specs (wire, journal rows, accumulator layout,
  support, simulation) that :mod:`ldp_client.registry` lists, on the parts they share in
  :mod:`~ldp_client.mechanisms.rappor.spec_base`.

Importing this package does not import numpy (the sampling module, which does, is not imported here).
"""

from ldp_client.mechanisms.rappor.batch import encode_batch_basic, encode_batch_boolean, encode_batch_rappor
from ldp_client.mechanisms.rappor.encoding import (
    BASIC_PRR_LABEL,
    BOOLEAN_PRR_LABEL,
    PRR_LABEL,
    SPEC_VERSION,
    BasicRapporEncoder,
    BooleanRapporEncoder,
    RapporEncoder,
    RapporReport,
    bloom_bits,
    bloom_input,
    bloom_positions,
    cohort_of,
    permanent_response,
)
from ldp_client.mechanisms.rappor.params import (
    MAX_COHORTS,
    MAX_RAPPOR_BITS,
    MAX_RAPPOR_HASHES,
    BasicRapporParams,
    BooleanRapporParams,
    RapporNoiseParams,
    RapporParams,
)

__all__ = [
    "BASIC_PRR_LABEL",
    "BOOLEAN_PRR_LABEL",
    "MAX_COHORTS",
    "MAX_RAPPOR_BITS",
    "MAX_RAPPOR_HASHES",
    "PRR_LABEL",
    "SPEC_VERSION",
    "BasicRapporEncoder",
    "BasicRapporParams",
    "BooleanRapporEncoder",
    "BooleanRapporParams",
    "RapporEncoder",
    "RapporNoiseParams",
    "RapporParams",
    "RapporReport",
    "bloom_bits",
    "bloom_input",
    "bloom_positions",
    "cohort_of",
    "encode_batch_basic",
    "encode_batch_boolean",
    "encode_batch_rappor",
    "permanent_response",
]
