"""Association: the joint distribution of the two variables of a paired campaign, by EM.

A paired campaign (:class:`~ldp_client.params.PairedParams`) receives from every device one report
holding both of its randomized values (:mod:`ldp_client.mechanisms.paired`), so no client identifier is
ever stored. Let theta[u, v] be the proportion of devices whose first variable is u and second is v. The
two sides are randomized independently given the values, so report r (first part y_r, second part z_r)
has likelihood

    P(y_r, z_r) = sum_{u, v} theta[u, v] P(y_r | u) P(z_r | v) = a_r' theta b_r,

with a_r[u] = P(y_r | u) and b_r[v] = P(z_r | v) the per-report likelihoods of each side's channel:

* rr: P(yes | yes) and P(yes | no) of the two-coin survey; grr: p if the report is the value, else q;
* boolean and basic RAPPOR: prod_i P(S_i | B_i) with P(1 | 1) = q*, P(1 | 0) = p* per bit;
* string RAPPOR, against candidates: prod_i P(S_i | B_i(u, cohort)) with the candidate's Bloom filter
  in the report's cohort (:func:`ldp_aggregator.rappor_estimates.rappor_design`, the client's hashing),
  plus an ``<other>`` value for strings outside the candidates, whose Bloom bits are taken as independent
  Bernoulli(b), b = 1 - (1 - 1/k)^h, i.e. each bit is 1 with probability b q* + (1 - b) p*.

**Estimation.** The maximum-likelihood theta is found by EM (Dempster, Laird, Rubin 1977; for RAPPOR as
in Fanti, Pihur, Erlingsson, PETS 2016, §4): theta <- theta * (sum_r w_r a_r b_r' / (a_r' theta b_r)) / W,
vectorised over reports (chunks of an (n x U) and (n x V) likelihood matrix; identical reports are merged
with a weight w_r, and for small sides the sufficient statistic is the table of joint report patterns the
accumulator keeps). EM is accelerated by SQUAREM (Varadhan and Roland, Scand. J. Statist. 2008, scheme
S3, with a monotonicity safeguard) and stops when the log-likelihood gains less than ``tolerance`` per
report.

**Standard errors** come from the observed information (Louis 1982; for this mixture the observed
information is exact and simple): I = sum_r w_r h_r h_r' with h_r = vec(a_r b_r') / (a_r' theta b_r),
in the U*V - 1 free coordinates of the simplex; Cov(theta) = J (J' I J)^+ J'. Intervals are
theta +/- z SE clipped to [0, 1]; marginals (row and column sums) get theirs from the same covariance.

**Independence test.** The likelihood-ratio statistic 2 (l_joint - l_indep), where l_indep is the
maximum over product distributions alpha beta' (two separate EMs, one per side), is compared with
chi-square((U' - 1)(V' - 1)), U', V' the values with positive estimated marginal mass (Wilks 1938; values
on the boundary make the test conservative).

Reports: for small sides (rr, grr, boolean, basic RAPPOR up to 12 values) the joint pattern table of
:class:`~ldp_aggregator.paired_accumulator.PairedAccumulator`; with a string-RAPPOR side, the retained raw
reports (``Store.raw_payloads``), since no small sufficient statistic exists for the per-report likelihood.

The modules, bottom up (each imports only those above it): :mod:`~ldp_aggregator.association.results`
(the result, the defaults, the error), :mod:`~ldp_aggregator.association.likelihood` (each side's
per-report likelihoods), :mod:`~ldp_aggregator.association.em` (EM, standard errors, the independence
test), :mod:`~ldp_aggregator.association.sources` (a stored campaign's reports, ``associate_campaign``)
and :mod:`~ldp_aggregator.association.messages` (the ``AssociationResponse`` and its dict form). Import
the public names from this package (``from ldp_aggregator.association import associate_campaign``).
"""

from __future__ import annotations

from ldp_aggregator.association.em import estimate_association
from ldp_aggregator.association.likelihood import side_likelihood
from ldp_aggregator.association.messages import association_response_to_dict, association_to_proto
from ldp_aggregator.association.results import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_VALUES,
    DEFAULT_TOLERANCE,
    OTHER_LABEL,
    AssociationResult,
    ReportsUnavailableError,
    SideLikelihood,
)
from ldp_aggregator.association.sources import associate_campaign, columns_from_payloads

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MAX_VALUES",
    "DEFAULT_TOLERANCE",
    "OTHER_LABEL",
    "AssociationResult",
    "ReportsUnavailableError",
    "SideLikelihood",
    "associate_campaign",
    "association_response_to_dict",
    "association_to_proto",
    "columns_from_payloads",
    "estimate_association",
    "side_likelihood",
]
