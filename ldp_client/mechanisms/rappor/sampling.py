"""Exact sampling of RAPPOR's sufficient statistics for simulation (the sum runner; imports numpy).

The estimators only ever see, per cohort, the number of reports and the number of ones in each bit. Given
the true counts, each of those sums is a sum of independent per-user contributions, so it can be drawn
directly with a handful of binomials and multinomials. The draws are exact in distribution: the sampled
statistics have the same joint law as the sums of the reports the per-report encoders would produce (up to
the float64 representation of the probabilities), at a cost independent of the number of users.
Probabilities come from the quantized thresholds of the parameters (``T / 2**32``, exact in float64).

Used by the RAPPOR specs' ``sum_sampler`` (:mod:`ldp_client.mechanisms.rappor.spec`), which import this
module only when called, so the device path never loads numpy; ``simulations.sampling`` re-exports it.
For simulation only: every function takes an explicit, seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from ldp_client._exact_sampling import as_counts as _as_counts
from ldp_client._exact_sampling import check_rng as _check_rng
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.rappor.encoding import bloom_positions
from ldp_client.mechanisms.rappor.params import RapporNoiseParams, RapporParams

__all__ = [
    "basic_rappor_set_counts",
    "bloom_position_table",
    "boolean_rappor_set_counts",
    "rappor_set_counts",
    "sample_bit_counts",
    "sample_rappor_bits",
    "sample_rappor_counts",
    "split_by_cohort",
]


def _check_probability(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.floating):
        raise InvalidParameterError(name, x, "a probability in [0, 1]")
    v = float(x)
    if not 0.0 <= v <= 1.0:
        raise InvalidParameterError(name, x, "a probability in [0, 1]")
    return v


def sample_bit_counts(
    prob_one_if_set: float,
    prob_one_if_clear: float,
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
        prob_one_if_set: q* = P(reported bit = 1 | Bloom bit = 1).
        prob_one_if_clear: p* = P(reported bit = 1 | Bloom bit = 0).
        set_counts: S, shape (m, k): users of cohort j whose Bloom bit i is set.
        cohort_reports: N, shape (m,): reports in cohort j; S[j, i] <= N[j].
        rng: the seeded generator.
    """
    g = _check_rng(rng)
    q = _check_probability("prob_one_if_set", prob_one_if_set)
    p = _check_probability("prob_one_if_clear", prob_one_if_clear)
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
    """:func:`sample_bit_counts` with the bit rates of ``params`` (from the effective f, p, q)."""
    return sample_bit_counts(
        params.prob_one_if_set, params.prob_one_if_clear, set_counts, cohort_reports, rng
    )


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
    """The client's Bloom hashing (a seam for tests that count which labels are hashed)."""
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
