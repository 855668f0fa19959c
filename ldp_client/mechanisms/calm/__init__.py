"""CALM marginals (``calm``): k-way marginals of several categorical attributes from one report per user.

Method (Zhang, Wang, Li, He, Chen, "CALM: Consistent Adaptive Local Marginal for Marginal Release under
Local Differential Privacy", CCS 2018, §4): a record holds d categorical attributes, attribute j over a
small domain of c_j labels. The campaign chooses m marginals (attribute sets A_1..A_m, e.g. every pair, or
the full set for a small joint). The users are split into m groups, each device's group uniform on 1..m
and derived from its client secret (HMAC-SHA256(secret, label || campaign id), as ``hio`` derives its
level: it stays put across reports and no identifier leaves the device); group i reports the cell of its
record in marginal A_i (one of c_{A_i} = prod_{j in A_i} c_j cells, row-major over A_i's attributes in
index order) with the better frequency oracle for c_{A_i} cells (CALM §4.2, "adaptive"): generalized
randomized response (:mod:`ldp_client.mechanisms.grr`) where its variance q(1-q)/(p-q)^2 is below local
hashing's, i.e. c < about 3 e^eps + 2 (Wang, Blocki, Li, Jha, USENIX Security 2017, §4.5), else optimized
local hashing (:mod:`ldp_client.mechanisms.olh`, the same g and p for every such marginal). A GRR marginal's
probability is the largest whose epsilon is at most local hashing's, so every group has one epsilon bound
(the largest over the groups; the group is independent of the record). A report is (group, a, b, bucket),
a = b = 0 and bucket = the reported cell for a GRR marginal.

Server. The ``support`` accumulator holds, marginal after marginal, the support count of every cell, then
each group's number of reports: sum_i c_{A_i} + m counts. Reads of it:

- :meth:`CalmSpec.marginal_tables` (:class:`ldp_client.layouts.MarginalTables`): per marginal its cell
  counts, reports and oracle rates, from which :mod:`ldp_aggregator.marginals` estimates every marginal,
  makes them consistent (CALM §4.3) and answers any marginal covered by one chosen set, with standard
  errors (formulas there and in docs/marginals.md);
- :meth:`CalmSpec.support` (kind SUPPORT, the generic frequency table): the items are the full joint's
  records; a campaign that chose the full attribute set estimates them from that group's reports, at the
  whole population's rates p*/m, q*/m (as ``hio``'s leaves). A campaign without the full set has no
  item table (:meth:`CalmSpec.item_table`): its marginals are what it answers.

Importing this module does not import numpy.
"""

from ldp_client.mechanisms.calm.core import (
    CalmEncoder,
    CalmParams,
    CalmReport,
    group_of,
    parse_attributes,
    parse_marginals,
)
from ldp_client.mechanisms.calm.spec import SPEC, CalmSpec

__all__ = [
    "SPEC",
    "CalmEncoder",
    "CalmParams",
    "CalmReport",
    "CalmSpec",
    "group_of",
    "parse_attributes",
    "parse_marginals",
]
