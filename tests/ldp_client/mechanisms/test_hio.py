"""Hierarchical intervals (hio, issue 18): the tree, the device's level, the encoder and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.mechanisms.hio import SPEC, HIOParams, HIOReport, level_of, node_of
from ldp_client.mechanisms.olh import bucket_of
from ldp_client.params import make_params
from ldp_client.secret import ClientSecret


def test_the_tree_has_the_fewest_levels_covering_the_domain() -> None:
    assert HIOParams.from_epsilon(100, 1.0).level_sizes() == (4, 16, 64, 256)
    assert HIOParams.from_epsilon(64, 1.0).level_sizes() == (4, 16, 64)
    assert HIOParams.from_epsilon(3, 1.0, branching=8).level_sizes() == (8,)
    p = HIOParams.from_epsilon(100, 1.0)
    # Node j of level l covers [j B^(h-l), (j+1) B^(h-l)).
    assert [node_of(p, level, 77) for level in (1, 2, 3, 4)] == [1, 4, 19, 77]


def test_epsilon_is_the_same_bound_at_every_level() -> None:
    p = HIOParams.from_epsilon(1000, 2.0, branching=5)
    assert p.epsilon == pytest.approx(2.0, rel=1e-6) and p.epsilon <= 2.0
    # GRR levels: the largest probability at or below local hashing's epsilon (rounded toward privacy).
    assert all(
        lp.epsilon <= p.epsilon and lp.epsilon == pytest.approx(p.epsilon, rel=1e-6) for lp in p.level_params
    )


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 3.0, 5.0])
def test_grr_is_used_exactly_where_its_variance_is_lower(epsilon: float) -> None:
    """CKS §4.2: the better oracle per level (Wang et al. 2017: GRR below about 3 e^eps + 2 values)."""
    from ldp_client._oracle_math import oracle_variance

    p = HIOParams.from_epsilon(4096, epsilon, branching=4)
    olh = p.level_params[-1]
    for level, lp in enumerate(p.level_params, start=1):
        grr_p = GRRParams.from_epsilon(4**level, olh.epsilon)
        better = oracle_variance(grr_p.p, grr_p.q) < oracle_variance(olh.p_star, olh.q_star)
        assert p.uses_grr(level) == better, (level, lp)
    assert 0 < p.grr_levels < p.levels or epsilon < 1


def test_a_grr_level_report_with_a_seed_is_refused() -> None:
    from ldp_client.errors import InvalidReportError

    p = HIOParams.from_epsilon(64, 2.0)
    assert p.grr_levels >= 1
    with pytest.raises(InvalidReportError, match="no seed"):
        SPEC.batch_from_reports(p, [HIOReport(1, 5, 0, 0)])
    with pytest.raises(InvalidReportError, match=r"bucket in \[0, 3\]"):
        SPEC.batch_from_reports(p, [HIOReport(1, 0, 0, 4)])


def test_the_level_comes_from_the_secret_stays_and_is_uniform() -> None:
    p = HIOParams.from_epsilon(256, 1.0)  # h = 4
    secret = ClientSecret.from_bytes(bytes(range(32)))
    assert level_of(p, "c1", secret) == level_of(p, "c1", secret)
    encode = SPEC.encoder(p, campaign_id="c1", secret=secret)
    assert {encode(v).level for v in range(0, 256, 17)} == {level_of(p, "c1", secret)}
    levels = [level_of(p, "c1", ClientSecret.from_bytes(i.to_bytes(32, "big"))) for i in range(4000)]
    counts = np.bincount(levels, minlength=5)[1:]
    # Uniform on 1..4: each count 1000 +- 6 sd (sd = sqrt(4000 * 1/4 * 3/4) = 27.4).
    assert np.all(np.abs(counts - 1000) < 6 * 27.4), counts


def test_a_report_hashes_the_node_of_its_level() -> None:
    p = HIOParams(domain=100, branching=4, g=8, truth_probability=0.999999)
    encode = SPEC.encoder(p, campaign_id="c", secret=ClientSecret.from_bytes(b"k" * 32))
    hits = 0
    for _ in range(200):
        r = encode(57)
        assert isinstance(r, HIOReport)
        hits += bucket_of(r.a, r.b, node_of(p, r.level, 57), p.g) == r.bucket
    assert hits >= 195


def test_a_device_without_a_secret_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="secret"):
        SPEC.encoder(HIOParams.from_epsilon(10, 1.0), campaign_id="c", secret=None)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"branching": 1, "g": 4, "truth_probability": 0.5}, "branching"),
        ({"branching": 4, "g": 1, "truth_probability": 0.5}, "g"),
        ({"branching": 4, "g": 4, "truth_probability": 0.1}, "truth_probability"),
        ({"branching": 4}, "epsilon, or g and truth_probability"),
        ({"g": 4, "truth_probability": 0.5, "k": 3}, "param k"),
    ],
)
def test_bad_parameters_are_named(fields: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        make_params("hio", domain=100, fields=fields)


def test_a_domain_too_large_for_one_estimate_message_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match=r"domain=32769.*at most 32768"):
        HIOParams.from_epsilon(32769, 1.0)
    with pytest.raises(InvalidParameterError, match=r"at most 131072 nodes"):
        HIOParams.from_epsilon(32768, 1.0, branching=1000)


def test_made_by_name_with_epsilon_and_branching() -> None:
    p = make_params("hio", epsilon=1.0, domain=50, fields={"branching": "8"})
    assert isinstance(p, HIOParams) and p.branching == 8 and p.levels == 2
