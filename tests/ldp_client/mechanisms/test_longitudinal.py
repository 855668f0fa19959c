"""The longitudinal mechanisms (issue 17): dbitflip, onebitmean, lgrr, losue.

What the registry's conformance test does not already check: the memoized part is pinned by golden vectors
(a change between releases would hand every device fresh coins), is the same at every report and after a
restart, and differs between campaigns; the fresh round really is fresh; L-GRR's epsilon is that of the
composed channel for every d (where multi-freq-ldpy's formula is right only for d = 2); bad parameters and
reports get one clear error naming the field.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from fractions import Fraction

import numpy as np
import pytest

from ldp_client import wire
from ldp_client._prob import PROB_ONE
from ldp_client._proto.ldp.v1 import reports_pb2
from ldp_client.domain import Domain
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.longitudinal import dbitflip, lgrr, losue, memo, onebitmean
from ldp_client.mechanisms.longitudinal.common import grr_channel_row, max_log_ratio
from ldp_client.params import make_params
from ldp_client.reporter import encoder_for
from ldp_client.secret import ClientSecret

KEY = bytes(range(32))
SECRET = ClientSecret.from_bytes(KEY)
CAMPAIGN = "golden-memo"


# ------------------------------------------------------------------------------------ golden vectors


def test_memo_stream_is_hmac_counter_mode() -> None:
    # block_j = HMAC-SHA256(secret, seed || u32be(j)), cut into little-endian words (docs/longitudinal.md).
    seed = b"L\x00" + len(CAMPAIGN).to_bytes(4, "big") + CAMPAIGN.encode() + (1).to_bytes(4, "big") + b"k"
    assert memo.memo_seed(b"L", CAMPAIGN, b"k") == seed
    stream = b"".join(hmac.digest(KEY, seed + j.to_bytes(4, "big"), hashlib.sha256) for j in range(2))
    words = memo.MemoWords(SECRET.prf, seed)
    assert [words.word() for _ in range(10)] == [
        int.from_bytes(stream[4 * i : 4 * i + 4], "little") for i in range(10)
    ]


def test_memo_below_is_lemire_with_rejection() -> None:
    class Fixed(memo.MemoWords):
        def __init__(self, ws: list[int]) -> None:
            super().__init__(SECRET.prf, b"")
            self._ws = ws

        def word(self) -> int:
            return self._ws.pop(0)

    # n = 3: (2**32 - 3) % 3 = 1 word value is rejected (m mod 2**32 < 1 only for word 0); word 0 is
    # rejected and the next one used.
    assert Fixed([0, PROB_ONE - 1]).below(3) == 2
    assert Fixed([PROB_ONE // 3 + 1]).below(3) == 1


def test_golden_memoized_parts() -> None:
    # Pinned at the commit that added the mechanisms: the derivation must never change silently.
    d10 = lgrr.LGRRParams(domain=Domain.of(10), first_probability=0.5, second_probability=0.375)
    assert [lgrr.memoized_index(SECRET, d10, campaign_id=CAMPAIGN, index=i) for i in range(10)] == [
        4, 1, 2, 4, 4, 5, 0, 6, 9, 7,
    ]  # fmt: skip
    d8 = losue.LOSUEParams(domain=Domain.of(8), first_one_probability=0.25, second_probability=0.75)
    assert [losue.memoized_bits(SECRET, d8, campaign_id=CAMPAIGN, index=i) for i in range(5)] == [
        87, 24, 8, 13, 64,
    ]  # fmt: skip
    d16 = dbitflip.DBitFlipParams(domain=Domain.of(16), d=4, bit_probability=0.75)
    state = dbitflip.memoized_state(SECRET, d16, campaign_id=CAMPAIGN)
    assert state.sampled == (8, 12, 2, 1)
    assert state.bit_in == (True, True, True, True) and state.bit_out == (False, False, False, False)
    grid = onebitmean.OneBitMeanParams(lo=0.0, hi=1.0, truth_probability=0.75, buckets=4)
    assert onebitmean.memoized_alpha(SECRET, campaign_id=CAMPAIGN) == 1193615328039511733
    bits = [onebitmean.memoized_bit(SECRET, grid, campaign_id=CAMPAIGN, point=g) for g in range(5)]
    assert bits == [1, 0, 0, 0, 1]


# ------------------------------------------------------------------------------------- memoization


@pytest.mark.parametrize(
    ("name", "epsilon", "domain", "fields", "values"),
    [
        ("dbitflip", 2.0, 12, {"d": 3}, list(range(12))),
        ("onebitmean", 1.0, None, {"lo": 0.0, "hi": 10.0, "buckets": 5}, [0.0, 1.3, 2.0, 7.77, 10.0]),
    ],
)
def test_permanent_reports_survive_restarts(
    name: str, epsilon: float, domain: int | None, fields: dict[str, object], values: list[object]
) -> None:
    # Fully memoized: every report of a value is the same, also from a new encoder (an app restart).
    params = make_params(name, epsilon=epsilon, domain=domain, fields=fields)
    first = encoder_for(params, campaign_id=CAMPAIGN, secret=SECRET)
    again = encoder_for(params, campaign_id=CAMPAIGN, secret=SECRET)
    for v in values:
        reports = {first(v) for _ in range(20)} | {again(v)}
        assert len(reports) == 1, (v, reports)


def test_memoized_rounds_are_per_value_and_per_campaign() -> None:
    params = lgrr.LGRRParams.from_epsilon(50, 1.0, epsilon_inf=1.5)
    enc = lgrr.LGRREncoder(params, campaign_id=CAMPAIGN, secret=SECRET)
    restarted = lgrr.LGRREncoder(params, campaign_id=CAMPAIGN, secret=lambda: SECRET)
    other = lgrr.LGRREncoder(params, campaign_id="another", secret=SECRET)
    memos = [enc.memoized(v) for v in range(50)]
    assert memos == [restarted.memoized(v) for v in range(50)]
    assert memos != [other.memoized(v) for v in range(50)]
    bits = losue.LOSUEParams.from_epsilon(30, 1.0, epsilon_inf=2.0)
    a = losue.LOSUEEncoder(bits, campaign_id=CAMPAIGN, secret=SECRET)
    b = losue.LOSUEEncoder(bits, campaign_id="another", secret=SECRET)
    assert [a.memoized(v) for v in range(30)] != [b.memoized(v) for v in range(30)]


def test_fresh_round_is_fresh_and_follows_p2() -> None:
    # The second round draws from the OS CSPRNG at every report: x' is reported w.p. p2 (z < 6).
    params = lgrr.LGRRParams(domain=Domain.of(6), first_probability=0.5, second_probability=0.5)
    enc = lgrr.LGRREncoder(params, campaign_id=CAMPAIGN, secret=SECRET)
    kept = enc.memoized(3)
    n = 4000
    hits = sum(enc.encode(3) == kept for _ in range(n))
    assert abs(hits - n * 0.5) <= 6 * math.sqrt(n * 0.25)
    bits = losue.LOSUEParams(domain=Domain.of(8), first_one_probability=0.25, second_probability=0.75)
    uenc = losue.LOSUEEncoder(bits, campaign_id=CAMPAIGN, secret=SECRET)
    memo_bits = uenc.memoized(2)
    same = sum(8 - bin(uenc.encode(2) ^ memo_bits).count("1") for _ in range(n // 8))
    assert abs(same - n * 0.75) <= 6 * math.sqrt(n * 0.75 * 0.25)


def test_dbitflip_values_outside_the_sample_look_alike() -> None:
    params = dbitflip.DBitFlipParams.from_epsilon(40, 1.0, d=3)
    enc = dbitflip.DBitFlipEncoder(params, campaign_id=CAMPAIGN, secret=SECRET)
    state = dbitflip.memoized_state(SECRET, params, campaign_id=CAMPAIGN)
    outside = {enc.encode(v) for v in range(40) if v not in state.sampled}
    assert len(outside) == 1
    sampled, bits = outside.pop()
    assert sampled == sum(1 << j for j in state.sampled)
    for j, b_in in zip(state.sampled, state.bit_in, strict=True):
        assert (enc.encode(j)[1] >> j) & 1 == b_in  # its own bucket: b_in; the others keep b_out
        assert enc.encode(j)[1] & ~(1 << j) == bits & ~(1 << j)


def test_onebitmean_alpha_rounding_keeps_a_point_within_a_step() -> None:
    params = onebitmean.OneBitMeanParams(lo=0.0, hi=4.0, truth_probability=0.75, buckets=4)
    alpha = onebitmean.memoized_alpha(SECRET, campaign_id=CAMPAIGN)
    cut = alpha / 2.0**63  # values of step [1, 2) below 1 + cut round down to point 1, above it up to 2
    enc = onebitmean.OneBitMeanEncoder(params, campaign_id=CAMPAIGN, secret=SECRET)
    low = {onebitmean.grid_point(params, params.position(1.0 + f * cut), alpha) for f in (0.0, 0.5, 0.99)}
    high = {
        onebitmean.grid_point(params, params.position(1.0 + cut + f * (1 - cut)), alpha) for f in (0.01, 0.9)
    }
    assert low == {1} and high == {2}
    bit = onebitmean.memoized_bit(SECRET, params, campaign_id=CAMPAIGN, point=1)
    assert {enc.encode(1.0 + f * cut) for f in (0.0, 0.5, 0.99)} == {bit}


# ------------------------------------------------------------------------------------------ privacy


def _mfl_second_probability(p1: float, q1: float, k: int, eps1: float) -> float:
    """multi-freq-ldpy's L-GRR p2: solved from (p1 p2 + q1 q2) / (p1 q2 + q1 p2) = e^eps1, the ratio of a
    two-value channel (written from its algebra, not copied)."""
    e = math.exp(eps1)
    return (e * p1 - q1) / (p1 * (k - 1) - q1 + e * p1 - e * q1 * (k - 1))


def _composed_epsilon(t1: int, t2: int, k: int) -> float:
    """ln of the max ratio of the two GRR channels multiplied out as k x k matrices, in Fractions."""
    p1, p2 = Fraction(t1, PROB_ONE), Fraction(t2, PROB_ONE)
    rows = []
    for v in range(k):
        first = grr_channel_row(p1, k, v)
        rows.append({y: sum(first[x] * grr_channel_row(p2, k, x)[y] for x in range(k)) for y in range(k)})
    return max_log_ratio(rows)


@pytest.mark.parametrize("k", [2, 3, 5, 10, 50])
def test_lgrr_epsilon_is_the_composed_channels(k: int) -> None:
    eps_inf, eps1 = 2.0, 1.0
    ours = lgrr.LGRRParams.from_epsilon(k, eps1, epsilon_inf=eps_inf)
    composed = _composed_epsilon(ours.first_threshold, ours.second_threshold, k)
    assert ours.epsilon == pytest.approx(composed, rel=1e-12)
    assert ours.epsilon <= eps1 and ours.epsilon == pytest.approx(eps1, abs=1e-6)
    # multi-freq-ldpy's p2 at the same p1: right for k = 2, for k > 2 it spends another epsilon.
    p1 = ours.first_threshold / PROB_ONE
    theirs = _mfl_second_probability(p1, (1 - p1) / (k - 1), k, eps1)
    spent = _composed_epsilon(ours.first_threshold, round(theirs * PROB_ONE), k)
    if k == 2:
        assert spent == pytest.approx(eps1, abs=1e-6)
    else:
        assert abs(spent - eps1) > 0.05, (k, spent)


def test_losue_epsilons_from_the_rounds() -> None:
    params = losue.LOSUEParams.from_epsilon(6, 1.0, epsilon_inf=3.0)
    q1 = Fraction(params.first_threshold, PROB_ONE)
    p2 = Fraction(params.second_threshold, PROB_ONE)
    q_star = q1 * p2 + (1 - q1) * (1 - p2)
    assert (
        params.epsilon == pytest.approx(math.log((1 - q_star) / q_star), rel=1e-12) and params.epsilon <= 1.0
    )
    assert (
        params.epsilon_inf == pytest.approx(math.log((1 - q1) / q1), rel=1e-12) and params.epsilon_inf <= 3.0
    )
    assert params.epsilon_inf == pytest.approx(3.0, abs=1e-6)


# ------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: lgrr.LGRRParams.from_epsilon(5, 2.0, epsilon_inf=1.0), "epsilon"),
        (lambda: lgrr.LGRRParams.from_epsilon(5, 1.0, epsilon_inf=-1.0), "epsilon_inf"),
        (lambda: lgrr.LGRRParams(domain=Domain.of(4), first_probability=0.2, second_probability=0.5), "first_probability"),  # noqa: E501
        (lambda: losue.LOSUEParams(domain=Domain.of(4), first_one_probability=0.5, second_probability=0.7), "first_one_probability"),  # noqa: E501
        (lambda: losue.LOSUEParams(domain=Domain.of(4), first_one_probability=0.2, second_probability=0.4), "second_probability"),  # noqa: E501
        (lambda: dbitflip.DBitFlipParams(domain=Domain.of(4), d=5, bit_probability=0.7), "d"),
        (lambda: dbitflip.DBitFlipParams(domain=Domain.of(4), d=2, bit_probability=0.5), "bit_probability"),
        (lambda: onebitmean.OneBitMeanParams(lo=0.0, hi=1.0, truth_probability=0.7, buckets=0), "buckets"),
        (lambda: make_params("lgrr", epsilon=1.0, domain=4, fields={"d": 2}), "param d"),
        (lambda: make_params("dbitflip", epsilon=1.0, domain=4, fields={"d": "two"}), "d"),
        (lambda: encoder_for(make_params("lgrr", epsilon=1.0, domain=4, fields={"epsilon_inf": 2.0}), campaign_id="c", secret=None), "secret"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_parameters_name_the_field(build: object, field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        build()  # type: ignore[operator]
    assert info.value.field == field


def test_dbitflip_reports_are_checked() -> None:
    params = dbitflip.DBitFlipParams(domain=Domain.of(10), d=2, bit_probability=0.75)
    enc = dbitflip.DBitFlipEncoder(params, campaign_id=CAMPAIGN, secret=SECRET)
    good = wire.batch_from_reports(params, [enc.encode(v) for v in range(10)])
    assert good[0].shape == (10, 2)
    with pytest.raises(InvalidReportError, match="sampled"):
        wire.batch_from_reports(params, [(0b111, 0)])  # three buckets sampled, d = 2
    with pytest.raises(InvalidReportError, match="outside the sampled"):
        wire.batch_from_reports(params, [(0b11, 0b100)])
    msg = reports_pb2.ReportBatch(campaign_id="c", batch_id="b", count=1)
    msg.dbitflip.sampled = bytes([0b11, 0])
    msg.dbitflip.bits = bytes([0b1000, 0])
    with pytest.raises(InvalidReportError, match="outside the sampled"):
        wire.batch_from_proto(msg, params, campaign_id="c")
    with pytest.raises(DomainError):
        enc.encode(10)


def test_onebitmean_batch_only_encoder_refuses_device_reports() -> None:
    params = onebitmean.OneBitMeanParams(lo=0.0, hi=1.0, truth_probability=0.75, buckets=4)
    codes = onebitmean.SPEC.new_encoder(params).encode_batch(
        np.array([0.0, 0.5, 1.0]), np.random.default_rng(1)
    )
    assert codes.dtype == np.uint32 and set(codes.tolist()) <= {0, 1}
    with pytest.raises(InvalidParameterError) as info:
        onebitmean.SPEC.new_encoder(params).encode(0.5)
    assert info.value.field == "secret"
