"""Generated string populations for discovery (issue 16): seeded labels, their weights, bad specs."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client.errors import InvalidParameterError
from simulations.populations import EmpiricalPopulation, parse_categorical_population


def test_url_hosts_are_distinct_short_hostnames_with_a_zipf_mandelbrot_tail() -> None:
    pop = parse_categorical_population("url-hosts:3000")
    assert isinstance(pop, EmpiricalPopulation) and pop.support_size == 3000
    hosts = pop.labels(3000)
    assert len(set(hosts)) == 3000 and all(len(h.encode()) <= 16 and "." in h for h in hosts)
    assert hosts == parse_categorical_population("url-hosts:3000").labels(3000)  # the same on every run
    p = pop.probabilities(3000)
    ranks = np.array([1, 10, 100, 2999])
    np.testing.assert_allclose(p[ranks - 1] / p[0], 3.7 / (ranks + 2.7), rtol=1e-9)


def test_heavy_flat_gives_the_heavy_values_their_share() -> None:
    pop = parse_categorical_population("heavy-flat:20,0.4,5020")
    p = pop.probabilities(pop.support_size)
    assert p[:20].sum() == pytest.approx(0.4) and np.allclose(p[20:], 0.6 / 5000)
    words = pop.labels(pop.support_size)
    assert all(3 <= len(w) <= 6 and w.isalpha() and w.islower() for w in words)


@pytest.mark.parametrize(
    "spec",
    [
        "url-hosts",
        "url-hosts:0",
        "url-hosts:x",
        "heavy-flat:20,1.5,100",
        "heavy-flat:20,0.4,20",
        "zipf-words:0,9",
    ],
)
def test_bad_string_population_specs_are_refused_in_one_line(spec: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        parse_categorical_population(spec)
    assert info.value.field == "population" and "\n" not in str(info.value)
    assert spec.split(":", maxsplit=1)[0] in str(info.value)
