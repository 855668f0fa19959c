"""Tests of the parameter dataclasses: every bad input is rejected, and the epsilons are the right ones."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError, PrivacyQuantizationWarning
from ldp_client.params import (
    MAX_DOMAIN_SIZE,
    BasicRapporParams,
    BinaryRRParams,
    BooleanRapporParams,
    Domain,
    GRRParams,
    RapporParams,
)

LN3 = math.log(3.0)
BAD_EPSILONS = [0, 0.0, -1.0, -1e-300, math.nan, math.inf, -math.inf, "1.0", None, True, [1.0]]

# --- epsilon validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_EPSILONS)
def test_rr_from_epsilon_rejects_bad_epsilon(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon="):
        BinaryRRParams.from_epsilon(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", BAD_EPSILONS)
def test_grr_from_epsilon_rejects_bad_epsilon(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon="):
        GRRParams.from_epsilon(4, bad)  # type: ignore[arg-type]


def test_tiny_epsilon_that_cannot_be_represented_is_rejected() -> None:
    # tanh(eps/2) * 2**32 < 1: no nonzero 32-bit truth probability is that small.
    with pytest.raises(InvalidParameterError, match="epsilon="):
        BinaryRRParams.from_epsilon(1e-12)
    with pytest.raises(InvalidParameterError, match="epsilon="):
        GRRParams.from_epsilon(1000, 1e-12)


# --- probability validation --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.1, 2**-34, math.nan, math.inf, "0.5", None, True])
def test_rr_truth_probability_out_of_range(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="truth_probability="):
        BinaryRRParams(truth_probability=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, math.nan, "x"])
def test_rr_yes_probability_out_of_range(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="yes_probability="):
        BinaryRRParams(truth_probability=0.5, yes_probability=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("d", "p"), [(2, 0.5), (4, 0.25), (4, 0.1), (3, 1 / 3), (5, 1.0), (5, 1.2), (5, -1.0)]
)
def test_grr_truth_probability_must_exceed_one_over_d(d: int, p: float) -> None:
    with pytest.raises(InvalidParameterError, match="truth_probability="):
        GRRParams(domain=Domain.of(d), truth_probability=p)


def test_grr_truth_probability_just_above_one_over_d() -> None:
    params = GRRParams(domain=Domain.of(4), truth_probability=0.25 + 2**-32)
    assert params.truth_threshold == (1 << 30) + 1
    assert params.epsilon > 0


def test_rr_thresholds_are_exact_for_dyadic_probabilities() -> None:
    params = BinaryRRParams(truth_probability=0.75, yes_probability=0.25)
    assert (params.truth_threshold, params.yes_threshold) == (3 << 30, 1 << 30)


# --- domains -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        1,
        0,
        -2,
        MAX_DOMAIN_SIZE + 1,
        [],
        ["only"],
        "abc",
        b"ab",
        True,
        2.0,
        None,
    ],
)
def test_domain_rejects_bad_specs(spec: object) -> None:
    with pytest.raises(InvalidParameterError, match="domain="):
        Domain.of(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("labels", [["a", "b", "a"], ["x", "x"]])
def test_domain_rejects_duplicate_labels(labels: list[str]) -> None:
    with pytest.raises(InvalidParameterError, match="distinct labels"):
        Domain.of(labels)


@pytest.mark.parametrize("labels", [["a", 1], [None, "b"], [b"a", "b"], ["a", ("b",)]])
def test_domain_rejects_non_string_labels(labels: list[object]) -> None:
    with pytest.raises(InvalidParameterError, match="strings"):
        Domain.of(labels)  # type: ignore[arg-type]


def test_domain_constructor_checks_label_count() -> None:
    with pytest.raises(InvalidParameterError, match="domain="):
        Domain(size=3, labels=("a", "b"))
    with pytest.raises(InvalidParameterError, match="domain="):
        Domain(size=1)


def test_grr_params_validate_their_domain() -> None:
    with pytest.raises(InvalidParameterError, match="domain="):
        GRRParams.from_epsilon(["a"], 1.0)
    with pytest.raises(InvalidParameterError, match="domain="):
        GRRParams.from_epsilon(["a", "a"], 1.0)
    with pytest.raises(InvalidParameterError, match="domain="):
        BasicRapporParams(domain=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 3, True, "0", 1.0, None])
def test_integer_domain_index_rejects_values_outside(bad: object) -> None:
    with pytest.raises(DomainError, match=r"value=.*\[0, 2\]"):
        Domain.of(3).index(bad)


@pytest.mark.parametrize("bad", ["d", "", 0, None, b"a"])
def test_label_domain_index_rejects_values_outside(bad: object) -> None:
    dom = Domain.of(["a", "b", "c"])
    with pytest.raises(DomainError, match="value="):
        dom.index(bad)
    assert [dom.index(v) for v in "abc"] == [0, 1, 2]


# --- quantization and epsilon ------------------------------------------------------------------------


def test_rr_from_epsilon_warns_when_epsilon_cannot_be_met() -> None:
    # tanh(20) rounds to 1 - 2**-32 at best, so epsilon 40 is out of reach; the effective one is lower.
    with pytest.warns(PrivacyQuantizationWarning, match="epsilon=40"):
        params = BinaryRRParams.from_epsilon(40)
    assert params.truth_threshold == PROB_ONE - 1
    assert params.epsilon < 40


def test_grr_from_epsilon_warns_when_epsilon_cannot_be_met() -> None:
    with pytest.warns(PrivacyQuantizationWarning):
        params = GRRParams.from_epsilon(16, 40.0)
    assert params.epsilon < 40


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 2.0, 5.0, 10.0])
def test_from_epsilon_meets_ordinary_requests_without_warning(eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rr = BinaryRRParams.from_epsilon(eps)
        grr = GRRParams.from_epsilon(32, eps)
    for params in (rr, grr):
        assert params.epsilon <= eps
        assert params.epsilon == pytest.approx(eps, rel=1e-6)


@settings(max_examples=300, deadline=None)
@given(
    eps=st.floats(min_value=1e-6, max_value=60.0, allow_nan=False, allow_infinity=False),
    d=st.integers(min_value=2, max_value=100_000),
)
def test_effective_epsilon_never_exceeds_requested(eps: float, d: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        assert BinaryRRParams.from_epsilon(eps).epsilon <= eps
        try:
            grr = GRRParams.from_epsilon(d, eps)
        except InvalidParameterError:
            # Only when p = e^eps/(e^eps + d - 1) is within about 2**-32 of 1/d (tiny eps, large d):
            # p - 1/d = (e^eps - 1) / (d (e^eps + d - 1)).
            assert math.expm1(eps) / (d * (math.exp(eps) + d - 1)) < 2.0**-31
            return
        assert grr.epsilon <= eps


def test_two_coin_default_is_ln3() -> None:
    params = BinaryRRParams.two_coin()
    assert params.p_yes_given_yes == 0.75
    assert params.p_yes_given_no == 0.25
    assert params.epsilon == pytest.approx(LN3, rel=1e-15)


def test_warner_form_is_ln_p_over_1_minus_p() -> None:
    params = BinaryRRParams.from_epsilon(1.0)
    p = params.p_yes_given_yes
    assert params.p_yes_given_no == pytest.approx(1 - p, rel=1e-15)
    assert params.epsilon == pytest.approx(math.log(p / (1 - p)), rel=1e-12)


def test_grr_epsilon_formula() -> None:
    params = GRRParams(domain=Domain.of(5), truth_probability=0.5)
    assert params.p == 0.5
    assert params.q == 0.125
    assert params.epsilon == pytest.approx(math.log(0.5 * 4 / 0.5), rel=1e-15)


# --- RAPPOR families ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"k": 0}, "k"),
        ({"k": 4097}, "k"),
        ({"k": 8.0}, "k"),
        ({"k": True}, "k"),
        ({"h": 0}, "h"),
        ({"h": 17}, "h"),
        ({"m": 0}, "m"),
        ({"m": (1 << 16) + 1}, "m"),
        ({"f": 1.0}, "f"),
        ({"f": -0.1}, "f"),
        ({"f": math.nan}, "f"),
        ({"p": 0.75, "q": 0.75}, "p"),
        ({"p": 0.8, "q": 0.5}, "p"),
        ({"p": -0.1}, "p"),
        ({"q": 1.5}, "q"),
    ],
)
def test_rappor_params_reject_bad_values(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError, match=f"{field}="):
        RapporParams(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [BasicRapporParams, BooleanRapporParams])
@pytest.mark.parametrize(
    ("kwargs", "field"), [({"f": 1.0}, "f"), ({"f": -0.1}, "f"), ({"p": 0.75, "q": 0.75}, "p")]
)
def test_rappor_variants_reject_bad_noise(cls: type, kwargs: dict[str, object], field: str) -> None:
    extra = {"domain": Domain.of(4)} if cls is BasicRapporParams else {}
    with pytest.raises(InvalidParameterError, match=f"{field}="):
        cls(**extra, **kwargs)


def test_rappor_limits_are_accepted() -> None:
    params = RapporParams(k=4096, h=16, m=1 << 16)
    assert params.num_bytes == 512
    assert RapporParams(k=1, h=1, m=1).num_bytes == 1


# Reference values: q* = f(p+q)/2 + (1-f) q, p* = f(p+q)/2 + (1-f) p (CCS 2014). With f=.5, p=.5, q=.75:
# q* = 0.6875, p* = 0.5625, and one bit contributes ln(q*(1-p*)/(p*(1-q*))) = ln(77/45) = 0.537157...
ONE_BIT = math.log((0.6875 * 0.4375) / (0.5625 * 0.3125))


def test_rappor_default_epsilons() -> None:
    params = RapporParams()  # k=128, h=2, m=64, f=.5, p=.5, q=.75
    assert params.epsilon_inf == pytest.approx(2 * 2 * LN3, rel=1e-12)
    assert params.epsilon_one == pytest.approx(2 * ONE_BIT, rel=1e-12)
    assert params.epsilon_one == pytest.approx(1.0743, abs=5e-5)
    assert params.epsilon == params.epsilon_one
    assert (params.prob_one_if_set, params.prob_one_if_clear) == (0.6875, 0.5625)


def test_rappor_bit_rates_say_which_bloom_bit() -> None:
    # Issue 14: RAPPOR's bit-level rates are named by the Bloom bit they condition on, so they cannot be
    # swapped with the p_star/q_star of the Support contract (P(support | holds v) / P(support | not)).
    f, p, q = 0.25, 0.375, 0.875
    for params in (
        RapporParams(f=f, p=p, q=q),
        BasicRapporParams(domain=3, f=f, p=p, q=q),
        BooleanRapporParams(f=f, p=p, q=q),
    ):
        assert not hasattr(params, "p_star") and not hasattr(params, "q_star")
        assert params.prob_one_if_set == f / 2 * p + (1 - f / 2) * q  # P(report bit 1 | Bloom bit 1)
        assert params.prob_one_if_clear == f / 2 * q + (1 - f / 2) * p  # P(report bit 1 | Bloom bit 0)


def test_basic_rappor_epsilons() -> None:
    params = BasicRapporParams(domain=Domain.of(["a", "b", "c"]))
    assert params.k == 3
    assert params.epsilon_inf == pytest.approx(2 * LN3, rel=1e-12)
    assert params.epsilon_one == pytest.approx(ONE_BIT, rel=1e-12)


def test_boolean_rappor_epsilons() -> None:
    # One bit differs: eps_inf = ln((1-f/2)/(f/2)) = ln 3, and eps_1 is the one-bit channel with
    # P(1|1) = q* = 0.6875, P(1|0) = p* = 0.5625: max(ln(q*/p*), ln((1-p*)/(1-q*))) = ln 1.4.
    params = BooleanRapporParams()
    assert params.k == 1
    assert params.epsilon_inf == pytest.approx(LN3, rel=1e-12)
    assert params.epsilon_one == pytest.approx(math.log(1.4), rel=1e-12)


def test_rappor_without_prr_has_infinite_longitudinal_epsilon() -> None:
    params = RapporParams(f=0.0, allow_f_zero=True)
    assert params.epsilon_inf == math.inf
    assert math.isfinite(params.epsilon_one)
