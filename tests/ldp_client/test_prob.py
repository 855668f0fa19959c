"""Exact tests of the quantized Bernoulli bit-vector sampler (no sampling: full enumeration), and of the
two rules that turn numbers into thresholds (docs/wire-protocol.md, "Probabilities and thresholds"): the
test vectors are read from the document itself and checked against the library and against an exact
evaluation written here, independently of the library's."""

from __future__ import annotations

import itertools
import math
import random
import re
import shlex
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from ldp_client import wire
from ldp_client._prob import (
    PROB_ONE,
    BitVectorSampler,
    expansion_ops,
    largest_threshold,
    quantize_probability,
    ratio_within_exp,
    smallest_threshold,
)
from ldp_client.errors import InvalidParameterError
from ldp_client.numeric_params import DuchiParams, SRParams
from ldp_client.params import (
    BinaryRRParams,
    GRRParams,
    OLHParams,
    OUEParams,
    SubsetSelectionParams,
    SUEParams,
    make_params,
)

WIRE_DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"
N = PROB_ONE


def _exact_one_probability(threshold: int) -> float:
    """P(bit = 1) of the expansion sampler, by enumerating every value of its random input bits."""
    ops = expansion_ops(threshold)
    if not ops:
        return threshold / PROB_ONE
    ones = 0
    for bits in itertools.product((0, 1), repeat=len(ops)):
        r = 0
        for is_or, x in zip(ops, bits, strict=True):
            r = (x | r) if is_or else (x & r)
        ones += r
    return ones / 2 ** len(ops)


@pytest.mark.parametrize("threshold", [1 << 31, 3 << 30, 1 << 30, 5 << 28, 0, PROB_ONE, 0xABC00000])
def test_expansion_gives_exact_probability(threshold: int) -> None:
    assert _exact_one_probability(threshold) == threshold / PROB_ONE


def test_dyadic_three_quarters_costs_two_words() -> None:
    assert len(expansion_ops(3 << 30)) == 2
    assert BitVectorSampler(3 << 30, 128).nbytes == 32


def test_sampler_width_and_extremes() -> None:
    assert BitVectorSampler(PROB_ONE, 13).sample(b"") == (1 << 13) - 1
    assert BitVectorSampler(0, 13).sample(b"") == 0
    s = BitVectorSampler(1 << 31, 12)
    assert s.sample(b"\xff\xff") == 0xFFF


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1, 1.1, "0.5", True])
def test_quantize_rejects_bad_values(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="p="):
        quantize_probability("p", bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ thresholds: the rules

#: Parameter dataclass attribute holding the threshold of each probability field.
_THRESHOLD_OF = {
    "truth_probability": "truth_threshold",
    "yes_probability": "yes_threshold",
    "p": "p_threshold",
    "q": "q_threshold",
    "f": "f_threshold",
    "low_probability": "low_threshold",
    "high_probability": "high_threshold",
}


def _ln_exact(num: int, den: int) -> Decimal:
    """ln(num/den) to 80 significant digits (decimal's ln is correctly rounded)."""
    ctx = Context(prec=80)
    return ctx.ln(ctx.divide(Decimal(num), Decimal(den)))


def _epsilon_at_most(num: int, den: int, epsilon: float) -> bool:
    """ln(num/den) <= epsilon (the double's exact value), decided with 80 digits, independently of the
    library (which compares with exp, not ln)."""
    gap = Decimal(epsilon) - _ln_exact(num, den)
    assert abs(gap) > Decimal("1e-60"), "too close to decide at 80 digits"
    return gap > 0


def _condition(mechanism: str, params: Any, field: str) -> tuple[Any, bool]:
    """The exact ratio of the Rule 2 table as a function of T, and whether the library takes the largest
    qualifying T (True) or the smallest (False)."""
    if mechanism == "rr":
        return (lambda t: (N + t, N - t)), True
    if mechanism == "grr":
        d = params.domain.size
        return (lambda t: (t * (d - 1), N - t)), True
    if mechanism in ("olh", "blh"):
        g = params.g
        return (lambda t: (t * (g - 1), N - t)), True
    if mechanism in ("hr", "sr"):
        return (lambda t: (t, N - t)), True
    if mechanism == "ss":
        d, k = params.domain.size, params.k
        return (lambda t: (t * (d - k), (N - t) * k)), True
    if mechanism == "oue" and field == "q":
        return (lambda t: (N - t, t)), False
    if mechanism == "sue" and field == "p":
        return (lambda t: (t * t, (N - t) ** 2)), True
    if mechanism == "duchi":
        return (lambda t: (N - t, t)), False
    if mechanism == "piecewise":
        g, m = params.cells, params.window
        return (lambda t: (t * (g - m), (N - t) * m)), True
    raise AssertionError(f"no Rule 2 condition for {mechanism}.{field}")


#: Probabilities a mechanism fixes whatever epsilon is (rr's yes 1/2, OUE's p 1/2, SUE's q = 1 - p).
_FIXED_BY_THE_MECHANISM = frozenset({("rr", "yes_probability"), ("oue", "p"), ("sue", "q")})


@dataclass(frozen=True)
class Vector:
    mechanism: str
    options: str
    field: str
    threshold: int
    on_the_wire: str


def _doc_vectors() -> list[Vector]:
    """The rows of the test-vector table of docs/wire-protocol.md."""
    lines = WIRE_DOC.read_text(encoding="utf-8").splitlines()
    header = "| mechanism | options | field | T | on the wire | note |"
    start = lines.index(header) + 2  # skip the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        mechanism, options, field, threshold, on_the_wire = cells[:5]
        rows.append(Vector(mechanism, options.strip("`"), field, int(threshold), on_the_wire))
    return rows


def _cli_params(mechanism: str, options: str) -> Any:
    """The parameters `ldp-aggregator campaign create` builds from these options (its make_params call)."""
    args = shlex.split(options)
    epsilon: float | None = None
    domain: int | None = None
    fields: dict[str, object] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag == "--epsilon":
            epsilon = float(value)
        elif flag == "--domain":
            domain = int(value)
        elif flag == "--param":
            name, _, raw = value.partition("=")
            fields[name] = raw
        else:
            raise AssertionError(f"unexpected option {flag}")
    return make_params(mechanism, epsilon=epsilon, domain=domain, fields=fields), epsilon


DOC_VECTORS = _doc_vectors()


def test_the_document_has_vectors_for_every_kind_of_rule() -> None:
    mechanisms = {v.mechanism for v in DOC_VECTORS}
    assert {"rr", "grr", "oue", "sue", "olh", "rappor"} <= mechanisms
    assert {"f", "p", "q"} <= {v.field for v in DOC_VECTORS if v.mechanism == "rappor"}
    ties = [
        v
        for v in DOC_VECTORS
        if "--epsilon" not in v.options and (Fraction(float(v.on_the_wire)) * N).denominator == 2
    ]
    assert len(ties) >= 3


@pytest.mark.parametrize("vector", DOC_VECTORS, ids=lambda v: f"{v.mechanism}-{v.field}-{v.options}")
def test_wire_protocol_threshold_vectors(vector: Vector) -> None:
    params, epsilon = _cli_params(vector.mechanism, vector.options)
    attribute = _THRESHOLD_OF[vector.field]
    assert getattr(params, attribute) == vector.threshold
    assert repr(getattr(params, vector.field)) == vector.on_the_wire
    # The server reads the campaign's doubles back into the same threshold.
    stored = wire.params_from_proto(wire.campaign_to_proto(campaign_id="v", params=params))
    assert getattr(stored, attribute) == vector.threshold
    x = Fraction(float(vector.on_the_wire))
    if epsilon is None:
        # Rule 1: the nearest integer to x * 2^32, ties to even (Fraction's round is exact, half to even).
        assert round(x * N) == vector.threshold
        return
    # Rule 2: the double on the wire is T / 2^32 exactly, and T is the most private side's nearest: T
    # qualifies and the next threshold toward the exact formula does not.
    assert x == Fraction(vector.threshold, N)
    if (vector.mechanism, vector.field) in _FIXED_BY_THE_MECHANISM:
        return
    ratio, largest = _condition(vector.mechanism, params, vector.field)
    t = vector.threshold
    assert _epsilon_at_most(*ratio(t), epsilon)
    assert not _epsilon_at_most(*ratio(t + 1 if largest else t - 1), epsilon)


def _boundary_epsilons(num: int, den: int) -> list[float]:
    """The double nearest to ln(num/den) and its two neighbours on each side."""
    center = float(_ln_exact(num, den))
    below = [math.nextafter(center, 0.0), math.nextafter(math.nextafter(center, 0.0), 0.0)]
    above = [math.nextafter(center, math.inf), math.nextafter(math.nextafter(center, math.inf), math.inf)]
    return [*below, center, *above]


_BOUNDARY_CASES: list[tuple[str, Any, Any, bool, int, int]] = [
    # (name, build from epsilon, ratio of T, largest?, T range)
    (
        "rr",
        lambda e: BinaryRRParams.from_epsilon(e).truth_threshold,
        lambda t: (N + t, N - t),
        True,
        1,
        N - 1,
    ),
    (
        "grr-d2",
        lambda e: GRRParams.from_epsilon(2, e).truth_threshold,
        lambda t: (t, N - t),
        True,
        N // 2 + 1,
        N - 1,
    ),
    (
        "grr-d37",
        lambda e: GRRParams.from_epsilon(37, e).truth_threshold,
        lambda t: (36 * t, N - t),
        True,
        N // 37 + 1,
        N - 1,
    ),
    ("oue", lambda e: OUEParams.from_epsilon(8, e).q_threshold, lambda t: (N - t, t), False, 1, N // 2 - 1),
    (
        "sue",
        lambda e: SUEParams.from_epsilon(8, e).p_threshold,
        lambda t: (t * t, (N - t) ** 2),
        True,
        N // 2 + 1,
        N - 1,
    ),
    (
        "olh-g5",
        lambda e: OLHParams.from_epsilon(100, e, g=5).truth_threshold,
        lambda t: (4 * t, N - t),
        True,
        N // 5 + 1,
        N - 1,
    ),
    (
        "ss-20-3",
        lambda e: SubsetSelectionParams.from_epsilon(20, e, k=3).truth_threshold,
        lambda t: (17 * t, 3 * (N - t)),
        True,
        3 * N // 20 + 1,
        N - 1,
    ),
    (
        "sr",
        lambda e: SRParams.from_epsilon(0.0, 1.0, e).truth_threshold,
        lambda t: (t, N - t),
        True,
        N // 2 + 1,
        N - 1,
    ),
    (
        "duchi",
        lambda e: DuchiParams.from_epsilon(0.0, 1.0, e).low_threshold,
        lambda t: (N - t, t),
        False,
        1,
        N // 2 - 1,
    ),
]


@pytest.mark.parametrize("case", _BOUNDARY_CASES, ids=lambda c: c[0])
def test_epsilon_within_an_ulp_of_a_thresholds_epsilon_rounds_toward_privacy(
    case: tuple[str, Any, Any, bool, int, int],
) -> None:
    """Rule 2 at its hardest: epsilon a few ulps from the exact epsilon of some threshold T0. The answer
    is T0 when epsilon is at least T0's epsilon, else its more private neighbour; a float64 evaluation of
    the formula gets about one in five of these wrong."""
    name, build, ratio, largest, lo, hi = case
    rng = random.Random(name)
    for _ in range(20):
        t0 = rng.randint(lo + 1000, hi - 1000)
        for epsilon in _boundary_epsilons(*ratio(t0)):
            expected = t0 if _epsilon_at_most(*ratio(t0), epsilon) else (t0 - 1 if largest else t0 + 1)
            assert build(epsilon) == expected, (name, t0, epsilon)


def test_ratio_within_exp_is_exact_at_the_float_boundary() -> None:
    # The double nearest ln 3 lies above ln 3, so 3/1 is within it and 3/1 plus a hair is not.
    assert Decimal(math.log(3)) > _ln_exact(3, 1)
    assert ratio_within_exp(3, 1, math.log(3))
    assert not ratio_within_exp(3, 1, math.nextafter(math.log(3), 0.0))  # one ulp lower: below ln 3
    # e to that double is 3 + 2.7e-16: 3 + 1e-16 is within it, 3 + 1e-15 is not (both decided exactly).
    assert ratio_within_exp(3 * 10**16 + 1, 10**16, math.log(3))
    assert not ratio_within_exp(3 * 10**15 + 1, 10**15, math.log(3))
    assert ratio_within_exp(1, 1, 0.0) and not ratio_within_exp(2, 1, 0.0)
    assert ratio_within_exp(1, 10**40, -10.0) and not ratio_within_exp(10**40, 1, 10.0)
    with pytest.raises(InvalidParameterError):
        ratio_within_exp(0, 1, 1.0)


def test_threshold_searches_find_the_edge_from_any_start() -> None:
    for start in (0, 5, 41, 42, 43, 100, 10**9):
        assert largest_threshold(lambda t: t <= 42, start, 1, 1000) == 42
        assert smallest_threshold(lambda t: t >= 42, start, 1, 1000) == 42
    assert largest_threshold(lambda t: t <= 0, 7, 1, 1000) == 0  # none qualifies
    assert smallest_threshold(lambda t: t >= 2000, 7, 1, 1000) == 0
    assert largest_threshold(lambda t: True, 7, 1, 1000) == 1000


def test_quantize_ties_go_to_even() -> None:
    assert [quantize_probability("x", k * 2.0**-33) for k in (1, 3, 5, 7)] == [0, 2, 2, 4]
    assert quantize_probability("x", 0.5 + 2.0**-33) == N // 2
    assert quantize_probability("x", 0.5 + 3 * 2.0**-33) == N // 2 + 2
    assert re.fullmatch(r"\d+", str(quantize_probability("x", 0.3)))
