"""Longitudinal mechanisms (issue 17): a device reports every day, and part of each report is memoized from
its client secret so that repeated reports of one value reveal no more than its epsilon_inf.

* :mod:`~ldp_client.mechanisms.longitudinal.dbitflip`: dBitFlip (Ding, Kulkarni, Yekhanin, NeurIPS 2017),
  histograms over k buckets;
* :mod:`~ldp_client.mechanisms.longitudinal.onebitmean`: 1BitMean with alpha-point rounding (same paper),
  means;
* :mod:`~ldp_client.mechanisms.longitudinal.lgrr` and :mod:`~ldp_client.mechanisms.longitudinal.losue`:
  L-GRR and L-OSUE (Arcolezi et al., 2022), two rounds: a memoized one at epsilon_inf and a fresh one per
  report;

over :mod:`~ldp_client.mechanisms.longitudinal.memo` (the memoized coins) and
:mod:`~ldp_client.mechanisms.longitudinal.common`. ``docs/longitudinal.md`` has the formulas. The registry
imports each module's ``SPEC`` (import the modules, not this package).
"""
