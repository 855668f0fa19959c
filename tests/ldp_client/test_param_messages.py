"""Issue 13, item 12: parameter errors speak of the user's own parameters and say what to change.

RAPPOR refuses h > k and (unless opted in) f = 0; OLH accepts epsilon above ln(2**20 - 1) (the optimal g
is capped at the largest g the wire allows instead of failing on a g the user never set); Laplace errors
name epsilon, grid or decay with the allowed range (never an internal threshold, never "a smaller grid" at
the smallest grid); a rule that fails only because of the 2**-32 rounding says so.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from ldp_client import wire
from ldp_client._oracle_math import MAX_LOCAL_HASH_BUCKETS
from ldp_client._proto.ldp.v1 import campaign_pb2
from ldp_client.errors import InvalidParameterError, PrivacyQuantizationWarning
from ldp_client.numeric_params import LaplaceParams
from ldp_client.params import (
    BasicRapporParams,
    BooleanRapporParams,
    GRRParams,
    OLHParams,
    OUEParams,
    RapporParams,
    make_params,
)

# ---------------------------------------------------------------------------------------------- RAPPOR


@pytest.mark.parametrize(("k", "h"), [(1, 2), (4, 8), (15, 16)])
def test_rappor_refuses_more_hashes_than_bits(k: int, h: int) -> None:
    with pytest.raises(InvalidParameterError) as info:
        RapporParams(k=k, h=h, m=4)
    assert info.value.field == "h"
    assert f"[1, {k}]" in str(info.value)


def test_rappor_accepts_h_equal_to_k() -> None:
    assert RapporParams(k=4, h=4, m=1).h == 4


def _basic(**kwargs: Any) -> BasicRapporParams:
    return BasicRapporParams(domain=3, **kwargs)


@pytest.mark.parametrize(
    "build", [RapporParams, _basic, BooleanRapporParams], ids=["rappor", "basic-rappor", "boolean-rappor"]
)
def test_rappor_f_zero_is_refused_unless_opted_in(build: Callable[..., Any]) -> None:
    for f in (0.0, 1e-12):  # 1e-12 rounds to 0 as well
        with pytest.raises(InvalidParameterError) as info:
            build(f=f)
        text = str(info.value)
        assert info.value.field == "f"
        assert "f=0.5" in text and "epsilon_inf = inf" in text and "allow_f_zero=True" in text
    opted = build(f=0.0, allow_f_zero=True)
    assert opted.epsilon_inf == math.inf
    # The opt-in is not a parameter of the mechanism: it does not take part in equality or the wire.
    assert opted == build(f=0.0, allow_f_zero=True)


def test_make_params_takes_the_f_zero_opt_in_as_text() -> None:
    with pytest.raises(InvalidParameterError, match="allow_f_zero=True"):
        make_params("rappor", fields={"f": "0"})
    params = make_params("rappor", fields={"f": "0", "allow_f_zero": "true"})
    assert isinstance(params, RapporParams) and params.epsilon_inf == math.inf
    with pytest.raises(InvalidParameterError, match="allow_f_zero='maybe' is invalid: allowed true or false"):
        make_params("rappor", fields={"allow_f_zero": "maybe"})


def test_an_unset_f_on_the_wire_still_decodes_as_f_zero() -> None:
    """The wire bytes are unchanged: an existing campaign with f unset (= 0) is described, not refused."""
    msg = campaign_pb2.Campaign(id="c", rappor=campaign_pb2.RapporParams(k=16, h=2, m=4, p=0.25, q=0.75))
    params = wire.params_from_proto(msg)
    assert isinstance(params, RapporParams)
    assert params.f == 0.0 and wire.epsilon_inf(params) == math.inf


# ------------------------------------------------------------------------------------------------- OLH


@pytest.mark.parametrize("epsilon", [13.9, 14.0, 20.0])
def test_olh_supports_epsilon_above_the_largest_optimal_g(epsilon: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyQuantizationWarning)
        params = OLHParams.from_epsilon(100, epsilon)
    assert params.g == MAX_LOCAL_HASH_BUCKETS
    assert epsilon * (1 - 1e-6) <= params.epsilon <= epsilon


def test_olh_far_above_the_representable_epsilon_warns_and_guarantees_less() -> None:
    with pytest.warns(PrivacyQuantizationWarning, match="epsilon=40"):
        params = OLHParams.from_epsilon(100, 40.0)
    assert params.g == MAX_LOCAL_HASH_BUCKETS and params.epsilon < 40.0


def test_olh_names_g_only_when_the_user_set_it() -> None:
    with pytest.raises(InvalidParameterError) as info:
        OLHParams.from_epsilon(100, 2.0, g=MAX_LOCAL_HASH_BUCKETS + 1)
    assert info.value.field == "g"
    with pytest.raises(InvalidParameterError) as info:
        OLHParams.from_epsilon(100, 1e-12)
    assert info.value.field == "epsilon" and "g=" not in str(info.value)


# --------------------------------------------------------------------------------------------- laplace


def _no_internal_numbers(text: str) -> None:
    """No 32-bit threshold (a bare integer of 7+ digits) and no internal field name in a message."""
    assert not re.search(r"(?<![.\d])\d{7,}", text), text
    assert "threshold" not in text, text


@pytest.mark.parametrize(
    ("kwargs", "field", "phrase"),
    [
        ({"epsilon": 1e-6}, "epsilon", "at least about 5.3e-05"),
        ({"epsilon": 1e-6, "grid": 2}, "epsilon", "at least about 5.3e-05"),
        ({"epsilon": 0.001, "grid": 1024}, "grid", "at most about 37 grid steps at epsilon=0.001"),
        ({"epsilon": 100.0}, "epsilon", "at most about 25.8 for laplace at grid=1024 (the default)"),
        ({"epsilon": 3000.0}, "epsilon", "at most about 25.8 for laplace at grid=1024 (the default)"),
        ({"epsilon": 40.0, "grid": 2}, "epsilon", "at most about 22 for laplace at grid=2 ("),
        # A table whose last weights round to 0 (an impossible output: infinite epsilon) used to fail
        # with a bare ValueError from math.log; it is refused like any epsilon that is too large.
        ({"epsilon": 28.9, "grid": 1024}, "epsilon", "at most about 25"),
    ],
)
def test_laplace_from_epsilon_errors_name_the_users_parameters(
    kwargs: dict[str, float], field: str, phrase: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        LaplaceParams.from_epsilon(0.0, 1.0, **kwargs)  # type: ignore[arg-type]
    text = str(info.value)
    assert info.value.field == field, text
    assert phrase in text, text
    assert "decay" not in text and "smaller grid for this epsilon" not in text, text
    _no_internal_numbers(text)


def test_laplace_limits_stated_in_messages_are_met() -> None:
    """The 'about' limits are conservative: a request just inside them is accepted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyQuantizationWarning)
        LaplaceParams.from_epsilon(0.0, 1.0, 5.3e-5)
        LaplaceParams.from_epsilon(0.0, 1.0, 0.001, grid=37)
        LaplaceParams.from_epsilon(0.0, 1.0, 25.8)
        LaplaceParams.from_epsilon(0.0, 1.0, 29.2, grid=16)
        LaplaceParams.from_epsilon(0.0, 1.0, 22.0, grid=2)


@pytest.mark.parametrize(
    ("grid", "decay", "phrase"),
    [
        (2, 1e-9, "a larger decay at grid=2"),
        (2, 0.99999999, "laplace needs an epsilon of at least about 5.3e-05"),
        (1024, 0.99999, "a grid of at most about 386 steps"),
        (2, 0.9999999999999, "becomes 1.0"),
    ],
)
def test_laplace_direct_decay_errors_show_the_users_value(grid: int, decay: float, phrase: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        LaplaceParams(lo=0.0, hi=1.0, grid=grid, decay=decay)
    text = str(info.value)
    assert info.value.field == "decay" and info.value.value == decay, text
    assert text.startswith(f"decay={decay!r} is invalid"), text
    assert phrase in text, text
    _no_internal_numbers(text)


# -------------------------------------------------------------------------------- rounding to 2**-32


def test_p_and_q_that_collapse_after_rounding_say_so() -> None:
    with pytest.raises(InvalidParameterError) as info:
        RapporParams(p=0.5, q=0.5 + 1e-11)
    text = str(info.value)
    assert "p=0.5 becomes 0.5 and q=0.50000000001 becomes 0.5" in text
    assert "differ by at least 2**-32" in text
    with pytest.raises(InvalidParameterError) as info:
        OUEParams(domain=4, p=0.5, q=0.5 - 1e-12)
    assert "q=0.499999999999 becomes 0.5 and p=0.5 becomes 0.5" in str(info.value)


def test_a_probability_that_rounds_onto_a_bound_says_so() -> None:
    with pytest.raises(InvalidParameterError) as info:
        GRRParams(domain=4, truth_probability=0.99999999999)
    assert "truth_probability=0.99999999999 becomes 1.0" in str(info.value)
    # No note when the value as written already breaks the rule.
    with pytest.raises(InvalidParameterError) as info:
        RapporParams(p=0.8, q=0.5)
    assert "rounded" not in str(info.value)
