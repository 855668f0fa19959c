"""Populations: exact probabilities, spec parsing, CSV parsing, errors, and seeded sampling checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ldp_client.errors import InvalidParameterError
from simulations.populations import (
    CategoricalPopulation,
    EmpiricalPopulation,
    GeometricPopulation,
    NumericPopulation,
    TruncatedNormalPopulation,
    UniformNumericPopulation,
    UniformPopulation,
    ZipfPopulation,
    load_empirical_csv,
    parse_categorical_population,
    parse_numeric_population,
    parse_population,
)

ALPHA = 1e-6


def _z(n_tests: int) -> float:
    """Two-sided Bonferroni z at family-wise level ALPHA, never below 5."""
    return max(5.0, float(stats.norm.isf(ALPHA / (2 * n_tests))))


def _write(tmp_path: Path, text: str, name: str = "pop.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- exact


@pytest.mark.parametrize("spec", ["zipf:1.1", "zipf:0.5", "uniform", "geometric:0.3", "geometric:0.999"])
@pytest.mark.parametrize("d", [1, 2, 7, 1000])
def test_probabilities_sum_to_one(spec: str, d: int) -> None:
    pop = parse_categorical_population(spec)
    probs = pop.probabilities(d)
    assert probs.shape == (d,)
    assert probs.dtype == np.float64
    assert np.all(probs >= 0)
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=0, abs_tol=1e-12)


def test_zipf_ratios_are_exact() -> None:
    s = 1.1
    probs = ZipfPopulation(s=s).probabilities(500)
    ranks = np.arange(1, 501, dtype=np.float64)
    np.testing.assert_allclose(probs / probs[0], ranks**-s, rtol=1e-13)
    harmonic = sum(r**-s for r in range(1, 501))
    assert math.isclose(float(probs[0]), 1.0 / harmonic, rel_tol=1e-12)


def test_uniform_is_flat() -> None:
    np.testing.assert_array_equal(UniformPopulation().probabilities(8), np.full(8, 0.125))


def test_geometric_is_truncated_and_renormalised() -> None:
    p, d = 0.3, 5
    probs = GeometricPopulation(p=p).probabilities(d)
    expected = np.array([(1 - p) ** i * p for i in range(d)]) / (1 - (1 - p) ** d)
    np.testing.assert_allclose(probs, expected, rtol=1e-13)
    np.testing.assert_allclose(probs[1:] / probs[:-1], 1 - p, rtol=1e-13)


def test_labels_default_to_indices() -> None:
    assert ZipfPopulation(s=1.0).labels(3) == ("0", "1", "2")


# ------------------------------------------------------------------------------------------ spec parsing


def test_parse_each_form(tmp_path: Path) -> None:
    path = _write(tmp_path, "a,1\nb,3\n")
    assert parse_population("zipf:1.1") == ZipfPopulation(s=1.1)
    assert parse_population(" Uniform ") == UniformPopulation()
    assert parse_population("geometric:0.3") == GeometricPopulation(p=0.3)
    emp = parse_population(f"empirical:{path}")
    assert isinstance(emp, EmpiricalPopulation)
    assert emp.values == ("a", "b") and emp.counts == (1, 3)
    assert parse_population("normal:0,0.5") == TruncatedNormalPopulation(mu=0.0, sigma=0.5, lo=-1.0, hi=1.0)
    assert parse_population("normal:10, 2, 0, 20") == TruncatedNormalPopulation(mu=10, sigma=2, lo=0, hi=20)
    assert parse_population("uniform-num:-1,1") == UniformNumericPopulation(lo=-1.0, hi=1.0)


@pytest.mark.parametrize(
    "spec", ["zipf:1.1", "uniform", "geometric:0.25", "normal:0.1,0.5,-1.0,1.0", "uniform-num:-2.0,3.5"]
)
def test_spec_round_trips(spec: str) -> None:
    pop = parse_population(spec)
    assert parse_population(pop.spec) == pop


@pytest.mark.parametrize(
    "spec",
    [
        "pareto:2",
        "",
        "zipf",
        "zipf:",
        "zipf:abc",
        "zipf:0",
        "zipf:-1",
        "zipf:nan",
        "zipf:1,2",
        "uniform:3",
        "geometric:0",
        "geometric:1",
        "geometric:1.5",
        "normal:0",
        "normal:0,0",
        "normal:0,-1",
        "normal:0,1,1,-1",
        "normal:0,1,2",
        "normal:50,1",
        "uniform-num:1,1",
        "uniform-num:2,1",
        "uniform-num:inf,1",
        "empirical:",
    ],
)
def test_bad_specs_name_the_spec(spec: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        parse_population(spec)
    assert info.value.field == "population"
    assert repr(spec) in str(info.value)


def test_unknown_population_lists_what_is_allowed() -> None:
    with pytest.raises(InvalidParameterError, match="zipf:S") as info:
        parse_population("pareto:2")
    for name in ("uniform", "geometric:P", "empirical:PATH", "normal:MU,SIGMA", "uniform-num:LO,HI"):
        assert name in info.value.allowed


def test_kind_specific_parsers() -> None:
    assert isinstance(parse_categorical_population("uniform"), CategoricalPopulation)
    assert isinstance(parse_numeric_population("uniform-num:0,1"), NumericPopulation)
    with pytest.raises(InvalidParameterError, match="categorical"):
        parse_categorical_population("normal:0,1")
    with pytest.raises(InvalidParameterError, match="numeric"):
        parse_numeric_population("zipf:1.1")


# -------------------------------------------------------------------------------------------- empirical


def test_csv_with_header_quotes_bom_and_trailing_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "apps.csv"
    path.write_bytes('\ufeffvalue,count\n"a,b",5\n c , 0\nd,15\n\n\n'.encode())
    pop = load_empirical_csv(path)
    assert pop.values == ("a,b", "c", "d")
    assert pop.counts == (5, 0, 15)
    assert pop.total == 20
    np.testing.assert_array_equal(pop.probabilities(3), [0.25, 0.0, 0.75])
    np.testing.assert_array_equal(pop.probabilities(5), [0.25, 0.0, 0.75, 0.0, 0.0])
    assert pop.labels(5) == ("a,b", "c", "d", "<unused-3>", "<unused-4>")
    assert pop.spec == f"empirical:{path}"


def test_csv_without_header(tmp_path: Path) -> None:
    pop = load_empirical_csv(_write(tmp_path, "x,1\ny,2"))
    assert pop.values == ("x", "y") and pop.counts == (1, 2)


def test_placeholder_labels_stay_distinct() -> None:
    pop = EmpiricalPopulation.from_counts({"<unused-1>": 2})
    labels = pop.labels(3)
    assert len(set(labels)) == 3
    assert labels[0] == "<unused-1>"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("a,1\na,2\n", 2, "already on line 1"),
        ("a,1\n\nb,2\n", 2, "blank"),
        ("a,1\nb,-2\n", 2, "negative"),
        ("a,-2\n", 1, "negative"),
        ("a,1\n,2\n", 2, "non-empty value"),
        ("a,1\nb,\n", 2, "non-negative integer"),
        ("a,1\nb,2.5\n", 2, "non-negative integer"),
        ("a,1\nb,2,3\n", 2, "two fields"),
        ("value,count\na,1\nb\n", 3, "two fields"),
    ],
)
def test_csv_errors_name_line_and_value(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidParameterError, match=fragment) as info:
        load_empirical_csv(path)
    assert f"line {line}" in str(info.value)
    assert str(path) in str(info.value)


def test_csv_errors_quote_the_value(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="'-7'"):
        load_empirical_csv(_write(tmp_path, "a,1\nb,-7\n"))
    with pytest.raises(InvalidParameterError, match="'dup'"):
        load_empirical_csv(_write(tmp_path, "dup,1\ndup,2\n"))


@pytest.mark.parametrize("text", ["value,count\n", "", "a,0\nb,0\n"])
def test_csv_without_users_is_rejected(tmp_path: Path, text: str) -> None:
    with pytest.raises(InvalidParameterError):
        load_empirical_csv(_write(tmp_path, text))


def test_missing_csv_is_a_parameter_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="FileNotFoundError"):
        parse_population(f"empirical:{tmp_path / 'nope.csv'}")


def test_domain_smaller_than_support_is_rejected() -> None:
    pop = EmpiricalPopulation.from_counts({"a": 1, "b": 2, "c": 3})
    rng = np.random.default_rng(0)
    for call in (
        lambda: pop.probabilities(2),
        lambda: pop.labels(2),
        lambda: pop.sample_counts(10, 2, rng),
        lambda: pop.sample_values(10, 2, rng),
    ):
        with pytest.raises(InvalidParameterError, match="at least 3") as info:
            call()
        assert info.value.field == "domain_size"


# -------------------------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("n", [0, -5, True, 2.0, "10"])
def test_n_users_must_be_a_positive_integer(n: object) -> None:
    rng = np.random.default_rng(0)
    pop = UniformPopulation()
    with pytest.raises(InvalidParameterError, match="n_users"):
        pop.sample_counts(n, 4, rng)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="n_users"):
        pop.sample_values(n, 4, rng)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="n_users"):
        UniformNumericPopulation(lo=0, hi=1).sample_reals(n, rng)  # type: ignore[arg-type]


@pytest.mark.parametrize("d", [0, -1, 2.5, 1 << 30])
def test_domain_size_is_validated(d: object) -> None:
    with pytest.raises(InvalidParameterError, match="domain_size"):
        UniformPopulation().probabilities(d)  # type: ignore[arg-type]


def test_rng_must_be_a_generator() -> None:
    with pytest.raises(InvalidParameterError, match="rng"):
        UniformPopulation().sample_counts(10, 4, np.random.RandomState(0))  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 17, 10**9, 10**12])
def test_sample_counts_sums_to_n(n: int) -> None:
    counts = ZipfPopulation(s=1.1).sample_counts(n, 1000, np.random.default_rng(1))
    assert counts.dtype == np.int64 and counts.shape == (1000,)
    assert int(counts.sum()) == n and np.all(counts >= 0)


def test_zero_probability_values_are_never_drawn() -> None:
    pop = EmpiricalPopulation.from_counts({"a": 1, "b": 0, "c": 1})
    rng = np.random.default_rng(2)
    values = pop.sample_values(10_000, 6, rng, chunk_size=999)
    assert set(np.unique(values).tolist()) == {0, 2}
    counts = pop.sample_counts(10_000, 6, rng)
    assert counts[1] == 0 and counts[3:].sum() == 0


@pytest.mark.statistical
def test_sample_counts_match_probabilities() -> None:
    """One multinomial draw: each count within z * sqrt(n p (1-p)) of n p (Bonferroni over items)."""
    d, n = 200, 10**7
    pop = ZipfPopulation(s=1.1)
    probs = pop.probabilities(d)
    counts = pop.sample_counts(n, d, np.random.default_rng(3))
    sd = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) <= _z(d) * sd)


@pytest.mark.statistical
@pytest.mark.parametrize("spec", ["zipf:1.1", "geometric:0.2"])
def test_sample_values_goodness_of_fit(spec: str) -> None:
    """Chi-square of per-user values against the exact probabilities, alpha = 1e-6 (pooled tail)."""
    d, n = 50, 200_000
    pop = parse_categorical_population(spec)
    probs = pop.probabilities(d)
    values = pop.sample_values(n, d, np.random.default_rng(4), chunk_size=30_001)
    assert values.shape == (n,) and values.dtype == np.int64
    observed = np.bincount(values, minlength=d).astype(np.float64)
    expected = n * probs
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    assert chi2 < stats.chi2.isf(ALPHA, obs.size - 1)


def test_iter_values_chunks() -> None:
    chunks = list(UniformPopulation().iter_values(10, 4, np.random.default_rng(5), chunk_size=4))
    assert [c.size for c in chunks] == [4, 4, 2]


# --------------------------------------------------------------------------------------------- numeric


def test_truncated_normal_moments_match_scipy() -> None:
    pop = TruncatedNormalPopulation(mu=0.3, sigma=0.7, lo=-1.0, hi=1.0)
    a, b = (pop.lo - pop.mu) / pop.sigma, (pop.hi - pop.mu) / pop.sigma
    ref = stats.truncnorm(a, b, loc=pop.mu, scale=pop.sigma)
    assert math.isclose(pop.mean, float(ref.mean()), rel_tol=1e-10)
    assert math.isclose(pop.variance, float(ref.var()), rel_tol=1e-10)
    assert math.isclose(pop.mass, stats.norm.cdf(b) - stats.norm.cdf(a), rel_tol=1e-12)


def test_uniform_numeric_moments() -> None:
    pop = UniformNumericPopulation(lo=-1.0, hi=3.0)
    assert pop.mean == 1.0
    assert pop.variance == pytest.approx(16 / 12)


def test_truncated_normal_needs_mass_in_range() -> None:
    with pytest.raises(InvalidParameterError, match="mass"):
        TruncatedNormalPopulation(mu=5.0, sigma=1.0)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "pop",
    [
        TruncatedNormalPopulation(mu=0.3, sigma=0.7),
        TruncatedNormalPopulation(mu=1.5, sigma=1.0, lo=-1.0, hi=1.0),
        UniformNumericPopulation(lo=-1.0, hi=1.0),
    ],
    ids=["normal-inside", "normal-tail", "uniform"],
)
def test_numeric_samples(pop: NumericPopulation) -> None:
    """Values stay in range; the sample mean is within z * sd / sqrt(n) of the exact mean; KS at 1e-6."""
    n = 100_000
    x = pop.sample_reals(n, np.random.default_rng(6))
    assert x.shape == (n,) and x.min() >= pop.lo and x.max() <= pop.hi
    assert abs(float(x.mean()) - pop.mean) <= _z(1) * math.sqrt(pop.variance / n)
    if isinstance(pop, TruncatedNormalPopulation):
        a, b = (pop.lo - pop.mu) / pop.sigma, (pop.hi - pop.mu) / pop.sigma
        cdf = stats.truncnorm(a, b, loc=pop.mu, scale=pop.sigma).cdf
    else:
        cdf = stats.uniform(loc=pop.lo, scale=pop.hi - pop.lo).cdf
    assert stats.kstest(x, cdf).pvalue > ALPHA
