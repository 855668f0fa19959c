"""RAPPOR decoding at full strength: sparse selection, constrained refit, calibrated errors, detection.

String RAPPOR with a candidate dictionary (Erlingsson, Pihur, Korolova, CCS 2014, §4; Google's
``analysis/R/decode.R``) is decoded by :func:`decode_rappor` in four steps, all on the per-cohort bit
counts of a :class:`~ldp_aggregator.accumulators.BitCountAccumulator`:

1. **Design.** X[(j, i), v] = 1 iff candidate v's Bloom filter in cohort j sets bit i, built as a sparse
   (m*k) x M matrix from :func:`ldp_aggregator.rappor_estimates.rappor_design`, i.e. from the client's own
   hashing code, so client and server can never disagree. Cohorts without reports are dropped (R rows remain).
2. **Weighted model.** With N_j reports in cohort j and c_ij ones, the debiased count
   y_ij = (c_ij - p* N_j)/(q* - p*) has E[y_ij] = N_j (X pi + b pi_0)_ij and
   Var[y_ij] = N_j r_ij (1 - r_ij)/(q*-p*)^2 with r_ij = p* + (q*-p*)(X pi + b pi_0)_ij (§2 of the formulas;
   the mixture variance includes the users' random split over cohorts). The extra column b = 1 - (1-1/k)^h
   is the *background*: reporters holding strings outside the dictionary, whose Bloom bits are, as far as
   the dictionary can tell, uniformly random; its unpenalised coefficient pi_0 is the mass the candidates
   do not explain (without it that mass is pushed onto candidates sharing its bits). Rows are whitened:
   y~ = y / s, A = diag(N / s) X, so the noise is N(0, 1) per row. The weights are fixed before the fit
   that uses them (first the null rate p*, then the rates fitted in that first pass), never the observed
   rates, whose noise would bias the fit.
3. **Selection: non-negative LASSO** (Tibshirani 1996; non-negative form as in decode.R's glmnet call)::

       minimise 1/2 ||y~ - A pi||^2 + lambda * sum_v ||A_v|| pi_v   subject to pi >= 0.

   With columns scaled by their norms the penalty is in z units: candidate v stays at 0 exactly when the
   standardised correlation A_v'(y~ - A pi)/||A_v|| of its column with the residual is at most lambda
   (KKT). For a candidate nobody holds that correlation is N(0, sigma^2), so lambda = sigma z_{1 - c/M}
   lets on average c absent candidates into the selection, whatever M is, without cross-validation
   (c = 1 is the one-sided *universal threshold*; Donoho and Johnstone 1994 use sigma sqrt(2 log M)). The
   default is c = 5 (``_SELECTION_EXPECTED_FALSE`` in ``string_decode``): selection only decides which
   coefficients the refit estimates, detection (below) decides what is reported, and a penalty that lets a
   few absent candidates in keeps the small true ones that the universal threshold zeroes (exp / 20% extra
   / eps_1 = 1 in ``bench/bench_rappor_decode.py``: total variation 0.182 -> 0.174 at k = 8, false
   positives 0.2 -> 0.4). sigma is 1 for a dictionary that explains the data and is estimated as max(1,
   sqrt(chi2/df)) from the first pass's residuals (strings outside the dictionary raise it; at the nominal
   level false candidates would absorb their signal). Detection (below) then decides what is reported. The
   problem is solved exactly by an active-set NNLS in Gram form (Lawson and Hanson 1974; Bro and De Jong
   1997) over a working set of candidates that grows until the KKT conditions hold for all M candidates (a
   sparse product A'r per check), so the (m*k) x M design is never densified and M may exceed R: a
   dictionary larger than what the bits can identify is decoded by selection (said in ``warnings``), not
   refused.
4. **Refit** on the selected set S: weighted least squares with pi >= 0 and sum(pi) + pi_0 <= 1 (the same
   active-set solver; the sum constraint by its Lagrange multiplier, found by Newton steps).

**Standard errors.** On the free coordinates F (pi_v > 0) of the refit, the estimator is the WLS solution
G_F^-1 A_F' y~ (G_F = A_F' A_F), projected on the sum constraint when it is active. Per candidate, the
variance is the larger of

* the model covariance G_F^-1 + G_F^-1 M G_F^-1, where M adds the within-cohort correlation of the rows
  that the users' multinomial split over values creates (``_split_meat`` in ``string_decode``; the row
  weights hold only its diagonal); and
* the cohort-clustered sandwich G_F^-1 (sum_j u_j u_j') G_F^-1, u_j = A_Fj' e_j the score of cohort j
  (Liang and Zeger 1986, CR1 scaling): cohorts are independent and hash independently, so strings outside
  the dictionary and other misfit show up as between-cohort variability of the scores.

For a candidate at 0, the standard error and the one-step estimate are those of adding it to the model
(the score test of its coefficient): SE = I_v^-1/2 with I_v = A_v'(I - H_F) A_v, pi~_v = A_v' e / I_v;
its interval is [0, max(pi~_v, 0) + z SE]. Other intervals are pi_hat +/- z SE (lower end clipped at 0),
and for *detected* candidates the hull of that and the interval valid conditional on detection
(:func:`selective_interval`), since reporting only estimates above a threshold selects those that noise
pushed up. ``bench/bench_rappor_decode.py`` measures the coverage (target: >= 90% for the 95% intervals of
reported strings).

**Detection.** One-sided p-values p_v = 1 - Phi(pi_v / SE_v) over all M candidates (score p-values for
candidates at 0). A candidate is detected when its estimate is positive and it passes Bonferroni
(p_v <= alpha/M, family-wise error <= alpha) or Benjamini-Hochberg (step-up, false discovery rate <=
alpha), as the caller chooses. The result carries the detection threshold for the campaign's N and
parameters: the smallest proportion detectable for an isolated candidate,
z_crit * sqrt(p*(1-p*)) / ((q*-p*) sqrt(h_eff N)), with h_eff = k (1 - (1 - 1/k)^h) the expected number of
distinct bits of a string and z_crit = z_{1-alpha/M} (Bonferroni) or the realised BH cut-off. This is
decode.R's threshold z_{1-alpha/M} sqrt(p*(1-p*) N)/(q*-p*)/N with the sqrt(h_eff) gain of reading all h
bits of a string.

Basic RAPPOR and boolean RAPPOR need no regression: :func:`decode_direct` debiases each bit
(:func:`ldp_aggregator.estimators.pure_oracle_arrays`) and applies the same detection.

The modules, bottom up (each imports only those above it): ``results`` (:class:`DecodeResult` and the
checks of the options), ``solvers`` (NNLS in Gram form, with a sum constraint, and the non-negative
LASSO), ``detection`` (:func:`detect`, :func:`detection_threshold`, :func:`selective_interval`),
``string_decode`` (string RAPPOR: :func:`decode_rappor_counts`, :func:`decode_rappor`), ``direct``
(:func:`decode_direct`) and ``campaign`` (:func:`decode`, :func:`decode_campaign` and the
``DecodeRappor`` messages). Import the public names from this package.
"""

from __future__ import annotations

from ldp_aggregator.rappor_decode.campaign import (
    correction_from_proto,
    decode,
    decode_campaign,
    decode_response_to_dict,
    decode_to_proto,
    decodes,
)
from ldp_aggregator.rappor_decode.detection import detect, detection_threshold, selective_interval
from ldp_aggregator.rappor_decode.direct import decode_direct
from ldp_aggregator.rappor_decode.results import CORRECTIONS, Correction, DecodeResult, ResidualDiagnostics
from ldp_aggregator.rappor_decode.string_decode import decode_rappor, decode_rappor_counts

__all__ = [
    "CORRECTIONS",
    "Correction",
    "DecodeResult",
    "ResidualDiagnostics",
    "correction_from_proto",
    "decode",
    "decode_campaign",
    "decode_direct",
    "decode_rappor",
    "decode_rappor_counts",
    "decode_response_to_dict",
    "decode_to_proto",
    "decodes",
    "detect",
    "detection_threshold",
    "selective_interval",
]
