"""Shared parts of the mechanisms' exact sum samplers (simulation only; imports numpy).

A spec's :meth:`~ldp_client.spec.MechanismSpec.sum_sampler` draws the sums of one report per simulated user
directly (a handful of binomials and multinomials, at a cost independent of the number of users); the
helpers every such sampler needs live here. The mechanism modules import this module only inside their
sampler functions, so the device path never loads numpy. ``simulations.sampling`` re-exports them.

For simulation only: every function takes an explicit, seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ldp_client.errors import InvalidParameterError

__all__ = ["as_counts", "check_rng", "spread_uniform_others"]


def check_rng(rng: object) -> np.random.Generator:
    """``rng`` if it is a numpy Generator (seeded by the caller), else InvalidParameterError."""
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError("rng", rng, "a numpy.random.Generator (seeded; simulation only)")
    return rng


def as_counts(
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
    g = check_rng(rng)
    m = as_counts("others_counts", others_counts, ndim=1)
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
