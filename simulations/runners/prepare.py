"""A configuration made concrete: the population, the domain and the mechanism's parameters
(:func:`prepare`, :class:`PreparedSimulation`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ldp_client import registry
from ldp_client.errors import InvalidParameterError
from ldp_client.params import (
    AUTO_MECHANISM,
    MechanismParams,
    make_params,
)
from ldp_client.spec import Kind
from simulations.marginals import marginal_items, takes_marginals
from simulations.populations import CategoricalPopulation, EmpiricalPopulation, parse_categorical_population
from simulations.runners.config import SimulationConfig, _estimates_candidates, _fixed_domain_size

if TYPE_CHECKING:
    pass

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
        items: labels of the estimated items: the population's values, or the candidate strings (string
            RAPPOR, ``spec.estimates_candidates``).
        item_index: population value of each item, -1 for a candidate no user can hold.
    """

    config: SimulationConfig
    population: CategoricalPopulation
    domain_size: int
    value_labels: tuple[str, ...]
    params: MechanismParams
    items: tuple[str, ...]
    item_index: NDArray[np.int64]
    value_items: tuple[NDArray[np.int64], ...] = ()
    """A marginal campaign (issue 18): per chosen marginal, the item (cell) of every population value
    (:func:`simulations.marginals.marginal_items`); empty otherwise."""

    def item_truth(self, value_counts: NDArray[np.int64]) -> NDArray[np.int64]:
        """True count of each item from the count of each population value."""
        idx = self.item_index
        if self.value_items:  # marginal cells: each value counts once in every chosen marginal
            out = np.zeros(len(self.items), dtype=np.int64)
            for cells in self.value_items:
                np.add.at(out, cells, value_counts)
            return out
        out = np.zeros(idx.size, dtype=np.int64)
        ok = idx >= 0
        out[ok] = value_counts[idx[ok]]
        return out


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
    if config.domain is None and spec is not None and not spec.takes_domain and spec.kind is Kind.SUPPORT:
        # Issue 18: a marginal campaign's parameters fix its joint (no domain argument): D defaults to it.
        early = _build_params(config, 0)
        if takes_marginals(early):
            config = dataclasses.replace(config, domain=marginal_items(early)[2])
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
    if takes_marginals(params):  # issue 18: the values are records of the joint, the items marginal cells
        items, value_items, joint = marginal_items(params)
        if d != joint:
            raise InvalidParameterError(
                "domain", d, f"{joint}, the size of the full joint of the campaign's attributes"
            )
        return PreparedSimulation(
            config=config,
            population=population,
            domain_size=d,
            value_labels=labels,
            params=params,
            items=items,
            item_index=np.arange(len(items), dtype=np.int64),
            value_items=value_items,
        )
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
