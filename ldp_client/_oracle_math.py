"""Exact rates, variances, privacy levels and optimal settings of the issue-6 frequency oracles.

Pure Python (no numpy), shared by the oracles' parameter classes (which validate and round; in
``ldp_client/mechanisms/``), their encoders and specs, and :mod:`ldp_client.spec` (``variance``). Every
probability enters as a 32-bit threshold ``T`` (the probability ``T / 2**32`` the encoders sample with), so
the rates and epsilons computed here are those of the implementation, not of the requested real numbers.

All frequency oracles here are "pure" in the sense of Wang, Blocki, Li, Jha, "Locally Differentially
Private Protocols for Frequency Estimation", USENIX Security 2017, §4: a report supports item v with
probability p* if the user holds v and q* otherwise, and

    n Var[f_hat_v] = (q*(1 - q*) + f_v (p* - q*)(1 - p* - q*)) / (p* - q*)^2.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ldp_client._prob import PROB_ONE, largest_threshold, ratio_within_exp
from ldp_client.privacy import log_ratio

__all__ = [
    "HASH_BITS",
    "MAX_LOCAL_HASH_BUCKETS",
    "best_olh_g",
    "best_ss_k",
    "ceil_log2",
    "grr_like_threshold",
    "hadamard_order",
    "hash_bucket_bounds",
    "hash_collision_mass",
    "local_hashing_q_star",
    "oracle_variance",
    "ss_epsilon",
    "ss_q_star",
    "ss_threshold",
    "unary_epsilon",
]

# Bits of the strongly universal hash value of local hashing (see ldp_client/mechanisms/olh.py).
HASH_BITS = 32
# Largest number of buckets g of local hashing: far above the optimum e^eps + 1 for any eps <= 13.8.
MAX_LOCAL_HASH_BUCKETS = 1 << 20
# Domains up to this half-size have the subset size k* found by scanning every k in [1, d/2].
_SS_FULL_SCAN = 1 << 15


def ceil_log2(x: int) -> int:
    """Smallest b with 2**b >= x (x >= 1)."""
    return (x - 1).bit_length()


def oracle_variance(p_star: float, q_star: float, frequency: float = 0.0) -> float:
    """n Var[f_hat_v] of a pure frequency oracle (Wang et al. 2017, §4; see the module docstring).

    At ``frequency = 0`` this is the "Var*" of the literature, the term that dominates for large domains.
    """
    delta = p_star - q_star
    return (q_star * (1.0 - q_star) + frequency * delta * (1.0 - p_star - q_star)) / (delta * delta)


def unary_epsilon(p: float, q: float) -> float:
    """Epsilon of unary encoding (one-hot vector, bit 1 kept w.p. p, bit 0 set w.p. q).

    Two values differ in two bits, so the worst output ratio is (p/q) ((1-q)/(1-p)) for p > q (Wang et
    al. 2017, §4.3).
    """
    return max(
        log_ratio(p, q) + log_ratio(1.0 - q, 1.0 - p),
        log_ratio(q, p) + log_ratio(1.0 - p, 1.0 - q),
    )


def grr_like_threshold(size: int, epsilon: float) -> int:
    """Largest threshold T with ln(T (size-1) / (2**32 - T)) <= epsilon: GRR's p = e^eps/(e^eps+size-1).

    Decided exactly (:func:`ldp_client._prob.ratio_within_exp`); the float formula only gives the
    starting point. Used by GRR over a domain and over the g buckets of local hashing. Returns 0 if no
    T > 2**32/size qualifies.
    """
    # p = 1 / (1 + (size-1) e^-eps) avoids overflow for large eps.
    estimate = math.floor(PROB_ONE / (1.0 + (size - 1) * math.exp(-epsilon)))
    return largest_threshold(
        lambda t: ratio_within_exp(t * (size - 1), PROB_ONE - t, epsilon),
        estimate,
        PROB_ONE // size + 1,
        PROB_ONE - 1,
    )


# ------------------------------------------------------------------------------------------ local hashing


def hash_bucket_bounds(g: int, bucket: int) -> tuple[int, int]:
    """``(lo, width)``: the 32-bit hash values h with floor(h g / 2**32) == bucket are [lo, lo + width).

    lo = ceil(bucket 2**32 / g); the bucket sizes are floor(2**32/g) or one more.
    """
    lo = -((-bucket * PROB_ONE) // g)
    hi = -((-(bucket + 1) * PROB_ONE) // g)
    return lo, hi - lo


def hash_collision_mass(g: int) -> Fraction:
    """S = sum over buckets y of P(bucket = y)^2 for a uniform 32-bit hash value mapped to [0, g).

    The map floor(h g / 2**32) gives r = 2**32 mod g buckets of floor(2**32/g) + 1 values and g - r of
    floor(2**32/g), so S = ((g - r) b^2 + r (b + 1)^2) / 2**64 with b = floor(2**32/g): 1/g plus at most
    g / 2**64 (exactly 1/g when g is a power of two).
    """
    b, r = divmod(PROB_ONE, g)
    return Fraction((g - r) * b * b + r * (b + 1) * (b + 1), PROB_ONE * PROB_ONE)


def local_hashing_q_star(p: float, g: int) -> float:
    """q* of local hashing: P(a report supports v | the user holds x != v).

    With a strongly universal hash (pairwise independent, uniform 32-bit values) the buckets of x and v
    are independent with the bucket law above, so P(same bucket) = S and

        q* = S p + (1 - S) (1 - p)/(g - 1)

    (the report is the true bucket w.p. p, each other bucket w.p. (1-p)/(g-1)). For S = 1/g this is
    Wang et al.'s q* = 1/g.
    """
    s = float(hash_collision_mass(g))
    return s * p + (1.0 - s) * (1.0 - p) / (g - 1)


def best_olh_g(epsilon: float) -> int:
    """The integer g >= 2 minimising n Var* of optimized local hashing at ``epsilon``.

    The real optimum is g = e^eps + 1 (Wang et al. 2017, §4.4); the variance is unimodal in g, so the
    integers around it are compared with the exact quantized rates. g is capped at
    :data:`MAX_LOCAL_HASH_BUCKETS` (2**20), which is the optimum's neighbourhood up to eps = 13.86.
    """
    center = math.exp(min(epsilon, 20.0)) + 1.0
    # Above eps = ln(2**20 - 1) (about 13.86) the optimum exceeds the largest g the wire allows; the
    # variance falls with g up to the optimum, so the largest allowed g is then the best one.
    lo = max(2, min(MAX_LOCAL_HASH_BUCKETS, math.floor(center) - 1))
    hi = max(lo, min(MAX_LOCAL_HASH_BUCKETS, math.ceil(center) + 1))
    best_g, best_v = 2, math.inf
    for g in range(lo, max(lo, hi) + 1):
        t = grr_like_threshold(g, epsilon)
        if t == 0:
            continue
        p = t / PROB_ONE
        v = oracle_variance(p, local_hashing_q_star(p, g))
        if v < best_v:
            best_g, best_v = g, v
    return best_g


# ------------------------------------------------------------------------------------- subset selection


def ss_q_star(p: float, d: int, k: int) -> float:
    """q* of k-subset selection: P(v in the subset | x != v) = p (k-1)/(d-1) + (1-p) k/(d-1).

    The subset holds x w.p. p plus k-1 uniform others, or else k uniform others out of the d-1.
    """
    return (p * (k - 1) + (1.0 - p) * k) / (d - 1)


def ss_epsilon(p: float, d: int, k: int) -> float:
    """Epsilon of k-subset selection with P(x in subset) = p.

    A subset Y has probability p / C(d-1, k-1) if it holds x and (1-p) / C(d-1, k) otherwise; the ratio
    of the two is p (d-k) / ((1-p) k) (Ye and Barg, IEEE T-IT 2018; Wang et al. 2016).
    """
    return abs(log_ratio(p * (d - k), (1.0 - p) * k))


def ss_threshold(d: int, k: int, epsilon: float) -> int:
    """Largest threshold T with ss_epsilon(T/2**32, d, k) <= epsilon and T/2**32 > k/d (0 if none).

    The exact rate is p = k e^eps / (k e^eps + d - k); rounding it down rounds toward privacy, and the
    comparison with epsilon is decided exactly (:func:`ldp_client._prob.ratio_within_exp`).
    """
    return largest_threshold(
        lambda t: ratio_within_exp(t * (d - k), (PROB_ONE - t) * k, epsilon),
        math.floor(PROB_ONE / (1.0 + (d - k) / k * math.exp(-epsilon))),
        k * PROB_ONE // d + 1,
        PROB_ONE - 1,
    )


def _ss_variance(d: int, k: int, epsilon: float, quantized: bool) -> float:
    if quantized:
        t = ss_threshold(d, k, epsilon)
        if t == 0:
            return math.inf
        p = t / PROB_ONE
    else:
        p = 1.0 / (1.0 + (d - k) / k * math.exp(-epsilon))
    return oracle_variance(p, ss_q_star(p, d, k))


def best_ss_k(d: int, epsilon: float) -> int:
    """Subset size k* in [1, max(1, d // 2)] minimising n Var* of subset selection at ``epsilon``.

    For d // 2 <= 32768 every k is evaluated with the exact quantized rate. Above that the (unimodal)
    variance of the unquantized rate is minimised by ternary search over the integers, and the exact
    quantized variances of the 33 integers around that minimum decide. The optimum is near
    d / (e^eps + 1) (Wang et al. 2016; Ye and Barg 2018).
    """
    hi = max(1, d // 2)
    if hi <= _SS_FULL_SCAN:
        candidates = range(1, hi + 1)
    else:
        lo, up = 1, hi
        while up - lo > 2:
            m1 = lo + (up - lo) // 3
            m2 = up - (up - lo) // 3
            if _ss_variance(d, m1, epsilon, False) <= _ss_variance(d, m2, epsilon, False):
                up = m2
            else:
                lo = m1
        mid = (lo + up) // 2
        candidates = range(max(1, mid - 16), min(hi, mid + 16) + 1)
    best_k, best_v = 1, math.inf
    for k in candidates:
        v = _ss_variance(d, k, epsilon, True)
        if v < best_v:
            best_k, best_v = k, v
    return best_k


# ------------------------------------------------------------------------------------- Hadamard response


def hadamard_order(d: int) -> int:
    """K = 2**ceil(log2(d + 1)): the Sylvester-Hadamard order whose rows 1..d encode the d values."""
    return 1 << ceil_log2(d + 1)
