"""CALM marginals (issue 18): estimation, consistency, exact adjoint weights, calibrated standard errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from ldp_aggregator.marginals import (
    EmptyGroupError,
    _adjoint,
    _consistent,
    _oracle_variance,
    answer_marginal,
    fit_marginals,
    parse_marginal,
)
from ldp_client.domain import Domain
from ldp_client.errors import InvalidParameterError
from ldp_client.layouts import MarginalTables
from ldp_client.mechanisms.calm import SPEC, CalmParams

ATTRS = (("a", Domain.of(3)), ("b", Domain.of(("x", "y", "z", "w"))), ("c", Domain.of(2)))
PAIRS = ((0, 1), (0, 2), (1, 2))


def _population(params: CalmParams, seed: int = 1) -> np.ndarray:
    """A joint with dependence: Dirichlet(0.7) cells, those with c = 0 and an even a three times as likely."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(params.joint_size, 0.7)).reshape(params.sizes)
    p[..., 0] *= 1 + 2 * (np.arange(params.sizes[0]) % 2 == 0)[:, None]
    p /= p.sum()
    return p.reshape(-1)


def _expected_tables(params: CalmParams, joint: np.ndarray, n_per_group: int) -> MarginalTables:
    """Support counts at their expectations (n_per_group reports in every group, shares ``joint``)."""
    counts = []
    for i, m in enumerate(params.marginals):
        other = tuple(k for k in range(len(params.sizes)) if k not in m)
        f = joint.reshape(params.sizes).sum(axis=other).reshape(-1)
        p, q = params.group_rates(i)
        counts.append(n_per_group * (q + (p - q) * f))
    support = np.concatenate([*counts, np.full(len(params.marginals), n_per_group)])
    acc = SimpleNamespace(n=n_per_group * len(params.marginals), support=support)
    return SPEC.marginal_tables(params, acc)


@pytest.mark.parametrize("grr", [(False, False, False), (True, False, True)])
def test_exact_at_expected_counts_and_consistent(grr: tuple[bool, ...]) -> None:
    params = CalmParams(attributes=ATTRS, marginals=PAIRS, g=4, truth_probability=0.6, grr=grr)
    joint = _population(params)
    fit = fit_marginals(_expected_tables(params, joint, 1000))
    for i, m in enumerate(params.marginals):
        other = tuple(k for k in range(3) if k not in m)
        np.testing.assert_allclose(fit.y[i], joint.reshape(params.sizes).sum(axis=other), atol=1e-12)
    # Any covered query: the full joint's projection.
    ans = answer_marginal(fit, (1, 0))
    truth = joint.reshape(params.sizes).sum(axis=2).T.reshape(-1)
    np.testing.assert_allclose([c.frequency for c in ans.cells], truth, atol=1e-12)
    assert ans.cells[1].labels == ("x", "1")


def test_consistency_makes_shared_attributes_agree_and_keeps_consistent_tables() -> None:
    rng = np.random.default_rng(3)
    params = CalmParams(attributes=ATTRS, marginals=(*PAIRS, (0, 1, 2)), g=4, truth_probability=0.6)
    tables = _expected_tables(params, _population(params), 500)
    fit = fit_marginals(tables)
    noisy = [x + rng.normal(0, 0.05, x.shape) for x in fit.x]
    y = _consistent(noisy, params.marginals, fit.steps)
    assert sum(float(t.sum()) for t in y) == pytest.approx(len(y))  # every total is 1
    np.testing.assert_allclose(y[0].sum(axis=1), y[1].sum(axis=1), atol=1e-12)  # a from (a,b) and (a,c)
    np.testing.assert_allclose(y[0].sum(axis=0), y[2].sum(axis=1), atol=1e-12)  # b
    np.testing.assert_allclose(y[3].sum(axis=2), y[0], atol=1e-12)  # (a,b) from the full joint
    # Already consistent tables are left as they are (the operator is the identity on them).
    again = _consistent(y, params.marginals, fit.steps)
    for u, v in zip(y, again, strict=True):
        np.testing.assert_allclose(u, v, atol=1e-12)


def test_adjoint_weights_are_the_exact_derivative() -> None:
    """<r, L x> = <L^T r, x> for the linear part of consistency: the variance's weights are exact."""
    rng = np.random.default_rng(4)
    params = CalmParams(
        attributes=ATTRS, marginals=PAIRS, g=4, truth_probability=0.6, grr=(True, False, False)
    )
    fit = fit_marginals(_expected_tables(params, _population(params), 700))
    x = [rng.normal(size=t.shape) for t in fit.x]
    zero = [np.zeros(t.shape) for t in fit.x]
    lin = [
        a - b
        for a, b in zip(
            _consistent(x, params.marginals, fit.steps),
            _consistent(zero, params.marginals, fit.steps),
            strict=True,
        )
    ]
    r = [rng.normal(size=t.shape) for t in fit.x]
    w = _adjoint(fit, [t[..., None] for t in r])
    lhs = sum(float((a * b).sum()) for a, b in zip(r, lin, strict=True))
    rhs = sum(float((a[..., 0] * b).sum()) for a, b in zip(w, x, strict=True))
    assert lhs == pytest.approx(rhs, rel=1e-10)


def test_bad_queries_and_empty_groups_are_named() -> None:
    params = CalmParams(attributes=ATTRS, marginals=PAIRS, g=4, truth_probability=0.6)
    tables = _expected_tables(params, _population(params), 100)
    with pytest.raises(InvalidParameterError, match="marginal='d'"):
        parse_marginal("a,d", tables.attributes)
    fit = fit_marginals(tables)
    with pytest.raises(InvalidParameterError, match="covered by one chosen marginal"):
        answer_marginal(fit, (0, 1, 2))
    with pytest.raises(EmptyGroupError, match="group 2 has none"):
        fit_marginals(MarginalTables(**{**tables.__dict__, "reports": (5, 0, 5)}))


def _calibration(
    params: CalmParams, queries: list[tuple[int, ...]], n: int, repeats: int, seed: int
) -> tuple[float, float, float]:
    """(MSE / mean variance, coverage, max |mean error| / its standard error) over seeded repeats through
    the real batch encoder and ingest."""
    rng = np.random.default_rng(seed)
    probs = _population(params, seed)
    err, var, hit, signed = [], [], [], []
    for _ in range(repeats):
        values = rng.choice(params.joint_size, size=n, p=probs)
        joint = np.bincount(values, minlength=params.joint_size).reshape(params.sizes)
        m, support = SPEC.layout_batch(
            params, SPEC.encode_batch(params, values, rng, campaign_id="c", labels=())
        )
        fit = fit_marginals(SPEC.marginal_tables(params, SimpleNamespace(n=m, support=support)))
        row_err, row_var = [], []
        for q in queries:
            other = tuple(k for k in range(len(params.sizes)) if k not in q)
            truth = np.transpose(joint.sum(axis=other), np.argsort(np.argsort(q))).reshape(-1)
            a = answer_marginal(fit, q)
            est = np.array([c.count for c in a.cells])
            se = np.array([c.std_error for c in a.cells])
            row_err.append(est - truth)
            row_var.append(se**2)
            hit.append(np.abs(est - truth) <= 1.959964 * se)
        signed.append(np.concatenate(row_err))
        err.append(np.concatenate(row_err) ** 2)
        var.append(np.concatenate(row_var))
    e, v, s = np.array(err), np.array(var), np.array(signed)
    bias_z = np.abs(s.mean(axis=0)) / np.sqrt(v.mean(axis=0) / repeats)
    return float(e.mean() / v.mean()), float(np.concatenate(hit).mean()), float(bias_z.max())


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("grr", "seed"), [((False, False, False), 11), ((True, False, True), 12)], ids=["olh", "mixed"]
)
def test_marginal_answers_are_unbiased_and_calibrated(grr: tuple[bool, ...], seed: int) -> None:
    """Seeded repeats: MSE / mean reported variance in [0.9, 1.1], 95% coverage in [0.93, 0.97], pooled
    over 2-way and 1-way marginals (40 cells, correlated through consistency); every cell's mean error
    within 4.5 of its standard errors (unbiased; 40 cells at R = 600: a 4.5-sigma bound is not reached by
    chance). The ratio's standard deviation is about sqrt(2/R) per cell (0.058 at R = 600), less pooled."""
    params = CalmParams(attributes=ATTRS, marginals=PAIRS, g=4, truth_probability=0.55, grr=grr)
    queries = [(0, 1), (2, 0), (1, 2), (1,), (0,)]
    ratio, coverage, bias_z = _calibration(params, queries, 6000, 600, seed)
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage
    assert bias_z < 4.5, bias_z


@pytest.mark.statistical
def test_the_group_sampling_variance_is_calibrated() -> None:
    """Nearly noiseless GRR groups (p about 0.999): the error left is mostly the random groups' sampling,
    which the variance's sampling part (with the cross-group term) must match."""
    params = CalmParams(
        attributes=ATTRS, marginals=PAIRS, g=2, truth_probability=1 - 2**-12, grr=(True, True, True)
    )
    assert params.group_rates(0)[0] > 0.99
    ratio, coverage, _ = _calibration(params, [(0, 1), (2,), (1, 2)], 3000, 800, 13)
    assert 0.9 <= ratio <= 1.1, ratio
    assert 0.93 <= coverage <= 0.97, coverage


def test_the_non_negative_version_is_consistent_and_non_negative() -> None:
    rng = np.random.default_rng(8)
    params = CalmParams(attributes=ATTRS, marginals=PAIRS, g=4, truth_probability=0.55)
    values = rng.choice(params.joint_size, size=800, p=_population(params))
    m, support = SPEC.layout_batch(params, SPEC.encode_batch(params, values, rng, campaign_id="c", labels=()))
    fit = fit_marginals(SPEC.marginal_tables(params, SimpleNamespace(n=m, support=support)))
    assert min(float(t.min()) for t in fit.y) < 0  # small n: the unbiased version has negative cells
    ans = answer_marginal(fit, (0, 1), non_negative=True)
    nonneg = np.array([c.non_negative_count for c in ans.cells])
    assert (nonneg >= 0).all() and math.isclose(nonneg.sum(), 800, rel_tol=1e-6)


@pytest.mark.parametrize("grr", [True, False])
def test_the_oracle_variance_is_exact_for_a_fixed_group(grr: bool) -> None:
    """Given the group's records, a GRR report names one cell (multinomial covariances) and a local-hashing
    report's cells are uncorrelated: the oracle part equals sum over the users of Var(w . report's
    debiased support row), computed here directly from each cell's report distribution."""
    params = CalmParams(attributes=ATTRS[:2], marginals=((0, 1),), g=4, truth_probability=0.6, grr=(grr,))
    joint = np.random.default_rng(2).dirichlet(np.ones(params.joint_size))
    n = 1000
    fit = fit_marginals(_expected_tables(params, joint, n))
    w = _adjoint(fit, [np.array([1.0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]).reshape(3, 4, 1)])[0].reshape(-1)
    p, q = params.group_rates(0)
    c = params.cells(0)
    total = 0.0
    for t in range(c):
        if grr:  # the reported cell a: P(a | t) = p if a = t else q; the support row is the indicator of a
            probs = np.where(np.arange(c) == t, p, q)
            mean = float(probs @ w)
            second = float(probs @ (w * w))
            v = second - mean**2
        else:  # independent support indicators: P = p* for t, q* for the others
            probs = np.where(np.arange(c) == t, p, q)
            v = float((probs * (1 - probs)) @ (w * w))
        total += joint[t] * v / (n * (p - q) ** 2)
    ours = _oracle_variance(fit, [w.reshape(3, 4, 1)])[0]
    assert ours == pytest.approx(total, rel=1e-9)
