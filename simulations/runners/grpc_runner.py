"""The ``grpc`` runner: a real aggregator, clients in spawned worker processes submitting batches (or running
a real :class:`~ldp_client.reporter.Reporter`), and the estimate read back over gRPC."""

from __future__ import annotations

import contextlib
import multiprocessing
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.client_access import ClientAccess
from ldp_client import registry
from ldp_client.errors import LdpError
from ldp_client.params import MechanismParams
from simulations import marginals as sim_marginals
from simulations.populations import CategoricalPopulation
from simulations.ranges import range_queries, rows_from_proto, takes_ranges
from simulations.runners.config import (
    GrpcClient,
    ProgressFn,
    SimulationError,
    _decodes_candidates,
    _estimates_candidates,
)
from simulations.runners.local import _encode_columns
from simulations.runners.prepare import PreparedSimulation
from simulations.runners.results import _Outcome

if TYPE_CHECKING:
    import grpc

    from ldp_aggregator._proto.ldp.v1 import estimates_pb2

# Batches are also capped in bytes, so wide one-hot reports (basic-rappor over a large domain) still fit.
_MAX_BATCH_BYTES = 8 * 1024 * 1024
# Batches per worker task: tasks (not workers) fix how users are split, so results for a given seed do not
# depend on the number of workers.
_BATCHES_PER_TASK = 2
_SUBMIT_ATTEMPTS = 6
_RPC_TIMEOUT_S = 120.0
_CONNECT_TIMEOUT_S = 15.0


# ------------------------------------------------------------------------------------------ gRPC runner


@dataclass(frozen=True, kw_only=True)
class _Task:
    """One worker task: draw ``n_users`` values, encode, submit in batches. Pickled to a spawned worker."""

    target: str
    campaign_id: str
    task_index: int
    n_users: int
    batch_size: int
    seed: np.random.SeedSequence
    params: MechanismParams
    population: CategoricalPopulation
    domain_size: int
    labels: tuple[str, ...]
    client: GrpcClient
    access: ClientAccess | None = None  # the Collector calls' token and TLS material (read by the parent)


_WORKER_CHANNELS: dict[tuple[str, ClientAccess | None], Any] = {}


def _collector(target: str, access: ClientAccess | None) -> Any:
    """The worker process's Collector stub for ``target`` (one channel per process, reused by its tasks)."""
    stub = _WORKER_CHANNELS.get((target, access))
    if stub is None:
        from ldp_client._proto.ldp.v1 import collector_pb2_grpc

        channel = (access or ClientAccess()).channel(
            target, options=[("grpc.max_send_message_length", 64 << 20)]
        )
        stub = collector_pb2_grpc.CollectorStub(channel)
        _WORKER_CHANNELS[(target, access)] = stub
    return stub


def _submit(stub: Any, msg: Any) -> int:
    """Submit one batch; retry transient failures with the SAME batch id (the server counts it once)."""
    import grpc

    retry = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
    for attempt in range(_SUBMIT_ATTEMPTS):
        try:
            resp = stub.Submit(msg, timeout=_RPC_TIMEOUT_S, wait_for_ready=True)
            return int(resp.accepted)
        except grpc.RpcError as exc:
            code = exc.code()
            if code not in retry or attempt == _SUBMIT_ATTEMPTS - 1:
                # grpc's exception objects do not pickle: send plain text back to the parent process.
                details = exc.details() or ""
                raise SimulationError(
                    f"Submit of batch {msg.batch_id!r} failed: {code.name}: {details}",
                    code.name,
                    call="Collector.Submit",
                    details=details,
                ) from None
            time.sleep(0.1 * 2**attempt)
    raise SimulationError(f"Submit of batch {msg.batch_id!r} failed")  # unreachable


def _grpc_task(task: _Task) -> tuple[NDArray[np.int64], int]:
    """Worker: returns (count of each population value among the task's users, reports accepted)."""
    if task.client == "reporter":
        return _reporter_task(task)
    from ldp_client import wire

    stub = _collector(task.target, task.access)
    rng = np.random.default_rng(task.seed)
    counts = np.zeros(task.domain_size, dtype=np.int64)
    accepted = 0
    values_iter = task.population.iter_values(task.n_users, task.domain_size, rng, chunk_size=task.batch_size)
    for j, values in enumerate(values_iter):
        counts += np.bincount(values, minlength=task.domain_size)
        columns = _encode_columns(task.params, values, rng, campaign_id=task.campaign_id, labels=task.labels)
        msg = wire.batch_to_proto(
            campaign_id=task.campaign_id,
            batch_id=f"t{task.task_index}-b{j}",
            params=task.params,
            columns=columns,
        )
        accepted += _submit(stub, msg)
    return counts, accepted


def _reporter_task(task: _Task) -> tuple[NDArray[np.int64], int]:
    """Worker: a real Reporter (CSPRNG, outbox, batching, retries) sends one report per simulated user."""
    from ldp_client.reporter import Reporter

    rng = np.random.default_rng(task.seed)
    counts = np.zeros(task.domain_size, dtype=np.int64)
    spec = registry.spec_for(task.params)  # SimulationConfig allows this client for registered ones only
    candidates = spec.estimates_candidates
    # The reporter refuses a campaign above max_epsilon: allow this campaign's (float-rounded) epsilon.
    max_eps = float(task.params.epsilon) * (1.0 + 1e-9) + 1e-12
    access = task.access or ClientAccess()
    with tempfile.TemporaryDirectory(prefix="ldp-sim-reporter-") as state:
        try:
            reporter = Reporter(
                task.target,
                task.campaign_id,
                max_epsilon=max_eps,
                state_dir=state,
                batch_size=task.batch_size,
                max_pending=task.n_users + 1,  # never drop a simulated user's value
                channel_credentials=access.credentials(),
                metadata=access.metadata(),
            )
            try:
                for values in task.population.iter_values(
                    task.n_users, task.domain_size, rng, chunk_size=task.batch_size
                ):
                    counts += np.bincount(values, minlength=task.domain_size)
                    for v in values.tolist():  # one call per user, as an app would: the point of this client
                        # A mechanism hashing strings reports the population label itself.
                        reporter.report(task.labels[v] if candidates else spec.input_value(task.params, v))
                settled = reporter.flush(timeout=600.0)
                stats = reporter.stats()
            finally:
                reporter.close(timeout=5.0)
        except LdpError as exc:
            raise _reporter_failure(task, exc) from None
    if not settled or stats.rejected_batches or stats.dropped_overflow or stats.dropped_invalid:
        raise SimulationError(
            f"reporter task {task.task_index}: not all reports were acknowledged (settled={settled}, "
            f"rejected batches={stats.rejected_batches}, dropped={stats.dropped_overflow}, "
            f"last error={stats.last_error!r})"
        )
    return counts, int(stats.sent_reports)


def _reporter_failure(task: _Task, exc: LdpError) -> SimulationError:
    """A Reporter's error as a SimulationError (which pickles back to the parent; the client's errors
    need not), keeping the status of a refused token (AccessDeniedError, also as the cause of a loss)."""
    from ldp_client.errors import AccessDeniedError

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, AccessDeniedError):
        cause = cause.__cause__ or cause.__context__
    message = f"reporter task {task.task_index}: {exc}"
    if isinstance(cause, AccessDeniedError):
        # The reporter names its calls "GetCampaign('id')" and "Submit to 'id'": keep the method.
        call = "Collector." + cause.call.partition("(")[0].partition(" ")[0]
        return SimulationError(message, cause.code, call=call, details=cause.details)
    return SimulationError(message)


def _outcome_from_proto(
    prep: PreparedSimulation, resp: estimates_pb2.EstimateResponse, truth: NDArray[np.int64], campaign_id: str
) -> _Outcome:
    if prep.value_items:  # issue 18: a marginal campaign's items are its marginals' cells
        rows = sim_marginals.rows_from_proto(resp)
        if rows.shape[0] != len(prep.items):
            raise SimulationError(
                f"campaign {campaign_id!r}: the aggregator returned {rows.shape[0]} marginal cells, "
                f"expected {len(prep.items)}"
            )
        return _Outcome(
            truth=truth,
            count=rows[:, 0],
            std_error=rows[:, 1],
            ci_low=rows[:, 2],
            ci_high=rows[:, 3],
            n_reports=int(resp.n_reports),
        )
    items = list(resp.items)
    if len(items) != len(prep.items):
        raise SimulationError(
            f"campaign {campaign_id!r}: the aggregator returned {len(items)} items, "
            f"expected {len(prep.items)}"
        )
    if _estimates_candidates(prep.params) and [it.label for it in items] != list(prep.items):
        raise SimulationError(f"campaign {campaign_id!r}: the aggregator returned other candidates")
    return _Outcome(
        truth=truth,
        count=np.array([it.count for it in items], dtype=np.float64),
        std_error=np.array([it.std_error for it in items], dtype=np.float64),
        ci_low=np.array([it.ci_low for it in items], dtype=np.float64),
        ci_high=np.array([it.ci_high for it in items], dtype=np.float64),
        n_reports=int(resp.n_reports),
        ranges=rows_from_proto(resp) if resp.ranges else None,
    )


def _decoded_outcome(
    analyst: Any, prep: PreparedSimulation, campaign_id: str, truth: NDArray[np.int64], target: str
) -> _Outcome:
    """Analyst.DecodeRappor on a string-RAPPOR campaign with the simulation's candidates (issue 5)."""
    import grpc

    from ldp_aggregator._proto.ldp.v1 import decode_pb2

    request = decode_pb2.DecodeRapporRequest(
        campaign_id=campaign_id,
        candidates=list(prep.items),
        confidence=prep.config.confidence,
        alpha=prep.config.detection_alpha,
    )
    try:
        resp = analyst.DecodeRappor(request, timeout=_RPC_TIMEOUT_S * 5)
    except grpc.RpcError as exc:
        raise _rpc_error("DecodeRappor", target, exc) from None
    if [c.label for c in resp.candidates] != list(prep.items):
        raise SimulationError(f"campaign {campaign_id!r}: the aggregator decoded other candidates")
    cands = list(resp.candidates)
    return _Outcome(
        truth=truth,
        count=np.array([c.count for c in cands], dtype=np.float64),
        std_error=np.array([c.std_error for c in cands], dtype=np.float64),
        ci_low=np.array([c.ci_low for c in cands], dtype=np.float64),
        ci_high=np.array([c.ci_high for c in cands], dtype=np.float64),
        n_reports=int(resp.n_reports),
        detected=np.array([c.detected for c in cands], dtype=bool),
    )


def _rpc_error(what: str, target: str, exc: grpc.RpcError) -> SimulationError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "ERROR"
    return SimulationError(
        f"{what} on the aggregator at {target} failed: {name}: {details}",
        None if code is None else name,
        call=f"Analyst.{what}",
        details=details or "",
    )


def get_estimate_checked(analyst: Any, target: str, request: Any, n_users: int) -> Any:
    """Analyst.GetEstimate, checking that the aggregator counted every simulated user's report.

    Raises:
        SimulationError: the call failed, or the estimate counts a different number of reports.
    """
    import grpc

    try:
        resp = analyst.GetEstimate(request, timeout=_RPC_TIMEOUT_S * 5)
    except grpc.RpcError as exc:
        raise _rpc_error("GetEstimate", target, exc) from None
    if int(resp.n_reports) != n_users:
        raise SimulationError(
            f"campaign {request.campaign_id!r}: the estimate counts {resp.n_reports} reports, "
            f"expected {n_users}"
        )
    return resp


def _task_sizes(n: int, per_task: int) -> list[int]:
    full, rest = divmod(n, per_task)
    return [per_task] * full + ([rest] if rest else [])


@dataclass(frozen=True, kw_only=True)
class AggregatorSession:
    """The aggregator a grpc-mode simulation reports to: its address and stubs on one open channel."""

    target: str
    analyst: Any  # analyst_pb2_grpc.AnalystStub
    collector: Any  # collector_pb2_grpc.CollectorStub


@contextlib.contextmanager
def aggregator_session(
    server: str | None,
    access: ClientAccess | None = None,
    reporter_access: ClientAccess | None = None,
    *,
    retain_raw: bool = False,
) -> Iterator[AggregatorSession]:
    """The aggregator a grpc-mode simulation reports to (closed, and stopped if started here, on exit).

    ``server`` None starts an in-process aggregator on a fresh SQLite file in a temporary directory (both
    gone on exit); otherwise ``HOST:PORT`` of a running one, reached with ``access`` (TLS material, and
    the token of the Analyst stub) and ``reporter_access`` (the token of the Collector stub; None: that of
    ``access``), over one connection. Waits until the channel is ready. ``retain_raw``: the in-process
    aggregator keeps raw reports (what the estimates of discovery campaigns read).

    Raises:
        SimulationError: the aggregator cannot be reached.
    """
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2_grpc
    from ldp_aggregator.server import BackgroundServer, ServerConfig
    from ldp_client._proto.ldp.v1 import collector_pb2_grpc

    access = access or ClientAccess()
    reporter_access = reporter_access or access

    with contextlib.ExitStack() as stack:
        if server is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ldp-sim-"))
            background = BackgroundServer(
                ServerConfig(db=Path(tmp) / "sim.sqlite3", listen="127.0.0.1:0", retain_raw=retain_raw)
            ).start()
            stack.callback(background.stop)
            target = background.target
        else:
            target = server
        channel = access.open_channel(target, options=[("grpc.max_receive_message_length", 256 << 20)])
        stack.callback(channel.close)
        try:
            grpc.channel_ready_future(channel).result(timeout=_CONNECT_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            raise SimulationError(
                f"cannot connect to the aggregator at {target} (waited {_CONNECT_TIMEOUT_S:g} s)",
                "UNAVAILABLE",
            ) from None
        yield AggregatorSession(
            target=target,
            analyst=analyst_pb2_grpc.AnalystStub(access.authorize(channel)),
            collector=collector_pb2_grpc.CollectorStub(reporter_access.authorize(channel)),
        )


def _run_grpc(
    prep: PreparedSimulation, seeds: list[np.random.SeedSequence], progress: ProgressFn | None
) -> list[_Outcome]:
    import grpc

    from ldp_aggregator._proto.ldp.v1 import analyst_pb2, estimates_pb2
    from ldp_client import wire

    cfg = prep.config
    params = prep.params
    batch_size = max(1, min(cfg.batch_size, _MAX_BATCH_BYTES // _row_bytes(params)))
    labels = prep.value_labels if _estimates_candidates(params) else ()
    outcomes: list[_Outcome] = []
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(aggregator_session(cfg.server, cfg.access, cfg.reporter_access))
        target, analyst = session.target, session.analyst
        pool = stack.enter_context(
            ProcessPoolExecutor(max_workers=cfg.workers, mp_context=multiprocessing.get_context("spawn"))
        )
        for r, seed in enumerate(seeds):
            # A fresh in-process database has no campaigns, so ids can be deterministic (RAPPOR's Bloom
            # hashing is keyed by the id, so a seed then reproduces the reports); a shared server needs
            # unique ids.
            suffix = f"-r{r}" if cfg.server is None else f"-{uuid.uuid4().hex[:16]}-r{r}"
            campaign_id = cfg.campaign_id + suffix
            campaign = wire.campaign_to_proto(
                campaign_id=campaign_id,
                params=params,
                description=f"ldp-sim: {cfg.mechanism} on {cfg.population}, {cfg.n_users} users, repeat {r}",
                # Candidate strings live with the campaign, as an operator sets them.
                candidates=list(prep.items) if _estimates_candidates(params) else (),
            )
            try:
                analyst.CreateCampaign(
                    analyst_pb2.CreateCampaignRequest(campaign=campaign), timeout=_RPC_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                raise _rpc_error("CreateCampaign", target, exc) from None
            sizes = _task_sizes(cfg.n_users, batch_size * _BATCHES_PER_TASK)
            task_seeds = seed.spawn(len(sizes))
            futures: list[Future[tuple[NDArray[np.int64], int]]] = []
            for i, (size, task_seed) in enumerate(zip(sizes, task_seeds, strict=True)):
                task = _Task(
                    target=target,
                    campaign_id=campaign_id,
                    task_index=i,
                    n_users=size,
                    batch_size=batch_size,
                    seed=task_seed,
                    params=params,
                    population=prep.population,
                    domain_size=prep.domain_size,
                    labels=labels,
                    client=cfg.grpc_client,
                    access=cfg.reporter_access or cfg.access,
                )
                futures.append(pool.submit(_grpc_task, task))
            counts = np.zeros(prep.domain_size, dtype=np.int64)
            accepted = 0
            size_of = {id(f): s for f, s in zip(futures, sizes, strict=True)}
            try:
                for fut in as_completed(futures):
                    task_counts, task_accepted = fut.result()
                    counts += task_counts
                    accepted += task_accepted
                    if progress is not None:
                        progress(size_of[id(fut)])
            except BaseException as exc:
                for f in futures:
                    f.cancel()
                if isinstance(exc, LdpError) or not isinstance(exc, Exception):
                    raise
                # A worker died or raised something unexpected (e.g. BrokenProcessPool): say which run.
                raise SimulationError(
                    f"campaign {campaign_id!r}: a client worker failed: {type(exc).__name__}: {exc}"
                ) from exc
            if accepted != cfg.n_users:
                raise SimulationError(
                    f"campaign {campaign_id!r}: the aggregator accepted {accepted} reports, "
                    f"expected {cfg.n_users}"
                )
            request = estimates_pb2.EstimateRequest(
                campaign_id=campaign_id,
                candidates=list(prep.items) if _estimates_candidates(params) else [],
                confidence=cfg.confidence,
            )
            if takes_ranges(params):  # issue 18: the run's ranges, answered by the Analyst
                request.ranges.extend(
                    estimates_pb2.RangeQuery(lo=lo, hi=hi)
                    for lo, hi in range_queries(len(prep.items), cfg.seed)
                )
            if prep.value_items:  # issue 18: the chosen marginals, answered by the Analyst
                request.marginals.extend(
                    estimates_pb2.MarginalQuery(attributes=list(q))
                    for q in sim_marginals.marginal_queries(params)
                )
            resp = get_estimate_checked(analyst, target, request, cfg.n_users)
            if _decodes_candidates(params) and cfg.candidates is not None:
                # A candidate dictionary (issue 5): the full decoder, through Analyst.DecodeRappor.
                outcomes.append(_decoded_outcome(analyst, prep, campaign_id, prep.item_truth(counts), target))
                continue
            outcomes.append(_outcome_from_proto(prep, resp, prep.item_truth(counts), campaign_id))
    return outcomes


def _row_bytes(params: MechanismParams) -> int:
    """Bytes of one report in a batch message (rr packs 8 per byte: counted as 1, an upper bound)."""
    # The journal row: an upper bound on its batch bytes.
    return sum(f.width for f in registry.spec_for(params).row_fields(params))
