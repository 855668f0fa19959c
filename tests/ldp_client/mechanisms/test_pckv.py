"""PCKV-GRR (issue 18): parameters, exact epsilon over rich inputs, encoders, bad input."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.pckv import SPEC, PCKVEncoder, PCKVParams


def _mappings(params: PCKVParams) -> list[dict[Any, float]]:
    """Every mapping of 1 to l keys with values at lo, the middle and hi."""
    keys = [params.domain.value(i) for i in range(params.domain.size)]
    xs = (params.lo, (params.lo + params.hi) / 2, params.hi)
    out = []
    for size in range(1, params.padding + 1):
        for chosen in itertools.combinations(keys, size):
            for vals in itertools.product(xs, repeat=size):
                out.append(dict(zip(chosen, vals, strict=True)))
    return out


@pytest.mark.parametrize(
    "params",
    [
        PCKVParams.from_epsilon(3, 1.0, padding=2),
        PCKVParams.from_epsilon(2, 0.5, padding=1),
        PCKVParams(domain=4, padding=1, key_probability=0.3, value_probability=0.95),  # eps2 binds
        PCKVParams.from_epsilon(("x", "y"), 3.0, padding=3, lo=0.0, hi=10.0, value_epsilon=1.0),
    ],
)
def test_epsilon_bounds_every_mapping_and_is_attained_with_one_key(params: PCKVParams) -> None:
    dists = [SPEC.exact_outputs(params, m) for m in _mappings(params)]
    for dist in dists:
        assert sum(dist.values()) == 1
    worst = Fraction(1)
    for y in dists[0]:
        probs = [d[y] for d in dists]
        worst = max(worst, max(probs) / min(probs))
    assert math.log(worst) <= params.epsilon + 1e-12
    if params.padding == 1:  # a single pair is reported outright: the bound is attained
        assert math.isclose(math.log(worst), params.epsilon, rel_tol=1e-12)


def test_formula_of_the_epsilon_is_the_papers() -> None:
    p = PCKVParams(domain=4, padding=2, key_probability=0.5, value_probability=0.75)
    eps1 = math.log(0.5 * 5 / 0.5)
    eps2 = math.log(3.0)
    assert p.key_epsilon == pytest.approx(eps1) and p.value_epsilon == pytest.approx(eps2)
    assert p.epsilon == pytest.approx(max(eps2, eps1 + math.log(2 * 0.75)))


@pytest.mark.parametrize(("d", "pad", "eps"), [(10, 1, 1.0), (100, 4, 2.0), (1000, 2, 0.5), (5, 3, 4.0)])
def test_from_epsilon_rounds_toward_privacy_and_meets_the_budget(d: int, pad: int, eps: float) -> None:
    p = PCKVParams.from_epsilon(d, eps, padding=pad)
    assert p.epsilon <= eps
    assert p.epsilon == pytest.approx(eps, abs=1e-6)
    # A threshold one step larger would exceed the budget (rounded toward privacy, not away).
    bigger = PCKVParams(domain=d, padding=pad, key_probability=p.a + 2**-32, value_probability=p.b)
    assert bigger.epsilon > eps


def test_optimal_split_beats_other_splits() -> None:
    from ldp_client.mechanisms.pckv import mean_variance_factor

    best = PCKVParams.from_epsilon(50, 2.0, padding=2)
    cost = mean_variance_factor(best.a, best.b, best.extended_size, 2)
    for e2 in (0.3, 0.8, 1.2, 1.6, 1.9):
        other = PCKVParams.from_epsilon(50, 2.0, padding=2, value_epsilon=e2)
        assert mean_variance_factor(other.a, other.b, other.extended_size, 2) > cost


def test_batch_encoder_distribution_matches_the_exact_one() -> None:
    params = PCKVParams.from_epsilon(3, 1.5, padding=2, lo=0.0, hi=4.0)
    mapping = {0: 3.0, 2: 0.0}
    n = 400_000
    keys = np.tile(np.array([[0, 2]]), (n, 1))
    vals = np.tile(np.array([[3.0, 0.0]]), (n, 1))
    out = PCKVEncoder(params).encode_batch(keys, vals, np.random.default_rng(5))
    counts = np.bincount(out, minlength=2 * params.extended_size)
    exact = SPEC.exact_outputs(params, mapping)
    for y, p in exact.items():
        sd = math.sqrt(n * float(p) * (1 - float(p)))
        assert abs(counts[y] - n * float(p)) < 5 * sd, (y, counts[y], n * float(p))


def test_device_encoder_distribution_matches_the_exact_one() -> None:
    params = PCKVParams.from_epsilon(2, 1.0, padding=2)
    mapping = {1: 0.5}
    n = 20_000
    enc = PCKVEncoder(params)
    counts = np.bincount([enc.encode(mapping) for _ in range(n)], minlength=2 * params.extended_size)
    for y, p in SPEC.exact_outputs(params, mapping).items():
        sd = math.sqrt(n * float(p) * (1 - float(p)))
        assert abs(counts[y] - n * float(p)) < 5 * sd, (y, counts[y], n * float(p))


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({}, "1 to padding=2 pairs"),
        ({"z": 0.0}, "key='z'"),
        ({"a": 11.0}, "[lo, hi] = [0.0, 10.0]"),
        ({"a": float("nan")}, "finite"),
        ({"a": 1.0, "b": 2.0, "c": 3.0}, "1 to padding=2 pairs"),
        ([("a", 1.0)], "a mapping"),
    ],
)
def test_bad_input_gets_a_one_line_error(mapping: Any, message: str) -> None:
    enc = PCKVEncoder(PCKVParams.from_epsilon(("a", "b", "c"), 1.0, padding=2, lo=0.0, hi=10.0))
    with pytest.raises(DomainError) as info:
        enc.encode(mapping)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_batch_bad_input() -> None:
    enc = PCKVEncoder(PCKVParams.from_epsilon(3, 1.0, padding=2))
    rng = np.random.default_rng(0)
    with pytest.raises(DomainError, match="at least one key"):
        enc.encode_batch(np.array([[0, -1], [-1, -1]]), np.zeros((2, 2)), rng)
    with pytest.raises(DomainError, match="distinct keys"):
        enc.encode_batch(np.array([[1, 1]]), np.zeros((1, 2)), rng)
    with pytest.raises(DomainError, match=r"\[lo, hi\]"):
        enc.encode_batch(np.array([[1, 2]]), np.array([[0.0, 1.5]]), rng)
    with pytest.raises(DomainError, match="key indices"):
        enc.encode_batch(np.array([[3, -1]]), np.zeros((1, 2)), rng)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"padding": 0}, "padding"),
        ({"padding": 1, "lo": 2.0, "hi": 1.0}, "hi"),
        ({"padding": 1, "key_probability": 0.1, "value_probability": 0.9}, "key_probability"),
        ({"padding": 1, "key_probability": 0.5, "value_probability": 0.4}, "value_probability"),
    ],
)
def test_bad_parameters_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SPEC.make(epsilon=None, domain=5, fields=dict(fields))
    assert info.value.field == field


def test_make_by_name_round_trips() -> None:
    p = SPEC.make(epsilon=1.0, domain=("a", "b"), fields={"padding": "2", "lo": "1", "hi": "5"})
    args = SPEC.make_args(p)
    assert SPEC.make(epsilon=args.epsilon, domain=args.domain, fields=dict(args.fields)) == p
    assert (p.lo, p.hi, p.padding) == (1.0, 5.0, 2)


@pytest.mark.parametrize(
    ("eps", "value_eps", "field"),
    [
        (1.0, 1e-13, "value_epsilon"),
        (1e-12, None, "epsilon"),
        (1.0, 1.5, "value_epsilon"),
    ],
)
def test_an_impossible_budget_split_names_the_field(eps: float, value_eps: float | None, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        PCKVParams.from_epsilon(5, eps, padding=2, value_epsilon=value_eps)
    assert info.value.field == field
