"""TreeHist (treehist, issue 16): the Hadamard answer and its transform, the rates, groups from the secret,
bad input, discovery in process, through the aggregator and through ldp-sim, and the calibration of the
verification level's estimates given discovery."""

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
from ldp_client.mechanisms.pem import Prefix
from ldp_client.mechanisms.treehist import (
    SPEC,
    TreeHistEncoder,
    TreeHistParams,
    direct_support,
    group_of,
    hadamard_answer,
    hadamard_support_table,
    level_digest,
)
from ldp_client.mechanisms.treehist.core import fwht
from ldp_client.params import make_params
from ldp_client.secret import ClientSecret
from simulations.cli import app as sim_app

runner = CliRunner()


def _params(**changes: int) -> TreeHistParams:
    base = dict(max_length=8, top_k=8, step_bits=8, hash_bits=16)
    base.update(changes)
    return TreeHistParams.from_epsilon(4.0, **base)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- the transform


def test_the_transform_is_the_walsh_hadamard_matrix() -> None:
    rng = np.random.default_rng(3)
    for m in (1, 2, 3, 6, 7):  # odd m ends with a radix-2 pass
        x = rng.integers(-50, 50, size=1 << m).astype(np.int64)
        r = np.arange(1 << m)
        signs = (-1) ** np.array([[bin(i & j).count("1") & 1 for j in r] for i in r])
        out = x.copy()
        fwht(out)
        assert np.array_equal(out, signs @ x), m


@pytest.mark.parametrize("t", [1, 3, 5])
def test_the_support_table_counts_the_reports_whose_answer_matches(t: int) -> None:
    # Every m-bit digest's support from the transform equals counting A D = y report by report.
    rng = np.random.default_rng(t)
    m, n = 9, 700
    rows = rng.integers(0, 2**64, size=(n, t), dtype=np.uint64)
    answers = rng.integers(0, 1 << t, size=n).astype(np.uint16)
    table = hadamard_support_table(rows, answers, m)
    digests = np.arange(1 << m, dtype=np.uint64)
    assert np.array_equal(table, direct_support(rows, answers, digests))
    # And the device's answer is the same A D.
    for i in range(5):
        d = int(rng.integers(0, 1 << m))
        assert hadamard_answer(tuple(int(w) for w in rows[i]), d) == sum(
            (bin(int(rows[i, k]) & d).count("1") & 1) << k for k in range(t)
        )


def test_other_digests_share_the_answer_at_rate_one_over_g() -> None:
    # q* = 1/g: with uniform rows, a distinct digest's answer equals the true one w.p. 2**-t exactly.
    p = _params()
    rng = np.random.default_rng(16)
    n, t = 200_000, p.hadamard_bits
    rows = rng.integers(0, 2**64, size=(n, t), dtype=np.uint64)
    digests = np.array([level_digest(p, p.levels, Prefix(4, v)) for v in range(32)], dtype=np.uint64)
    own = np.zeros(n, dtype=np.int64)
    for k in range(t):
        own |= (np.bitwise_count(rows[:, k] & digests[0]) & 1).astype(np.int64) << k
    counts = direct_support(rows, own.astype(np.uint16), digests)
    assert counts[0] == n
    q = 1.0 / p.g
    assert np.all(np.abs(counts[1:] - n * q) < 5.5 * np.sqrt(n * q * (1 - q))), counts[1:] / n


# ----------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("", "non-empty"),
        (b"", "non-empty"),
        ("x" * 9, "at most 8 bytes"),
        ("ééé" + "ee0", "at most 8"),
        (3, "str"),
    ],
)
def test_bad_values_are_refused_in_one_line(value: object, where: str) -> None:
    enc = TreeHistEncoder(_params(), group=0)
    with pytest.raises(DomainError, match=where) as info:
        enc.encode(value)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": 257, "step_bits": 8}, "top_k"),  # 2^16 / 2^8 candidates kept at most
        ({"max_length": 0}, "max_length"),
        ({"max_length": 65}, "max_length"),
        ({"hadamard_bits": 11}, "hadamard_bits"),
        ({"hash_bits": 7}, "hash_bits"),
        ({"hash_bits": 25}, "hash_bits"),
    ],
)
def test_bad_parameters_are_refused(fields: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_params("treehist", epsilon=2.0, fields=dict(fields))
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_reports_that_do_not_fit_the_campaign_are_refused() -> None:
    p = _params()
    msg = reports_pb2.Report()
    msg.treehist.group = p.groups  # one past the verification level
    msg.treehist.rows[:] = [1] * p.hadamard_bits
    with pytest.raises(InvalidReportError, match="group"):
        SPEC.report_from_proto(msg, p)
    msg.treehist.group = 0
    msg.treehist.rows[:] = [1]  # fewer rows than hadamard_bits
    with pytest.raises(InvalidReportError, match="rows"):
        SPEC.report_from_proto(msg, p)


# -------------------------------------------------------------------------------------------- groups


def test_the_device_group_comes_from_the_secret_and_the_campaign() -> None:
    p = _params()
    secret = ClientSecret.from_bytes(bytes(range(32)))
    assert group_of(p, "c1", secret) == group_of(p, "c1", ClientSecret.from_bytes(bytes(range(32))))
    groups = Counter(group_of(p, "c1", ClientSecret.generate()) for _ in range(3000))
    # Uniform over the G discovery levels and the verification level (chi-square, alpha 1e-6).
    assert stats.chisquare([groups.get(j, 0) for j in range(p.groups)]).pvalue > 1e-6
    assert len({group_of(p, f"c{i}", secret) for i in range(64)}) > 1
    encode = SPEC.encoder(p, campaign_id="c1", secret=lambda: secret)
    assert {encode("hello").group for _ in range(20)} == {group_of(p, "c1", secret)}


# ------------------------------------------------------------------------------------------- discovery


def _population(n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    heavy = ["apple", "banana", "kiwi", "\u00e9clair", "fig"]
    tail = [f"t{i:03d}" for i in range(300)]
    probs = np.array([0.2, 0.15, 0.1, 0.08, 0.06] + [0.41 / 300] * 300)
    return heavy + tail, rng.choice(305, size=n, p=probs)


def test_discovery_finds_the_heavy_hitters_and_estimates_them_at_the_verification_level() -> None:
    p = _params(max_length=7, top_k=8)
    rng = np.random.default_rng(2026)
    labels, values = _population(200_000, rng)
    columns = SPEC.encode_batch(p, values, rng, campaign_id="t", labels=labels)
    res = discover_columns(p, columns, len(values))
    truth = Counter(labels[v] for v in values)
    assert [it.label for it in res.items[:5]] == ["apple", "banana", "kiwi", "\u00e9clair", "fig"]
    for it in res.items[:5]:
        assert abs(it.count - truth[it.label]) < 5 * it.std_error, (it, truth[it.label])
    assert len(res.levels) == p.groups and res.levels[-1].tested == 8  # the verification level
    # Its standard errors are those of the verification group alone (about n / (G + 1) reports).
    verify = res.levels[-1].reports
    assert abs(verify - len(values) / p.groups) < 5 * np.sqrt(len(values) / p.groups)


def test_a_campaign_discovers_through_the_aggregator(tmp_path: Path) -> None:
    p = _params(max_length=7, top_k=6)
    rng = np.random.default_rng(7)
    labels, values = _population(60_000, rng)
    with BackgroundServer(ServerConfig(db=tmp_path / "ldp.sqlite3", listen="127.0.0.1:0")) as server:
        args = ["campaign", "create", "words", "--mechanism", "treehist", "--epsilon", "4"]
        args += ["--server", server.target]
        for bad, field in (("top_k=0", "top_k"), ("top_k=257", "top_k"), ("hash_bits=30", "hash_bits")):
            out = runner.invoke(aggregator_app, [*args, "--param", bad])
            assert out.exit_code == 2 and field in out.output and len(out.output.strip().splitlines()) == 1
        fields = ["--param", "max_length=7", "--param", "top_k=6", "--param", "hash_bits=16"]
        created = runner.invoke(aggregator_app, [*args, *fields])
        assert created.exit_code == 0, created.output
        with grpc.insecure_channel(server.target) as channel:
            listed = analyst_pb2_grpc.AnalystStub(channel).ListCampaigns(analyst_pb2.ListCampaignsRequest())
            assert [c.id for c in listed.campaigns] == ["words"]  # the refused ones were not stored
            collector = collector_pb2_grpc.CollectorStub(channel)
            for i in range(0, len(values), 20_000):
                cols = SPEC.encode_batch(p, values[i : i + 20_000], rng, campaign_id="words", labels=labels)
                collector.Submit(
                    wire.batch_to_proto(campaign_id="words", batch_id=f"b{i}", params=p, columns=cols)
                )
            # A batch with a group past the verification level is refused whole: nothing is counted.
            bad_batch = wire.batch_to_proto(campaign_id="words", batch_id="bad", params=p, columns=cols)
            bad_batch.treehist.groups = np.full(bad_batch.count, p.groups, dtype="<u2").tobytes()
            with pytest.raises(grpc.RpcError) as info:
                collector.Submit(bad_batch)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        out = runner.invoke(aggregator_app, ["estimate", "words", "--json", "--server", server.target])
        assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["n_reports"] == len(values)
    assert [it["label"] for it in doc["items"][:3]] == ["apple", "banana", "kiwi"]
    assert len(doc["levels"]) == p.groups and all(lv["kept"] == 6 for lv in doc["levels"])


def test_ldp_sim_runs_treehist_in_sum_report_and_grpc_mode(tmp_path: Path) -> None:
    csv = tmp_path / "words.csv"
    csv.write_text("value,count\nalpha,500\nbeta,300\ngamma,200\n" + "".join(f"w{i},5\n" for i in range(40)))
    args = ["run", "--mechanism", "treehist", "-p", f"empirical:{csv}", "-n", "40000", "-e", "4"]
    args += ["--param", "top_k=4", "--param", "max_length=5", "--param", "hash_bits=16"]
    for mode in ("sum", "report", "grpc"):
        out = tmp_path / f"{mode}.json"
        result = runner.invoke(sim_app, [*args, "--mode", mode, "--json-out", str(out)])
        assert result.exit_code == 0, result.output
        doc = json.loads(out.read_text())
        items = doc["items"]
        assert [it["label"] for it in items[:3]] == ["alpha", "beta", "gamma"], items
        assert set(items[0]) == {"label", "estimate", "std_error", "ci_low", "ci_high", "true_count"}
        assert doc["metrics"]["recall_top16"] == pytest.approx(3 / 16)
    too_long = runner.invoke(sim_app, [*args[:-6], "--param", "max_length=4", "--mode", "report"])
    assert too_long.exit_code == 2 and "alpha" in too_long.output and "at most 4 bytes" in too_long.output
    zero = runner.invoke(sim_app, [*args[:-6], "--param", "top_k=0", "--mode", "report"])
    assert zero.exit_code == 2 and "top_k" in zero.output


@pytest.mark.slow
@pytest.mark.statistical
def test_estimates_given_discovery_are_unbiased_and_calibrated() -> None:
    # Values near the discovery threshold too: 3 heavy values and 6 of 0.9% each among 150 tail values of
    # 0.1-0.6%; every discovered value counts (one nobody holds at 0), given its discovery. The verification
    # group's estimates do not depend on the choice, so MSE / mean variance is near 1 and the 95% intervals
    # cover at the nominal rate (binomial bounds at alpha 1e-4).
    p = TreeHistParams.from_epsilon(4.0, max_length=5, top_k=12, step_bits=8, hash_bits=16)
    heavy = ["apple", "kiwi", "fig"] + [f"mid{i}" for i in range(6)]
    tail = [f"t{i:03d}" for i in range(150)]
    probs = np.array([0.2, 0.12, 0.08] + [0.009] * 6 + list(np.linspace(0.001, 0.006, 150)))
    probs /= probs.sum()
    labels = heavy + tail
    ratios, covered, cells, near = [], 0, 0, 0
    for seed in range(150):
        rng = np.random.default_rng(seed)
        values = rng.choice(len(labels), size=40_000, p=probs)
        truth = Counter(labels[v] for v in values)
        res = discover_columns(
            p, SPEC.encode_batch(p, values, rng, campaign_id="c", labels=labels), len(values)
        )
        for it in res.items:  # a discovered value nobody holds is scored at its true count 0
            ratios.append(((it.count - truth[it.label]) ** 2, it.std_error**2))
            covered += it.ci_low <= truth[it.label] <= it.ci_high
            cells += 1
            near += it.label.startswith("mid")
    sq, var = np.array(ratios).sum(axis=0)
    assert near > 100  # values near the threshold were among those scored
    assert 0.9 <= sq / var <= 1.1, sq / var
    lo, hi = stats.binom.ppf([5e-5, 1 - 5e-5], cells, 0.95) / cells
    assert lo <= covered / cells <= hi, covered / cells
