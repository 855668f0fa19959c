"""The second demo (``make demo-cluster``): two aggregator replicas on PostgreSQL, one killed midway, then the
report archive reduced on Dask to the same numbers.

1. Starts a throwaway PostgreSQL cluster of its own (:class:`simulations.pg_throwaway.PgCluster`: initdb in a
   temporary directory, a free loopback port; as root its commands run as the ``postgres`` user).
2. Starts two replicas, ``ldp-aggregator serve --store postgresql://... --retain-raw``, on free loopback
   ports (the password reaches them as ``PGPASSWORD``, as a deployment would pass it, never on a command
   line), and creates two campaigns through one of them: a browser question with k-ary randomized
   response and a home-page question with RAPPOR (the campaign keeps its candidate strings, decoys
   included).
3. Simulates a population: every user answers both questions, encoded on the "device"; the reports go in
   batches from client threads, half of them homed on each replica, over gRPC. Once half the batches are
   acknowledged, replica A is killed with SIGKILL while the clients keep going: a client whose call
   failed resends the SAME batch (its id is the idempotency key) to the other replica, as a client behind
   a load balancer would. Afterwards every batch the killed replica had acknowledged is sent again to the
   survivor, as by devices that never got their answer: each must be answered "duplicate".
4. Prints the estimates (with their 95% intervals, next to the truth) as the surviving replica answers
   them, and checks that every batch was counted exactly once: each campaign's accumulator equals the sum
   of the batches sent, byte for byte, and counts every user.
5. Exports the report archive from PostgreSQL (``ldp-aggregator archive export DIR --store URL``), verifies
   it (``archive verify``), reduces each campaign's files on a Dask LocalCluster with the server's own
   ingest and estimation code, prints the same tables and checks that they are identical.
6. Cleans up everything, also on Ctrl-C, SIGTERM or a failure: replicas stopped, the Dask cluster closed,
   PostgreSQL stopped and its directory removed. ``OUT`` keeps the replicas' logs and the archive
   (deleted and made afresh at every run).

Exit codes: 0 success; 1 a step failed (one line says which); 4 no PostgreSQL binaries here (the line names
Debian's package); 130 interrupted. Run ``python -m simulations.demo_cluster --help`` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.table import Table

from ldp_aggregator.accumulators import Accumulator, accumulator_for, add_columns
from ldp_aggregator.cli_common import EXIT_INTERNAL, EXIT_OK, EXIT_UNAVAILABLE, print_error
from ldp_client import registry, wire
from ldp_client.params import GRRParams, MechanismParams, RapporParams
from simulations.demo import BROWSERS, DECOYS, SITES
from simulations.failover import (
    SUBMIT_TIMEOUT_S,
    DeviceBatch,
    FailoverClient,
    Ledger,
    Replica,
    ReplicaError,
)
from simulations.pg_throwaway import PgCluster, missing_reason

__all__ = ["DemoError", "DemoOutcome", "QuestionOutcome", "main", "run_demo"]

# Wide enough for the estimate tables when the output is piped (rich falls back to 80 columns).
console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)

EXIT_INTERRUPTED: Final = 130
_REPLICAS: Final = ("A", "B")
_CONFIDENCE: Final = 0.95
_ALPHA: Final = 0.05


class DemoError(Exception):
    """A step of the demo failed; the message says which and why (one line)."""


# ------------------------------------------------------------------------------------------- questions


@dataclass(frozen=True, kw_only=True)
class Question:
    """One campaign and the population's answers to it.

    Attributes:
        campaign_id: Its id on the aggregator.
        title: The question, for the tables.
        params: The mechanism's parameters.
        values: The population's possible answers (population index -> label).
        weights: Their relative frequencies.
        candidates: The campaign's candidate strings (RAPPOR; decoys included), else empty.
        command: The equivalent ``ldp-aggregator campaign create`` command line (``{out}``: the output
            directory, where the candidates file is written).
    """

    campaign_id: str
    title: str
    params: MechanismParams
    values: tuple[str, ...]
    weights: tuple[float, ...]
    candidates: tuple[str, ...] = ()
    command: str

    @property
    def decoded(self) -> bool:
        """Whether its answers are a RAPPOR decode (Analyst.DecodeRappor) rather than an estimate."""
        return bool(self.candidates)

    def labels_for_encoding(self) -> Sequence[str]:
        """What the batch encoder needs to turn population indices into reports (RAPPOR hashes strings)."""
        return self.values if self.decoded else ()


def _questions() -> list[Question]:
    browsers = tuple(BROWSERS)
    sites = tuple(SITES)
    rappor = RapporParams(k=128, h=2, m=64)
    return [
        Question(
            campaign_id="browser",
            title="Which browser do you use most?",
            params=GRRParams.from_epsilon(list(browsers), 2.0),
            values=browsers,
            weights=tuple(float(BROWSERS[b]) for b in browsers),
            command=f"ldp-aggregator campaign create browser --mechanism grr --labels {','.join(browsers)}"
            " --epsilon 2",
        ),
        Question(
            campaign_id="home",
            title="What is your home page?",
            params=rappor,
            values=sites,
            weights=tuple(1.0 / (i + 1) ** 1.1 for i in range(len(sites))),
            candidates=(*sites, *DECOYS),
            command="ldp-aggregator campaign create home --mechanism rappor --param k=128 --param h=2"
            " --param m=64 --candidates {out}/home-candidates.txt",
        ),
    ]


# ------------------------------------------------------------------------------------------- outcome


@dataclass(frozen=True, kw_only=True)
class QuestionOutcome:
    """One campaign's numbers, from the surviving replica and from the archive reduced on Dask.

    Attributes:
        question: The campaign.
        truth: Users holding each value (population index).
        expected_accumulator: The sum of every batch sent (computed by the clients), serialized.
        server_accumulator: The replica's committed accumulator (Analyst.ExportCampaign), serialized.
        server_batches: Batches the database holds for the campaign.
        server_answer: The replica's EstimateResponse or DecodeRapporResponse.
        archive_accumulator: The archive's files reduced on Dask, serialized.
        archive_answer: The same answer computed from the archive's accumulator.
    """

    question: Question
    truth: NDArray[np.int64]
    expected_accumulator: bytes
    server_accumulator: bytes
    server_batches: int
    server_answer: Any
    archive_accumulator: bytes = b""
    archive_answer: Any = None


@dataclass(kw_only=True)
class DemoOutcome:
    """What one run did and saw (for the test; ``main`` prints it as it goes).

    Attributes:
        users: Simulated users (each answers every question).
        batches: Batches sent (all questions).
        killed: The replica killed with SIGKILL.
        acked_by: Batches each replica acknowledged.
        resent: Batches acknowledged by another replica than the one first tried; ``duplicates`` of them
            were answered "duplicate" (the killed replica had committed them before it died).
        replayed: The batches the killed replica had acknowledged, sent again to the survivor afterwards (as
            a device that never got its answer would); ``replay_duplicates`` of them were answered
            "duplicate" (all, or the demo fails: nothing it acknowledged may be counted twice).
        questions: Per campaign: the replica's and the archive's numbers.
        archive: The archive directory; ``verify_output`` what ``archive verify`` printed.
        pg_dir: The throwaway PostgreSQL's directory (removed at the end); ``replica_pids`` their pids.
        seconds: Wall-clock time of the whole run.
    """

    users: int
    batches: int = 0
    killed: str = _REPLICAS[0]
    acked_by: dict[str, int] = field(default_factory=dict)
    resent: int = 0
    duplicates: int = 0
    replayed: int = 0
    replay_duplicates: int = 0
    questions: list[QuestionOutcome] = field(default_factory=list)
    archive: Path = Path()
    verify_output: str = ""
    pg_dir: Path = Path()
    replica_pids: list[int] = field(default_factory=list)
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------- printing


def _fmt(x: float) -> str:
    return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def _rows(q: QuestionOutcome, answer: Any) -> list[tuple[str, float, float, float, float, bool | None]]:
    """(label, count, std error, low, high, detected) per item of an estimate or decode answer."""
    if q.question.decoded:
        return [(c.label, c.count, c.std_error, c.ci_low, c.ci_high, c.detected) for c in answer.candidates]
    return [(i.label, i.count, i.std_error, i.ci_low, i.ci_high, None) for i in answer.items]


def _table(q: QuestionOutcome, answer: Any, source: str, *, max_rows: int = 10) -> Table:
    """An answer next to the truth: the most common values first, then any decoy candidates."""
    question = q.question
    truth = {label: int(t) for label, t in zip(question.values, q.truth.tolist(), strict=True)}
    rows = _rows(q, answer)
    order = sorted(range(len(rows)), key=lambda i: -truth.get(rows[i][0], -1))
    held = [i for i in order if rows[i][0] in truth][:max_rows]
    decoys = [i for i in order if rows[i][0] not in truth]
    what = "RAPPOR decode" if question.decoded else f"{question.params.name}"
    t = Table(
        title=f"{question.title} ({what}, epsilon {question.params.epsilon:.4g}; {source})",
        title_justify="left",
    )
    for col in ("item", "true count", "estimate", "std error", f"{_CONFIDENCE:.0%} interval"):
        t.add_column(col, justify="left" if col == "item" else "right")
    if question.decoded:
        t.add_column("detected", justify="center")
    for i in [*held, *decoys]:
        label, count, se, lo, hi, detected = rows[i]
        row = [label, f"{truth.get(label, 0):,}", _fmt(count), _fmt(se), f"[{_fmt(lo)}, {_fmt(hi)}]"]
        if detected is not None:
            row.append("yes" if detected else "")
        t.add_row(*row)
        if i == held[-1] and len(held) < len(truth):
            t.add_row(f"... {len(truth) - len(held)} more", *[""] * (len(t.columns) - 1))
    return t


def _shell(line: str) -> None:
    console.print(f"[dim]$ {line}[/dim]", soft_wrap=True)


# ------------------------------------------------------------------------------------------- the run


def _population(
    questions: Sequence[Question], users: int, rng: np.random.Generator
) -> list[NDArray[np.int64]]:
    """Each user's answer to each question (population indices), drawn from the questions' weights."""
    answers = []
    for q in questions:
        p = np.asarray(q.weights, dtype=np.float64)
        answers.append(rng.choice(len(q.values), size=users, p=p / p.sum()).astype(np.int64))
    return answers


def _encode(
    questions: Sequence[Question],
    answers: Sequence[NDArray[np.int64]],
    batch_size: int,
    rng: np.random.Generator,
) -> tuple[list[DeviceBatch], list[Accumulator]]:
    """Every user's reports, encoded as their devices would (the batch encoders), in batches of
    ``batch_size`` users per question; and the sum of all batches per question (what must be counted)."""
    batches: list[DeviceBatch] = []
    sums = [accumulator_for(q.params) for q in questions]
    users = answers[0].size
    for start in range(0, users, batch_size):
        end = min(start + batch_size, users)
        for j, q in enumerate(questions):
            spec = registry.spec_for(q.params)
            columns = spec.encode_batch(
                q.params,
                answers[j][start:end],
                rng,
                campaign_id=q.campaign_id,
                labels=q.labels_for_encoding(),
            )
            add_columns(sums[j], q.params, columns)
            batch_id = f"users-{start}-{end - 1}"
            msg = wire.batch_to_proto(
                campaign_id=q.campaign_id, batch_id=batch_id, params=q.params, columns=columns
            )
            batches.append(DeviceBatch(batch_id=batch_id, message=msg))
    return batches, sums


def _create_campaigns(target: str, questions: Sequence[Question], out: Path) -> None:
    """Create the campaigns through one replica (the Analyst service), showing the equivalent commands;
    their candidate lists are written to ``out`` as those commands read them."""
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        for q in questions:
            if q.candidates:
                (out / f"{q.campaign_id}-candidates.txt").write_text("\n".join(q.candidates) + "\n", "utf-8")
            _shell(f"{q.command.format(out=out)} --server {target}")
            campaign = wire.campaign_to_proto(
                campaign_id=q.campaign_id, params=q.params, description=q.title, candidates=q.candidates
            )
            try:
                analyst.CreateCampaign(analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=30)
            except grpc.RpcError as exc:
                raise DemoError(
                    f"creating campaign {q.campaign_id!r} failed: {exc.code().name}: {exc.details()}"
                ) from None


def _send_and_kill(
    batches: list[DeviceBatch], replicas: Sequence[Replica], clients: int, outcome: DemoOutcome
) -> list[DeviceBatch]:
    """The clients send every batch; replica A is SIGKILLed once half of them are acknowledged.

    Returns the batches replica A acknowledged before it died.
    """
    ledger = Ledger(mark_after=len(batches) // 2)
    per_client: list[list[DeviceBatch]] = [[] for _ in range(clients)]
    for i, b in enumerate(batches):
        per_client[(i // 2) % clients].append(b)  # a user chunk's batches (one per question) go together
    threads = [FailoverClient(mine, replicas, c % len(replicas), ledger) for c, mine in enumerate(per_client)]
    victim = replicas[0]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        while not ledger.marked.wait(0.05):
            if ledger.abort.is_set() or not any(t.is_alive() for t in threads):
                break
        if ledger.failure is None and ledger.marked.is_set():
            victim.kill()
            with ledger.lock:
                acked_then = ledger.acked
            console.print(
                f"[bold red]SIGKILL[/bold red] replica {victim.name} (pid {victim.pid}) after {acked_then:,}"
                f" of {len(batches):,} batches were acknowledged; the clients keep going, and resend what"
                " it left unanswered (same batch ids) to replica B"
            )
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    finally:
        ledger.abort.set()  # on Ctrl-C: the clients stop at their next attempt
    if ledger.failure is not None:
        raise DemoError(ledger.failure)
    if ledger.acked != len(batches):
        raise DemoError(f"only {ledger.acked} of {len(batches)} batches were acknowledged")
    outcome.acked_by = {r.name: ledger.acked_by.get(r.name, 0) for r in replicas}
    outcome.resent, outcome.duplicates = ledger.resent, ledger.duplicates
    by_a, by_b = (outcome.acked_by[r.name] for r in replicas)
    console.print(
        f"all {len(batches):,} batches acknowledged in {time.monotonic() - t0:.1f} s: replica A"
        f" {by_a:,} (before it was killed), replica B {by_b:,}; {ledger.resent:,} resent to B after a failed"
        f' call ({ledger.duplicates:,} answered "duplicate": A committed them, then died before answering)'
    )
    return ledger.acked_batches.get(victim.name, [])


def _replay_acknowledged(batches: Sequence[DeviceBatch], survivor: Replica, outcome: DemoOutcome) -> None:
    """Send every batch the killed replica acknowledged again, to the survivor: each must be answered
    "duplicate" (its commit outlived the replica, in the shared database) and count nothing."""
    import grpc

    from ldp_client._proto.ldp.v1 import collector_pb2_grpc

    duplicates = 0
    with grpc.insecure_channel(survivor.target) as ch:
        collector = collector_pb2_grpc.CollectorStub(ch)
        for batch in batches:
            try:
                resp = collector.Submit(batch.message, timeout=SUBMIT_TIMEOUT_S)
            except grpc.RpcError as exc:
                raise DemoError(
                    f"resending batch {batch.batch_id!r} to replica {survivor.name} failed:"
                    f" {exc.code().name}: {exc.details()}"
                ) from None
            if not resp.duplicate or resp.accepted:
                raise DemoError(
                    f"batch {batch.batch_id!r}, acknowledged by the killed replica, was counted again by"
                    f" replica {survivor.name} ({resp.accepted} reports)"
                )
            duplicates += 1
    outcome.replayed, outcome.replay_duplicates = len(batches), duplicates
    console.print(
        f"then all {len(batches):,} batches replica A had acknowledged were sent again to replica B, as"
        f' devices that never got their answer would: {duplicates:,} answered "duplicate", nothing counted'
        " twice"
    )


def _server_answers(
    target: str,
    questions: Sequence[Question],
    sums: Sequence[Accumulator],
    truths: Sequence[NDArray[np.int64]],
) -> list[QuestionOutcome]:
    """Each campaign's accumulator and answer from the surviving replica (the Analyst service)."""
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, analyst_pb2_grpc, decode_pb2, estimates_pb2

    out = []
    with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 256 << 20)]) as ch:
        analyst = analyst_pb2_grpc.AnalystStub(ch)
        for q, acc, truth in zip(questions, sums, truths, strict=True):
            try:
                export = analyst.ExportCampaign(
                    analyst_pb2.ExportCampaignRequest(campaign_id=q.campaign_id), timeout=60
                )
                answer: Any
                if q.decoded:
                    answer = analyst.DecodeRappor(
                        decode_pb2.DecodeRapporRequest(
                            campaign_id=q.campaign_id, confidence=_CONFIDENCE, alpha=_ALPHA
                        ),
                        timeout=120,
                    )
                else:
                    answer = analyst.GetEstimate(
                        estimates_pb2.EstimateRequest(campaign_id=q.campaign_id, confidence=_CONFIDENCE),
                        timeout=60,
                    )
            except grpc.RpcError as exc:
                raise DemoError(
                    f"reading campaign {q.campaign_id!r} from replica B failed:"
                    f" {exc.code().name}: {exc.details()}"
                ) from None
            out.append(
                QuestionOutcome(
                    question=q,
                    truth=truth,
                    expected_accumulator=acc.to_bytes(),
                    server_accumulator=bytes(export.accumulator),
                    server_batches=int(export.n_batches),
                    server_answer=answer,
                )
            )
    return out


def _archive_cli(args: list[str], password: str) -> str:
    """Run ``ldp-aggregator ARGS`` as an operator would (the password in PGPASSWORD); its stdout."""
    cmd = [sys.executable, "-m", "ldp_aggregator", *args]
    env = {**os.environ, "PGPASSWORD": password}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=600, check=False, start_new_session=True
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise DemoError(
            f"ldp-aggregator {args[0]} {args[1]} failed (exit {proc.returncode}):"
            f" {lines[-1] if lines else ''}"
        )
    return proc.stdout


def _reduce_on_dask(archive: Path, outcomes: list[QuestionOutcome], workers: int) -> list[QuestionOutcome]:
    """Each campaign's archive files reduced on a Dask LocalCluster, and the answers computed from them."""
    from dataclasses import replace

    from ldp_aggregator.analysis import estimate_campaign, estimate_to_proto
    from ldp_aggregator.rappor_decode import decode_campaign, decode_to_proto
    from ldp_aggregator.reduce import dask_client, reduce_archive
    from ldp_aggregator.service import estimate_note
    from ldp_client.errors import LdpError

    done = []
    try:
        with dask_client(None, workers=workers) as client:
            for q in outcomes:
                cid = q.question.campaign_id
                result = reduce_archive(client, archive, cid)
                answer: Any
                if q.question.decoded:
                    answer = decode_to_proto(
                        decode_campaign(
                            result.info, result.accumulator, confidence=_CONFIDENCE, alpha=_ALPHA
                        ),
                        cid,
                    )
                else:
                    answer = estimate_to_proto(
                        estimate_campaign(result.info, result.accumulator, confidence=_CONFIDENCE)
                    )
                    answer.note = estimate_note(result.info, [])
                console.print(
                    f"{cid}: reduced {result.files} file(s), {result.rows:,} payloads,"
                    f" {result.accumulator.n:,} reports on Dask in {result.seconds:.2f} s"
                )
                done.append(
                    replace(q, archive_accumulator=result.accumulator.to_bytes(), archive_answer=answer)
                )
    except LdpError as exc:
        raise DemoError(f"the reduce on Dask failed: {exc}") from None
    return done


def _check_exactly_once(outcome: DemoOutcome, batches_per_question: int) -> None:
    for q in outcome.questions:
        cid = q.question.campaign_id
        if q.server_accumulator != q.expected_accumulator or q.server_batches != batches_per_question:
            raise DemoError(
                f"campaign {cid!r}: the replica's accumulator ({q.server_batches} batches) is not the sum of"
                f" the {batches_per_question} batches sent: a batch was lost or counted twice"
            )
    n = ", ".join(f"{q.question.campaign_id} n = {outcome.users:,}" for q in outcome.questions)
    console.print(
        f"[bold green]exactly once[/bold green]: {n} = the users; each campaign's accumulator equals the"
        f" sum of the {batches_per_question:,} batches sent, byte for byte"
    )


@contextlib.contextmanager
def _interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM as Ctrl-C (KeyboardInterrupt), so the cleanup runs either way (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_demo(
    out: Path,
    *,
    users: int = 1_000_000,
    batch_size: int = 1_000,
    clients: int = 8,
    workers: int = 2,
    seed: int = 2026,
    on_cluster: Callable[[PgCluster], None] | None = None,
) -> DemoOutcome:
    """The whole demo (see the module docstring); prints as it goes and returns what it saw.

    ``on_cluster`` is called with the PostgreSQL cluster once it runs (tests use it to see its directory).

    Raises:
        DemoError: a step failed (everything is cleaned up first).
        KeyboardInterrupt: Ctrl-C or SIGTERM (everything is cleaned up first).
    """
    t0 = time.monotonic()
    questions = _questions()
    outcome = DemoOutcome(users=users)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "archive"
    shutil.rmtree(archive, ignore_errors=True)  # the demo's own archive, made afresh at every run
    outcome.archive = archive
    rng = np.random.default_rng(seed)
    answers = _population(questions, users, rng)
    truths = [np.bincount(a, minlength=len(q.values)) for q, a in zip(questions, answers, strict=True)]
    batches, sums = _encode(questions, answers, batch_size, rng)
    outcome.batches = len(batches)

    console.rule(
        "[bold]two aggregator replicas on PostgreSQL, one killed midway; the archive reduced on Dask[/bold]"
    )
    with contextlib.ExitStack() as stack:
        t_pg = time.monotonic()
        cluster = PgCluster()
        stack.callback(cluster.destroy)
        outcome.pg_dir = cluster.dir
        cluster.start()
        if on_cluster is not None:
            on_cluster(cluster)
        url = f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
        console.print(
            f"[bold]PostgreSQL[/bold] {cluster.bin.parent.name}: a throwaway cluster in {cluster.dir} on"
            f" 127.0.0.1:{cluster.port} (removed at the end), ready in {time.monotonic() - t_pg:.1f} s"
        )
        _shell(
            f"PGPASSWORD=... ldp-aggregator serve --store {url} --listen 0.0.0.0:50051 --retain-raw   # x2"
        )
        replicas = [Replica(name, url, cluster.password, out / f"replica-{name}.log") for name in _REPLICAS]
        for r in replicas:
            stack.callback(r.stop)
            outcome.replica_pids.append(r.pid)
        for r in replicas:
            r.wait_ready()
        console.print(
            "[bold]replicas[/bold]: "
            + ", ".join(f"{r.name} on {r.target} (pid {r.pid})" for r in replicas)
            + f", one PostgreSQL database; logs in {out}"
        )
        _create_campaigns(replicas[0].target, questions, out)
        console.print(
            f'{users:,} simulated users answer both questions, each answer encoded on the "device":'
            f" {len(batches):,} batches of up to {batch_size:,} reports from {clients} client threads, half"
            " of them homed on each replica"
        )
        acknowledged_by_victim = _send_and_kill(batches, replicas, clients, outcome)
        survivor = replicas[1]
        _replay_acknowledged(acknowledged_by_victim, survivor, outcome)
        outcome.questions = _server_answers(survivor.target, questions, sums, truths)
        _check_exactly_once(outcome, len(batches) // len(questions))
        for q in outcome.questions:
            console.print(_table(q, q.server_answer, f"replica {survivor.name}"))

        console.rule("[bold]the report archive, exported from PostgreSQL and reduced on Dask[/bold]")
        for args in (
            ["archive", "export", str(archive), "--store", url],
            ["archive", "verify", str(archive), "--store", url],
        ):
            _shell(f"ldp-aggregator {' '.join(args)}")
            text = _archive_cli(args, cluster.password)
            console.print(text.rstrip(), markup=False)
            if args[1] == "verify":
                outcome.verify_output = text
        for question in questions:
            verb = "decode" if question.decoded else "estimate"
            _shell(f"ldp-aggregator archive {verb} {archive} {question.campaign_id} --workers {workers}")
        outcome.questions = _reduce_on_dask(archive, outcome.questions, workers)
        for q in outcome.questions:
            console.print(_table(q, q.archive_answer, "the archive on Dask"))
        for q in outcome.questions:
            cid = q.question.campaign_id
            if q.archive_accumulator != q.server_accumulator:
                raise DemoError(f"campaign {cid!r}: the archive's accumulator differs from the replica's")
            if q.archive_answer != q.server_answer:
                raise DemoError(f"campaign {cid!r}: the archive's answer differs from the replica's")
        console.print(
            "[bold green]identical[/bold green]: the archive's accumulators equal the replica's byte for"
            " byte, and every estimate, standard error and interval above equals the replica's answer"
        )
        codes = [r.stop() for r in replicas]
    outcome.seconds = time.monotonic() - t0
    console.print(
        f"replica A was killed (exit {codes[0]}), replica B stopped with SIGTERM (exit {codes[1]});"
        f" PostgreSQL stopped and {cluster.dir} removed; total {outcome.seconds:.1f} s"
    )
    return outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", type=Path, default=Path("demo-cluster-output"), help="logs and the archive (made afresh)"
    )
    ap.add_argument("--users", type=int, default=1_000_000, help="simulated users (default 1,000,000)")
    ap.add_argument("--batch-size", type=int, default=1_000, help="reports per batch (default 1,000)")
    ap.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--workers", type=int, default=2, help="Dask LocalCluster workers (default 2)")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args(argv)
    for name in ("users", "batch_size", "clients", "workers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: allowed an integer >= 1")
    reason = missing_reason()
    if reason is not None:
        print_error(f"make demo-cluster needs PostgreSQL 15: {reason}")
        return EXIT_UNAVAILABLE
    try:
        with _interrupt_on_sigterm():
            run_demo(
                args.out,
                users=args.users,
                batch_size=args.batch_size,
                clients=args.clients,
                workers=args.workers,
                seed=args.seed,
            )
    except KeyboardInterrupt:
        print_error("interrupted: what it had started was stopped (replicas, PostgreSQL) and removed")
        return EXIT_INTERRUPTED
    except (DemoError, ReplicaError, RuntimeError) as exc:  # RuntimeError: initdb or pg_ctl failed
        print_error(f"demo-cluster: {exc}")
        return EXIT_INTERNAL
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
