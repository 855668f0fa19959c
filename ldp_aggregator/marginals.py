"""Marginals of several categorical attributes from frequency-oracle groups (issue 18; ``calm``).

Input: a :class:`ldp_client.layouts.MarginalTables` (a spec's ``marginal_tables``): m chosen marginals,
A_i a set of attributes with c_i cells; n_i of the N = n reports belong to group i (their users a uniformly
random subset, independent of the records) and C_{i,v} of them support cell v, with the group's rates
p_i*, q_i* (GRR over the cells, or local hashing).

1. Per-marginal estimates (Wang, Blocki, Li, Jha, USENIX Security 2017, §4): the share of group-i users in
   cell v, x_{i,v} = (C_{i,v}/n_i - q*) / (p* - q*), unbiased for the population's share f_{A_i}(v).
2. Consistency (Zhang, Wang, Li, He, Chen, CCS 2018, §4.3, after Qardaji, Yang, Li, "PriView", SIGMOD
   2014, §4.2): for every attribute set C in the closure of the chosen sets under intersection, smallest
   first (the empty set first), the marginals containing C are given one C-marginal: the empty set's is the
   known total 1; any other's is the inverse-variance weighted average T_C = sum_i w_i P_C x_i of their
   projections (P_C sums a marginal over the attributes outside C), w_i proportional to
   1 / ((c_i/c_C) s_i^2) with s_i^2 = q*(1-q*)/(n_i (p*-q*)^2) the cell variance of group i at f = 0 (a
   projected cell sums c_i/c_C cells). Each marginal then moves to it, spreading the difference evenly:
   x_i += E (T_C - P_C x_i) / (c_i/c_C), E repeating a C-cell over the cells it sums. Processing the sets in
   increasing size keeps every earlier set consistent (PriView's argument: the change a later set C' makes
   to a projection onto B is a projection of T_C' - P_C' x_i onto C' n B, consistent already), so at the
   end all chosen marginals agree on every shared set. The weights depend only on the design, so the
   result is an affine function of the x, the identity on consistent tables: unbiased.
3. A query over attributes Q covered by a chosen set A_i is the projection of consistent marginal i onto Q
   (the same from every chosen set containing Q: Q lies in their intersection, made consistent). As a
   linear function of the estimates, answer = sum_{j,v} w_{j,v} x_{j,v} + const, the weights computed
   exactly by the adjoint of the consistency steps (one column per queried cell, no matrix formed).
4. Its variance. Oracle part, given the groups: a local-hashing group's cells are uncorrelated, sum_v
   w_v^2 [q*(1-q*) + f_v (p*-q*)(1-p*-q*)] / (n_j (p*-q*)^2); a GRR group's report names one cell
   (multinomial), exactly [q W2 + (p-q) sum_v f_v w_v^2 - sum_v f_v (q W + (p-q) w_v)^2] / (n_j (p-q)^2)
   with W = sum_v w_v and W2 = sum_v w_v^2. Sampling part of the random disjoint groups (Cochran, "Sampling
   Techniques", 1977, §2.8, as :mod:`ldp_aggregator.ranges` step 4): with g_j(record) = w_{j, cell of the
   record in A_j} and sigma_jk their population covariances, N/(N-1) sum_j sigma_jj / n_j -
   Var_pop(sum_j g_j) / (N-1). sigma_jk for j != k needs the joint of A_j u A_k: exact when one contains the
   other, else taken with A_j and A_k independent given A_j n A_k (the maximum-entropy joint of the two
   consistent marginals); this term is O(1/N) against the O(m/N) of the rest. The unknown f are plugged
   in from the consistent marginals (clipped to [0, 1] and renormalised for the sampling part). Count
   scale: N times the share; standard error and a normal interval.
5. Non-negative version, beside (never instead of) the unbiased one (CALM §4.3): Norm-Sub of every
   marginal, then consistency, repeated until no cell is below -1e-9 (at most 100 rounds), then clipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.estimation import NoReportsError, normal_quantile
from ldp_aggregator.postprocess import norm_sub
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, InvalidReportError
from ldp_client.layouts import MarginalTables

__all__ = [
    "EmptyGroupError",
    "MarginalAnswer",
    "MarginalCellAnswer",
    "MarginalFit",
    "add_to_proto",
    "answer_marginal",
    "campaign_marginals",
    "fit_marginals",
    "marginal_answer_dict",
    "marginals_to_dict",
    "parse_marginal",
]

_COLUMN_BLOCK = 1 << 22
"""Adjoint columns are processed in blocks of at most this many floats (cells times columns)."""


class EmptyGroupError(NoReportsError):
    """A group has no report yet: its marginal, hence the consistent ones, cannot be estimated."""

    def __init__(self, group: int) -> None:
        InvalidReportError.__init__(
            self, "n_reports", 0, f"at least one report in every group (group {group} has none)"
        )


@dataclass(frozen=True)
class MarginalCellAnswer:
    """One cell of an answered marginal: its labels (query order), count, share, error, interval."""

    labels: tuple[str, ...]
    count: float
    frequency: float
    std_error: float
    ci_low: float
    ci_high: float
    non_negative_count: float = 0.0


@dataclass(frozen=True)
class MarginalAnswer:
    """An answered marginal: the query's attributes and its cells, row-major in query order."""

    attributes: tuple[str, ...]
    cells: tuple[MarginalCellAnswer, ...]
    non_negative: bool = False


@dataclass(frozen=True)
class _Step:
    """One consistency step: the set C, the marginals containing it and their weights (None: total 1)."""

    subset: tuple[int, ...]
    members: tuple[int, ...]
    weights: tuple[float, ...] | None


@dataclass(frozen=True)
class MarginalFit:
    """The fitted marginals: raw estimates x_i, consistent y_i (share scale, arrays shaped by the marginal's
    attributes), the consistency steps and what the variances need (module docstring)."""

    tables: MarginalTables
    x: tuple[NDArray[np.float64], ...]
    y: tuple[NDArray[np.float64], ...]
    steps: tuple[_Step, ...]

    @property
    def n(self) -> int:
        return int(self.tables.n)

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(len(self.tables.labels[a]) for a in self.tables.marginals[i])


def _project(table: NDArray[np.float64], attrs: Sequence[int], subset: Sequence[int]) -> NDArray[np.float64]:
    """P_C: the table (axes ``attrs``, then any trailing axes) summed over the attributes outside C."""
    axes = tuple(k for k, a in enumerate(attrs) if a not in subset)
    out: NDArray[np.float64] = table.sum(axis=axes) if axes else table
    return out


def _expand(small: NDArray[np.float64], attrs: Sequence[int], subset: Sequence[int]) -> NDArray[np.float64]:
    """E: a C-table repeated over the cells of a marginal with attributes ``attrs`` (broadcast view)."""
    shape = list(small.shape)
    idx = 0
    new_shape = []
    for a in attrs:
        if a in subset:
            new_shape.append(shape[idx])
            idx += 1
        else:
            new_shape.append(1)
    new_shape.extend(shape[idx:])
    return small.reshape(new_shape)


def _closure(marginals: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The chosen sets' closure under pairwise intersection, with the empty set, smallest first."""
    sets = {frozenset(m) for m in marginals}
    sets.add(frozenset())
    grew = True
    while grew:
        grew = False
        for a in list(sets):
            for b in list(sets):
                c = a & b
                if c not in sets:
                    sets.add(c)
                    grew = True
    return sorted((tuple(sorted(s)) for s in sets), key=lambda s: (len(s), s))


def _steps(tables: MarginalTables, base: Sequence[float]) -> tuple[_Step, ...]:
    """The consistency steps (step 2): each set of the closure contained in two or more chosen marginals
    (and the empty set, whose total is known), with the inverse-variance weights."""
    sizes = [len(lab) for lab in tables.labels]
    out = []
    for subset in _closure(tables.marginals):
        members = tuple(i for i, m in enumerate(tables.marginals) if set(subset) <= set(m))
        if not subset:
            out.append(_Step(subset, members, None))
            continue
        if len(members) < 2:
            continue
        c_sub = math.prod(sizes[a] for a in subset)
        inv = [c_sub / (math.prod(sizes[a] for a in tables.marginals[i]) * base[i]) for i in members]
        total = sum(inv)
        out.append(_Step(subset, members, tuple(v / total for v in inv)))
    return tuple(out)


def _consistent(
    x: Sequence[NDArray[np.float64]], marginals: Sequence[tuple[int, ...]], steps: Sequence[_Step]
) -> list[NDArray[np.float64]]:
    """The consistency steps applied to share tables (step 2)."""
    y = [np.array(t, dtype=np.float64, copy=True) for t in x]
    for st in steps:
        proj = {i: _project(y[i], marginals[i], st.subset) for i in st.members}
        if st.weights is None:
            target: Any = 1.0
        else:
            target = sum(w * proj[i] for w, i in zip(st.weights, st.members, strict=True))
        for i in st.members:
            k = y[i].size / np.size(proj[i])
            y[i] = y[i] + _expand(np.asarray(target - proj[i]), marginals[i], st.subset) / k
    return y


def _adjoint(fit: MarginalFit, ybar: list[NDArray[np.float64]]) -> list[NDArray[np.float64]]:
    """d(sum_i ybar_i . y_i)/d x_j for every marginal (trailing axis: one column per queried cell): the
    adjoint of the consistency steps, in reverse. For a step, x_j' = x_j + E (T - P_C x_j)/k_j with
    T = sum_i w_i P_C x_i, so xbar_j = ybar_j + E (w_j U - u_j), u_i = P_C ybar_i / k_i, U = sum_i u_i (no
    w_j U term for the known total)."""
    margs = fit.tables.marginals
    bar = [np.array(b, copy=True) for b in ybar]
    for st in reversed(fit.steps):
        u = {}
        for i in st.members:
            cells = math.prod(fit.shape(i))
            sub_cells = math.prod(len(fit.tables.labels[a]) for a in st.subset)
            u[i] = _project(bar[i], margs[i], st.subset) / (cells / sub_cells)
        total = sum(u.values()) if st.weights is not None else None
        for pos, j in enumerate(st.members):
            # The known total (weights None) has no w_j U term.
            delta = -u[j] if st.weights is None or total is None else st.weights[pos] * total - u[j]
            bar[j] = bar[j] + _expand(np.asarray(delta), margs[j], st.subset)
    return bar


def fit_marginals(tables: MarginalTables) -> MarginalFit:
    """Per-marginal estimates and the consistent marginals (steps 1 and 2 of the module docstring).

    Raises:
        EmptyGroupError: a group has no report yet.
    """
    xs, base = [], []
    for i, (counts, n_i) in enumerate(zip(tables.counts, tables.reports, strict=True)):
        if n_i <= 0:
            raise EmptyGroupError(i + 1)
        p, q = float(tables.p_star[i]), float(tables.q_star[i])
        shape = tuple(len(tables.labels[a]) for a in tables.marginals[i])
        c = np.asarray(counts, dtype=np.float64).reshape(shape)
        xs.append((c / n_i - q) / (p - q))
        base.append(q * (1 - q) / (n_i * (p - q) ** 2))
    steps = _steps(tables, base)
    y = _consistent(xs, tables.marginals, steps)
    return MarginalFit(tables=tables, x=tuple(xs), y=tuple(y), steps=steps)


def _oracle_variance(fit: MarginalFit, w: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Step 4's oracle part of every column (share scale)."""
    t = fit.tables
    out = np.zeros(w[0].shape[-1])
    for j, wj in enumerate(w):
        p, q, n_j = float(t.p_star[j]), float(t.q_star[j]), t.reports[j]
        d = p - q
        f = fit.y[j].reshape(-1)
        wf = wj.reshape(-1, wj.shape[-1])
        if t.grr[j]:
            big_w = wf.sum(axis=0)
            w2 = (wf * wf).sum(axis=0)
            mean = q * big_w[None, :] + d * wf
            v = q * w2 + d * (f @ (wf * wf)) - f @ (mean * mean)
            out += np.maximum(v, 0.0) / (n_j * d * d)
        else:
            cell = np.maximum((q * (1 - q) + f * d * (1 - p - q)) / (n_j * d * d), 0.0)
            out += cell @ (wf * wf)
    return out


def _population(fit: MarginalFit) -> list[NDArray[np.float64]]:
    """The consistent marginals clipped to [0, 1] and renormalised: the plug-in population shares."""
    out = []
    for y in fit.y:
        f = np.clip(y, 0.0, None)
        s = f.sum()
        out.append(f / s if s > 0 else np.full(f.shape, 1.0 / f.size))
    return out


def _sampling_variance(fit: MarginalFit, w: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Step 4's sampling part of every column (share scale)."""
    t = fit.tables
    n = fit.n
    q_cols = w[0].shape[-1]
    if n <= 1:
        return np.zeros(q_cols)
    f = _population(fit)
    margs = t.marginals
    mean = []
    centred = []
    within = np.zeros(q_cols)
    total = np.zeros(q_cols)
    for j, wj in enumerate(w):
        fj = f[j][..., None]
        mj = (fj * wj).reshape(-1, q_cols).sum(axis=0)
        cj = wj - mj.reshape((1,) * (wj.ndim - 1) + (q_cols,))
        sjj = (fj * cj * cj).reshape(-1, q_cols).sum(axis=0)
        mean.append(mj)
        centred.append(cj)
        within += sjj / t.reports[j]
        total += sjj
    for j in range(len(w)):
        for k in range(j + 1, len(w)):
            common = tuple(sorted(set(margs[j]) & set(margs[k])))
            if not common:
                continue  # independent given nothing: E[g_j g_k] = E g_j E g_k under the plug-in joint
            aj = _project(f[j][..., None] * centred[j], margs[j], common)
            ak = _project(f[k][..., None] * centred[k], margs[k], common)
            pc = _project(f[j], margs[j], common)[..., None]
            with np.errstate(divide="ignore", invalid="ignore"):
                term = np.where(pc > 0, aj * ak / pc, 0.0)
            total += 2.0 * term.reshape(-1, q_cols).sum(axis=0)
    return np.maximum(n / (n - 1) * within - total / (n - 1), 0.0)


def _non_negative(fit: MarginalFit, rounds: int = 100) -> list[NDArray[np.float64]]:
    """Step 5: Norm-Sub and consistency, repeated; then clipped."""
    y = [np.array(t, copy=True) for t in fit.y]
    for _ in range(rounds):
        if min(float(t.min()) for t in y) >= -1e-9:
            break
        y = [norm_sub(t.reshape(-1), 1.0).reshape(t.shape) for t in y]
        y = _consistent(y, fit.tables.marginals, fit.steps)
    return [np.clip(t, 0.0, None) for t in y]


def parse_marginal(text: str | Sequence[str], attributes: Sequence[str]) -> tuple[int, ...]:
    """A query's attributes (``a,b`` or a list of names) as indices, checked.

    Raises:
        InvalidParameterError: an unknown or repeated attribute (named, with the campaign's attributes).
    """
    names = [s.strip() for s in text.split(",")] if isinstance(text, str) else [str(s) for s in text]
    where = {a: i for i, a in enumerate(attributes)}
    out = []
    for name in names:
        if name not in where:
            raise InvalidParameterError("marginal", name[:80], f"attributes among {', '.join(attributes)}")
        if where[name] in out:
            raise InvalidParameterError("marginal", name[:80], "each attribute once")
        out.append(where[name])
    if not out:
        raise InvalidParameterError("marginal", "", f"one or more attributes among {', '.join(attributes)}")
    return tuple(out)


def _covering(tables: MarginalTables, query: Sequence[int]) -> int:
    for i, m in enumerate(tables.marginals):
        if set(query) <= set(m):
            return i
    chosen = "; ".join("+".join(tables.attributes[a] for a in m) for m in tables.marginals)
    asked = ",".join(tables.attributes[a] for a in query)
    raise InvalidParameterError("marginal", asked, f"attributes covered by one chosen marginal ({chosen})")


def answer_marginal(
    fit: MarginalFit, query: Sequence[int], confidence: float = 0.95, *, non_negative: bool = False
) -> MarginalAnswer:
    """The marginal over the attributes ``query`` (indices, in the order the cells are listed): steps 3-5.

    Raises:
        InvalidParameterError: no chosen marginal covers the query (the chosen ones named).
    """
    t = fit.tables
    i = _covering(t, query)
    attrs = t.marginals[i]
    z = normal_quantile(confidence)
    sorted_q = tuple(sorted(query))
    share = _project(fit.y[i], attrs, sorted_q)
    order = [sorted_q.index(a) for a in query]
    share_q = np.transpose(share, order).reshape(-1) if share.ndim else share.reshape(-1)
    nonneg = None
    if non_negative:
        nn = _project(_non_negative(fit)[i], attrs, sorted_q)
        nonneg = np.transpose(nn, order).reshape(-1)
    qshape = tuple(len(t.labels[a]) for a in query)
    q_cells = int(np.prod(qshape))
    variance = np.empty(q_cells)
    total_cells = sum(int(np.prod(fit.shape(j))) for j in range(len(t.marginals)))
    block = max(1, _COLUMN_BLOCK // max(total_cells, 1))
    # r over marginal i's cells for each queried cell (query order): the indicator of the cells it sums.
    sub_shape = tuple(len(t.labels[a]) for a in attrs)
    grids = np.indices(sub_shape).reshape(len(attrs), -1)
    qcell = np.zeros(grids.shape[1], dtype=np.int64)
    for a in query:
        qcell = qcell * len(t.labels[a]) + grids[attrs.index(a)]
    for start in range(0, q_cells, block):
        cols = np.arange(start, min(start + block, q_cells))
        r = (qcell[:, None] == cols[None, :]).astype(np.float64).reshape((*sub_shape, cols.size))
        ybar = [np.zeros((*fit.shape(j), cols.size)) for j in range(len(t.marginals))]
        ybar[i] = r
        w = _adjoint(fit, ybar)
        variance[start : start + cols.size] = _oracle_variance(fit, w) + _sampling_variance(fit, w)
    n = fit.n
    cells = []
    for c in range(q_cells):
        idx = np.unravel_index(c, qshape) if qshape else ()
        labels = tuple(t.labels[a][int(k)] for a, k in zip(query, idx, strict=True))
        count = float(share_q[c]) * n
        se = math.sqrt(float(variance[c])) * n
        cells.append(
            MarginalCellAnswer(
                labels=labels,
                count=count,
                frequency=float(share_q[c]),
                std_error=se,
                ci_low=count - z * se,
                ci_high=count + z * se,
                non_negative_count=0.0 if nonneg is None else float(nonneg[c]) * n,
            )
        )
    return MarginalAnswer(
        attributes=tuple(t.attributes[a] for a in query), cells=tuple(cells), non_negative=non_negative
    )


def campaign_marginals(
    params: Any,
    acc: Any,
    queries: Sequence[Sequence[str] | str],
    confidence: float = 0.95,
    *,
    non_negative: Sequence[bool] = (),
) -> tuple[MarginalAnswer, ...]:
    """A campaign's answers to marginal queries, through its spec's ``marginal_tables``.

    Raises:
        InvalidParameterError: the mechanism answers no marginals, or a query is bad (an unknown attribute,
            one not covered by a chosen marginal; checked before the data, so the same answer with or
            without reports).
        EmptyGroupError: a group has no report yet.
    """
    spec = registry.spec_for(params)
    tables = spec.marginal_tables(params, acc)
    if tables is None:
        raise InvalidParameterError("marginals", params.name, "a campaign of a marginal mechanism (calm)")
    parsed = [parse_marginal(q, tables.attributes) for q in queries]
    for q in parsed:
        _covering(tables, q)
    normal_quantile(confidence)
    flags = list(non_negative) + [False] * (len(parsed) - len(non_negative))
    fit = fit_marginals(tables)
    return tuple(
        answer_marginal(fit, q, confidence, non_negative=nn) for q, nn in zip(parsed, flags, strict=True)
    )


_CELL_FIELDS = ("count", "frequency", "std_error", "ci_low", "ci_high")


def marginal_answer_dict(a: Any) -> dict[str, Any]:
    """The JSON form of one marginal (a :class:`MarginalAnswer` or a ``MarginalTableEstimate``)."""
    cells = []
    for c in a.cells:
        cell = {"labels": list(c.labels), **{name: getattr(c, name) for name in _CELL_FIELDS}}
        if a.non_negative:
            cell["non_negative_count"] = c.non_negative_count
        cells.append(cell)
    return {"attributes": list(a.attributes), "non_negative": bool(a.non_negative), "cells": cells}


def add_to_proto(msg: Any, answers: Sequence[MarginalAnswer]) -> None:
    """Fill ``EstimateResponse.marginals`` (issue 18)."""
    for a in answers:
        out = msg.marginals.add(attributes=list(a.attributes), non_negative=a.non_negative)
        for c in a.cells:
            out.cells.add(
                labels=list(c.labels),
                count=c.count,
                frequency=c.frequency,
                std_error=c.std_error,
                ci_low=c.ci_low,
                ci_high=c.ci_high,
                non_negative_count=c.non_negative_count,
            )


def marginals_to_dict(msg: Any) -> dict[str, Any]:
    """The JSON form of an EstimateResponse's marginals (empty when it has none)."""
    return {"marginals": [marginal_answer_dict(m) for m in msg.marginals]} if msg.marginals else {}
