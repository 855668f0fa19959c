"""``auto``: the frequency oracle with the lowest variance for a domain size, an epsilon and an upload budget.

The candidates are the registered mechanisms that offer themselves to ``auto``
(``spec.chosen_by_auto``; today grr, oue, sue, olh, blh, ss and hr), each built exactly as a campaign would
build it at the epsilon and compared by ``spec.variance`` (n Var* at f -> 0, Wang et al., USENIX Security
2017, §4: the term that dominates for all but the most frequent items) within the budget on
``spec.report_bits`` (GRR ceil(log2 d); OUE, SUE and SS d; OLH and BLH 128 bits of hash seed plus
ceil(log2 g); HR log2 K). The comparison itself is :func:`ldp_client._oracle_choice.compare`; the lowest
variance wins, ties (within a relative 1e-12) going to the smaller report.

Regimes this reproduces (reference table, ``ldp-formulas.md`` §1.2): GRR for d < 3 e^eps + 2; SS,
which is never worse than GRR or OUE, otherwise; OLH or HR/BLH when the budget excludes d-bit reports.

Importing this module does not import numpy (nor :mod:`ldp_client.params`, which imports this one).
"""

from __future__ import annotations

import warnings
from typing import Any

from ldp_client import registry
from ldp_client._oracle_choice import AutoChoice, Candidate, check_request, compare
from ldp_client.domain import MAX_DOMAIN_SIZE, Domain
from ldp_client.errors import InvalidParameterError

__all__ = [
    "AUTO_CANDIDATES",
    "AutoChoice",
    "Candidate",
    "auto_choice",
    "choose_mechanism",
    "make_auto_params",
]

AUTO_CANDIDATES: tuple[str, ...] = tuple(s.name for s in registry.SPECS if s.chosen_by_auto)
"""Mechanisms ``auto`` compares, in the order used to list them (the registry's)."""


def choose_mechanism(
    domain: int | Domain | list[str] | tuple[str, ...],
    epsilon: float,
    *,
    max_report_bits: int | None = None,
    mechanisms: tuple[str, ...] = AUTO_CANDIDATES,
) -> AutoChoice:
    """Pick the frequency oracle with the lowest variance at f -> 0 (module docstring).

    Args:
        domain: the domain (a size d, labels, or a :class:`~ldp_client.domain.Domain`).
        epsilon: per-report epsilon (> 0).
        max_report_bits: optional upload budget in bits per report.
        mechanisms: the candidates to compare (a subset of :data:`AUTO_CANDIDATES`).

    Returns:
        An :class:`AutoChoice` whose ``params`` is the chosen mechanism's parameters. Quantization warnings
        (:class:`~ldp_client.errors.PrivacyQuantizationWarning`) are re-issued for the chosen one only.

    Raises:
        InvalidParameterError: bad domain, epsilon, budget or candidate names, or no candidate fits the
            budget (the message gives the smallest report size available).
    """
    check_request(domain, epsilon, max_report_bits)
    names = tuple(mechanisms)
    unknown = [m for m in names if m not in AUTO_CANDIDATES]
    if unknown or not names:
        raise InvalidParameterError(
            "mechanisms", unknown or names, f"names among {', '.join(AUTO_CANDIDATES)}"
        )
    choice, caught = compare([registry.spec_named(m) for m in names], domain, epsilon, max_report_bits)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    return choice


def make_auto_params(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> Any:
    """``make_params("auto", ...)``: the chosen parameters. ``fields`` may hold ``max_report_bits``.

    Raises:
        InvalidParameterError: no epsilon or domain, an unknown field, or what :func:`choose_mechanism`
            raises.
    """
    return auto_choice(epsilon=epsilon, domain=domain, fields=fields).params


def auto_choice(*, epsilon: float | None, domain: object, fields: dict[str, object]) -> AutoChoice:
    """:func:`choose_mechanism` from the command-line form of :func:`make_auto_params` (the CLIs print
    its ``reason``).

    Raises:
        InvalidParameterError: as :func:`make_auto_params`.
    """
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "an epsilon > 0 (auto compares mechanisms at it)")
    if domain is None:
        raise InvalidParameterError("domain", None, "a size or labels (required by auto)")
    budget: int | None = None
    for name, raw in fields.items():
        if name != "max_report_bits":
            raise InvalidParameterError(f"param {name}", raw, "a field of auto: max_report_bits")
        try:
            budget = int(raw) if isinstance(raw, str) else raw  # type: ignore[assignment]
        except ValueError:
            raise InvalidParameterError("max_report_bits", raw, "an integer >= 1 (bits per report)") from None
    if isinstance(domain, int) and not isinstance(domain, bool) and not 2 <= domain <= MAX_DOMAIN_SIZE:
        raise InvalidParameterError("domain", domain, f"a size in [2, {MAX_DOMAIN_SIZE}]")
    return choose_mechanism(
        Domain.of(domain),  # type: ignore[arg-type]
        epsilon,
        max_report_bits=budget,
    )
