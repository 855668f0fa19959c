"""Prefix extension (pem, issue 16): keys and padding, groups from the secret, candidates, the hash's
collision rate, bad input, discovery in process, through the aggregator and through ldp-sim."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc
from ldp_aggregator.cli import app as aggregator_app
from ldp_aggregator.discovery import discover_columns
from ldp_aggregator.server import BackgroundServer, ServerConfig
from ldp_client import wire
from ldp_client._proto.ldp.v1 import collector_pb2_grpc, reports_pb2
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


def _params(**changes: int) -> PEMParams:
    base = dict(max_length=8, top_k=8, step_bits=4)
    base.update(changes)
    return PEMParams.from_epsilon(4.0, **base)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ keys


def test_the_length_makes_padding_unambiguous() -> None:
    p = _params()
    last = p.levels - 1
    assert prefix_of(p, last, b"a") != prefix_of(p, last, b"a\x00")
    keys = {
        prefix_digest(last, 64, prefix_of(p, last, v)) for v in (b"a", b"a\x00", b"\x00a", b"\x00", b"aa")
    }
    assert len(keys) == 5
    # Any byte is a value byte; str is its UTF-8.
    assert value_bytes(p, "é") == "é".encode() and value_bytes(p, b"\xff\x00") == b"\xff\x00"


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("", "non-empty"),
        (b"", "non-empty"),
        ("x" * 9, "at most 8 bytes"),
        ("éééé" + "e", "at most 8 bytes"),
        (3, "str"),
    ],
)
def test_bad_values_are_refused_in_one_line(value: object, where: str) -> None:
    enc = PEMEncoder(_params(), group=0)
    with pytest.raises(DomainError, match=where) as info:
        enc.encode(value)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 4097, "step_bits": 4}, "top_k"),  # 2^16 / 2^4 = 4096 candidates kept at most
        ({"max_length": 0}, "max_length"),
        ({"max_length": 65}, "max_length"),
        ({"step_bits": 13}, "step_bits"),
    ],
)
def test_bad_parameters_are_refused(fields: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_params("pem", epsilon=2.0, fields=dict(fields))
    assert info.value.field == field


def test_the_device_group_comes_from_the_secret_and_the_campaign() -> None:
    p = _params()
    secret = ClientSecret.from_bytes(bytes(range(32)))
    assert group_of(p, "c1", secret) == group_of(p, "c1", ClientSecret.from_bytes(bytes(range(32))))
    groups = Counter(group_of(p, "c1", ClientSecret.generate()) for _ in range(3000))
    # Uniform over the levels (chi-square, alpha 1e-6), and a device's level differs between campaigns.
    observed = [groups.get(j, 0) for j in range(p.levels)]
    assert stats.chisquare(observed).pvalue > 1e-6
    assert len({group_of(p, f"c{i}", secret) for i in range(64)}) > 1
    encode = SPEC.encoder(p, campaign_id="c1", secret=lambda: secret)
    assert {encode("hello").group for _ in range(20)} == {group_of(p, "c1", secret)}


def test_candidates_stop_growing_once_a_value_is_complete() -> None:
    p = PEMParams(max_length=2, start_bits=4, step_bits=4, top_k=2, g=4, truth_probability=0.5)
    level0 = level_candidates(p, 0, [])
    assert len(level0) == 2 * 16  # lengths 1, 2 times the first 4 bits
    # A 1-byte value's prefix of 8 bits is complete: only a zero extension follows it.
    kept = [Prefix(1, 0x61), Prefix(2, 0x61)]
    assert level_candidates(p, 2, kept) == (Prefix(1, 0x610), *[Prefix(2, 0x610 | e) for e in range(16)])


def test_distinct_prefixes_collide_in_bucket_at_rate_one_over_g() -> None:
    # The support counts of other prefixes follow q*: distinct digests share a bucket with probability 1/g.
    p = PEMParams.from_epsilon(2.0, max_length=4, top_k=8)
    rng = np.random.default_rng(16)
    n = 200_000
    keys = np.array([prefix_digest(3, 20, Prefix(4, v)) for v in range(64)], dtype=np.uint64)
    a = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    b = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    from ldp_client.mechanisms.olh import hash_buckets

    own = hash_buckets(a, b, keys[:1], p.g).astype(np.uint32)  # every report says key 0's own bucket
    counts = support_counts(a, b, own, keys, p.g)
    assert counts[0] == n
    rate = 1.0 / p.g
    sd = np.sqrt(n * rate * (1 - rate))
    assert np.all(np.abs(counts[1:] - n * rate) < 5.5 * sd), counts[1:] / n


# ------------------------------------------------------------------------------------------- discovery


def _population(n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    heavy = ["apple", "banana", "kiwi", "\u00e9clair", "fig"]
    tail = [f"t{i:03d}" for i in range(300)]
    labels = heavy + tail
    probs = np.array([0.2, 0.15, 0.1, 0.08, 0.06] + [0.41 / 300] * 300)
    return labels, rng.choice(len(labels), size=n, p=probs)


def test_discovery_finds_the_heavy_hitters_with_calibrated_errors() -> None:
    p = _params(max_length=7, top_k=8)
    rng = np.random.default_rng(2026)
    labels, values = _population(200_000, rng)
    columns = SPEC.encode_batch(p, values, rng, campaign_id="t", labels=labels)
    res = discover_columns(p, columns, len(values))
    truth = Counter(labels[v] for v in values)
    assert [it.label for it in res.items[:5]] == ["apple", "banana", "kiwi", "\u00e9clair", "fig"]
    for it in res.items[:5]:
        assert abs(it.count - truth[it.label]) < 5 * it.std_error, (it, truth[it.label])
    assert res.levels[0].tested == len(level_candidates(p, 0, []))
    assert all(lv.kept == 8 for lv in res.levels) and len(res.levels) == p.levels


def test_a_campaign_discovers_through_the_aggregator(tmp_path: Path) -> None:
    p = _params(max_length=7, top_k=6)
    rng = np.random.default_rng(7)
    labels, values = _population(60_000, rng)
    with BackgroundServer(ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0")) as server:
        args = [
            "campaign",
            "create",
            "words",
            "--mechanism",
            "pem",
            "--epsilon",
            "4",
            "--server",
            server.target,
        ]
        bad = runner.invoke(aggregator_app, [*args[:4], "--param", "top_k=0", *args[4:]])
        assert bad.exit_code == 2 and "top_k" in bad.output and len(bad.output.strip().splitlines()) == 1
        fields = ["--param", "max_length=7", "--param", "top_k=6", "--param", "step_bits=4"]
        created = runner.invoke(aggregator_app, [*args, *fields])
        assert created.exit_code == 0, created.output
        with grpc.insecure_channel(server.target) as channel:
            listed = analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest())
            assert [c.id for c in listed.campaigns] == ["words"]  # the refused one was not stored
            collector = collector_pb2_grpc.CollectorStub(channel)
            for i in range(0, len(values), 20_000):
                cols = SPEC.encode_batch(p, values[i : i + 20_000], rng, campaign_id="words", labels=labels)
                msg = wire.batch_to_proto(campaign_id="words", batch_id=f"b{i}", params=p, columns=cols)
                collector.Submit(msg)
            # A report of a level the campaign does not have is refused, and nothing is counted.
            bad_batch = wire.batch_to_proto(campaign_id="words", batch_id="bad", params=p, columns=cols)
            bad_batch.pem.groups = (np.full(bad_batch.count, p.levels, dtype="<u2")).tobytes()
            with pytest.raises(grpc.RpcError) as info:
                collector.Submit(bad_batch)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        out = runner.invoke(aggregator_app, ["estimate", "words", "--json", "--server", server.target])
        assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["n_reports"] == len(values)
    assert [it["label"] for it in doc["items"][:3]] == ["apple", "banana", "kiwi"]
    assert len(doc["levels"]) == p.levels and all(lv["kept"] == 6 for lv in doc["levels"])


def test_a_server_without_raw_reports_refuses_a_discovery_campaign(tmp_path: Path) -> None:
    config = ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0", retain_raw=False)
    with BackgroundServer(config) as server:
        args = [
            "campaign",
            "create",
            "words",
            "--mechanism",
            "pem",
            "--epsilon",
            "4",
            "--server",
            server.target,
        ]
        result = runner.invoke(aggregator_app, args)
        assert result.exit_code == 2 and "retains raw reports" in result.output, result.output
        with grpc.insecure_channel(server.target) as channel:
            listed = analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest())
        assert list(listed.campaigns) == []


def test_ldp_sim_runs_a_discovery_in_report_and_grpc_mode(tmp_path: Path) -> None:
    csv = tmp_path / "words.csv"
    csv.write_text("value,count\nalpha,500\nbeta,300\ngamma,200\n" + "".join(f"w{i},5\n" for i in range(40)))
    for mode in ("report", "grpc"):
        out = tmp_path / f"{mode}.json"
        args = ["run", "--mechanism", "pem", "-p", f"empirical:{csv}", "-n", "30000", "-e", "4"]
        args += ["--param", "top_k=4", "--param", "max_length=5", "--mode", mode, "--json-out", str(out)]
        result = runner.invoke(sim_app, args)
        assert result.exit_code == 0, result.output
        doc = json.loads(out.read_text())
        items = doc["items"]
        assert [it["label"] for it in items[:3]] == ["alpha", "beta", "gamma"], items
        assert set(items[0]) == {"label", "estimate", "std_error", "ci_low", "ci_high", "true_count"}
        assert doc["metrics"]["recall_top16"] == pytest.approx(3 / 16)
    too_long = runner.invoke(sim_app, [*args[:-4], "--param", "max_length=4", "--mode", "report"])
    assert too_long.exit_code == 2 and "alpha" in too_long.output and "at most 4 bytes" in too_long.output


def test_reports_of_unknown_levels_are_refused() -> None:
    p = _params()
    msg = reports_pb2.Report()
    msg.pem.group = p.levels
    with pytest.raises(InvalidReportError, match="group"):
        SPEC.report_from_proto(msg, p)


@pytest.mark.slow
def test_estimates_of_discovered_values_are_calibrated_over_seeded_repeats() -> None:
    # The heavy values are discovered in every repeat; their estimates are unbiased (MSE/variance near 1)
    # and their 95% intervals cover at the nominal rate (binomial bounds at alpha 1e-4 over 5 x 200 cells).
    p = _params(max_length=7, top_k=8)
    heavy = ["apple", "banana", "kiwi", "\u00e9clair", "fig"]
    sq_err, var, covered, cells = 0.0, 0.0, 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        labels, values = _population(50_000, rng)
        truth = Counter(labels[v] for v in values)
        res = discover_columns(
            p, SPEC.encode_batch(p, values, rng, campaign_id="c", labels=labels), len(values)
        )
        for label in heavy:
            it = res.item(label)
            sq_err += (it.count - truth[label]) ** 2
            var += it.std_error**2
            covered += it.ci_low <= truth[label] <= it.ci_high
            cells += 1
    assert 0.85 <= sq_err / var <= 1.15, sq_err / var
    lo, hi = stats.binom.ppf([5e-5, 1 - 5e-5], cells, 0.95) / cells
    assert lo <= covered / cells <= hi, covered / cells


def test_short_values_pool_the_levels_where_they_were_already_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "fig" (3 bytes) is whole from the level holding 24 bits on: the groups of those levels estimate its
    # count too, and pooling them (weights n_j) shrinks its standard error; a 7-byte value gains nothing.
    p = _params(max_length=7, top_k=8)
    rng = np.random.default_rng(11)
    labels, values = _population(100_000, rng)
    columns = SPEC.encode_batch(p, values, rng, campaign_id="t", labels=labels)
    pooled = discover_columns(p, columns, len(values))
    monkeypatch.setattr(type(SPEC), "discovery_same_value", lambda self, params, level, cand: ())
    alone = discover_columns(p, columns, len(values))
    assert pooled.item("fig").std_error < 0.7 * alone.item("fig").std_error
    assert pooled.item("\u00e9clair").std_error == pytest.approx(
        alone.item("\u00e9clair").std_error, rel=0.05
    )
