"""Exact sampling of the sufficient statistics of the issue-6 frequency oracles (the "sum" runner).

For simulation only: every function takes an explicit, seeded ``numpy.random.Generator``. As in
:mod:`simulations.sampling`, the sampled statistics have exactly the joint law of the sums the per-report
encoders would produce for the given true counts (up to the float64 representation of the probabilities,
which are exact multiples of 2**-32), at a cost independent of the number of users.

* **Unary encoding** (oue, sue): the bits of a report are independent, so the support count of item v is
  C_v = Bin(c_v, p) + Bin(n - c_v, q), independently across items.
* **Hadamard response** (hr): a user holding x lands in C_x w.p. p, then uniformly on it. So the counts of
  reported indices are N = sum_x [Mult(A_x, uniform on C_x) + Mult(c_x - A_x, uniform off C_x)] with
  A_x ~ Bin(c_x, p): O(d K) work, used while d K <= 2**26.
* **Local hashing, subset selection and set-valued** have no cheap exact sampler (the support counts of
  different items are dependent through each report's seed or subset): the runners fall back to the
  per-report runner for them (:func:`has_sum_sampler`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ldp_client._exact_sampling import check_rng as _check_rng
from ldp_client.errors import InvalidParameterError
from ldp_client.params import HadamardParams, MechanismParams, OUEParams, SUEParams

__all__ = ["MAX_HR_CELLS", "has_sum_sampler", "sample_hr_counts", "sample_ue_support"]

MAX_HR_CELLS = 1 << 26
"""Largest d * K for which Hadamard response is sampled exactly in the sum runner."""


def has_sum_sampler(params: MechanismParams) -> bool:
    """Whether the sum runner samples this issue-6 oracle's statistics exactly (else it runs per report)."""
    if isinstance(params, OUEParams | SUEParams):
        return True
    if isinstance(params, HadamardParams):
        return params.domain.size * params.order <= MAX_HR_CELLS
    return False


def _true_counts(params: OUEParams | SUEParams | HadamardParams, true_counts: object) -> NDArray[np.int64]:
    c = np.asarray(true_counts)
    d = params.domain.size
    if c.ndim != 1 or c.shape[0] != d or c.dtype.kind not in "iu":
        raise InvalidParameterError(
            "true_counts", f"<array shape={c.shape} dtype={c.dtype}>", f"{d} integer counts"
        )
    out = c.astype(np.int64)
    if out.size and int(out.min()) < 0:
        raise InvalidParameterError("true_counts", int(out.min()), "non-negative counts")
    return out


def sample_ue_support(
    params: OUEParams | SUEParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> tuple[int, NDArray[np.int64]]:
    """(n, C): support counts of unary encoding for ``true_counts[v]`` users holding v. For simulation only.

    C_v = Bin(c_v, P/2**32) + Bin(n - c_v, Q/2**32), independent across v (module docstring).
    """
    g = _check_rng(rng)
    c = _true_counts(params, true_counts)
    n = int(c.sum())
    support = g.binomial(c, params.p_star) + g.binomial(n - c, params.q_star)
    return n, support.astype(np.int64)


def sample_hr_counts(
    params: HadamardParams, true_counts: NDArray[np.int64] | Sequence[int], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Counts of each reported index j in [0, K) of Hadamard response. For simulation only.

    Raises:
        InvalidParameterError: d K > :data:`MAX_HR_CELLS` (use the report runner).
    """
    g = _check_rng(rng)
    c = _true_counts(params, true_counts)
    d, k = params.domain.size, params.order
    if d * k > MAX_HR_CELLS:
        raise InvalidParameterError("domain", d, f"d * K <= {MAX_HR_CELLS} for the exact hr sum sampler")
    inside = g.binomial(c, params.p_star)
    cols = np.arange(k, dtype=np.int64)
    out = np.zeros(k, dtype=np.int64)
    half = np.full(k // 2, 2.0 / k)
    for x in np.flatnonzero(c).tolist():
        even = (np.bitwise_count((x + 1) & cols) & 1) == 0
        members, others = cols[even], cols[~even]
        out[members] += g.multinomial(int(inside[x]), half)
        out[others] += g.multinomial(int(c[x] - inside[x]), half)
    return out
