"""The numerical core of RAPPOR decoding: non-negative least squares in Gram form and the LASSO on top.

* :func:`nnls_gram`: argmin 1/2 x'Gx - c'x over x >= 0 by block principal pivoting, with Lawson-Hanson as
  the exact fallback;
* :func:`nnls_gram_sum`: the same with sum(x) <= total (or == total), through the sum's multiplier;
* :func:`nn_lasso`: the non-negative LASSO over a sparse design with many columns, on a working set that
  grows until the KKT conditions hold for every column;
* :func:`solve_spd` and :func:`gram`: the linear algebra they share.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["gram", "nn_lasso", "nnls_gram", "nnls_gram_sum", "solve_spd"]

# Candidates whose Gram matrix the working set may hold (dense, |W|^2 doubles: 4000 -> 128 MB).
_MAX_WORKING_SET = 4000
# Violators added to the working set per KKT round.
_ADD_PER_ROUND = 500
# Relative tolerance of the KKT checks (z units) and of the active-set solver.
_KKT_TOL = 1e-7
_MAX_KKT_ROUNDS = 100
# Exchanges of block principal pivoting before it hands over to Lawson-Hanson.
_BPP_MAX_ITERATIONS = 60
# Bisection steps for the multiplier of sum(pi) <= 1 (relative precision 2^-60).
_SUM_BISECTION_STEPS = 60


def solve_spd(G: NDArray[np.float64], c: NDArray[np.float64]) -> NDArray[np.float64]:
    """G z = c for a symmetric positive semidefinite G, by Cholesky with a ridge of 1e-12 of the mean
    diagonal (a singular G, e.g. dependent candidate columns, then gets the ridge solution); least squares
    if even that fails."""
    from scipy import linalg

    n = c.size
    if n == 0:
        return np.zeros(0)
    ridge = 1e-12 * max(float(np.trace(G)) / n, 1e-300)
    try:
        factor = linalg.cho_factor(G + ridge * np.eye(n), check_finite=False)
        return np.asarray(linalg.cho_solve(factor, c, check_finite=False))
    except linalg.LinAlgError:
        return np.asarray(linalg.lstsq(G, c, check_finite=False)[0])


def nnls_gram(
    G: NDArray[np.float64],
    c: NDArray[np.float64],
    x0: NDArray[np.float64] | None = None,
    max_free: int | None = None,
) -> NDArray[np.float64]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0 (G symmetric positive semidefinite).

    Block principal pivoting (Portugal, Judice, Vicente 1994; Kim and Park, SIAM J. Sci. Comput. 2011):
    solve on a guessed free set F, then move every coordinate violating the KKT conditions (x_F < 0, or a
    negative gradient Gx - c outside F) across at once, with Murty's single-pivot rule as a backup after
    three exchanges that do not reduce the number of violations, which guarantees termination. A handful of
    linear solves instead of one per active coordinate; a warm start ``x0`` seeds F. Should it not finish
    in its iteration budget, or F grow beyond ``max_free`` (the rank bound: G = A'A with that many rows),
    the Lawson-Hanson method (:func:`_nnls_lawson_hanson`) completes the solve.
    """
    n = c.size
    if n == 0:
        return np.zeros(0)
    scale = float(np.max(np.abs(c))) + float(np.max(np.abs(np.diag(G)))) + 1e-300
    tol = 1e-11 * scale
    free = np.zeros(n, dtype=bool) if x0 is None else np.asarray(x0) > 0
    best, backup = n + 1, 3
    x = np.zeros(n)
    # Well-posed problems finish in a few dozen exchanges; a degenerate one (more candidate columns than
    # independent rows) can make the exchanges wander, and Lawson-Hanson handles that case exactly.
    for _ in range(min(10 * n + 50, _BPP_MAX_ITERATIONS)):
        x = np.zeros(n)
        idx = np.flatnonzero(free)
        if max_free is not None and idx.size > max_free:
            break
        if idx.size:
            x[idx] = solve_spd(G[np.ix_(idx, idx)], c[idx])
        grad = G @ x - c
        bad_x = free & (x < 0)
        bad_y = ~free & (grad < -tol)
        bad = bad_x | bad_y
        nbad = int(np.count_nonzero(bad))
        if nbad == 0:
            return np.maximum(x, 0.0)
        if nbad < best:
            best, backup = nbad, 3
            free ^= bad
        elif backup > 0:
            backup -= 1
            free ^= bad
        else:
            j = int(np.flatnonzero(bad)[-1])
            free[j] = not free[j]
    return _nnls_lawson_hanson(G, c, np.maximum(x, 0.0))


def _nnls_lawson_hanson(
    G: NDArray[np.float64], c: NDArray[np.float64], x0: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0: the Lawson-Hanson active-set method on the normal
    equations (Bro and De Jong, J. Chemometrics 1997, "FNNLS"), one coordinate at a time. Finite, exact,
    slower; the fallback of :func:`nnls_gram`."""
    n = c.size
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    if n == 0:
        return x
    scale = float(np.max(np.abs(c))) + float(np.max(np.abs(np.diag(G)))) + 1e-300
    tol = 1e-11 * scale
    if x0 is not None and np.any(x0 > 0):
        x = np.maximum(x0, 0.0)
        passive = x > 0
        x = _inner(G, c, x, passive)
        passive = x > 0
    blocked = np.zeros(n, dtype=bool)
    for _ in range(3 * n + 50):
        w = c - G @ x
        w[passive | blocked] = -np.inf
        j = int(np.argmax(w))
        if not w[j] > tol:
            break
        trial = passive.copy()
        trial[j] = True
        x_new = _inner(G, c, x, trial)
        if x_new[j] <= 0:
            # In exact arithmetic the freed coordinate moves up; when it cannot (a numerically singular
            # G), set it aside until the solution changes, so the method never cycles.
            blocked[j] = True
            continue
        x = x_new
        passive = x > 0
        blocked[:] = False
    return x


def _inner(
    G: NDArray[np.float64], c: NDArray[np.float64], x: NDArray[np.float64], passive: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """Lawson-Hanson inner loop: from feasible x, solve on the passive set, stepping back on violations."""
    x = x.copy()
    passive = passive.copy()
    for _ in range(passive.size + 1):
        idx = np.flatnonzero(passive)
        if idx.size == 0:
            return np.zeros_like(x)
        z = solve_spd(G[np.ix_(idx, idx)], c[idx])
        if np.all(z > 0):
            out = np.zeros_like(x)
            out[idx] = z
            return out
        xi = x[idx]
        neg = z <= 0
        # Largest step from x toward z that keeps every passive coordinate >= 0.
        denom = xi - z
        t = np.full(z.size, np.inf)
        t[neg] = np.where(denom[neg] > 0, xi[neg] / np.where(denom[neg] > 0, denom[neg], 1.0), 0.0)
        step = float(np.min(t))
        x[idx] = xi + step * (z - xi)
        # The coordinates that reached the boundary leave the passive set.
        leave = (neg & (t <= step)) | (x[idx] <= 0)
        passive[idx[leave]] = False
        x[~passive] = 0.0
    return np.maximum(x, 0.0)


def nnls_gram_sum(
    G: NDArray[np.float64],
    c: NDArray[np.float64],
    total: float,
    *,
    equality: bool = False,
    max_free: int | None = None,
) -> tuple[NDArray[np.float64], float]:
    """argmin 1/2 x'Gx - c'x subject to x >= 0 and sum(x) <= total (or == total); returns (x, mu).

    With the multiplier mu of the sum constraint the solution is x(mu) = NNLS with linear term c - mu 1;
    sum(x(mu)) is continuous, non-increasing and piecewise linear in mu (linear while the active set is
    fixed: x_P = G_PP^-1 (c_P - mu 1)). Newton steps on it (exact within a piece) find sum = total in a
    few NNLS solves; bisection takes over if a step fails to make progress. For the inequality mu >= 0,
    and mu = 0 when the unconstrained sum is already within the total.
    """
    x = nnls_gram(G, c, max_free=max_free)
    if not equality and x.sum() <= total * (1.0 + 1e-12):
        return x, 0.0
    mu = 0.0
    lo, hi = -math.inf, math.inf  # bracket: sum(x(lo)) > total >= sum(x(hi))
    scale = max(float(np.max(np.abs(c))), 1e-300)
    for _ in range(_SUM_BISECTION_STEPS):
        excess = float(x.sum()) - total
        if abs(excess) <= 1e-12 * total:
            break
        if excess > 0:
            lo = max(lo, mu)
        else:
            hi = min(hi, mu)
        idx = np.flatnonzero(x > 0)
        slope = float(solve_spd(G[np.ix_(idx, idx)], np.ones(idx.size)).sum()) if idx.size else 0.0
        step = mu + excess / slope if slope > 0 else math.nan
        if not (math.isfinite(step) and lo < step < hi):
            if math.isfinite(lo) and math.isfinite(hi):
                step = 0.5 * (lo + hi)
            elif math.isfinite(lo):
                step = lo + max(abs(lo), scale)
            else:
                step = hi - max(abs(hi), scale)
        mu = step
        x = nnls_gram(G, c - mu, x, max_free)
    if x.sum() > total or (equality and x.sum() > 0):  # numerical residue: scale onto the constraint
        x = x * (total / float(x.sum()))
    return x, mu


def gram(A: Any, cols: NDArray[np.intp]) -> NDArray[np.float64]:
    sub = A[:, cols]
    return np.asarray((sub.T @ sub).toarray())


def nn_lasso(
    A: Any, y: NDArray[np.float64], penalty: NDArray[np.float64], norms: NDArray[np.float64]
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """argmin 1/2 ||y - A x||^2 + penalty'x over x >= 0, for a sparse ``A`` with many columns.

    Columns with penalty 0 are always in the working set. The others enter when they violate the KKT
    condition A_v'(y - A x) <= penalty_v, the worst (in z units, divided by ``norms``) first, with at most
    _MAX_WORKING_SET candidates in the dense Gram matrix at a time; the subproblem on the working set is
    solved exactly (:func:`nnls_gram`). Ends when no column of A violates its condition.

    Returns:
        (indices of the working set, sorted; coefficients on it).
    """
    M = A.shape[1]
    tol = _KKT_TOL * norms * (1.0 + penalty / np.maximum(norms, 1e-300))
    always = np.flatnonzero(penalty <= 0)
    score = np.asarray(A.T @ y)
    viol = np.flatnonzero(score - penalty > tol)
    viol = viol[penalty[viol] > 0]
    order = viol[np.argsort(-(score[viol] - penalty[viol]) / norms[viol], kind="stable")]
    work = np.union1d(always, order[: _MAX_WORKING_SET // 2]).astype(np.intp)
    x = np.zeros(work.size)
    if work.size == 0:
        return work, x
    for _ in range(_MAX_KKT_ROUNDS):
        G = gram(A, work)
        c = np.asarray(A[:, work].T @ y) - penalty[work]
        x = nnls_gram(G, c, x, A.shape[0])
        resid = y - A[:, work] @ x
        score = np.asarray(A.T @ resid)
        in_work = np.zeros(M, dtype=bool)
        in_work[work] = True
        viol = np.flatnonzero((score - penalty > tol) & ~in_work)
        if viol.size == 0:
            break
        # Keep the working set bounded: drop penalised coordinates at 0, add the worst violators.
        keep = (x > 0) | (penalty[work] <= 0)
        room = max(_ADD_PER_ROUND, _MAX_WORKING_SET - int(keep.sum()))
        rank = np.argsort(-(score[viol] - penalty[viol]) / norms[viol], kind="stable")
        add = viol[rank[: min(room, _ADD_PER_ROUND)]]
        new_work = np.concatenate([work[keep], add])
        order_idx = np.argsort(new_work, kind="stable")
        x = np.concatenate([x[keep], np.zeros(add.size)])[order_idx]
        work = new_work[order_idx]
    return work, x
