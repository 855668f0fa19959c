"""Simulation runners: whole user populations through the client's encoders and the aggregator's estimators.

For simulation only: every random draw comes from a ``numpy.random.Generator`` seeded from
``SimulationConfig.seed`` (the gRPC runner's optional ``reporter`` client is the one exception: it encodes
with the OS CSPRNG, as a device does, so its reports are not reproducible).

Three runners produce the same thing, an accumulator of one report per simulated user that the SAME
estimator reads (:func:`ldp_aggregator.estimators.estimate_frequencies` for rr, grr, basic-rappor and
boolean-rappor; :func:`ldp_aggregator.rappor_estimates.estimate_rappor_candidates` for string RAPPOR):

``sum``
    Exact sampling of the sufficient statistics (:mod:`simulations.sampling`), never one report at a time:
    the users' values are one multinomial draw over the population, RAPPOR users are split over cohorts
    by a multinomial, and the accumulated counts are binomial (RR, RAPPOR bits) or an exact O(d) spread
    (GRR). A real accumulator is filled from the sampled counts and estimated. Correct in distribution for
    one report per user; the cost does not depend on the number of users (10^9 users take seconds).
``report``
    Every user's value is drawn (streamed chunk by chunk from the population, never materialised whole)
    and encoded by the client's batch encoder (``encode_batch``) with the seeded generator, and each
    chunk of reports is added to the accumulator with ``add_columns``, exactly as the server ingests a
    batch. Memory is bounded by the chunk size.
``grpc``
    End to end: a real aggregator (started here on a temporary SQLite database with
    :class:`~ldp_aggregator.server.BackgroundServer`, or an existing one at ``server``), a campaign created
    with ``Analyst.CreateCampaign``, clients in worker processes (``multiprocessing`` *spawn* context)
    that draw values, encode them and submit them over gRPC in batches with unique batch ids, and the
    estimate read back with ``Analyst.GetEstimate``. An existing server is reached with the config's
    ``access`` (TLS material, and an admin token for the Analyst calls) and ``reporter_access`` (a
    reporter token for the clients' Collector calls), read once by the caller and pickled to the workers
    (:class:`ldp_aggregator.client_access.ClientAccess`).

    Which client code the workers run (``grpc_client``):

    * ``batch`` (default): each worker encodes a batch with the mechanism's ``encode_batch`` (seeded) and
      sends it with ``Collector.Submit`` (retrying UNAVAILABLE with the same batch id, which the server
      counts once). This is what makes 10^6 users in well under a minute possible, and it is the only
      correct choice for the RAPPOR variants: a :class:`~ldp_client.reporter.Reporter` is ONE device with
      one client secret, so every report it sends shares one cohort and one memoized permanent response,
      whereas a simulated population needs a fresh secret per user.
    * ``reporter`` (rr and grr only, which have no per-device state): each worker runs a real
      :class:`~ldp_client.reporter.Reporter` (outbox in a temporary directory) and calls
      ``report(value)`` once per user, so reports are encoded one by one with the OS CSPRNG, journaled,
      sealed and sent exactly as on a device. Much slower per report (a Python call per user), not
      seeded, but it exercises the production client path.

Results are on the count scale (estimated number of users per item). Besides the metrics of
:mod:`simulations.metrics`, :class:`SimulationResult` gives frequency-scale errors used to plan a launch
(:func:`sweep` with a target error): see :meth:`SimulationResult.error`.

Detection (string RAPPOR): a candidate is *detected* when its one-sided z statistic estimate / std_error
exceeds z_{1 - alpha/M} for M candidates (a Bonferroni-corrected z-test at family-wise level alpha,
``detection_alpha``), as RAPPOR's decoder reports a string only when its coefficient clears a
Bonferroni threshold (Erlingsson et al., CCS 2014, §4; google/rappor ``analysis/R/decode.R``). One-sided
because only a positive count is evidence that a string is present.

The modules, bottom up (each imports only those above it): :mod:`~simulations.runners.config` (the
configuration, its modes and defaults, :class:`SimulationError`), :mod:`~simulations.runners.prepare`
(population, domain and parameters), :mod:`~simulations.runners.results` (:class:`SimulationResult`, one
repeat's estimate), :mod:`~simulations.runners.local` (the ``sum`` and ``report`` runners),
:mod:`~simulations.runners.grpc_runner` (the ``grpc`` runner), :mod:`~simulations.runners.run`
(:func:`simulate`) and :mod:`~simulations.runners.sweeps` (:func:`sweep`, :func:`required_users`). Import
the public names from this package (``from simulations.runners import SimulationConfig, simulate``).
"""

from __future__ import annotations

from simulations.runners.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_SIZE,
    ERROR_METRICS,
    GRPC_CLIENTS,
    MODES,
    PILOT_USERS,
    ErrorMetric,
    GrpcClient,
    Mode,
    ProgressFn,
    SimulationConfig,
    SimulationError,
)

# The private helpers imported with "as" are for other modules (simulations.numeric's gRPC path,
# bench/bench_oracle_paths.py); they are not in __all__.
from simulations.runners.grpc_runner import _RPC_TIMEOUT_S as _RPC_TIMEOUT_S
from simulations.runners.grpc_runner import AggregatorSession, aggregator_session, get_estimate_checked
from simulations.runners.grpc_runner import _rpc_error as _rpc_error
from simulations.runners.grpc_runner import _submit as _submit
from simulations.runners.local import _encode_columns as _encode_columns
from simulations.runners.prepare import PreparedSimulation, prepare
from simulations.runners.results import SimulationResult
from simulations.runners.run import simulate
from simulations.runners.sweeps import SweepPoint, SweepResult, required_users, sweep

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "ERROR_METRICS",
    "GRPC_CLIENTS",
    "MODES",
    "PILOT_USERS",
    "AggregatorSession",
    "ErrorMetric",
    "GrpcClient",
    "Mode",
    "PreparedSimulation",
    "ProgressFn",
    "SimulationConfig",
    "SimulationError",
    "SimulationResult",
    "SweepPoint",
    "SweepResult",
    "aggregator_session",
    "get_estimate_checked",
    "prepare",
    "required_users",
    "simulate",
    "sweep",
]
