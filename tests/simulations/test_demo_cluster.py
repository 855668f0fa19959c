"""``make demo-cluster`` end to end (issue 15, item 5): a throwaway PostgreSQL, two real replicas, one
SIGKILLed midway, the archive exported with ``--store``, verified and reduced on a real Dask LocalCluster.

Small N, the real thing otherwise. Checked: both replicas took reports, the clients' retries moved to the
survivor, every batch (those the killed replica acknowledged included) is counted exactly once, the
archive's numbers are the replica's, and nothing is left running or on disk, also after a Ctrl-C or
without PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ldp_aggregator.accumulators import accumulator_from_bytes
from simulations import demo_cluster, pg_throwaway
from simulations.pg_throwaway import PgCluster, missing_reason
from tests.ldp_aggregator.conftest import _pg_unavailable

USERS = 20_000


@pytest.fixture
def _needs_postgresql() -> None:
    reason = missing_reason()
    if reason is not None:
        _pg_unavailable(reason)


def _gone(pid: int) -> bool:
    """No such process, or a zombie: exited, and not yet reaped by its parent (the postmaster's parent is
    init, which in a container may reap late)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


@pytest.mark.usefixtures("_needs_postgresql")
@pytest.mark.timeout(300)
def test_demo_cluster_counts_every_batch_once_after_a_sigkill_and_the_archive_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clusters: list[PgCluster] = []
    postmasters: list[int | None] = []

    def seen(cluster: PgCluster) -> None:
        clusters.append(cluster)
        postmasters.append(cluster.postmaster_pid())

    outcome = demo_cluster.run_demo(
        tmp_path / "out", users=USERS, batch_size=250, clients=8, workers=2, on_cluster=seen
    )
    printed = capsys.readouterr().out

    # Both replicas took reports, and A's clients moved to B after its SIGKILL.
    assert outcome.batches == 2 * USERS // 250
    assert outcome.acked_by["A"] > 0 and outcome.acked_by["B"] > 0
    assert sum(outcome.acked_by.values()) == outcome.batches
    assert outcome.resent > 0
    # What A acknowledged outlived it: sent again to B, every one is answered "duplicate".
    assert outcome.replayed == outcome.replay_duplicates == outcome.acked_by["A"]
    # Exactly once: each campaign holds every batch once (the killed replica's acknowledged ones too):
    # its accumulator is the sum of the batches sent and counts every user.
    assert [q.question.campaign_id for q in outcome.questions] == ["browser", "home"]
    for q in outcome.questions:
        assert q.server_batches == outcome.batches // 2
        assert q.server_accumulator == q.expected_accumulator
        assert accumulator_from_bytes(q.server_accumulator).n == USERS
        assert int(q.truth.sum()) == USERS
        # The archive exported from PostgreSQL and reduced on Dask: the replica's numbers, exactly.
        assert q.archive_accumulator == q.server_accumulator
        assert q.archive_answer == q.server_answer
        assert q.server_answer.n_reports == USERS
    verified = " ".join(outcome.verify_output.split())  # rich wraps long lines
    assert f": ok, 2 file(s), {outcome.batches} payload(s), 2 campaign(s)" in verified
    for phrase in ("SIGKILL replica A", "batches acknowledged in", "exactly once", "identical", "home page"):
        assert phrase in printed
    # Everything it started is gone: replicas, PostgreSQL and its directory.
    assert len(clusters) == 1 and postmasters[0] is not None
    assert not outcome.pg_dir.exists() and outcome.pg_dir == clusters[0].dir
    assert all(_gone(pid) for pid in [*outcome.replica_pids, postmasters[0]])
    assert (tmp_path / "out" / "archive").is_dir()  # kept, with the replicas' logs
    assert (tmp_path / "out" / "replica-A.log").is_file()


@pytest.mark.usefixtures("_needs_postgresql")
@pytest.mark.timeout(300)
def test_demo_cluster_cleans_up_everything_on_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def interrupted(batches: Any, replicas: Any, clients: int, outcome: demo_cluster.DemoOutcome) -> Any:
        seen["pg_dir"] = outcome.pg_dir
        seen["pids"] = [r.pid for r in replicas]
        assert outcome.pg_dir.is_dir() and not any(_gone(pid) for pid in seen["pids"])
        raise KeyboardInterrupt  # as Ctrl-C while the clients send

    monkeypatch.setattr(demo_cluster, "_send_and_kill", interrupted)
    code = demo_cluster.main(["--out", str(tmp_path / "out"), "--users", "2000"])
    err = capsys.readouterr().err
    assert code == demo_cluster.EXIT_INTERRUPTED
    assert err.startswith("error: interrupted") and err.count("\n") == 1
    assert not seen["pg_dir"].exists()
    assert all(_gone(pid) for pid in seen["pids"])


def test_demo_cluster_without_postgresql_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pg_throwaway, "bindir", lambda: None)
    code = demo_cluster.main(["--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 4
    assert err.count("\n") == 1 and err.startswith("error: make demo-cluster needs PostgreSQL 15: ")
    assert "install Debian's `postgresql` package" in err
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
