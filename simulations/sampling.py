"""Exact sampling of the aggregated sufficient statistics of one report per user (the "sum" runner).

For simulation only: every function takes an explicit, seeded ``numpy.random.Generator``.

The estimators only ever see sums of reports: the yes count for RR, the count of each reported value for
GRR, and per cohort the number of reports and the number of ones in each bit for RAPPOR. Given the true
counts, each of those sums is a sum of independent per-user contributions, so it can be drawn directly
with a handful of binomials and multinomials. The draws below are exact in distribution: the sampled
statistics have the same joint law as the sums of reports that the per-report encoders would produce
(up to the float64 representation of the probabilities), at a cost independent of the number of users.

Probabilities come from the quantized thresholds of the parameter objects (``T / 2**32``, exact in
float64), i.e. the probabilities the per-report encoders really use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ldp_client._prob import threshold_to_probability
from ldp_client.errors import InvalidParameterError
from ldp_client.params import (
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    GRRParams,
    RapporParams,
)
from simulations.populations import _check_rng

if TYPE_CHECKING:
    from collections.abc import Callable

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

RapporNoiseParams = RapporParams | BasicRapporParams | BooleanRapporParams


def _as_counts(
    name: str, x: object, *, ndim: int, shape: tuple[int | None, ...] | None = None
) -> NDArray[np.int64]:
    """Validate a non-negative integer array of the given rank (and shape; None = any length)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu" or arr.ndim != ndim:
        # Describe the array rather than repr it: it may hold millions of entries.
        raise InvalidParameterError(
            name, f"<array shape={arr.shape} dtype={arr.dtype}>", f"a {ndim}-dimensional array of integers"
        )
    if shape is not None:
        for axis, (got, want) in enumerate(zip(arr.shape, shape, strict=True)):
            if want is not None and got != want:
                raise InvalidParameterError(
                    f"{name}.shape[{axis}]", got, f"{want} (expected shape {tuple(shape)})"
                )
    if (
        arr.dtype.kind == "u"
        and arr.dtype.itemsize >= 8
        and arr.size
        and int(arr.max()) > np.iinfo(np.int64).max
    ):
        raise InvalidParameterError(name, int(arr.max()), "counts that fit in int64")
    out = arr.astype(np.int64, copy=False)
    if out.size and int(out.min()) < 0:
        raise InvalidParameterError(name, int(out.min()), "non-negative counts")
    return out


def _check_probability(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.floating):
        raise InvalidParameterError(name, x, "a probability in [0, 1]")
    v = float(x)
    if not 0.0 <= v <= 1.0:
        raise InvalidParameterError(name, x, "a probability in [0, 1]")
    return v


# --------------------------------------------------------------------------------------------------------
# Binary randomized response


def sample_rr_counts(
    params: BinaryRRParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """(no, yes) report counts of binary RR for ``true_counts = (no, yes)`` users. For simulation only.

    The two-coin survey (Warner, JASA 1965): a user answers truthfully with a = T_a/2^32, otherwise says
    "yes" with b = T_b/2^32. Drawn in the same two stages, so every probability is an exact quantized
    threshold: truthful yeses A ~ Bin(c_yes, a), untruthful users U ~ (c_yes - A) + Bin(c_no, 1-a), coin
    yeses B ~ Bin(U, b); yes = A + B. Marginally yes ~ Bin(c_yes, a + (1-a) b) + Bin(c_no, (1-a) b),
    independent sums, which is the law of the yes count of the per-report encoder.
    """
    g = _check_rng(rng)
    c = _as_counts("true_counts", true_counts, ndim=1, shape=(2,))
    a = threshold_to_probability(params.truth_threshold)
    b = threshold_to_probability(params.yes_threshold)
    c_no, c_yes = int(c[0]), int(c[1])
    truthful_yes = int(g.binomial(c_yes, a))
    untruthful = (c_yes - truthful_yes) + int(g.binomial(c_no, 1.0 - a))
    yes = truthful_yes + int(g.binomial(untruthful, b))
    return np.array([c_no + c_yes - yes, yes], dtype=np.int64)


# --------------------------------------------------------------------------------------------------------
# Generalized (k-ary) randomized response


def spread_uniform_others(
    others_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Where ``others_counts[v]`` reports, each uniform over the d-1 values other than v, land.

    Returns L with L[w] = sum over v != w of X[v, w], where the rows X[v] ~ Multinomial(M_v, uniform on
    {0..d-1} minus {v}) are independent. For simulation only. O(d) binomial draws instead of the O(d^2)
    of one multinomial per source, and exact in distribution:

    1. Split each source: a report from v lands below v with probability v/(d-1), and then uniformly on
       {0..v-1}; otherwise uniformly on {v+1..d-1}. So E_v ~ Bin(M_v, v/(d-1)) "low" reports and
       M_v - E_v "high" reports, independently across v.
    2. Low reports, columns w = d-1 down to 0. The pool holds the low reports of sources above w that have
       not landed on a column above w. Each such report is uniform on {0..v-1} conditioned on not being
       in {w+1..v-1}, i.e. uniform on {0..w}, whatever its source, and independently of the others. So
       Bin(pool, 1/(w+1)) of them land on w. Then the low reports of source w join the pool (they are
       uniform on {0..w-1}, as every remaining pool report now is).
    3. High reports, the mirror image: columns w = 0 up to d-1, Bin(pool, 1/(d-w)) land on w, then the high
       reports of source w join the pool.

    Each step draws the conditional law of the next column given everything drawn so far, so the joint
    law of L is exactly the one of the independent multinomial rows.
    """
    g = _check_rng(rng)
    m = _as_counts("others_counts", others_counts, ndim=1)
    d = m.size
    if d < 2:
        raise InvalidParameterError(
            "others_counts", f"<array shape={m.shape}>", "an array of length >= 2 (a domain of d >= 2)"
        )
    low = g.binomial(m, np.arange(d, dtype=np.float64) / (d - 1))
    high = m - low
    low_list = low.tolist()
    high_list = high.tolist()
    landed = [0] * d
    pool = 0
    for w in range(d - 1, -1, -1):
        if pool:
            k = int(g.binomial(pool, 1.0 / (w + 1)))
            landed[w] = k
            pool -= k
        pool += low_list[w]
    pool = 0
    for w in range(d):
        if pool:
            k = int(g.binomial(pool, 1.0 / (d - w)))
            landed[w] += k
            pool -= k
        pool += high_list[w]
    return np.asarray(landed, dtype=np.int64)


def sample_grr_counts(
    params: GRRParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Count of each reported value of GRR for ``true_counts[v]`` users holding v. For simulation only.

    A user holding v reports v with p = T/2^32 and otherwise a uniformly random other value (Kairouz et
    al., ICML 2016; Wang et al., USENIX Security 2017). So the truthful reports T_v ~ Bin(c_v, p),
    independently, and the c_v - T_v others are spread by :func:`spread_uniform_others` (exact, O(d)).
    The result sums to sum(true_counts).
    """
    g = _check_rng(rng)
    d = params.domain.size
    c = _as_counts("true_counts", true_counts, ndim=1, shape=(d,))
    truthful = g.binomial(c, threshold_to_probability(params.truth_threshold)).astype(np.int64, copy=False)
    return truthful + spread_uniform_others(c - truthful, g)


# --------------------------------------------------------------------------------------------------------
# RAPPOR family


def sample_bit_counts(
    q_star: float,
    p_star: float,
    set_counts: NDArray[np.int64],
    cohort_reports: NDArray[np.int64],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Number of reports with bit i = 1 in cohort j, given how many of them had Bloom bit i set.

    ones[j, i] ~ Bin(S[j, i], q*) + Bin(N_j - S[j, i], p*), all independent. For simulation only.

    Exact in distribution for the per-bit sums: given the users' values, the reported bits of one report
    are independent across bits (PRR and IRR randomize each bit on its own, CCS 2014 §3), a bit is 1 with
    q* if its Bloom bit is set and p* otherwise, and users are independent. (Sums over different bits of
    the same users are independent too, so the whole (m, k) array has the right joint law.)

    Args:
        q_star: P(reported bit = 1 | Bloom bit = 1).
        p_star: P(reported bit = 1 | Bloom bit = 0).
        set_counts: S, shape (m, k): users of cohort j whose Bloom bit i is set.
        cohort_reports: N, shape (m,): reports in cohort j; S[j, i] <= N[j].
        rng: the seeded generator.
    """
    g = _check_rng(rng)
    q = _check_probability("q_star", q_star)
    p = _check_probability("p_star", p_star)
    s = _as_counts("set_counts", set_counts, ndim=2)
    n = _as_counts("cohort_reports", cohort_reports, ndim=1, shape=(s.shape[0],))
    unset = n[:, None] - s
    if unset.size and int(unset.min()) < 0:
        j, i = np.unravel_index(int(np.argmin(unset)), unset.shape)
        raise InvalidParameterError(
            f"set_counts[{j}, {i}]", int(s[j, i]), f"at most cohort_reports[{j}] = {int(n[j])}"
        )
    return (g.binomial(s, q) + g.binomial(unset, p)).astype(np.int64, copy=False)


def sample_rappor_bits(
    params: RapporNoiseParams,
    set_counts: NDArray[np.int64],
    cohort_reports: NDArray[np.int64],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """:func:`sample_bit_counts` with q* and p* of ``params`` (from the effective f, p, q)."""
    return sample_bit_counts(params.q_star, params.p_star, set_counts, cohort_reports, rng)


def split_by_cohort(
    true_counts: NDArray[np.int64] | Sequence[int], m: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Split the users of each value over ``m`` uniform cohorts: shape (m, n_values). For simulation only.

    Each user's cohort is uniform on 0..m-1 and independent of the value (the client derives it from its
    random secret as a 64-bit HMAC output mod m, docs/rappor-encoding.md, whose bias is at most m/2^64 and
    is ignored here), so the users of value l split as
    Multinomial(c_l, (1/m, ..., 1/m)), independently across values (one vectorised call; values with no
    users cost nothing).
    """
    g = _check_rng(rng)
    c = _as_counts("true_counts", true_counts, ndim=1)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise InvalidParameterError("m", m, "an integer >= 1")
    m = int(m)
    out = np.zeros((m, c.size), dtype=np.int64)
    if m == 1:
        out[0] = c
        return out
    nz = np.flatnonzero(c)
    if nz.size:
        out[:, nz] = g.multinomial(c[nz], np.full(m, 1.0 / m)).T
    return out


def _bloom_positions_fn() -> Callable[[str, int, str, int, int], tuple[int, ...]]:
    from ldp_client.mechanisms.rappor import bloom_positions

    return bloom_positions


def bloom_position_table(
    params: RapporParams, *, campaign_id: str, labels: Sequence[str]
) -> NDArray[np.int64]:
    """Bloom bit positions of every label in every cohort: shape (m, n_labels, h).

    ``table[j, l]`` is ``bloom_positions(campaign_id, j, labels[l], k, h)`` (the client's own hashing, see
    ``docs/rappor-encoding.md``). Positions may repeat within a row (two hashes hitting one bit).
    Compute it once and pass it to :func:`rappor_set_counts` when simulating many repeats over the same
    labels. Costs m * n_labels hash evaluations.
    """
    bloom = _bloom_positions_fn()
    k, h, m = params.k, params.h, params.m
    table = np.empty((m, len(labels), h), dtype=np.int64)
    for li, label in enumerate(labels):
        table[:, li, :] = [bloom(campaign_id, j, label, k, h) for j in range(m)]
    if table.size and (int(table.min()) < 0 or int(table.max()) >= k):
        raise InvalidParameterError("bloom positions", (int(table.min()), int(table.max())), f"in [0, {k})")
    return table


def rappor_set_counts(
    params: RapporParams,
    *,
    campaign_id: str,
    labels: Sequence[str],
    counts_by_cohort: NDArray[np.int64],
    position_table: NDArray[np.int64] | None = None,
) -> NDArray[np.int64]:
    """S[j, i]: users of cohort j whose Bloom filter has bit i set; shape (m, k).

    S[j, i] = sum over labels l of counts_by_cohort[j, l] * [i in positions(j, l)], where a bit hit by two
    of a label's hashes counts once (the Bloom filter is a set of bits).

    Args:
        params: the RAPPOR parameters (k, h, m).
        campaign_id: the campaign the Bloom hashing is keyed by.
        labels: the value of each column of ``counts_by_cohort``.
        counts_by_cohort: shape (m, n_labels): users of cohort j holding labels[l].
        position_table: optional precomputed :func:`bloom_position_table` for ``labels`` (shape
            (m, n_labels, h)); without it, positions are computed only for labels with users.
    """
    k, h, m = params.k, params.h, params.m
    counts = _as_counts("counts_by_cohort", counts_by_cohort, ndim=2, shape=(m, len(labels)))
    if position_table is None:
        nz = np.flatnonzero(counts.sum(axis=0))
        table = bloom_position_table(params, campaign_id=campaign_id, labels=[labels[int(i)] for i in nz])
        counts = counts[:, nz]
    else:
        table = np.asarray(position_table)
        if table.shape != (m, len(labels), h) or table.dtype.kind not in "iu":
            raise InvalidParameterError(
                "position_table", table.shape, f"an integer array of shape {(m, len(labels), h)}"
            )
        if table.size and (int(table.min()) < 0 or int(table.max()) >= k):
            raise InvalidParameterError(
                "position_table", (int(table.min()), int(table.max())), f"in [0, {k})"
            )
        table = table.astype(np.int64, copy=False)
    # A position repeated within one (cohort, label) row is set once: keep only first occurrences.
    first = np.ones(table.shape, dtype=bool)
    for t in range(1, h):
        first[..., t] = ~np.any(table[..., :t] == table[..., t : t + 1], axis=-1)
    flat = (np.arange(m, dtype=np.int64)[:, None, None] * k + table)[first]
    weights = np.broadcast_to(counts[:, :, None], table.shape)[first]
    out = np.zeros(m * k, dtype=np.int64)
    np.add.at(out, flat, weights)
    return out.reshape(m, k)


def sample_rappor_counts(
    params: RapporParams,
    *,
    campaign_id: str,
    labels: Sequence[str],
    true_counts: NDArray[np.int64] | Sequence[int],
    rng: np.random.Generator,
    position_table: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """One RAPPOR report per user, as sufficient statistics: (ones (m, k), cohort_reports (m,)).

    Users of each label split over uniform cohorts (:func:`split_by_cohort`), their Bloom bits are
    counted (:func:`rappor_set_counts`) and the PRR+IRR noise is drawn per bit
    (:func:`sample_bit_counts`). For simulation only.
    """
    g = _check_rng(rng)
    by_cohort = split_by_cohort(true_counts, params.m, g)
    if by_cohort.shape[1] != len(labels):
        raise InvalidParameterError("true_counts", by_cohort.shape[1], f"{len(labels)} counts, one per label")
    s = rappor_set_counts(
        params,
        campaign_id=campaign_id,
        labels=labels,
        counts_by_cohort=by_cohort,
        position_table=position_table,
    )
    n = by_cohort.sum(axis=1)
    return sample_rappor_bits(params, s, n, g), n


def basic_rappor_set_counts(
    true_counts: NDArray[np.int64] | Sequence[int],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Basic (one-hot) RAPPOR: (S, N) with S = true counts as one cohort, shape (1, d), and N = (n,)."""
    c = _as_counts("true_counts", true_counts, ndim=1)
    return c[None, :].copy(), np.array([int(c.sum())], dtype=np.int64)


def boolean_rappor_set_counts(
    true_counts: NDArray[np.int64] | Sequence[int],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Boolean RAPPOR from ``true_counts = (false, true)``: (S, N) = ([[true]], [false + true])."""
    c = _as_counts("true_counts", true_counts, ndim=1, shape=(2,))
    return np.array([[int(c[1])]], dtype=np.int64), np.array([int(c.sum())], dtype=np.int64)
