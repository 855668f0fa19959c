"""Exact sampling of the sufficient statistics of the issue-6 frequency oracles (the "sum" runner).

The samplers live in the mechanism modules, reached through their specs (``spec.sum_sampler``), and are
re-exported here: unary encoding (oue, sue: :func:`ldp_client.mechanisms.ue.sample_ue_support`, C_v =
Bin(c_v, p) + Bin(n - c_v, q) independently across items) and Hadamard response (hr:
:func:`ldp_client.mechanisms.hr.sample_hr_counts`, the counts of reported indices, O(d K) work, while
d K <= :data:`MAX_HR_CELLS`). Local hashing, subset selection and set-valued have no cheap exact sampler
(the support counts of different items are dependent through each report's seed, subset or set): their
specs offer none, and the runners encode every report (:func:`has_sum_sampler`).

For simulation only: every sampler takes an explicit, seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

from ldp_client import registry
from ldp_client.mechanisms.hr import MAX_HR_CELLS, sample_hr_counts
from ldp_client.mechanisms.ue import sample_ue_support
from ldp_client.params import MechanismParams

__all__ = ["MAX_HR_CELLS", "has_sum_sampler", "sample_hr_counts", "sample_ue_support"]


def has_sum_sampler(params: MechanismParams) -> bool:
    """Whether the sum runner samples a campaign's sums exactly (else it encodes every report).

    A mechanism has one when its spec offers one (``spec.sum_sampler``).
    """
    return registry.spec_for(params).sum_sampler(params) is not None
