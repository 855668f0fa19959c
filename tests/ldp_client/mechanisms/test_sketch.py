"""The sketches (cms, hcms) on the device side: the hashing as docs/sketches.md writes it down (test
vectors, an independent re-implementation), the vectorised server hashing, parameters (epsilon rounded
toward privacy, clear refusals) and the per-report encoders."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest

from ldp_client import privacy
from ldp_client._prob import PROB_ONE
from ldp_client.errors import DomainError, InvalidParameterError
from ldp_client.mechanisms.sketch import CMSEncoder, CMSParams, HCMSEncoder, HCMSParams, hashing
from ldp_client.params import make_params

CAMPAIGN = "example-campaign"

# docs/sketches.md, "Test vectors": the same numbers.
FINGERPRINTS = {
    "": 0xAC49792A31408C79,
    "apple": 0x0EF09406146C9BD3,
    "caf\u00e9": 0x75739780782C7101,
    "\U0001f600": 0xDC636F2AF081CCEF,
}
ROW_KEYS = [
    (0x50D92D9E9D7810C9, 0x3BFD74DFCD17EE05, 0xF8F73E88DC0B0538),
    (0x7D3E0BA02A12600D, 0xF40A1C3091E91EEB, 0x59DDDE2AA91A2CC9),
]
BUCKETS_1024 = {
    "": [55, 542, 870, 572],
    "apple": [497, 215, 356, 1023],
    "caf\u00e9": [639, 150, 584, 651],
    "\U0001f600": [482, 813, 388, 233],
}
BUCKETS_1000 = {
    "": [53, 529, 850, 558],
    "apple": [485, 210, 347, 999],
    "caf\u00e9": [624, 147, 570, 636],
    "\U0001f600": [471, 793, 379, 227],
}


def _reference_bucket(campaign: str, row: int, value: str, m: int) -> int:
    """The documented hashing, written again from the text (not from the module)."""
    x = int.from_bytes(hashlib.sha256(b"ldp.v1 sketch value\x00" + value.encode()).digest()[:8], "little")
    c = campaign.encode()
    key = hashlib.sha256(
        b"ldp.v1 sketch row\x00" + len(c).to_bytes(4, "little") + c + row.to_bytes(4, "little")
    ).digest()
    a0, a1, b = (int.from_bytes(key[i : i + 8], "little") for i in (0, 8, 16))
    h = ((a0 * (x % 2**32) + a1 * (x >> 32) + b) % 2**64) >> 32
    return (h * m) >> 32


def test_hashing_matches_the_documented_test_vectors() -> None:
    for value, fp in FINGERPRINTS.items():
        assert hashing.fingerprint(value.encode()) == fp
    assert [hashing.row_key(CAMPAIGN, j) for j in range(2)] == ROW_KEYS
    for table, m in ((BUCKETS_1024, 1024), (BUCKETS_1000, 1000)):
        for value, buckets in table.items():
            fp = hashing.fingerprint(value.encode())
            assert [hashing.bucket(hashing.row_key(CAMPAIGN, j), fp, m) for j in range(4)] == buckets
            assert [_reference_bucket(CAMPAIGN, j, value, m) for j in range(4)] == buckets


def test_the_servers_vectorised_hashing_is_the_devices() -> None:
    # Strings of many lengths and scripts, rows keyed by two campaigns, widths power of two or not.
    values = [f"v{i}" * (i % 7) + "\u00e9\U0001f600"[: i % 3] for i in range(300)]
    values = list(dict.fromkeys(values))
    for campaign, k, m in (("a", 5, 1024), ("another campaign \u00fc", 3, 1000)):
        table = hashing.candidate_buckets(campaign, k, m, values)
        expected = [[_reference_bucket(campaign, j, v, m) for j in range(k)] for v in values]
        np.testing.assert_array_equal(table, expected)


def test_collision_mass_is_exact() -> None:
    assert hashing.collision_mass(1024) == Fraction(1, 1024)
    s = hashing.collision_mass(1000)  # buckets of floor(2^32/1000) or one more 32-bit hash values
    size, extra = divmod(2**32, 1000)
    assert s == Fraction(extra * (size + 1) ** 2 + (1000 - extra) * size**2, 2**64)
    assert s > Fraction(1, 1000)


@pytest.mark.parametrize(("cls", "signs"), [(CMSParams, 2), (HCMSParams, 1)])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 8.0])
def test_from_epsilon_rounds_toward_privacy(cls: type, signs: int, epsilon: float) -> None:
    params = cls.from_epsilon(epsilon, k=16, m=64)
    t = params.flip_threshold
    # The exact epsilon of the quantised f does not exceed the request; one step less private would.
    assert signs * privacy.log_ratio(PROB_ONE - t, t) <= epsilon
    assert signs * privacy.log_ratio(PROB_ONE - (t - 1), t - 1) > epsilon
    assert params.epsilon == pytest.approx(epsilon, rel=1e-6)
    assert params.flip == t / PROB_ONE
    assert params.q_star == pytest.approx(
        (params.flip + (1 - 2 * params.flip) / 64) if signs == 2 else 0.5 + (1 - 2 * params.flip) / 128
    )


@pytest.mark.parametrize(
    ("name", "fields", "field", "allowed"),
    [
        ("cms", {"k": 0, "m": 64}, "k", "1"),
        ("cms", {"k": 4, "m": 1}, "m", "2"),
        ("cms", {"k": 4, "m": 5000}, "m", "4096"),
        ("hcms", {"k": 4, "m": 48}, "m", "power of two"),
        ("cms", {"k": 4, "m": 8, "flip_probability": 0.5}, "flip_probability", "(0, 1/2)"),
        ("hcms", {"k": 4, "m": 8, "flip_probability": 0.0}, "flip_probability", "(0, 1/2)"),
    ],
)
def test_bad_parameters_say_which_field_and_what_is_allowed(
    name: str, fields: dict[str, object], field: str, allowed: str
) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_params(name, epsilon=None if "flip_probability" in fields else 2.0, fields=dict(fields))
    assert info.value.field == field and allowed in info.value.allowed


@pytest.mark.parametrize("name", ["cms", "hcms"])
def test_a_sketch_takes_no_domain(name: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_params(name, epsilon=2.0, domain=10)
    assert info.value.field == "domain" and "candidate strings" in info.value.allowed
    params = make_params(name, epsilon=2.0)
    assert (params.k, params.m) == (64, 1024)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "encoder",
    [
        CMSEncoder(CMSParams(k=3, m=20, flip_probability=0.25), campaign_id=CAMPAIGN),
        HCMSEncoder(HCMSParams(k=3, m=16, flip_probability=0.25), campaign_id=CAMPAIGN),
    ],
    ids=["cms", "hcms"],
)
def test_encoders_take_strings_only(encoder: CMSEncoder | HCMSEncoder) -> None:
    for bad in (3, b"bytes", None, "\ud800"):
        with pytest.raises(DomainError) as info:
            encoder.encode(bad)  # type: ignore[arg-type]
        assert info.value.field == "value"
    report = encoder.encode("a" * 10_000)  # any length
    assert 0 <= report.row < 3


@pytest.mark.statistical
def test_cms_report_keeps_the_bucket_sign_at_rate_one_minus_f() -> None:
    # The per-report path (OS CSPRNG): the bucket's bit is set with probability 1 - f, every other bit with
    # f. Not seeded (the device never is), so the bound is wide: 6 standard deviations.
    params = CMSParams(k=2, m=16, flip_probability=0.25)
    enc = CMSEncoder(params, campaign_id=CAMPAIGN)
    buckets = [_reference_bucket(CAMPAIGN, j, "apple", 16) for j in range(2)]
    n = 4000
    own = other = 0
    for _ in range(n):
        row, bits = enc.encode("apple")
        own += bits >> buckets[row] & 1
        other += bin(bits).count("1") - (bits >> buckets[row] & 1)
    assert abs(own - 0.75 * n) <= 6 * math.sqrt(n * 0.75 * 0.25)
    assert abs(other - 0.25 * 15 * n) <= 6 * math.sqrt(15 * n * 0.75 * 0.25)
