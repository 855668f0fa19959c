"""pem's optional parameters (issue 16): the verification group (estimates of the discovered values that do
not depend on their choice) and the declared alphabet (characters as digits of ceil(log2 |A|) bits)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from ldp_aggregator.discovery import discover_columns
from ldp_aggregator.estimators import pure_oracle_arrays
from ldp_client import wire
from ldp_client._proto.ldp.v1 import campaign_pb2, reports_pb2
from ldp_client.errors import DomainError, InvalidParameterError, InvalidReportError
from ldp_client.mechanisms.pem import (
    SPEC,
    PEMEncoder,
    PEMParams,
    Prefix,
    group_of,
    level_candidates,
    prefix_digest,
    prefix_of,
    support_counts,
    value_bytes,
)
from ldp_client.params import make_params
from ldp_client.secret import ClientSecret
from simulations.cli import app as sim_app

runner = CliRunner()
LOWER = "abcdefghijklmnopqrstuvwxyz"


# ------------------------------------------------------------------------------------------ alphabet


def test_an_alphabet_makes_characters_digits_and_needs_fewer_levels() -> None:
    words = PEMParams.from_epsilon(2.0, max_length=6, alphabet=LOWER)
    raw = PEMParams.from_epsilon(2.0, max_length=6)
    # 26 letters: 5 bits each, 30 bits for 6 letters: start 2 letters, 1 letter per level = 5 levels
    # (bytes: 48 bits, start 8, step 6 = 8 levels).
    assert (words.symbol_bits, words.start_bits, words.step_bits, words.levels) == (5, 10, 5, 5)
    assert raw.levels == 8
    assert value_bytes(words, "cab") == bytes((2, 0, 1))
    assert prefix_of(words, words.levels - 1, b"\x02\x00\x01") == Prefix(3, (2 << 25) | (1 << 15))
    # The length stays in the key: "a" and "aa" (digit 0 twice) differ.
    last = words.levels - 1
    assert prefix_of(words, last, value_bytes(words, "a")) != prefix_of(words, last, value_bytes(words, "aa"))
    # The label of a last-level candidate is the word again.
    for word in ("cab", "zzzzzz", "q"):
        cand = prefix_of(words, last, value_bytes(words, word))
        assert SPEC.discovery_label(words, cand) == word


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("caB", "alphabet .* not 'B'"),
        ("ca b", "not ' '"),
        ("", "1 to 6 characters"),
        ("abcdefg", "1 to 6 characters"),
        (3, "a str"),
    ],
)
def test_values_outside_the_alphabet_are_refused_on_the_device(value: object, where: str) -> None:
    p = PEMParams.from_epsilon(2.0, max_length=6, alphabet=LOWER)
    enc = PEMEncoder(p, group=1)
    with pytest.raises(DomainError, match=where) as info:
        enc.encode(value)  # type: ignore[arg-type]
    assert "\n" not in str(info.value) and info.value.field == "value"
    assert enc.encode("abc").group == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"alphabet": "a"}, "alphabet"),
        ({"alphabet": "abca"}, "alphabet"),
        ({"alphabet": "".join(chr(0x100 + i) for i in range(257))}, "alphabet"),
        ({"verification_share": 0.6}, "verification_share"),
        ({"verification_share": -0.1}, "verification_share"),
    ],
)
def test_bad_options_are_refused(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_params("pem", epsilon=2.0, fields=dict(fields))
    assert info.value.field == field


def test_candidates_over_an_alphabet_are_its_digits_only() -> None:
    # 3 letters: 2-bit digits, 3 of the 4 patterns valid. Level 0 (2 bits = one letter): 3 per length;
    # level 1 (1 more bit: the top bit of the second letter): 0 or 1 (both can start a digit below 3);
    # level 2 (its low bit): "x?" with top bit 1 only as 10 (= "z"), not 11.
    p = PEMParams(
        max_length=2, start_bits=2, step_bits=1, top_k=4, g=3, truth_probability=0.6, alphabet="xyz"
    )
    assert level_candidates(p, 0, []) == (
        Prefix(1, 0),
        Prefix(1, 1),
        Prefix(1, 2),
        *[Prefix(2, d) for d in range(3)],
    )
    level1 = level_candidates(p, 1, [Prefix(2, 1)])
    assert level1 == (Prefix(2, 0b010), Prefix(2, 0b011))
    level2 = level_candidates(p, 2, [Prefix(2, 0b011)])
    assert level2 == (Prefix(2, 0b0110),)  # "yz"; 0b0111 is no digit
    assert SPEC.discovery_label(p, Prefix(2, 0b0110)) == "yz"
    # Bytes: every pattern.
    q = PEMParams(max_length=1, start_bits=4, step_bits=4, top_k=2, g=4, truth_probability=0.5)
    assert len(level_candidates(q, 1, [Prefix(1, 3)])) == 16


def test_discovery_over_an_alphabet_finds_the_words() -> None:
    p = PEMParams.from_epsilon(4.0, max_length=6, top_k=8, alphabet=LOWER)
    rng = np.random.default_rng(7)
    heavy = ["apple", "kiwi", "fig", "banana", "plum"]
    labels = heavy + ["".join(rng.choice(list(LOWER), size=rng.integers(3, 7))) for _ in range(300)]
    probs = np.array([0.2, 0.15, 0.1, 0.08, 0.06] + [0.41 / 300] * 300)
    values = rng.choice(len(labels), size=100_000, p=probs)
    res = discover_columns(p, SPEC.encode_batch(p, values, rng, campaign_id="w", labels=labels), len(values))
    truth = Counter(labels[v] for v in values)
    assert [it.label for it in res.items[:5]] == heavy
    for it in res.items[:5]:
        assert abs(it.count - truth[it.label]) < 5 * it.std_error


# ------------------------------------------------------------------------------------- verification


def test_the_verification_group_comes_from_the_secret_at_its_share() -> None:
    p = PEMParams.from_epsilon(4.0, max_length=4, top_k=8, verification_share=0.25)
    plain = PEMParams.from_epsilon(4.0, max_length=4, top_k=8)
    assert p.groups == p.levels + 1 and plain.groups == plain.levels
    secrets = [ClientSecret.generate() for _ in range(4000)]
    groups = [group_of(p, "c", s) for s in secrets]
    verify = sum(g == p.levels for g in groups)
    lo, hi = stats.binom.ppf([5e-7, 1 - 5e-7], len(secrets), 0.25)
    assert lo <= verify <= hi, verify
    # A device outside the verification group keeps the level it has without one (share 0: as before).
    assert all(g == group_of(plain, "c", s) for g, s in zip(groups, secrets, strict=True) if g != p.levels)
    observed = Counter(g for g in groups if g != p.levels)
    assert stats.chisquare([observed[j] for j in range(p.levels)]).pvalue > 1e-6


def test_verification_reports_are_whole_values_and_only_with_a_share() -> None:
    p = PEMParams.from_epsilon(4.0, max_length=4, top_k=8, verification_share=0.25)
    enc = PEMEncoder(p, group=p.levels)
    report = enc.encode("abc")
    assert report.group == p.levels
    msg = reports_pb2.Report()
    SPEC.report_to_proto(msg, p, report)
    SPEC.report_from_proto(msg, p)
    plain = PEMParams.from_epsilon(4.0, max_length=4, top_k=8)
    with pytest.raises(InvalidReportError, match="group"):
        SPEC.report_from_proto(msg, plain)
    with pytest.raises(InvalidParameterError):
        PEMEncoder(plain, group=plain.levels)
    msg.pem.group = p.levels + 1
    with pytest.raises(InvalidReportError, match="group"):
        SPEC.report_from_proto(msg, p)


def test_the_options_travel_in_the_campaign_and_default_to_the_old_meaning() -> None:
    p = PEMParams.from_epsilon(2.0, max_length=6, alphabet=LOWER, verification_share=0.2)
    msg = SPEC.params_to_proto(p)
    assert (msg.alphabet, msg.verification_share) == (LOWER, 0.2)
    assert SPEC.params_from_proto(campaign_pb2.PrefixExtensionParams.FromString(msg.SerializeToString())) == p
    # Without the new fields (an older campaign): no verification group, bytes.
    old = PEMParams.from_epsilon(2.0, max_length=6)
    raw = SPEC.params_to_proto(old).SerializeToString()
    assert SPEC.params_from_proto(campaign_pb2.PrefixExtensionParams.FromString(raw)) == old
    # proto3 leaves fields at their defaults out: an old campaign's bytes are those of before the fields.
    assert (
        raw
        == campaign_pb2.PrefixExtensionParams(
            max_length=6,
            start_bits=8,
            step_bits=6,
            top_k=32,
            g=old.g,
            truth_probability=old.truth_probability,
        ).SerializeToString()
    )
    camp = wire.campaign_to_proto(
        campaign_id="opts", params=p, description="", candidates=[], created_unix_ms=0
    )
    assert wire.params_from_proto(camp) == p


def test_discovered_values_are_estimated_by_the_verification_group_only() -> None:
    p = PEMParams.from_epsilon(4.0, max_length=5, top_k=6, verification_share=0.3)
    rng = np.random.default_rng(3)
    labels = ["apple", "kiwi", "fig"] + [f"t{i:03d}" for i in range(100)]
    probs = np.array([0.3, 0.2, 0.1] + [0.004] * 100)
    values = rng.choice(len(labels), size=60_000, p=probs)
    columns = SPEC.encode_batch(p, values, rng, campaign_id="v", labels=labels)
    res = discover_columns(p, columns, len(values))
    assert len(res.levels) == p.groups and res.levels[-1].tested == 6
    groups, a, b, y = columns
    mine = groups == p.levels
    assert abs(mine.mean() - 0.3) < 0.01
    s = 8 * p.max_length
    for it in res.items[:3]:
        key = prefix_digest(p.levels, s, prefix_of(p, p.levels, value_bytes(p, it.label)))
        c = support_counts(a[mine], b[mine], y[mine], np.array([key], dtype=np.uint64), p.g)
        est = pure_oracle_arrays(c, int(mine.sum()), p.p_star, p.q_star, 0.95).count[0]
        assert it.count == pytest.approx(est * len(values) / mine.sum(), rel=1e-9)
    assert [it.label for it in res.items[:3]] == ["apple", "kiwi", "fig"]


def _near_threshold_run(share: float, repeats: int) -> tuple[float, float, int, float]:
    """MSE / mean variance, 95% coverage, cells and mean error / SE of the values near the threshold, of
    every discovered value (true count 0 for a value nobody holds), over seeded repeats."""
    p = PEMParams.from_epsilon(4.0, max_length=5, top_k=12, verification_share=share)
    mids = [f"mid{i}" for i in range(6)]
    labels = ["apple", "kiwi", "fig", *mids] + [f"t{i:03d}" for i in range(150)]
    probs = np.array([0.2, 0.12, 0.08] + [0.009] * 6 + list(np.linspace(0.001, 0.006, 150)))
    probs /= probs.sum()
    sq, var, covered, cells, near = 0.0, 0.0, 0, 0, []
    for seed in range(repeats):
        rng = np.random.default_rng(seed)
        values = rng.choice(len(labels), size=40_000, p=probs)
        truth = Counter(labels[v] for v in values)
        res = discover_columns(
            p, SPEC.encode_batch(p, values, rng, campaign_id="c", labels=labels), len(values)
        )
        for it in res.items:
            # Every discovered value, a value nobody holds (true count 0) included.
            err = it.count - truth[it.label]
            sq, var, cells = sq + err**2, var + it.std_error**2, cells + 1
            covered += it.ci_low <= truth[it.label] <= it.ci_high
            if it.label.startswith("mid"):
                near.append(err / it.std_error)
    return sq / var, covered / cells, cells, float(np.mean(near)) if near else 0.0


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.timeout(1800)  # about 25 s of CPU; a shared machine stretches it well past the default 300 s
def test_estimates_given_discovery_are_calibrated_with_a_verification_group() -> None:
    # 3 heavy values, 6 of 0.9% each near the threshold (discovered in some repeats only) and 150 of
    # 0.1-0.6%; every discovered value counts, given its discovery (one nobody holds at its true count 0).
    # The verification group's reports took no part in the choice: MSE / mean variance in [0.9, 1.1] and
    # the 95% intervals cover at the nominal rate (binomial bounds at alpha 1e-4). Without the group
    # (share 0) the last level's reports both choose and estimate, and the values near the threshold are
    # over-estimated when found.
    ratio, coverage, cells, near = _near_threshold_run(0.2, 150)
    assert 0.9 <= ratio <= 1.1, ratio
    lo, hi = stats.binom.ppf([5e-5, 1 - 5e-5], cells, 0.95) / cells
    assert lo <= coverage <= hi, coverage
    assert abs(near) < 0.25, near


@pytest.mark.parametrize("size", [2, 3, 8, 26, 39, 64, 100, 256])
def test_the_encoders_fast_digest_matches_the_key_at_every_alphabet_size(size: int) -> None:
    # The encoder packs the digits in C (str.translate to base-2**c digits, then int()); the server's
    # candidates come from prefix_of: both must give the same prefix at every level.
    from ldp_client.mechanisms.pem.core import PrefixHasher

    alphabet = "".join(chr(0x41 + i) for i in range(size))
    p = PEMParams(
        max_length=5, start_bits=3, step_bits=7, top_k=4, g=4, truth_probability=0.5, alphabet=alphabet
    )
    rng = np.random.default_rng(size)
    words = ["".join(rng.choice(list(alphabet), size=rng.integers(1, 6))) for _ in range(40)]
    for level in range(p.levels):
        hasher = PrefixHasher(p, level)
        for w in words:
            want = prefix_digest(level, p.prefix_bits(level), prefix_of(p, level, value_bytes(p, w)))
            assert hasher.digest(w) == want, (w, level)
            assert hasher.digest(w.encode()) == want  # bytes: their UTF-8 text


def test_ldp_sim_runs_both_options_over_grpc(tmp_path: Path) -> None:
    # The campaign carries the options to the aggregator, the devices encode over the alphabet and the
    # verification group estimates the values; a population with a character outside it is refused.
    csv = tmp_path / "words.csv"
    csv.write_text("value,count\nalpha,500\nbeta,300\ngamma,200\n" + "".join(f"w{i},5\n" for i in range(40)))
    out = tmp_path / "grpc.json"
    args = ["run", "--mechanism", "pem", "-p", f"empirical:{csv}", "-n", "30000", "-e", "4"]
    args += ["--param", "top_k=4", "--param", "max_length=5", "--param", "verification_share=0.25"]
    result = runner.invoke(
        sim_app, [*args, "--param", f"alphabet={LOWER}0123456789", "--mode", "grpc", "--json-out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [it["label"] for it in doc["items"][:3]] == ["alpha", "beta", "gamma"], doc["items"]
    assert doc["summary"]["params"]["alphabet"] == LOWER + "0123456789"
    refused = runner.invoke(sim_app, [*args, "--param", f"alphabet={LOWER}", "--mode", "report"])
    assert refused.exit_code == 2 and "alphabet" in refused.output, refused.output


@pytest.mark.parametrize("size", [0, 2, 11, 26, 39, 256])
def test_the_simulations_label_table_matches_the_key_at_every_level(size: int) -> None:
    # The batch encoders' table (label_digests: each label packed once, hashed at every level) must hold
    # the keys the devices hash (prefix_digest of prefix_of), over bytes (size 0) and over alphabets.
    from ldp_client.mechanisms.pem.core import label_digests

    alphabet = "".join(chr(0x41 + i) for i in range(size))
    p = PEMParams(
        max_length=5, start_bits=3, step_bits=7, top_k=4, g=4, truth_probability=0.5, alphabet=alphabet
    )
    rng = np.random.default_rng(size)
    chars = list(alphabet) if alphabet else list("abcé€xyz")
    words = sorted({"".join(rng.choice(chars, size=rng.integers(1, 6))) for _ in range(60)})
    words = [w for w in words if len(w.encode()) <= 5 or alphabet]
    table = label_digests(p, words, p.levels)
    for level in range(p.levels):
        want = [
            prefix_digest(level, p.prefix_bits(level), prefix_of(p, level, value_bytes(p, w))) for w in words
        ]
        assert table[:, level].tolist() == want, level
