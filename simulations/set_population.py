"""A simulated population of set-valued users with planted frequent itemsets (issue 18, svim): simulation
only, sampled with an explicit, seeded ``numpy.random.Generator``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldp_client.errors import InvalidParameterError
from simulations.populations import _check_n_users

__all__ = ["SetPopulation", "parse_set_population"]


@dataclass(frozen=True)
class SetPopulation:
    """Users holding sets of items of a domain of d items, with planted frequent itemsets (issue 18, svim).

    Each user holds each of the planted itemsets independently with its probability, plus ``1 +
    Binomial(extra - 1, 1/2)`` items drawn from a Zipf(1.1) law over the d items (repeats merge), so the
    frequent itemsets are known by construction and the item frequencies are skewed, as in the paper's
    data sets. Spec: ``sets`` (the default patterns) or ``sets:EXTRA`` (the number of noise draws).
    """

    patterns: tuple[tuple[tuple[int, ...], float], ...] = (
        ((0, 1), 0.30),
        ((2, 3, 4), 0.22),
        ((1, 5), 0.16),
        ((0, 6, 7), 0.12),
        ((8, 9), 0.08),
    )
    extra: int = 3

    def sets(self, n_users: int, d: int, rng: np.random.Generator) -> NDArray[np.int64]:
        """n rows of item indices (-1 in unused slots), every row non-empty; vectorised (one step per
        pattern and per noise draw, none per user)."""
        n = _check_n_users(n_users)
        if d < 10:
            raise InvalidParameterError("domain", d, "at least 10 items for the planted itemsets of 'sets'")
        held = np.zeros((n, d), dtype=np.bool_)
        for pattern, prob in self.patterns:
            chosen = rng.random(n) < prob
            held[np.ix_(chosen, np.asarray(pattern, dtype=np.int64))] = True
        weights = 1.0 / np.arange(1, d + 1) ** 1.1
        draws = 1 + rng.binomial(self.extra - 1, 0.5, size=n)
        for r in range(self.extra):
            items = rng.choice(d, size=n, p=weights / weights.sum())
            rows = np.flatnonzero(draws > r)
            held[rows, items[rows]] = True
        width = int(held.sum(axis=1).max())
        # Row r's items first (ascending), then -1: sort the keys item-or-d per row.
        keys = np.where(held, np.arange(d)[None, :], d)
        out = np.sort(keys, axis=1)[:, :width]
        return np.where(out < d, out, -1).astype(np.int64)


def parse_set_population(spec: str) -> SetPopulation | None:
    """``sets`` or ``sets:EXTRA`` (1 <= EXTRA <= 64) as a :class:`SetPopulation`; None for another spec."""
    name, _, arg = spec.partition(":")
    if name != "sets":
        return None
    if not arg:
        return SetPopulation()
    try:
        extra = int(arg)
    except ValueError:
        raise InvalidParameterError("population", spec, "sets or sets:EXTRA (an integer 1..64)") from None
    if not 1 <= extra <= 64:
        raise InvalidParameterError("population", spec, "sets or sets:EXTRA (an integer 1..64)")
    return SetPopulation(extra=extra)
