"""Exact sampling of the aggregated sufficient statistics of one report per user (the "sum" runner).

For simulation only: every function takes an explicit, seeded ``numpy.random.Generator``.

The estimators only ever see sums of reports: the yes count for RR, the count of each reported value for
GRR, and per cohort the number of reports and the number of ones in each bit for RAPPOR. Given the true
counts, each of those sums is a sum of independent per-user contributions, so it can be drawn directly
with a handful of binomials and multinomials. The draws are exact in distribution: the sampled
statistics have the same joint law as the sums of reports that the per-report encoders would produce
(up to the float64 representation of the probabilities), at a cost independent of the number of users.

The samplers of registered mechanisms live in their mechanism modules (``spec.sum_sampler``; rr:
:func:`ldp_client.mechanisms.rr.sample_rr_counts`, grr: :func:`ldp_client.mechanisms.grr.sample_grr_counts`
with :func:`ldp_client._exact_sampling.spread_uniform_others`, the RAPPOR variants:
:mod:`ldp_client.mechanisms.rappor.sampling`) and are re-exported here.
"""

from __future__ import annotations

from ldp_client._exact_sampling import spread_uniform_others
from ldp_client.mechanisms.grr import sample_grr_counts
from ldp_client.mechanisms.rappor.sampling import (
    basic_rappor_set_counts,
    bloom_position_table,
    boolean_rappor_set_counts,
    rappor_set_counts,
    sample_bit_counts,
    sample_rappor_bits,
    sample_rappor_counts,
    split_by_cohort,
)
from ldp_client.mechanisms.rr import sample_rr_counts

__all__ = [
    "basic_rappor_set_counts",
    "bloom_position_table",
    "boolean_rappor_set_counts",
    "rappor_set_counts",
    "sample_bit_counts",
    "sample_grr_counts",
    "sample_rappor_bits",
    "sample_rappor_counts",
    "sample_rr_counts",
    "split_by_cohort",
    "spread_uniform_others",
]
