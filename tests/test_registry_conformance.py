"""Every registered mechanism (ldp_client.registry.SPECS) passes the same checks, with no per-mechanism code.

A new mechanism joins these tests by being registered. What each check guards:

* the spec and the registry agree (name, parameter class, oneof members, lookups, ``make_params``);
* parameters by name round-trip (``make(**make_args(p)) == p``);
* exact epsilon by enumeration: the spec's exact output distribution (Fractions) has max ratio e^epsilon
  with epsilon the one the parameters report (for an (epsilon, delta) mechanism, ``spec.delta > 0``: the
  hockey-stick divergence at e^epsilon of every pair of inputs is at most delta), and the
  device's encoder only ever outputs what it lists (or, for public randomness the enumeration conditions
  on, such as local hashing's seeds, outputs of positive exact probability:
  ``spec.exact_output_probability``);
* the batch encoder and the exact sum sampler follow that distribution (seeded, bounds from the variance);
* the estimator is exact at the expected counts, one check per kind (:data:`_EXACT_BY_KIND`): SUPPORT
  through the spec's Support, RAPPOR the candidates' regression, MEAN the means estimated from the expected
  code sums through the spec's Moments, PAIRED the association's EM (its maximum-likelihood joint
  distribution); and the analyst's facades estimate through the same path (:data:`_FACADES_BY_KIND`);
* codec round trips: parameters, batches, single reports, journal rows (bytes equal to the batch codec's);
* accumulators: merge associative and commutative, the byte form round-trips, the size bound holds;
* the mechanism is offered by ``ldp-sim run`` and by ``ldp-aggregator campaign create``.

Every exact check is for a device of the campaign :data:`CAMPAIGN` (``spec.campaign_inputs`` and
``spec.campaign_outputs``): a mechanism that hashes strings with keys derived from the campaign id (string
RAPPOR's Bloom filters, a sketch's hash rows) has inputs and outputs that depend on it. A mechanism of kind
SUPPORT that estimates candidate strings (``spec.estimates_candidates``) is estimated with its inputs as the
candidates.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import pytest
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.accumulators import (
    accumulator_for,
    accumulator_from_bytes,
    accumulator_from_sums,
    accumulator_nbytes,
    add_columns,
    batch_delta,
    check_matches,
)
from ldp_aggregator.analysis import estimate_campaign
from ldp_aggregator.association import associate_campaign, estimate_association, side_likelihood
from ldp_aggregator.cli import app as aggregator_app
from ldp_aggregator.discovery import discover, discover_columns
from ldp_aggregator.estimators import estimate_frequencies, estimate_support
from ldp_aggregator.means import estimate_means, estimate_moments
from ldp_aggregator.rappor_estimates import estimate_rappor_candidates
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import _journal_rows, registry, wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.paired import paired_side_id, side_spec
from ldp_client.params import MECHANISM_NAMES, make_params
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret
from ldp_client.spec import LAYOUT_SUMS, Kind, Layout, MechanismSpec
from simulations.cli import app as sim_app

CASES = [
    pytest.param(spec, params, id=f"{spec.name}-{i}")
    for spec in registry.SPECS
    for i, params in enumerate(spec.examples())
]
SPECS = [pytest.param(spec, id=spec.name) for spec in registry.SPECS]
runner = CliRunner()
# Seeded sampling checks: a cell may deviate from its expectation by at most this many standard deviations.
Z = 6.0
CAMPAIGN = "conformance"
"""The campaign of every exact check (a mechanism hashing with campaign keys depends on it)."""


def _inputs(spec: MechanismSpec[Any], params: Any) -> tuple[Any, ...]:
    return spec.campaign_inputs(params, CAMPAIGN)


def _dist(spec: MechanismSpec[Any], params: Any, value: Any) -> Any:
    return spec.campaign_outputs(params, value, CAMPAIGN)


def _labels(spec: MechanismSpec[Any], params: Any) -> list[str]:
    """The population labels of the inputs (the strings a device of a string-hashing mechanism encodes)."""
    return [str(x) for x in _inputs(spec, params)]


def _candidates(spec: MechanismSpec[Any], params: Any) -> tuple[str, ...]:
    """What an estimate is asked for: the inputs' labels for a mechanism that estimates candidate strings,
    else nothing (its items are fixed)."""
    return tuple(_labels(spec, params)) if spec.estimates_candidates else ()


def _items(spec: MechanismSpec[Any], params: Any) -> tuple[str, ...]:
    """The labels of the estimated items."""
    return _candidates(spec, params) if spec.estimates_candidates else spec.items(params)


def _support(spec: MechanismSpec[Any], params: Any, acc: Any) -> Any:
    """The spec's Support of an accumulator: of its items, or of the candidates of :data:`CAMPAIGN`."""
    if spec.estimates_candidates:
        return spec.candidate_support(params, acc, _candidates(spec, params), campaign_id=CAMPAIGN)
    return spec.support(params, acc)


def _outputs(spec: MechanismSpec[Any], params: Any) -> list[Any]:
    """Every output the encoder can produce for some input, in a fixed order."""
    seen: dict[Any, None] = {}
    for x in _inputs(spec, params):
        for y, p in _dist(spec, params, x).items():
            if p > 0:
                seen.setdefault(y, None)
    return sorted(seen, key=repr)


def _layout_sums(layout: Layout, acc: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """A layout's sums of an accumulator (ldp_client.spec.LAYOUT_SUMS), as float arrays; a composite
    layout's first sums are its parts' accumulators, whose sums are named ``part.sum``."""
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(LAYOUT_SUMS[layout.kind]):
        value = getattr(acc, name)
        if i < len(layout.parts):
            out.update(_layout_sums(layout.parts[i], value, f"{prefix}{name}."))
        elif value is not None:
            out[prefix + name] = np.asarray(value, dtype=np.float64)
    return out


def _sums(spec: MechanismSpec[Any], params: Any, acc: Any) -> dict[str, np.ndarray]:
    return _layout_sums(spec.layout(params), acc)


def _one_report_sums(spec: MechanismSpec[Any], params: Any, output: Any) -> dict[str, np.ndarray]:
    acc = accumulator_for(params)
    add_columns(acc, params, wire.batch_from_reports(params, [output]))
    return _sums(spec, params, acc)


def _expected_sums(spec: MechanismSpec[Any], params: Any, true_counts: list[int]) -> dict[str, np.ndarray]:
    """E[sums] of one report per user, ``true_counts[i]`` users holding input i (from the exact outputs)."""
    return _sum_moments(spec, params, true_counts)[0]


def _sum_moments(
    spec: MechanismSpec[Any], params: Any, true_counts: list[int]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(E[sums], Var[sums]) of one independent report per user, ``true_counts[i]`` users holding input i:
    each report adds its output's sums, so mean and variance add up over the users (from the exact
    outputs). For a sum of 0/1 events (a count) the variance is the binomial one."""
    per_output = {y: _one_report_sums(spec, params, y) for y in _outputs(spec, params)}
    mean: dict[str, np.ndarray] = {}
    var: dict[str, np.ndarray] = {}
    for x, c in zip(_inputs(spec, params), true_counts, strict=True):
        dist = [(y, p) for y, p in _dist(spec, params, x).items() if p > 0]
        for name in next(iter(per_output.values())):
            m = sum(float(p) * per_output[y][name] for y, p in dist)
            m2 = sum(float(p) * per_output[y][name] ** 2 for y, p in dist)
            mean[name] = mean.get(name, 0.0) + c * m
            var[name] = var.get(name, 0.0) + c * np.maximum(m2 - m * m, 0.0)
    return mean, var


def _exact_expected_sums(spec: MechanismSpec[Any], params: Any, true_counts: list[int]) -> dict[str, Any]:
    """E[sums] as exact Fractions (object arrays), ``true_counts[i]`` users holding input i (a layout
    without parts: the kinds whose check needs exact sums)."""
    per_output = {}
    names = LAYOUT_SUMS[spec.layout(params).kind]
    for y in _outputs(spec, params):
        acc = accumulator_for(params)
        add_columns(acc, params, wire.batch_from_reports(params, [y]))
        per_output[y] = {name: np.array(getattr(acc, name), dtype=object) for name in names}
    total: dict[str, Any] = {}
    for x, c in zip(_inputs(spec, params), true_counts, strict=True):
        for y, p in _dist(spec, params, x).items():
            if p == 0:
                continue
            for name, arr in per_output[y].items():
                total[name] = total.get(name, 0) + (c * p) * arr
    return total


def _same_columns(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple)
            and isinstance(b, tuple)
            and len(a) == len(b)
            and all(_same_columns(x, y) for x, y in zip(a, b, strict=True))
        )
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))


# ------------------------------------------------------------------------------------------ registry


@pytest.mark.parametrize("spec", SPECS)
def test_spec_and_registry_agree(spec: MechanismSpec[Any]) -> None:
    assert spec.name == spec.params_type.name
    assert registry.spec_named(spec.name) is spec
    assert registry.spec_for_member(spec.wire.campaign) is spec
    assert spec.name in MECHANISM_NAMES and spec.name in registry.names()
    examples = spec.examples()
    assert examples, "a spec offers small example parameters for these checks"
    for params in examples:
        assert type(params) is spec.params_type
        assert registry.spec_for(params) is spec
        # The oneof members are those of the protos (a wrapper's reports use the wrapped mechanism's).
        names = spec.wire_names(params)
        assert names.campaign == spec.wire.campaign
        assert names.batch in _members(reports_pb2.ReportBatch, "payload")
        assert names.report in _members(reports_pb2.Report, "value")
    assert spec.wire.campaign in _members(campaign_pb2.Campaign, "mechanism")


def _members(message: Any, oneof: str) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.oneofs_by_name[oneof].fields}


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_parameters_by_name_round_trip(spec: MechanismSpec[Any], params: Any) -> None:
    args = spec.make_args(params)
    assert spec.make(epsilon=args.epsilon, domain=args.domain, fields=dict(args.fields)) == params
    assert (
        make_params(spec.name, epsilon=args.epsilon, domain=args.domain, fields=dict(args.fields)) == params
    )


# ------------------------------------------------------------------------------------------- privacy


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_exact_epsilon_by_enumeration(spec: MechanismSpec[Any], params: Any) -> None:
    inputs = _inputs(spec, params)
    dists = [_dist(spec, params, x) for x in inputs]
    for x, dist in zip(inputs, dists, strict=True):
        assert sum(dist.values()) == 1, f"P(.|{x!r}) sums to {sum(dist.values())}"
        assert all(isinstance(p, Fraction) and p >= 0 for p in dist.values())
    if spec.delta(params) > 0:
        _check_approximate_dp(spec, params, dists)
        return
    worst = Fraction(1)
    for y in _outputs(spec, params):
        probs = [d.get(y, Fraction(0)) for d in dists]
        if min(probs) == 0:
            pytest.fail(f"output {y!r} is impossible for some input and possible for another: epsilon = inf")
        worst = max(worst, max(probs) / min(probs))
    # The max ratio, exact in Fractions, is e^epsilon with epsilon as the parameters report it.
    assert math.isclose(math.log(worst), params.epsilon, rel_tol=1e-12, abs_tol=1e-12), (
        f"max ratio e^{math.log(worst)!r}, the parameters report epsilon={params.epsilon!r}"
    )
    assert math.isclose(wire.epsilon_inf(params), spec.epsilon_inf(params))


def _hockey_stick(p: Any, q: Any, epsilon: float) -> float:
    """sum over outputs of max(0, P(y) - e^epsilon Q(y)): the smallest delta of the pair at epsilon."""
    scale = math.exp(epsilon)
    return math.fsum(max(0.0, float(pr) - scale * float(q.get(y, 0))) for y, pr in p.items())


def _check_approximate_dp(spec: MechanismSpec[Any], params: Any, dists: list[Any]) -> None:
    # An (epsilon, delta) mechanism (spec.delta > 0) has no finite pure epsilon to enumerate; its guarantee
    # is the hockey-stick divergence at e^epsilon of every ordered pair of inputs' output distributions,
    # at most the declared delta. (Whether the reported epsilon is the smallest is the mechanism's own
    # test: some are exact, some are bounds.) The masses may be rationals of float64 values (an irrational
    # distribution): the tolerance allows 1e-9 of delta.
    delta = spec.delta(params)
    worst = max(
        _hockey_stick(p, q, params.epsilon)
        for i, p in enumerate(dists)
        for j, q in enumerate(dists)
        if i != j
    )
    assert worst <= delta * (1.0 + 1e-9), f"delta at epsilon={params.epsilon!r} is {worst!r} > {delta!r}"
    assert math.isclose(wire.epsilon_inf(params), spec.epsilon_inf(params))


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_exact_epsilon_inf_by_enumeration(spec: MechanismSpec[Any], params: Any) -> None:
    # A memoized mechanism enumerates what unlimited reports of one value reveal (the memoized part, over
    # the coins derived from the client secret): its max ratio is e^epsilon_inf, the spec's longitudinal
    # bound (the one the reporter and the device ledger read).
    inputs = _inputs(spec, params)
    dists = [spec.exact_memoized_outputs(params, x) for x in inputs]
    if any(d is None for d in dists):
        pytest.skip(f"{spec.name} enumerates no memoized part (epsilon_inf = {spec.epsilon_inf(params)})")
    worst = Fraction(1)
    outputs = {y for d in dists if d is not None for y, p in d.items() if p > 0}
    for x, dist in zip(inputs, dists, strict=True):
        assert dist is not None and sum(dist.values()) == 1, f"memoized P(.|{x!r}) does not sum to 1"
    for y in outputs:
        probs = [d.get(y, Fraction(0)) for d in dists if d is not None]
        if min(probs) == 0:
            pytest.fail(f"memoized output {y!r} is impossible for some input: epsilon_inf = inf")
        worst = max(worst, max(probs) / min(probs))
    assert math.isclose(math.log(worst), spec.epsilon_inf(params), rel_tol=1e-12, abs_tol=1e-12), (
        f"memoized max ratio e^{math.log(worst)!r}, the spec reports epsilon_inf={spec.epsilon_inf(params)!r}"
    )
    # One report never reveals more than the memoized part it is computed from.
    assert params.epsilon <= spec.epsilon_inf(params) * (1 + 1e-12)


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_device_encoder_outputs_are_the_enumerated_ones(spec: MechanismSpec[Any], params: Any) -> None:
    encode = encoder_for(params, campaign_id=CAMPAIGN, secret=ClientSecret.from_bytes(bytes(range(32))))
    for x in _inputs(spec, params):
        possible = {y for y, p in _dist(spec, params, x).items() if p > 0}
        for _ in range(64):
            y = encode(x)
            # Outside the enumeration only where it samples public randomness (a seed): then y must
            # still have a positive exact probability.
            assert y in possible or spec.exact_output_probability(params, x, y) > 0, (
                f"encode({x!r}) returned {y!r}, not among {sorted(possible, key=repr)[:20]}"
            )


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_batch_encoder_follows_the_exact_distribution(spec: MechanismSpec[Any], params: Any) -> None:
    n = 2_000_000  # a threshold off by 1% (an output probability by 0.25%) moves a count past the bound
    rng = np.random.default_rng(20_240_614)
    labels = _labels(spec, params)
    for i in range(len(labels)):
        true_counts = [n if j == i else 0 for j in range(len(labels))]
        expected, variance = _sum_moments(spec, params, true_counts)
        acc = accumulator_for(params)
        columns = spec.encode_batch(
            params, np.full(n, i, dtype=np.int64), rng, campaign_id=CAMPAIGN, labels=labels
        )
        add_columns(acc, params, columns)
        assert acc.n == n
        for name, observed in _sums(spec, params, acc).items():
            m = expected[name]
            bound = Z * np.sqrt(variance[name]) + 1e-9 * np.maximum(1.0, np.abs(m))
            bad = np.abs(observed - m) > bound
            assert not bad.any(), f"input {i}: {name} {observed[bad]} vs expected {m[bad]}"


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_sum_sampler_follows_the_exact_distribution(spec: MechanismSpec[Any], params: Any) -> None:
    sampler = spec.sum_sampler(params)
    if sampler is None:
        pytest.skip(f"{spec.name} has no exact sum sampler (the simulator encodes every report)")
    # The sampler's cost does not depend on the users: many of them make the check sharp.
    labels = _labels(spec, params)
    true_counts = [10**7 + 10**6 * i for i in range(len(labels))]
    n = sum(true_counts)
    expected = _expected_sums(spec, params, true_counts)
    rng = np.random.default_rng(7)
    repeats = 400
    total = {name: np.zeros_like(arr) for name, arr in expected.items()}
    for _ in range(repeats):
        acc = accumulator_from_sums(
            params,
            sampler(np.asarray(true_counts, dtype=np.int64), rng, campaign_id=CAMPAIGN, labels=labels),
        )
        assert acc.n == n
        for name, arr in _sums(spec, params, acc).items():
            total[name] += arr
    for name, m in expected.items():
        bound = Z * np.sqrt(np.maximum(m * (1.0 - m / n), 0.0) / repeats) + 1e-9 * np.maximum(np.abs(m), 1.0)
        mean = total[name] / repeats
        assert (np.abs(mean - m) <= bound).all(), f"{name}: mean {mean} vs expected {m}"


# ------------------------------------------------------------------------------------------ estimator


def _true_counts(spec: MechanismSpec[Any], params: Any) -> list[int]:
    return [1000 * (i + 1) + 7 * i * i for i in range(len(_inputs(spec, params)))]


def _exact_support(spec: MechanismSpec[Any], params: Any) -> None:
    true_counts = _true_counts(spec, params)
    n = sum(true_counts)
    view = SimpleNamespace(**_expected_sums(spec, params, true_counts), n=n)
    support = _support(spec, params, view)
    assert support.labels == _items(spec, params) and support.n == n
    est = estimate_support(support, mechanism=spec.name, epsilon=params.epsilon)
    counts = np.array([it.count for it in est.items])
    np.testing.assert_allclose(counts, true_counts, rtol=1e-9, atol=1e-6 * n)
    # The rates the simulator's interval warning reads are the Support's.
    assert support.p_star == spec.support_rates(params)[0] and support.q_star == spec.support_rates(params)[1]


def _exact_candidates(spec: MechanismSpec[Any], params: Any) -> None:
    # Kind RAPPOR: the inputs, as candidates, are counted exactly from the expected bit sums.
    true_counts = _true_counts(spec, params)
    n = sum(true_counts)
    view = SimpleNamespace(**_expected_sums(spec, params, true_counts), n=n)
    est = estimate_rappor_candidates(params, view, campaign_id=CAMPAIGN, candidates=_labels(spec, params))
    np.testing.assert_allclose([it.count for it in est.items], true_counts, rtol=1e-9, atol=1e-6 * n)
    assert est.epsilon_inf == spec.epsilon_inf(params)


def _side_inputs(params: Any) -> list[tuple[Any, ...]]:
    """Each side's inputs, for a device of CAMPAIGN (a side is encoded under its own campaign id)."""
    return [
        side_spec(s).campaign_inputs(s, paired_side_id(CAMPAIGN, side))
        for side, s in zip(("first", "second"), params.sides, strict=True)
    ]


def _expected_association(spec: MechanismSpec[Any], params: Any, true_counts: list[int]) -> Any:
    """The association's EM on every possible paired report weighted by its expected count."""
    outputs = _outputs(spec, params)
    weights = np.zeros(len(outputs))
    where = {y: i for i, y in enumerate(outputs)}
    for x, c in zip(_inputs(spec, params), true_counts, strict=True):
        for y, p in _dist(spec, params, x).items():
            weights[where[y]] += float(c * p)
    columns = wire.batch_from_reports(params, outputs)
    sides = [
        side_likelihood(
            side_params,
            cols,
            campaign_id=paired_side_id(CAMPAIGN, side),
            # A string-RAPPOR side is estimated against candidates: its inputs (the others ignore them).
            candidates=[str(x) for x in inputs],
        )
        for side, side_params, cols, inputs in zip(
            ("first", "second"), params.sides, columns, _side_inputs(params), strict=True
        )
    ]
    return estimate_association(
        params, sides[0], sides[1], weights=weights, tolerance=1e-15, max_iterations=100_000
    )


def _exact_association(spec: MechanismSpec[Any], params: Any) -> None:
    # Kind PAIRED: the maximum-likelihood joint distribution of the expected reports is the truth. The
    # inputs are the pairs of the sides' inputs (first side major); the estimate's values start with each
    # side's inputs, and any further value (string RAPPOR's <other>) holds nobody.
    true_counts = _true_counts(spec, params)
    res = _expected_association(spec, params, true_counts)
    per_side = [len(inputs) for inputs in _side_inputs(params)]
    truth = np.zeros_like(res.joint)
    truth[: per_side[0], : per_side[1]] = np.reshape(true_counts, per_side) / sum(true_counts)
    # EM approaches a value on the boundary of the simplex (string RAPPOR's <other> = 0) only slowly, so
    # the tolerance is that of its stopping rule, not of floating point.
    np.testing.assert_allclose(res.joint, truth, atol=1e-4 if (truth == 0).any() else 1e-6)
    assert res.n == sum(true_counts)


def _exact_means(spec: MechanismSpec[Any], params: Any) -> None:
    # Kind MEAN: the expected sums of the codes, exactly: the means estimated from them are the true means
    # (up to the one rounding to float; laplace's clamped ends decode to the geometric tail's conditional
    # mean, which its integer table meets to about 1e-13 of the range).
    true_counts = _true_counts(spec, params)
    n = sum(true_counts)
    sums = _exact_expected_sums(spec, params, true_counts)
    arrays = {k: np.asarray(v, dtype=object) for k, v in sums.items()}
    view = SimpleNamespace(**{k: v.item() if v.ndim == 0 else v for k, v in arrays.items()}, n=n)
    moments = spec.moments(params, view)
    design = spec.mean_design(params)
    assert moments.n == n and design.labels == spec.items(params)
    est = estimate_moments(moments, mechanism=spec.name, epsilon=params.epsilon)
    values = [np.atleast_1d(np.asarray(x, dtype=object)) for x in _inputs(spec, params)]
    for a, (lo, hi) in enumerate(design.ranges):
        truth = sum(c * Fraction(v[a]) for c, v in zip(true_counts, values, strict=True)) / n
        assert est.means[a].label == design.labels[a]
        assert est.means[a].mean == pytest.approx(float(truth), abs=1e-12 * (hi - lo))


def _exact_discovery(spec: MechanismSpec[Any], params: Any) -> None:
    # Kind DISCOVERY: every level's candidates get their expected support counts (the level's share of the
    # users, the truth of each candidate and the rates of the level's Support); the level loop then
    # discovers exactly the inputs, with their true counts.
    levels = spec.discovery_levels(params)
    inputs = _inputs(spec, params)
    true_counts = [levels * c for c in _true_counts(spec, params)]
    n = sum(true_counts)
    some = wire.batch_from_reports(params, _outputs(spec, params)[:1])

    def support_of(level: int, candidates: Any) -> Any:
        rates = spec.discovery_support(params, some, level, candidates)
        holders = np.zeros(len(candidates))
        where = {c: i for i, c in enumerate(candidates)}
        for x, c in zip(inputs, true_counts, strict=True):
            i = where.get(spec.discovery_prefix(params, level, x))  # any subset of a level's candidates
            if i is not None:
                holders[i] += c / levels
        users = n // levels
        counts = users * rates.q_star + (rates.p_star - rates.q_star) * holders
        return dataclasses.replace(rates, counts=counts, n=users)

    res = discover(params, support_of, n)
    assert len(res.levels) == levels and res.levels[0].tested == len(spec.discovery_candidates(params, 0, ()))
    # The inputs first (ranked by count), then any other candidate kept, each with an estimate of 0.
    found = {it.label: it.count for it in res.items[: len(inputs)]}
    assert set(found) == {str(x) for x in inputs}
    for x, c in zip(inputs, true_counts, strict=True):
        assert found[str(x)] == pytest.approx(c, rel=1e-9)
    assert all(abs(it.count) <= 1e-9 * n for it in res.items[len(inputs) :])


_EXACT_BY_KIND: dict[Kind, Callable[[MechanismSpec[Any], Any], None]] = {
    Kind.SUPPORT: _exact_support,
    Kind.RAPPOR: _exact_candidates,
    Kind.MEAN: _exact_means,
    Kind.PAIRED: _exact_association,
    Kind.DISCOVERY: _exact_discovery,
}
"""The exact-estimator check of each kind; a kind without one fails the test below on purpose."""


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_estimator_is_exact_at_expected_counts(spec: MechanismSpec[Any], params: Any) -> None:
    check = _EXACT_BY_KIND.get(spec.kind)
    if check is None:
        pytest.fail(f"no conformance check of the {spec.kind} estimator yet: add one for this kind")
    check(spec, params)


def _facades_support(spec: MechanismSpec[Any], params: Any, acc: Any, columns: Any) -> None:
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    cands = _candidates(spec, params)
    direct = estimate_support(_support(spec, params, acc), mechanism=spec.name, epsilon=params.epsilon)
    assert estimate_frequencies(params, acc, candidates=cands, campaign_id=CAMPAIGN) == direct
    assert estimate_campaign(info, acc, candidates=cands).frequencies == direct
    if spec.estimates_candidates:  # the campaign's candidates when the request has none
        with_cands = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params, candidates=cands)
        assert estimate_campaign(with_cands, acc).frequencies == direct
        assert estimate_campaign(info, acc).frequencies is None


def _facades_candidates(spec: MechanismSpec[Any], params: Any, acc: Any, columns: Any) -> None:
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    with pytest.raises(InvalidParameterError):  # no per-item frequencies without candidates
        estimate_frequencies(params, acc)
    labels = _labels(spec, params)
    direct = estimate_rappor_candidates(params, acc, campaign_id=CAMPAIGN, candidates=labels)
    assert estimate_campaign(info, acc, candidates=labels).frequencies == direct


def _facades_means(spec: MechanismSpec[Any], params: Any, acc: Any, columns: Any) -> None:
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    with pytest.raises(InvalidParameterError):  # means, not frequencies
        estimate_frequencies(params, acc)
    direct = estimate_moments(spec.moments(params, acc), mechanism=spec.name, epsilon=params.epsilon)
    assert estimate_means(params, acc) == direct
    assert estimate_campaign(info, acc).means == direct


def _facades_association(spec: MechanismSpec[Any], params: Any, acc: Any, columns: Any) -> None:
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    with pytest.raises(InvalidParameterError):  # two variables: no per-item frequencies
        estimate_frequencies(params, acc)
    assert estimate_campaign(info, acc).frequencies is None
    batch = wire.batch_to_proto(campaign_id=CAMPAIGN, batch_id="b", params=params, columns=columns)
    candidates = [str(x) for inputs in _side_inputs(params) for x in inputs]
    res = associate_campaign(
        wire.CampaignInfo(campaign_id=CAMPAIGN, params=params, candidates=candidates),
        acc,
        lambda: [batch.SerializeToString()],
        confidence=0.9,
    )
    assert res.n == acc.n and res.joint.shape == (len(res.row_labels), len(res.col_labels))
    assert res.joint.sum() == pytest.approx(1.0)


def _facades_discovery(spec: MechanismSpec[Any], params: Any, acc: Any, columns: Any) -> None:
    info = wire.CampaignInfo(campaign_id=CAMPAIGN, params=params)
    with pytest.raises(InvalidParameterError):  # discovered values, not frequencies of declared items
        estimate_frequencies(params, acc)
    batch = wire.batch_to_proto(campaign_id=CAMPAIGN, batch_id="b", params=params, columns=columns)
    direct = discover_columns(params, columns, acc.n)
    assert estimate_campaign(info, acc, reports=lambda: [batch.SerializeToString()]).discovery == direct
    assert estimate_campaign(info, acc).discovery is None  # no raw reports: nothing discovered


_FACADES_BY_KIND: dict[Kind, Callable[[MechanismSpec[Any], Any, Any, Any], None]] = {
    Kind.SUPPORT: _facades_support,
    Kind.RAPPOR: _facades_candidates,
    Kind.MEAN: _facades_means,
    Kind.PAIRED: _facades_association,
    Kind.DISCOVERY: _facades_discovery,
}
"""What the analyst's facades (estimate_frequencies, estimate_campaign, ...) give for each kind, checked
against the kind's own estimator fed through the spec."""


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_the_facades_estimate_through_the_spec(spec: MechanismSpec[Any], params: Any) -> None:
    check = _FACADES_BY_KIND.get(spec.kind)
    if check is None:
        pytest.fail(f"no conformance check of the {spec.kind} estimate yet: add one for this kind")
    acc = accumulator_for(params)
    columns = wire.batch_from_reports(params, _outputs(spec, params) * 3)
    add_columns(acc, params, columns)
    check(spec, params, acc, columns)


# ------------------------------------------------------------------------------------------- codecs


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_parameters_round_trip_on_the_wire(spec: MechanismSpec[Any], params: Any) -> None:
    assert spec.params_from_proto(spec.params_to_proto(params)) == params
    msg = wire.campaign_to_proto(campaign_id="conformance", params=params)
    assert msg.WhichOneof("mechanism") == spec.wire.campaign == wire.mechanism_field(params)
    data = msg.SerializeToString()
    back = wire.campaign_from_proto(campaign_pb2.Campaign.FromString(data))
    assert back.params == params
    assert wire.campaign_to_proto(campaign_id="conformance", params=back.params).SerializeToString() == data


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_batches_round_trip(spec: MechanismSpec[Any], params: Any) -> None:
    outputs = _outputs(spec, params) * 3 + _outputs(spec, params)[:1]
    columns = wire.batch_from_reports(params, outputs)
    msg = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=columns)
    assert msg.count == len(outputs)
    assert msg.WhichOneof("payload") == spec.wire_names(params).batch == wire.batch_field(params)
    data = msg.SerializeToString()
    decoded = wire.batch_from_proto(reports_pb2.ReportBatch.FromString(data), params, campaign_id="c")
    assert _same_columns(decoded, columns)
    again = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=decoded)
    assert again.SerializeToString() == data


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_single_reports_round_trip(spec: MechanismSpec[Any], params: Any) -> None:
    for y in _outputs(spec, params):
        msg = wire.report_to_proto(campaign_id="c", report_id="r", params=params, report=y)
        assert msg.WhichOneof("value") == spec.wire_names(params).report
        parsed = reports_pb2.Report.FromString(msg.SerializeToString())
        decoded = wire.report_from_proto(parsed, params, campaign_id="c")
        assert _same_columns(decoded, wire.batch_from_reports(params, [y]))


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_journal_rows_round_trip(spec: MechanismSpec[Any], params: Any) -> None:
    outputs = _outputs(spec, params) * 5
    pack = _journal_rows.row_packer(params)
    rows = b"".join(pack(y) for y in outputs)
    assert len(rows) == _journal_rows.row_bytes(params) * len(outputs)
    assert _journal_rows.row_bytes(params) == sum(f.width for f in spec.row_fields(params))
    _journal_rows.check_rows(params, "c", rows)
    msg = _journal_rows.batch_from_rows(campaign_id="c", batch_id="b", params=params, rows=rows)
    # Rows become exactly the batch the column codec makes of the same reports.
    columns = wire.batch_from_reports(params, outputs)
    expected = wire.batch_to_proto(campaign_id="c", batch_id="b", params=params, columns=columns)
    assert msg.SerializeToString() == expected.SerializeToString()
    assert _journal_rows.rows_from_batch(params, msg) == rows


# ---------------------------------------------------------------------------------------- accumulators


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_accumulators_merge_and_round_trip(spec: MechanismSpec[Any], params: Any) -> None:
    outputs = _outputs(spec, params)
    batches = [outputs * 2, outputs[::-1] + outputs[:1], outputs[-1:] * 3]
    accs = []
    for reports in batches:
        columns = wire.batch_from_reports(params, reports)
        acc = accumulator_for(params)
        add_columns(acc, params, columns)
        check_matches(acc, params)
        assert acc.n == len(reports)
        assert accumulator_for(params) + batch_delta(params, columns) == acc
        accs.append(acc)
    a, b, c = accs
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert a + accumulator_for(params) == a
    assert (a + b + c).n == sum(len(r) for r in batches)
    for acc in (a, a + b + c, accumulator_for(params)):
        data = acc.to_bytes()
        assert accumulator_from_bytes(data) == acc
        assert accumulator_from_bytes(data).to_bytes() == data
    empty = len(accumulator_for(params).to_bytes())
    layout = spec.layout(params)
    assert empty <= accumulator_nbytes(params) == layout.nbytes
    assert all(len(acc.to_bytes()) <= layout.nbytes for acc in (a, b, c, a + b + c))
    if not layout.grows:  # a fixed-size byte form: the bound is its size, plus headers
        # 64 bytes of headers allowed per accumulator: a composite layout's parts have theirs.
        assert layout.nbytes <= empty + 64 * (1 + len(layout.parts))


# ------------------------------------------------------------------------------- offered to the users


def _cli_args(spec: MechanismSpec[Any], params: Any, *, domain_option: str) -> list[str]:
    args = spec.make_args(params)
    out = ["--mechanism", spec.name]
    if args.epsilon is not None:
        out += ["--epsilon", repr(args.epsilon)]
    if isinstance(args.domain, tuple):
        out += (
            ["--labels", ",".join(args.domain)]
            if domain_option == "labels"
            else ["-d", str(len(args.domain))]
        )
    elif args.domain is not None:
        out += ["--domain" if domain_option == "labels" else "-d", str(args.domain)]
    elif domain_option == "size" and spec.fixed_domain_size is None and spec.kind is not Kind.MEAN:
        # A categorical population whose size is neither declared nor fixed by the mechanism (string
        # RAPPOR, a sketch: strings of any kind, hashed by the devices): the simulated population's size.
        # (A MEAN population is real values: no domain.)
        out += ["-d", str(len(_inputs(spec, params)))]
    for name, value in args.fields.items():
        out += ["--param", f"{name}={value!r}" if isinstance(value, float) else f"{name}={value}"]
    return out


# The population a simulation of each kind draws from (the frequency kinds: categorical values; MEAN: reals,
# each attribute clamped into its declared range).
_POPULATION = {Kind.MEAN: "uniform-num:0,1"}


@pytest.mark.parametrize(("spec", "params"), CASES)
@pytest.mark.parametrize("mode", ["sum", "report"])
def test_offered_by_ldp_sim_run(spec: MechanismSpec[Any], params: Any, mode: str) -> None:
    args = _cli_args(spec, params, domain_option="size")
    population = _POPULATION.get(spec.kind, "uniform")
    result = runner.invoke(
        sim_app, ["run", *args, "-p", population, "-n", "3000", "--mode", mode, "--seed", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert summary["mechanism"] == spec.name and summary["n_users"] == 3000
    assert summary["epsilon"] == pytest.approx(params.epsilon)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    db = Path(tmp_path_factory.mktemp("conformance")) / "ldp.sqlite3"
    with BackgroundServer(ServerConfig(db=db, listen="127.0.0.1:0")) as running:
        yield running


@pytest.mark.parametrize(("spec", "params"), CASES)
def test_offered_by_campaign_create(server: BackgroundServer, spec: MechanismSpec[Any], params: Any) -> None:
    campaign_id = f"conformance-{spec.name}-{spec.examples().index(params)}"
    args = _cli_args(spec, params, domain_option="labels")
    result = runner.invoke(
        aggregator_app, ["campaign", "create", campaign_id, *args, "--server", server.target]
    )
    assert result.exit_code == 0, result.output
    with grpc.insecure_channel(server.target) as channel:
        analyst = analyst_pb2_grpc.AnalystStub(channel)
        listed = analyst.ListCampaigns(analyst_pb2.ListCampaignsRequest(), timeout=30)
    (created,) = [c for c in listed.campaigns if c.id == campaign_id]
    assert wire.campaign_from_proto(created).params == params
