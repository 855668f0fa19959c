"""Epsilon of each mechanism, computed from the probabilities the code actually samples with.

All inputs are the *effective* (32-bit quantized) probabilities, so the reported epsilon is the one the
implementation guarantees. Infinite epsilon is returned (not raised) where a channel has a zero
probability that makes some output impossible under one input but not another.
"""

from __future__ import annotations

import math

__all__ = [
    "binary_channel_epsilon",
    "grr_epsilon",
    "log_ratio",
    "rappor_effective_rates",
    "rappor_epsilon_inf",
    "rappor_epsilon_one",
]


def log_ratio(num: float, den: float) -> float:
    """ln(num/den) with the conventions ln(0/0) = 0 (output impossible under both) and ln(x/0) = inf."""
    if num == den:
        return 0.0
    if den == 0.0:
        return math.inf
    if num == 0.0:
        return -math.inf
    return math.log(num / den)


def binary_channel_epsilon(p_one_given_one: float, p_one_given_zero: float) -> float:
    """Epsilon of a one-bit channel: max over outputs y and inputs x, x' of ln P(y|x)/P(y|x').

    Warner's randomized response (Warner, JASA 1965) with truth probability p has
    P(1|1) = p, P(1|0) = 1 - p and epsilon = ln(p/(1-p)).
    """
    a, b = p_one_given_one, p_one_given_zero
    return max(
        log_ratio(a, b),
        log_ratio(b, a),
        log_ratio(1.0 - a, 1.0 - b),
        log_ratio(1.0 - b, 1.0 - a),
    )


def grr_epsilon(truth_probability: float, domain_size: int) -> float:
    """Epsilon of k-ary randomized response: ln(p (d-1) / (1-p)) for truth probability p > 1/d.

    Source: Kairouz, Bonawitz, Ramage, "Discrete distribution estimation under local privacy", ICML 2016;
    the output equals the input w.p. p and each other value w.p. (1-p)/(d-1).
    """
    other = (1.0 - truth_probability) / (domain_size - 1)
    return max(log_ratio(truth_probability, other), log_ratio(other, truth_probability))


def rappor_effective_rates(f: float, p: float, q: float) -> tuple[float, float]:
    """(q*, p*): probability a reported bit is 1 when the Bloom bit is 1, resp. 0.

    q* = f(p+q)/2 + (1-f) q and p* = f(p+q)/2 + (1-f) p (Erlingsson, Pihur, Korolova, CCS 2014, §3).
    """
    shared = 0.5 * f * (p + q)
    return shared + (1.0 - f) * q, shared + (1.0 - f) * p


def rappor_epsilon_inf(f: float, differing_bits_per_side: int) -> float:
    """Longitudinal epsilon of the permanent randomized response.

    Two inputs whose Bloom filters differ in at most ``u`` bits on each side (u = h for RAPPOR, 1 for
    one-hot basic RAPPOR) give eps_inf = 2u ln((1 - f/2)/(f/2)) (CCS 2014, Theorem 1). The boolean case,
    where a single bit differs, is the one-bit channel of :func:`binary_channel_epsilon` with
    P(1|1) = 1 - f/2 and P(1|0) = f/2.
    """
    per_bit = log_ratio(1.0 - f / 2.0, f / 2.0)
    return 2 * differing_bits_per_side * per_bit


def rappor_epsilon_one(f: float, p: float, q: float, differing_bits_per_side: int) -> float:
    """Epsilon of a single report: u * ln(q*(1-p*) / (p*(1-q*))) (CCS 2014, Theorem 2; u as above)."""
    qs, ps = rappor_effective_rates(f, p, q)
    return differing_bits_per_side * (log_ratio(qs, ps) + log_ratio(1.0 - ps, 1.0 - qs))
