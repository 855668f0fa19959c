"""What a simulation is asked to do: :class:`SimulationConfig` (checked when built), the modes, clients and
error metrics it names, the defaults, and :class:`SimulationError`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from ldp_aggregator.client_access import ClientAccess
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.params import (
    AUTO_MECHANISM,
    MECHANISM_NAMES,
    MechanismParams,
)
from ldp_client.spec import Kind

if TYPE_CHECKING:
    pass

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
# Mechanisms whose items are candidate strings (SimulationConfig.candidates): spec.estimates_candidates.
_CANDIDATE_MECHANISMS = tuple(s.name for s in registry.SPECS if s.estimates_candidates)


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
        candidates: string RAPPOR and the mechanisms that estimate candidate strings
            (``spec.estimates_candidates``): the strings to estimate (default: the population's labels).
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
            if self.mechanism not in _CANDIDATE_MECHANISMS:
                raise InvalidParameterError(
                    "candidates",
                    f"{len(cands)} candidates",
                    f"none for {self.mechanism} (only for {', '.join(_CANDIDATE_MECHANISMS)})",
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


def _kind(mechanism: str) -> Kind | None:
    """How the server estimates a registered mechanism (None: not registered, or auto)."""
    spec = registry.find_named(mechanism)
    return None if spec is None else spec.kind


def _decodes_candidates(params: MechanismParams) -> bool:
    """Kind RAPPOR (string RAPPOR): candidates decoded from per-cohort bit counts, with detection."""
    return registry.spec_for(params).kind is Kind.RAPPOR


def _estimates_candidates(params: MechanismParams) -> bool:
    """The items are candidate strings, the population's labels (which the devices hash) or a dictionary
    (``spec.estimates_candidates``: string RAPPOR, a sketch), not a declared domain."""
    return registry.spec_for(params).estimates_candidates


def _fixed_domain_size(mechanism: str) -> int | None:
    """The number of population values a mechanism fixes (rr: 2), or None."""
    spec = registry.find_named(mechanism)
    return None if spec is None else spec.fixed_domain_size
