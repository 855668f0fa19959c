"""Simulation runners: whole user populations through the client's encoders and the aggregator's estimators.

For simulation only: every random draw comes from a ``numpy.random.Generator`` seeded from
``SimulationConfig.seed`` (the gRPC runner's optional ``reporter`` client is the one exception: it encodes
with the OS CSPRNG, as a device does, so its reports are not reproducible).

Three runners produce the same thing, an accumulator of one report per simulated user that the SAME
estimator reads (:func:`ldp_aggregator.estimators.estimate_frequencies` for rr, grr, basic-rappor and
boolean-rappor; :func:`ldp_aggregator.estimators.estimate_rappor_candidates` for string RAPPOR):

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
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
from numpy.typing import NDArray

from ldp_aggregator.accumulators import (
    Accumulator,
    BitCountAccumulator,
    accumulator_for,
    accumulator_from_sums,
    add_columns,
)
from ldp_aggregator.client_access import ClientAccess
from ldp_aggregator.estimators import estimate_frequencies, estimate_rappor_candidates
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.params import (
    AUTO_MECHANISM,
    MECHANISM_NAMES,
    MechanismParams,
    make_params,
)
from ldp_client.spec import Kind
from simulations.metrics import Metrics, compute_metrics
from simulations.oracle_sampling import has_sum_sampler
from simulations.populations import CategoricalPopulation, EmpiricalPopulation, parse_categorical_population

if TYPE_CHECKING:
    import grpc

    from ldp_aggregator._proto.ldp.v1 import estimates_pb2
    from ldp_client.spec import SumSampler

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "ERROR_METRICS",
    "MODES",
    "ErrorMetric",
    "Mode",
    "PreparedSimulation",
    "SimulationConfig",
    "SimulationError",
    "SimulationResult",
    "SweepPoint",
    "SweepResult",
    "prepare",
    "required_users",
    "simulate",
    "sweep",
]

Mode = Literal["sum", "report", "grpc"]
GrpcClient = Literal["batch", "reporter"]
ErrorMetric = Literal["max-se", "rmse"]
MODES: tuple[str, ...] = ("sum", "report", "grpc")
GRPC_CLIENTS: tuple[str, ...] = ("batch", "reporter")
ERROR_METRICS: tuple[str, ...] = ("max-se", "rmse")
ProgressFn = Callable[[int], None]

# Users encoded per chunk by the report runner: measured fastest for RAPPOR k=128 (2^18 to 2^22 tried), and
# about 150 MB of temporaries per chunk, so memory stays far below the 2 GiB budget at any N.
DEFAULT_CHUNK_SIZE = 1 << 20
# Reports per gRPC batch: 1 MB for RAPPOR k=128 (20 bytes a report), far below the server's 16 MiB limit.
DEFAULT_BATCH_SIZE = 50_000
# Batches are also capped in bytes, so wide one-hot reports (basic-rappor over a large domain) still fit.
_MAX_BATCH_BYTES = 8 * 1024 * 1024
# Batches per worker task: tasks (not workers) fix how users are split, so results for a given seed do not
# depend on the number of workers.
_BATCHES_PER_TASK = 2
_MAX_USERS = 1 << 53  # counts stay exact in float64 estimators
# Users of the pilot run that sizes N for a target error. The sum runner's cost does not depend on N, and at
# this size the estimator's plug-in variances are those at the true frequencies to a few parts in 10^5.
PILOT_USERS = 10**9
# Issue 6: mechanisms whose sum runner falls back to encoding every report pilot with at most this many.
_PER_REPORT_PILOT_USERS = 10**6
# Registered mechanisms without per-device state: one Reporter may stand for many simulated users (of the
# kinds this runner simulates: simulations.numeric runs those of kind MEAN with its own client).
_STATELESS = tuple(s.name for s in registry.SPECS if not s.per_device_state and s.kind is not Kind.MEAN)
_STATELESS_TEXT = " and ".join(", ".join(_STATELESS).rsplit(", ", 1))
_SUBMIT_ATTEMPTS = 6
_RPC_TIMEOUT_S = 120.0
_CONNECT_TIMEOUT_S = 15.0


class SimulationError(LdpError):
    """A simulation could not run to the end (aggregator unreachable, a batch refused, a worker failed).

    ``status`` is the gRPC status name when the aggregator answered with an error or could not be reached
    (``"UNAVAILABLE"``), else None; ``ldp-sim`` picks its exit code from it. ``call`` names the refused
    call as ``Service.Method`` (``"Analyst.CreateCampaign"``, ``"Collector.Submit"``) and ``details`` is the
    server's own message, so that ``ldp-sim`` can say which of its options fixes a refused token.
    """

    def __init__(
        self, message: str, status: str | None = None, *, call: str | None = None, details: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.call = call
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in worker processes and pickled back: keep the status, the call and the details.
        return (_rebuild_simulation_error, (str(self), self.status, self.call, self.details))


def _rebuild_simulation_error(
    message: str, status: str | None, call: str | None, details: str
) -> SimulationError:
    return SimulationError(message, status, call=call, details=details)


# --------------------------------------------------------------------------------------------- config


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise InvalidParameterError(name, value, allowed)
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise InvalidParameterError(name, value, allowed)
    return v


def _check_open_unit(name: str, value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) < 1.0:
        raise InvalidParameterError(name, value, f"a number in (0, 1) ({what})")
    return float(value)


def _normalise_params(value: object) -> tuple[tuple[str, str | int | float], ...]:
    items: list[tuple[object, object]]
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = []
        for pair in value:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise InvalidParameterError("params", pair, "(name, value) pairs or a mapping name -> value")
            items.append((pair[0], pair[1]))
    else:
        raise InvalidParameterError("params", value, "a mapping of parameter names to values")
    out: dict[str, str | int | float] = {}
    for name, v in items:
        if not isinstance(name, str) or not name:
            raise InvalidParameterError("params", name, "parameter names that are non-empty strings")
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise InvalidParameterError("params", f"{name}={v!r}", "a string, integer or number value")
        out[name] = v  # a later value for the same name wins, as a repeated --param does
    return tuple(out.items())


@dataclass(frozen=True, kw_only=True)
class SimulationConfig:
    """What to simulate. Cheap validation here; the population and parameters are built by :func:`prepare`.

    Attributes:
        mechanism: one of ``rr``, ``grr``, ``rappor``, ``basic-rappor``, ``boolean-rappor``.
        population: a categorical population spec (:func:`simulations.populations.parse_population`),
            e.g. ``zipf:1.1``, ``uniform``, ``geometric:0.3``, ``empirical:PATH``.
        n_users: users per repeat, each sending one report (1 <= N <= 2^53).
        domain: number of values D the population is spread over. Default: 2 for rr and boolean-rappor
            (value 1 = yes/true), the number of values of an empirical population; required otherwise.
            grr and basic-rappor declare this domain; for string RAPPOR the values are the population's
            labels (strings) hashed into Bloom filters.
        epsilon: for rr and grr (``from_epsilon``); RAPPOR variants are set by ``params`` (f, p, q, ...).
        params: any init field of the mechanism's parameter dataclass by name (``k``, ``h``, ``m``, ``f``,
            ``p``, ``q``, ``truth_probability``, ...), as a mapping or (name, value) pairs; string values
            are converted by :func:`ldp_client.params.make_params`.
        mode: ``sum``, ``report`` or ``grpc`` (module docstring).
        seed: root of every generator (``numpy.random.SeedSequence(seed)``; one child per repeat).
        repeats: independent simulations R.
        candidates: string RAPPOR only: the candidate strings to estimate (default: the population's labels).
        confidence: two-sided level of the estimators' intervals.
        detection_alpha: family-wise level of the RAPPOR detection test (module docstring).
        chunk_size: users per chunk in the report runner (bounds memory).
        campaign_id: campaign id (it keys RAPPOR's Bloom hashing). The gRPC runner appends ``-r<repeat>``
            with its own aggregator, and a random suffix as well with ``server``, so repeated runs against
            one server never collide.
        server: gRPC runner: ``HOST:PORT`` of a running aggregator; None starts one on a temporary database.
        workers: gRPC runner: client worker processes.
        batch_size: gRPC runner: reports per submitted batch.
        grpc_client: gRPC runner: ``batch`` or ``reporter`` (module docstring).
        access: with ``server``: the access token and TLS material of the Analyst calls (create the
            campaigns, read their estimates: an ADMIN token), from
            :func:`ldp_aggregator.client_access.read_client_access`. None: plaintext, no token.
        reporter_access: with ``server``: those of the clients' Collector calls (submit the reports: a
            REPORTER token, not limited to campaigns, since the campaign ids are made up per run; an admin
            token may not submit). None: the same as ``access``.
    """

    mechanism: str
    population: str
    n_users: int
    domain: int | None = None
    epsilon: float | None = None
    params: Mapping[str, str | int | float] | Sequence[tuple[str, str | int | float]] = ()
    mode: Mode = "sum"
    seed: int = 0
    repeats: int = 1
    candidates: Sequence[str] | None = None
    confidence: float = 0.95
    detection_alpha: float = 0.05
    chunk_size: int = DEFAULT_CHUNK_SIZE
    campaign_id: str = "ldp-sim"
    server: str | None = None
    workers: int = 2
    batch_size: int = DEFAULT_BATCH_SIZE
    grpc_client: GrpcClient = "batch"
    access: ClientAccess | None = None
    reporter_access: ClientAccess | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISM_NAMES and self.mechanism != AUTO_MECHANISM:  # issue 6: auto
            raise InvalidParameterError("mechanism", self.mechanism, f"one of {', '.join(MECHANISM_NAMES)}")
        if _kind(self.mechanism) is Kind.PAIRED:  # issue 5: two variables per report
            raise InvalidParameterError(
                "mechanism", self.mechanism, "one variable per report (for paired: ldp-sim associate)"
            )
        if not isinstance(self.population, str) or not self.population.strip():
            raise InvalidParameterError("population", self.population, "a population spec, e.g. zipf:1.1")
        _check_int("n_users", self.n_users, 1, _MAX_USERS)
        if self.domain is not None:
            _check_int("domain", self.domain, 1)
        if self.epsilon is not None and (
            isinstance(self.epsilon, bool)
            or not isinstance(self.epsilon, int | float)
            or not math.isfinite(self.epsilon)
            or self.epsilon <= 0
        ):
            raise InvalidParameterError("epsilon", self.epsilon, "a finite number > 0")
        object.__setattr__(self, "params", _normalise_params(self.params))
        if self.mode not in MODES:
            raise InvalidParameterError("mode", self.mode, f"one of {', '.join(MODES)}")
        _check_int("seed", self.seed, 0)
        _check_int("repeats", self.repeats, 1, 1_000_000)
        if self.candidates is not None:
            if isinstance(self.candidates, str | bytes) or not isinstance(self.candidates, Sequence):
                raise InvalidParameterError("candidates", self.candidates, "a sequence of candidate strings")
            cands = tuple(self.candidates)
            if _kind(self.mechanism) is not Kind.RAPPOR:
                raise InvalidParameterError(
                    "candidates", f"{len(cands)} candidates", f"none for {self.mechanism} (only for rappor)"
                )
            if not cands:
                raise InvalidParameterError("candidates", cands, "at least one candidate string")
            seen: set[str] = set()
            for c in cands:
                if not isinstance(c, str) or not c:
                    raise InvalidParameterError("candidates", c, "non-empty strings")
                if c in seen:
                    raise InvalidParameterError("candidates", c, "distinct candidates (this one is repeated)")
                seen.add(c)
            object.__setattr__(self, "candidates", cands)
        _check_open_unit("confidence", self.confidence, "e.g. 0.95")
        _check_open_unit("detection_alpha", self.detection_alpha, "family-wise level, e.g. 0.05")
        _check_int("chunk_size", self.chunk_size, 1)
        if not isinstance(self.campaign_id, str) or not 1 <= len(self.campaign_id) <= 80:
            raise InvalidParameterError("campaign_id", self.campaign_id, "a string of 1 to 80 characters")
        if self.server is not None:
            host, sep, port = self.server.rpartition(":") if isinstance(self.server, str) else ("", "", "")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise InvalidParameterError("server", self.server, "HOST:PORT with a port in [1, 65535]")
        for name in ("access", "reporter_access"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, ClientAccess):
                raise InvalidParameterError(name, type(value).__name__, "a ClientAccess or None")
            if value is not None and self.server is None:
                raise InvalidParameterError(
                    name, value, "None without server (the in-process aggregator needs no token or TLS)"
                )
        _check_int("workers", self.workers, 1, 256)
        _check_int("batch_size", self.batch_size, 1, 1_000_000)
        if self.grpc_client not in GRPC_CLIENTS:
            raise InvalidParameterError("grpc_client", self.grpc_client, f"one of {', '.join(GRPC_CLIENTS)}")
        if self.grpc_client == "reporter" and self.mechanism not in _STATELESS:
            raise InvalidParameterError(
                "grpc_client",
                self.grpc_client,
                "batch for RAPPOR variants (a Reporter is one device with one client secret; simulated users "
                f"need one each), reporter only for {_STATELESS_TEXT}",
            )

    @property
    def param_fields(self) -> dict[str, str | int | float]:
        """The ``params`` overrides as a dict."""
        return dict(cast(tuple[tuple[str, str | int | float], ...], self.params))

    def with_changes(self, **changes: Any) -> SimulationConfig:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)


# ------------------------------------------------------------------------------------------ preparation


@dataclass(frozen=True, kw_only=True, eq=False)
class PreparedSimulation:
    """A validated simulation: the population, the domain, the mechanism's parameters and the items.

    Attributes:
        config: the configuration.
        population: the parsed categorical population.
        domain_size: D, the number of population values.
        value_labels: label of each population value 0..D-1 (the strings RAPPOR hashes).
        params: the mechanism's parameters.
        items: labels of the estimated items: the population's values, or the RAPPOR candidates.
        item_index: population value of each item, -1 for a candidate no user can hold.
    """

    config: SimulationConfig
    population: CategoricalPopulation
    domain_size: int
    value_labels: tuple[str, ...]
    params: MechanismParams
    items: tuple[str, ...]
    item_index: NDArray[np.int64]

    def item_truth(self, value_counts: NDArray[np.int64]) -> NDArray[np.int64]:
        """True count of each item from the count of each population value."""
        idx = self.item_index
        out = np.zeros(idx.size, dtype=np.int64)
        ok = idx >= 0
        out[ok] = value_counts[idx[ok]]
        return out


def _kind(mechanism: str) -> Kind | None:
    """How the server estimates a registered mechanism (None: not registered, or auto)."""
    spec = registry.find_named(mechanism)
    return None if spec is None else spec.kind


def _estimates_candidates(params: MechanismParams) -> bool:
    """The mechanism estimates candidate strings (kind RAPPOR: string RAPPOR), not a declared domain."""
    return registry.spec_for(params).kind is Kind.RAPPOR


def _fixed_domain_size(mechanism: str) -> int | None:
    """The number of population values a mechanism fixes (rr: 2), or None."""
    spec = registry.find_named(mechanism)
    return None if spec is None else spec.fixed_domain_size


def _default_domain(config: SimulationConfig, population: CategoricalPopulation) -> int:
    if config.domain is not None:
        return int(config.domain)
    fixed = _fixed_domain_size(config.mechanism)
    if fixed is not None:
        return fixed
    if isinstance(population, EmpiricalPopulation):
        return population.support_size
    raise InvalidParameterError(
        "domain",
        None,
        f"the number of values D (e.g. 1000) for population {config.population!r} and mechanism "
        f"{config.mechanism} (only empirical populations, rr and boolean-rappor have a default)",
    )


def _build_params(config: SimulationConfig, domain_size: int) -> MechanismParams:
    mech = config.mechanism
    fields_ = config.param_fields
    spec = registry.find_named(mech)  # None for auto (issue 6) or an unknown name (make_params refuses it)
    if spec is not None:
        alternative = spec.epsilon_field
        if alternative is not None and config.epsilon is None and alternative not in fields_:
            raise InvalidParameterError(
                "epsilon", None, f"an epsilon > 0 for {mech} (or set --param {alternative}=...)"
            )
    # auto picks a frequency oracle, and declares the domain as the oracles do.
    takes_domain = spec.takes_domain if spec is not None else mech == AUTO_MECHANISM
    try:
        return make_params(
            mech,
            epsilon=config.epsilon,
            domain=domain_size if takes_domain else None,
            fields=dict(fields_),
        )
    except InvalidParameterError as exc:
        if exc.field in ("epsilon", "mechanism"):
            raise
        if exc.field == "domain":
            raise InvalidParameterError("domain", domain_size, exc.allowed) from exc
        # An unknown name ("param NAME"), a value of the wrong type, or a value out of range: all come from
        # --param, so name it, with the mechanism's own message.
        name = exc.field.removeprefix("param ")
        raise InvalidParameterError("params", f"{name}={exc.value}", exc.allowed) from exc


def prepare(config: SimulationConfig) -> PreparedSimulation:
    """Parse the population, fix the domain, build the parameters and the estimated items.

    Raises:
        InvalidParameterError: with ``field`` one of ``population``, ``domain``, ``epsilon``, ``params``,
            ``candidates`` (the :class:`SimulationConfig` field at fault), naming the value and what is
            allowed: an unknown or numeric population, a domain smaller than the population's support, an
            unknown parameter name or a bad value, candidates of which no user can hold any.
    """
    spec = registry.find_named(config.mechanism)
    if spec is not None and spec.kind is Kind.MEAN:  # means: see simulations.numeric.simulate_numeric
        raise InvalidParameterError(
            "mechanism",
            config.mechanism,
            "a frequency mechanism here (numeric mechanisms run with simulations.numeric.simulate_numeric, "
            "as `ldp-sim run` does, in every mode; sweeps are not available for them)",
        )
    population = parse_categorical_population(config.population)
    d = _default_domain(config, population)
    fixed = _fixed_domain_size(config.mechanism)
    if fixed is not None and d != fixed:
        raise InvalidParameterError(
            "domain", d, f"{fixed} for {config.mechanism} (value 0 = no/false, 1 = yes/true)"
        )
    try:
        labels = population.labels(d)
    except InvalidParameterError as exc:
        raise InvalidParameterError("domain", d, exc.allowed) from exc
    params = _build_params(config, d)
    if _estimates_candidates(params):
        items = tuple(config.candidates) if config.candidates is not None else labels
        where = {label: i for i, label in enumerate(labels)}
        index = np.array([where.get(c, -1) for c in items], dtype=np.int64)
        probs = population.probabilities(d)
        held = index >= 0
        if not np.any(probs[index[held]] > 0):
            raise InvalidParameterError(
                "candidates",
                f"{len(items)} candidates",
                f"a dictionary containing at least one value of population {config.population!r}",
            )
    else:
        items = labels
        index = np.arange(d, dtype=np.int64)
    return PreparedSimulation(
        config=config,
        population=population,
        domain_size=d,
        value_labels=labels,
        params=params,
        items=items,
        item_index=index,
    )


# --------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True, eq=False)
class SimulationResult:
    """R repeats of M items, on the count scale, with the metrics against the truth.

    Attributes:
        config: what was simulated.
        params: the mechanism's parameters (``params.epsilon`` is the per-report epsilon).
        labels: the M item labels (population values, or RAPPOR candidates).
        domain_size: D, the number of population values.
        truth: (R, M) true counts.
        estimates, std_errors, ci_low, ci_high: (R, M) the estimator's output.
        n_reports: (R,) reports counted per repeat (= n_users).
        detected: (R, M) RAPPOR detections (module docstring), None for the other mechanisms.
        detection_z: the one-sided z threshold of the detection test, None without detection.
        metrics: :func:`simulations.metrics.compute_metrics`; ``mse_over_variance`` divides by the mean
            of the estimator's own variance (std_error^2), so it is about 1 when the reported standard
            errors are right.
        elapsed_s: wall-clock seconds of the whole run.
    """

    config: SimulationConfig
    params: MechanismParams
    labels: tuple[str, ...]
    domain_size: int
    truth: NDArray[np.int64]
    estimates: NDArray[np.float64]
    std_errors: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    n_reports: NDArray[np.int64]
    detected: NDArray[np.bool_] | None
    detection_z: float | None
    metrics: Metrics
    elapsed_s: float

    @property
    def epsilon(self) -> float:
        """Per-report epsilon of the parameters actually used."""
        return float(self.params.epsilon)

    @property
    def epsilon_inf(self) -> float:
        """Longitudinal bound (RAPPOR variants), +inf for rr and grr."""
        from ldp_client.wire import epsilon_inf

        return float(epsilon_inf(self.params))

    @property
    def interval_warning(self) -> str | None:
        """One line when the intervals' normal approximation is poor at this n (issue 13), else None."""
        from simulations.metrics import interval_warning

        return interval_warning(self.params, self.config.n_users)

    @property
    def rmse_frequency(self) -> float:
        """Observed root mean squared error of the frequencies: sqrt(MSE) / N."""
        return math.sqrt(self.metrics.mse) / self.config.n_users

    @property
    def predicted_rmse_frequency(self) -> float:
        """RMSE of the frequencies of an unbiased estimator with the reported variances: sqrt(mean SE^2)/N."""
        return math.sqrt(float(np.mean(self.std_errors**2))) / self.config.n_users

    @property
    def max_std_error_frequency(self) -> float:
        """Largest standard error of an item's frequency: max over items of sqrt(mean_r SE^2) / N."""
        per_item = np.sqrt(np.mean(self.std_errors**2, axis=0))
        return float(np.max(per_item)) / self.config.n_users

    def error(self, metric: ErrorMetric) -> float:
        """The frequency-scale error ``metric``: ``max-se`` (estimator's) or ``rmse`` (observed)."""
        if metric == "max-se":
            return self.max_std_error_frequency
        if metric == "rmse":
            return self.rmse_frequency
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")

    def predicted_error(self, metric: ErrorMetric) -> float:
        """The estimator's own prediction of ``metric`` (from its reported variances, no truth used)."""
        if metric == "max-se":
            return self.max_std_error_frequency
        if metric == "rmse":
            return self.predicted_rmse_frequency
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")


@dataclass(frozen=True, kw_only=True, eq=False)
class _Outcome:
    """One repeat: true item counts, the estimate's arrays, and the number of reports."""

    truth: NDArray[np.int64]
    count: NDArray[np.float64]
    std_error: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    n_reports: int
    # String RAPPOR with a --candidates dictionary (issue 5): the full decoder's detections.
    detected: NDArray[np.bool_] | None = None


def _estimate(prep: PreparedSimulation, acc: Accumulator, truth: NDArray[np.int64]) -> _Outcome:
    """The aggregator's estimator on ``acc`` (the same functions the Analyst service calls)."""
    params = prep.params
    conf = prep.config.confidence
    if _estimates_candidates(params):
        if not isinstance(acc, BitCountAccumulator):  # accumulator_for(params) made it; narrows the type
            raise SimulationError(f"internal: {type(acc).__name__} for {params.name}")
        if prep.config.candidates is not None:
            # A candidate dictionary (issue 5): the full decoder (LASSO selection, constrained refit,
            # calibrated intervals, detection), as Analyst.DecodeRappor answers. Without one the items are
            # the population's own values and the unbiased WLS below is the estimator being simulated.
            from ldp_aggregator.rappor_decode import decode_rappor

            dec = decode_rappor(
                params,  # type: ignore[arg-type]
                acc,
                campaign_id=prep.config.campaign_id,
                candidates=prep.items,
                confidence=conf,
                alpha=prep.config.detection_alpha,
            )
            return _Outcome(
                truth=truth,
                count=dec.count,
                std_error=dec.std_error,
                ci_low=dec.ci_low,
                ci_high=dec.ci_high,
                n_reports=dec.n,
                detected=dec.detected,
            )
        est = estimate_rappor_candidates(
            params,  # type: ignore[arg-type]
            acc,
            campaign_id=prep.config.campaign_id,
            candidates=prep.items,
            confidence=conf,
        )
    else:
        est = estimate_frequencies(params, acc, confidence=conf)
    items = est.items
    return _Outcome(
        truth=truth,
        count=np.fromiter((it.count for it in items), dtype=np.float64, count=len(items)),
        std_error=np.fromiter((it.std_error for it in items), dtype=np.float64, count=len(items)),
        ci_low=np.fromiter((it.ci_low for it in items), dtype=np.float64, count=len(items)),
        ci_high=np.fromiter((it.ci_high for it in items), dtype=np.float64, count=len(items)),
        n_reports=est.n,
    )


# ------------------------------------------------------------------------------------------- sum runner


def _sum_repeat(prep: PreparedSimulation, rng: np.random.Generator, sampler: SumSampler) -> _Outcome:
    """One repeat from the spec's exact sampler of the layout's sums."""
    counts = prep.population.sample_counts(prep.config.n_users, prep.domain_size, rng)
    sums = sampler(counts, rng, campaign_id=prep.config.campaign_id, labels=prep.value_labels)
    return _estimate(prep, accumulator_from_sums(prep.params, sums), prep.item_truth(counts))


def _run_sum(
    prep: PreparedSimulation, seeds: list[np.random.SeedSequence], progress: ProgressFn | None
) -> list[_Outcome]:
    params = prep.params
    sampler = registry.spec_for(params).sum_sampler(params)
    if sampler is None:  # no exact sampler: every report is encoded
        return _run_report(prep, seeds, progress)
    out = []
    for seed in seeds:
        out.append(_sum_repeat(prep, np.random.default_rng(seed), sampler))
        if progress is not None:
            progress(prep.config.n_users)
    return out


# ---------------------------------------------------------------------------------------- report runner


def _encode_columns(
    params: MechanismParams,
    values: NDArray[np.int64],
    rng: np.random.Generator,
    *,
    campaign_id: str,
    labels: Sequence[str],
) -> Any:
    """One report per user with the client's batch encoder: the contract's columns for ``params``."""
    spec = registry.spec_for(params)
    return spec.encode_batch(params, values, rng, campaign_id=campaign_id, labels=labels)


def _report_repeat(
    prep: PreparedSimulation, rng: np.random.Generator, progress: ProgressFn | None
) -> _Outcome:
    cfg = prep.config
    d = prep.domain_size
    acc = accumulator_for(prep.params)
    counts = np.zeros(d, dtype=np.int64)
    for values in prep.population.iter_values(cfg.n_users, d, rng, chunk_size=cfg.chunk_size):
        counts += np.bincount(values, minlength=d)
        columns = _encode_columns(
            prep.params, values, rng, campaign_id=cfg.campaign_id, labels=prep.value_labels
        )
        add_columns(acc, prep.params, columns)
        if progress is not None:
            progress(int(values.size))
    return _estimate(prep, acc, prep.item_truth(counts))


def _run_report(
    prep: PreparedSimulation, seeds: list[np.random.SeedSequence], progress: ProgressFn | None
) -> list[_Outcome]:
    return [_report_repeat(prep, np.random.default_rng(seed), progress) for seed in seeds]


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
                        reporter.report(spec.input_value(task.params, v))
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
    server: str | None, access: ClientAccess | None = None, reporter_access: ClientAccess | None = None
) -> Iterator[AggregatorSession]:
    """The aggregator a grpc-mode simulation reports to (closed, and stopped if started here, on exit).

    ``server`` None starts an in-process aggregator on a fresh SQLite file in a temporary directory (both
    gone on exit); otherwise ``HOST:PORT`` of a running one, reached with ``access`` (TLS material, and
    the token of the Analyst stub) and ``reporter_access`` (the token of the Collector stub; None: that of
    ``access``), over one connection. Waits until the channel is ready.

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
                ServerConfig(db=Path(tmp) / "sim.sqlite3", listen="127.0.0.1:0", retain_raw=False)
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
                # String RAPPOR: the candidate dictionary lives with the campaign, as an operator sets it.
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
            resp = get_estimate_checked(analyst, target, request, cfg.n_users)
            if _estimates_candidates(params) and cfg.candidates is not None:
                # A candidate dictionary (issue 5): the full decoder, through Analyst.DecodeRappor.
                outcomes.append(_decoded_outcome(analyst, prep, campaign_id, prep.item_truth(counts), target))
                continue
            outcomes.append(_outcome_from_proto(prep, resp, prep.item_truth(counts), campaign_id))
    return outcomes


def _row_bytes(params: MechanismParams) -> int:
    """Bytes of one report in a batch message (rr packs 8 per byte: counted as 1, an upper bound)."""
    # The journal row: an upper bound on its batch bytes.
    return sum(f.width for f in registry.spec_for(params).row_fields(params))


# ------------------------------------------------------------------------------------------- simulate


def _detection_z(alpha: float, m: int) -> float:
    """One-sided Bonferroni threshold: P(Z > z) = alpha / M."""
    return NormalDist().inv_cdf(1.0 - alpha / m)


def simulate(config: SimulationConfig, *, progress: ProgressFn | None = None) -> SimulationResult:
    """Run ``config.repeats`` independent simulations and compare the estimates with the truth.

    Args:
        config: what to simulate (validated); see :class:`SimulationConfig`.
        progress: called with the number of users just completed (for progress bars).

    Raises:
        InvalidParameterError: a bad specification (see :func:`prepare`).
        SimulationError: the gRPC runner could not complete (aggregator unreachable, batch refused, ...).
    """
    t0 = time.perf_counter()
    prep = prepare(config)
    seeds = np.random.SeedSequence(config.seed).spawn(config.repeats)
    runner = {"sum": _run_sum, "report": _run_report, "grpc": _run_grpc}[config.mode]
    outcomes = runner(prep, seeds, progress)
    truth = np.stack([o.truth for o in outcomes])
    est = np.stack([o.count for o in outcomes])
    se = np.stack([o.std_error for o in outcomes])
    lo = np.stack([o.ci_low for o in outcomes])
    hi = np.stack([o.ci_high for o in outcomes])
    n_reports = np.array([o.n_reports for o in outcomes], dtype=np.int64)
    detected = None
    z = None
    if _estimates_candidates(prep.params):
        z = _detection_z(config.detection_alpha, len(prep.items))
        detected = (se > 0) & (est > z * se)
        if all(o.detected is not None for o in outcomes):  # the full decoder's own test (issue 5)
            detected = np.stack([cast(NDArray[np.bool_], o.detected) for o in outcomes])
    metrics = compute_metrics(
        truth,
        est,
        variance=se**2,
        ci_low=lo,
        ci_high=hi,
        detected=detected,
        n_users=n_reports,
    )
    return SimulationResult(
        config=config,
        params=prep.params,
        labels=prep.items,
        domain_size=prep.domain_size,
        truth=truth,
        estimates=est,
        std_errors=se,
        ci_low=lo,
        ci_high=hi,
        n_reports=n_reports,
        detected=detected,
        detection_z=z,
        metrics=metrics,
        elapsed_s=time.perf_counter() - t0,
    )


# ---------------------------------------------------------------------------------------------- sweeps


@dataclass(frozen=True, kw_only=True, eq=False)
class SweepPoint:
    """One point of a sweep.

    Attributes:
        value: the swept value (converted: float epsilon, int users/domain, or the parameter's text).
        result: the simulation at this point (with a target error: the verification run at
            ``required_users``).
        pilot: with a target error, the pilot run the required N was solved from (sum runner).
        required_users: with a target error, the N solved for.
        predicted_error: with a target error, the error the pilot predicts at ``required_users``.
    """

    value: float | int | str
    result: SimulationResult
    pilot: SimulationResult | None = None
    required_users: int | None = None
    predicted_error: float | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class SweepResult:
    """A sweep over one axis; with ``target_error``, the users needed at each point."""

    base: SimulationConfig
    over: str
    points: tuple[SweepPoint, ...]
    target_error: float | None = None
    error_metric: ErrorMetric = "max-se"
    elapsed_s: float = 0.0
    values: tuple[float | int | str, ...] = field(default=())


def required_users(pilot: SimulationResult, target_error: float, metric: ErrorMetric) -> tuple[int, float]:
    """Users needed for a frequency-scale error of ``target_error``, from a pilot run; and the prediction.

    Every estimator here has variance exactly proportional to 1/N on the frequency scale at a fixed
    population distribution: Var[f_hat] = (q*(1-q*)/(p*-q*)^2 + f (1-p*-q*)/(p*-q*)) / N for the pure
    oracles (Wang et al., USENIX Security 2017, §4), and the WLS covariance of string RAPPOR scales with
    the bit variances, each N_j r(1-r) with N_j proportional to N. So an error e0 = ``metric`` predicted
    by the estimator's own variances at N0 (the pilot) becomes e0 sqrt(N0/N) at N, and

        N = ceil(N0 (e0 / target)^2).

    Returns:
        (N, predicted error at N).
    """
    if (
        isinstance(target_error, bool)
        or not isinstance(target_error, int | float)
        or not (math.isfinite(target_error) and target_error > 0)
    ):
        raise InvalidParameterError("target_error", target_error, "a finite number > 0 (frequency scale)")
    if metric not in ERROR_METRICS:
        raise InvalidParameterError("error_metric", metric, f"one of {', '.join(ERROR_METRICS)}")
    n0 = pilot.config.n_users
    e0 = pilot.predicted_error(metric)
    if not (math.isfinite(e0) and e0 > 0):
        raise SimulationError(f"the pilot run predicts an error of {e0!r}; cannot scale it")
    n = max(1, math.ceil(n0 * (e0 / float(target_error)) ** 2))
    if n > _MAX_USERS:
        raise InvalidParameterError(
            "target_error", target_error, f"an error reachable with at most 2^53 users (needs about {n:.3g})"
        )
    return n, e0 * math.sqrt(n0 / n)


def _sweep_axes(mechanism: str) -> tuple[str, ...]:
    spec = registry.find_named(mechanism)  # None for auto (issue 6): no mechanism fields to sweep
    names = (
        [f.name for f in fields(spec.params_type) if f.init and f.name not in ("domain", "inner")]
        if spec is not None
        else []
    )
    return ("epsilon", "users", "domain", *names)


def _convert_value(over: str, raw: float | int | str) -> float | int | str:
    if over == "epsilon":
        try:
            v = float(raw)
        except ValueError:
            raise InvalidParameterError("values", raw, "numbers for --over epsilon") from None
        return v
    if over in ("users", "domain"):
        try:
            f = float(raw)
        except ValueError:
            raise InvalidParameterError("values", raw, f"integers for --over {over}") from None
        if not (math.isfinite(f) and f == int(f)):
            raise InvalidParameterError("values", raw, f"integers for --over {over} (e.g. 1000 or 1e6)")
        return int(f)
    return raw


def _config_at(base: SimulationConfig, over: str, value: float | int | str) -> SimulationConfig:
    if over == "epsilon":
        return base.with_changes(epsilon=value)
    if over == "users":
        return base.with_changes(n_users=value)
    if over == "domain":
        return base.with_changes(domain=value)
    merged = base.param_fields
    merged[over] = value
    return base.with_changes(params=merged)


def sweep(
    config: SimulationConfig,
    *,
    over: str | None = None,
    values: Sequence[float | int | str] = (),
    target_error: float | None = None,
    error_metric: ErrorMetric = "max-se",
    pilot_users: int = PILOT_USERS,
    progress: ProgressFn | None = None,
) -> SweepResult:
    """Simulate at several values of one axis, and/or solve for the users a target error needs.

    Args:
        config: the base configuration (with a target error its ``n_users`` is ignored: N is solved for).
        over: ``epsilon``, ``users``, ``domain``, or a field of the mechanism's parameters (``k``, ``f``,
            ``truth_probability``, ...); None for a single point.
        values: the values of ``over`` (strings are converted: numbers for epsilon, integers such as
            ``1e6`` for users and domain, parameter fields by :func:`~ldp_client.params.make_params`).
        target_error: if set, at every point: a pilot run with the *sum* runner at ``pilot_users`` gives
            the estimator's predicted error, :func:`required_users` solves for N, and a verification run
            at that N (in ``config.mode``) measures the error reached.
        error_metric: ``max-se`` (largest standard error of an item's frequency, from the estimator) or
            ``rmse`` (root mean squared error of the frequencies; predicted from the estimator's variances,
            measured against the truth in the verification).
        pilot_users: users of the pilot run (the sum runner costs the same at any N, and a large pilot
            makes the estimator's plug-in variance that of the true frequencies).
        progress: called with users completed.

    Raises:
        InvalidParameterError: field ``over``, ``values``, ``target_error`` or ``error_metric``, or any
            field of :func:`prepare` at some point of the sweep.
    """
    t0 = time.perf_counter()
    _check_int("pilot_users", pilot_users, 1, _MAX_USERS)
    if error_metric not in ERROR_METRICS:
        raise InvalidParameterError("error_metric", error_metric, f"one of {', '.join(ERROR_METRICS)}")
    if target_error is not None and (
        isinstance(target_error, bool)
        or not isinstance(target_error, int | float)
        or not (math.isfinite(target_error) and target_error > 0)
    ):
        raise InvalidParameterError("target_error", target_error, "a finite number > 0 (frequency scale)")
    if over is None:
        if values:
            raise InvalidParameterError("over", None, "the axis the values are for (--over)")
        converted: list[float | int | str] = []
    else:
        axes = _sweep_axes(config.mechanism)
        if over not in axes:
            raise InvalidParameterError("over", over, f"one of {', '.join(axes)}")
        if over == "users" and target_error is not None:
            raise InvalidParameterError(
                "over", over, "another axis with --target-error (the target solves for the users)"
            )
        if not values:
            raise InvalidParameterError("values", list(values), f"at least one value of {over}")
        converted = [_convert_value(over, v) for v in values]
    if over is None and target_error is None:
        raise InvalidParameterError(
            "over", None, "an axis (--over with --values), or --target-error, or both"
        )
    points: list[SweepPoint] = []
    configs = [(v, _config_at(config, over, v)) for v in converted] if over else [("", config)]
    for value, cfg in configs:
        if target_error is None:
            points.append(SweepPoint(value=value, result=simulate(cfg, progress=progress)))
            continue
        pilot_n = pilot_users
        if not has_sum_sampler(prepare(cfg).params):
            # Without an exact sum sampler the pilot encodes every report: keep it affordable.
            pilot_n = min(pilot_users, _PER_REPORT_PILOT_USERS)
        pilot = simulate(cfg.with_changes(mode="sum", n_users=pilot_n), progress=None)
        n_req, predicted = required_users(pilot, target_error, error_metric)
        verified = simulate(cfg.with_changes(n_users=n_req), progress=progress)
        points.append(
            SweepPoint(
                value=value, result=verified, pilot=pilot, required_users=n_req, predicted_error=predicted
            )
        )
    return SweepResult(
        base=config,
        over=over or "",
        points=tuple(points),
        target_error=None if target_error is None else float(target_error),
        error_metric=error_metric,
        elapsed_s=time.perf_counter() - t0,
        values=tuple(converted),
    )
