"""Several numeric mechanisms at the same privacy on the same population (issue 17): ``ldp-sim compare``.

Where ``ldp-sim run`` simulates one mechanism, a comparison runs each named one-dimensional mean mechanism
(``laplace``, ``duchi``, ``piecewise``, ``hybrid``, ``sr``, ``onebitmean``, ``gaussian``) through
:func:`simulations.numeric.simulate_numeric` (the real batch encoders, accumulator and estimator) with the
same ``epsilon``, the same population, users, repeats and seed, and the range of the population as the
declared range. A mechanism with a ``delta`` field (the Gaussian mechanism, (epsilon, delta)-LDP, analytic
calibration of Balle and Wang, ICML 2018) gets ``delta``; the others are pure epsilon-LDP (delta 0), so
at the same epsilon they give a stronger guarantee, and the table says which is which.

Per mechanism (over R repeats, truth = the population's mean): MSE of the mean, the mean of the
estimator's own reported variance SE^2, their ratio (about 1 when the estimator is unbiased and its
variance right), the theoretical variance (:mod:`simulations.numeric`), the coverage of the intervals at
``confidence``, and the MSE relative to the best of the comparison. Theory for the pure mechanisms at small
epsilon: Laplace's variance grows as 8/eps^2, Duchi's and Piecewise's as (e^eps+1)^2/(e^eps-1)^2 and
about 4 e^(eps/2)/(3 (e^(eps/2)-1)^2) per unit range (Duchi, Jordan, Wainwright, JASA 2018; Wang et al.,
ICDE 2019, the piecewise mechanism), and the Gaussian's as sigma^2 with sigma from
:func:`ldp_client.mechanisms.numeric.gaussian.calibration.analytic_sigma`.

Seeded (``seed``): one :class:`numpy.random.SeedSequence` per repeat, the same for every mechanism, so the
first chunk of users holds the same values in every mechanism's run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian.calibration import check_delta
from ldp_client.spec import Kind
from simulations.numeric import NumericSimulationResult, simulate_numeric
from simulations.runners import DEFAULT_CHUNK_SIZE, SimulationConfig

__all__ = [
    "COMPARE_FORMAT",
    "CompareResult",
    "check_mechanisms",
    "compare_mechanisms",
    "compare_table",
    "compare_to_dict",
]

COMPARE_FORMAT = "ldp-sim.compare.v1"


def _comparable() -> tuple[str, ...]:
    """One-dimensional mean mechanisms of the registry (a range, no domain of attributes)."""
    return tuple(
        s.name for s in registry.SPECS if s.kind is Kind.MEAN and s.takes_range and not s.takes_domain
    )


def _takes_delta(name: str) -> bool:
    return "delta" in {f.name for f in dataclasses.fields(registry.spec_named(name).params_type)}


@dataclass(frozen=True, kw_only=True, eq=False)
class CompareResult:
    """Every mechanism's run, in the order asked for (``runs``), and what they shared."""

    mechanisms: tuple[str, ...]
    epsilon: float
    delta: float | None
    population: str
    users: int
    repeats: int
    seed: int
    confidence: float
    runs: tuple[NumericSimulationResult, ...]

    @property
    def best_mse(self) -> float:
        return min(r.metrics.mse for r in self.runs)


def check_mechanisms(mechanisms: Sequence[str], delta: float | None) -> tuple[str, ...]:
    """The mechanism names, checked: known, one-dimensional means, no repeat; ``delta`` given exactly when
    one of them takes it.

    Raises:
        InvalidParameterError: field ``mechanisms`` or ``delta``, naming the value and what is allowed.
    """
    allowed = _comparable()
    names = tuple(m.strip() for m in mechanisms)
    if len(names) < 2:
        raise InvalidParameterError(
            "mechanisms", ",".join(names), f"two or more comma-separated names of {', '.join(allowed)}"
        )
    for name in names:
        if name not in allowed:
            raise InvalidParameterError("mechanisms", name, f"one of {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise InvalidParameterError("mechanisms", ",".join(names), "each mechanism once")
    needs = [n for n in names if _takes_delta(n)]
    if needs and delta is None:
        raise InvalidParameterError("delta", None, f"a delta in (0, 1) for {', '.join(needs)}")
    if not needs and delta is not None:
        raise InvalidParameterError("delta", delta, "no delta: none of these mechanisms takes one")
    if delta is not None:
        check_delta(delta, "delta")  # before any run: [1e-30, 1)
    return names


def compare_mechanisms(
    mechanisms: Sequence[str],
    *,
    epsilon: float,
    delta: float | None,
    population: str,
    users: int,
    repeats: int,
    seed: int = 0,
    confidence: float = 0.95,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> CompareResult:
    """Run every mechanism at ``epsilon`` (and ``delta`` for those that take it) on the same population.

    Raises:
        InvalidParameterError: a bad mechanism list or delta (:func:`check_mechanisms`), or a bad
            population, epsilon, users, repeats or confidence (the field of the simulation's config).
    """
    names = check_mechanisms(mechanisms, delta)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not (0 < epsilon < math.inf):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    runs = []
    for name in names:
        params = {"delta": float(delta)} if _takes_delta(name) and delta is not None else {}
        config = SimulationConfig(
            mechanism=name,
            population=population,
            n_users=users,
            epsilon=float(epsilon),
            params=params,
            mode="report",
            seed=seed,
            repeats=repeats,
            confidence=confidence,
            chunk_size=chunk_size,
        )
        runs.append(simulate_numeric(config))
    return CompareResult(
        mechanisms=names,
        epsilon=float(epsilon),
        delta=None if delta is None else float(delta),
        population=population,
        users=users,
        repeats=repeats,
        seed=seed,
        confidence=confidence,
        runs=tuple(runs),
    )


def _number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)  # strict JSON: no inf/nan


def compare_to_dict(result: CompareResult) -> dict[str, Any]:
    """The comparison as a JSON-ready document (format ``ldp-sim.compare.v1``)."""
    best = result.best_mse
    return {
        "format": COMPARE_FORMAT,
        "epsilon": result.epsilon,
        "delta": result.delta,
        "population": result.population,
        "users": result.users,
        "repeats": result.repeats,
        "seed": result.seed,
        "confidence": result.confidence,
        "truth": float(result.runs[0].truth[0]),
        "mechanisms": [
            {
                "mechanism": name,
                "epsilon": run.epsilon,
                "delta": run.delta,
                "mse": _number(run.metrics.mse),
                "mean_variance": _number(run.metrics.mean_variance),
                "mse_over_variance": _number(run.metrics.mse_over_variance),
                "theory_variance": _number(run.metrics.theory_variance),
                "mse_over_theory": _number(run.metrics.mse_over_theory),
                "coverage": run.metrics.coverage,
                "mean_error": _number(run.metrics.mean_error),
                "mse_over_best": _number(run.metrics.mse / best if best > 0 else math.inf),
                "elapsed_s": run.elapsed_s,
            }
            for name, run in zip(result.mechanisms, result.runs, strict=True)
        ],
    }


def compare_table(result: CompareResult) -> Any:
    """A rich table: one row per mechanism."""
    from rich.table import Table

    delta = "" if result.delta is None else f", delta {result.delta:g} where it applies"
    table = Table(
        title=f"mean of {result.population}, {result.users:,} users x {result.repeats} repeats, "
        f"epsilon {result.epsilon:g}{delta}"
    )
    table.add_column("mechanism")
    for col in ("epsilon", "delta", "MSE", "mean reported variance", "MSE / variance", "theory variance"):
        table.add_column(col, justify="right")
    table.add_column(f"coverage ({result.confidence:.0%})", justify="right")
    table.add_column("MSE / best", justify="right")
    best = result.best_mse
    for name, run in zip(result.mechanisms, result.runs, strict=True):
        m = run.metrics
        table.add_row(
            name,
            f"{run.epsilon:.4g}",
            f"{run.delta:g}",
            f"{m.mse:.4g}",
            f"{m.mean_variance:.4g}",
            f"{m.mse_over_variance:.3f}",
            f"{m.theory_variance:.4g}",
            f"{m.coverage:.3f}",
            f"{m.mse / best:.2f}" if best > 0 else "-",
        )
    table.caption = (
        "delta 0: pure epsilon-LDP; the Gaussian mechanism is (epsilon, delta)-LDP (a weaker guarantee at "
        "the same epsilon). MSE / variance near 1: unbiased, variance right."
    )
    return table
