"""CALM marginals (calm, issue 18): parameters, the device's group, the encoder and its checks."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_client._oracle_math import oracle_variance
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.calm import SPEC, CalmParams, CalmReport, group_of, parse_attributes
from ldp_client.mechanisms.grr import GRRParams
from ldp_client.params import make_params
from ldp_client.secret import ClientSecret

ATTRS = "age=young/mid/old;os=android/ios;plan=free/paid;region=8"


def _params(epsilon: float = 1.0, marginals: str = "all-pairs") -> CalmParams:
    p = make_params("calm", epsilon=epsilon, fields={"attributes": ATTRS, "marginals": marginals})
    assert isinstance(p, CalmParams)
    return p


def test_attributes_and_marginals_by_name() -> None:
    p = _params(marginals="age+os;region+plan;age")
    assert p.names == ("age", "os", "plan", "region") and p.sizes == (3, 2, 2, 8)
    assert p.marginals == ((0, 1), (2, 3), (0,))
    assert [p.cells(i) for i in range(3)] == [6, 16, 3]
    assert len(_params().marginals) == 6  # all pairs of 4
    assert _params(marginals="full").full_group() == 0
    assert SPEC.item_table(_params(marginals="full")) and not SPEC.item_table(_params())


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_grr_is_used_exactly_where_its_variance_is_lower(epsilon: float) -> None:
    """CALM's adaptive oracle: GRR for a marginal of c cells where q(1-q)/(p-q)^2 is below local hashing's."""
    p = _params(epsilon, "age+os;age+region;os+plan+region;age+os+plan+region")
    olh = [lp for lp in p.group_params if not isinstance(lp, GRRParams)]
    olh_var = oracle_variance(olh[0].p_star, olh[0].q_star) if olh else None
    for lp in p.group_params:
        assert lp.epsilon <= p.epsilon * (1 + 1e-12)
        if isinstance(lp, GRRParams) and olh_var is not None:
            assert oracle_variance(lp.p, lp.q) < olh_var
    assert p.grr[0]  # 6 cells: GRR at every epsilon here
    assert p.epsilon == pytest.approx(epsilon, rel=1e-6) and p.epsilon <= epsilon
    assert not p.grr[3] or epsilon >= 4.0  # 96 cells: local hashing below e^eps of about 31


def test_the_group_comes_from_the_secret_stays_and_is_uniform() -> None:
    p = _params()  # 6 groups
    secret = ClientSecret.from_bytes(bytes(range(32)))
    assert group_of(p, "c1", secret) == group_of(p, "c1", secret)
    encode = SPEC.encoder(p, campaign_id="c1", secret=secret)
    record = {"age": "mid", "os": "ios", "plan": "free", "region": 3}
    assert {encode(record).group for _ in range(20)} == {group_of(p, "c1", secret)}
    groups = [group_of(p, "c1", ClientSecret.from_bytes(i.to_bytes(32, "big"))) for i in range(6000)]
    counts = np.bincount(groups, minlength=7)[1:]
    # Uniform on 1..6: each count 1000 +- 6 sd (sd = sqrt(6000 * 1/6 * 5/6) = 28.9).
    assert np.all(np.abs(counts - 1000) < 6 * 28.9), counts


def test_a_record_is_a_mapping_or_a_tuple_and_bad_ones_are_named() -> None:
    p = _params()
    assert p.record_indices({"age": "old", "os": "android", "plan": "paid", "region": 7}) == (2, 0, 1, 7)
    assert p.record_indices(("old", "android", "paid", 7)) == (2, 0, 1, 7)
    with pytest.raises(DomainError, match=r"record=.colour"):
        p.record_indices({"colour": "red", "age": "old", "os": "ios", "plan": "paid", "region": 1})
    with pytest.raises(DomainError, match=r"record\.os"):
        p.record_indices({"age": "old", "os": "windows", "plan": "paid", "region": 1})
    with pytest.raises(DomainError, match="a value for every attribute"):
        p.record_indices({"age": "old"})
    with pytest.raises(DomainError, match="4 values"):
        p.record_indices(("old", "ios"))


def test_bad_parameters_are_named() -> None:
    with pytest.raises(InvalidParameterError, match="marginals='colour'"):
        make_params("calm", epsilon=1.0, fields={"attributes": ATTRS, "marginals": "age+colour"})
    with pytest.raises(InvalidParameterError, match="attributes"):
        parse_attributes("age")
    with pytest.raises(InvalidParameterError, match="distinct attribute names"):
        make_params("calm", epsilon=1.0, fields={"attributes": "a=2;a=3", "marginals": "a"})
    with pytest.raises(InvalidParameterError, match="at most 65536 records"):
        make_params("calm", epsilon=1.0, fields={"attributes": "a=300;b=300", "marginals": "a"})


def test_a_grr_group_report_with_a_seed_or_a_cell_too_large_is_refused() -> None:
    p = _params(2.0, "age+os;region+plan")
    assert p.grr[0]
    with pytest.raises(InvalidReportError, match="no seed"):
        SPEC.batch_from_reports(p, [CalmReport(1, 5, 0, 0)])
    with pytest.raises(InvalidReportError, match=r"bucket in \[0, 5\]"):
        SPEC.batch_from_reports(p, [CalmReport(1, 0, 0, 6)])
    with pytest.raises(InvalidReportError, match=r"group in \[1, 2\]"):
        SPEC.batch_from_reports(p, [CalmReport(3, 0, 0, 0)])


def test_the_batch_encoder_reports_each_users_cell() -> None:
    """Nearly noiseless GRR: every report names the cell of its record in its group's marginal."""
    p = CalmParams(
        attributes=_params().attributes, marginals=((0, 1), (1, 3)), g=2, truth_probability=1 - 2**-20,
        grr=(True, True),
    )  # fmt: skip
    rng = np.random.default_rng(1)
    values = rng.integers(0, p.joint_size, 5000)
    groups, _, _, cells = SPEC.encode_batch(p, values, rng, campaign_id="c", labels=())
    expected = np.array(
        [p.cell_of(int(gr) - 1, p.joint_indices(int(v))) for gr, v in zip(groups, values, strict=True)]
    )
    assert np.mean(cells == expected) > 0.999
    with pytest.raises(DomainError, match="joint indices"):
        SPEC.encode_batch(p, np.array([p.joint_size]), rng, campaign_id="c", labels=())
