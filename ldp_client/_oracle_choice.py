"""The comparison behind ``auto``: the frequency oracle with the lowest variance among some specs.

:mod:`ldp_client.auto` compares the registered mechanisms that offer themselves
(``spec.chosen_by_auto``); a set-valued campaign with ``inner=auto`` compares the oracles its wire format
can carry (:mod:`ldp_client.mechanisms.sets`). Both call :func:`compare` with the specs, which is why it
lives here, below the registry: it takes the specs as an argument and never looks them up.

Every candidate is built exactly as a campaign would build it (``spec.make`` at the epsilon with no other
field: ``from_epsilon`` with its optimal free parameter, g for OLH, k for subset selection), so the
comparison uses the 32-bit quantized rates the encoders really sample with. The criterion is
``spec.variance(params)``, the per-item variance of the unbiased frequency estimate at f -> 0,

    n Var*[f_hat_v] = q*(1 - q*) / (p* - q*)^2                (Wang et al., USENIX Security 2017, §4)

the term that dominates for all but the most frequent items, and ``spec.report_bits(params)`` is the upload
size a budget excludes candidates by. Among the candidates within the budget the lowest variance wins, ties
(within a relative 1e-12) going to the smaller report, then to the order the specs were given in.

Importing this module does not import numpy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ldp_client.domain import Domain
from ldp_client.errors import InvalidParameterError
from ldp_client.spec import MechanismSpec

__all__ = ["AutoChoice", "Candidate", "check_budget", "check_request", "compare"]

_TIE_RTOL = 1e-12


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One mechanism as ``auto`` evaluated it.

    Attributes:
        mechanism: its name.
        params: its parameters at the requested epsilon (None when it cannot be built, see ``note``).
        variance: n Var* (frequency scale, times n) at f -> 0; +inf when not built.
        report_bits: upload size of one report in bits (0 when not built).
        eligible: within the upload budget (and built).
        note: why it is not eligible, or "".
    """

    mechanism: str
    params: Any | None
    variance: float
    report_bits: int
    eligible: bool
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class AutoChoice:
    """The chosen mechanism, why, and every candidate compared.

    Attributes:
        params: the chosen parameters (a campaign stores these, never "auto").
        mechanism: the chosen name.
        variance: its n Var* at f -> 0.
        report_bits: its upload size per report.
        runner_up: the next-best eligible candidate (None if it was the only one).
        candidates: every candidate, eligible ones first, each group by increasing variance.
        reason: one sentence saying which and why, with the runner-up's variance and any exclusions.
    """

    params: Any
    mechanism: str
    variance: float
    report_bits: int
    runner_up: Candidate | None
    candidates: tuple[Candidate, ...]
    reason: str


def check_budget(max_report_bits: object) -> int | None:
    """``max_report_bits`` as an int >= 1 (or None: no budget)."""
    if max_report_bits is None:
        return None
    if isinstance(max_report_bits, bool) or not isinstance(max_report_bits, int) or max_report_bits < 1:
        raise InvalidParameterError("max_report_bits", max_report_bits, "an integer >= 1 (bits per report)")
    return max_report_bits


def check_request(
    domain: int | Domain | list[str] | tuple[str, ...], epsilon: object, max_report_bits: object
) -> tuple[Domain, float, int | None]:
    """The domain, epsilon and budget of a comparison, validated (in that order)."""
    dom = Domain.of(domain)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not math.isfinite(epsilon):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    return dom, float(epsilon), check_budget(max_report_bits)


def compare(
    specs: Sequence[MechanismSpec[Any]],
    domain: int | Domain | list[str] | tuple[str, ...],
    epsilon: float,
    max_report_bits: int | None,
) -> tuple[AutoChoice, list[warnings.WarningMessage]]:
    """The lowest-variance candidate among ``specs`` (module docstring), and the warnings its parameters
    raised when built (PrivacyQuantizationWarning), for the caller to re-issue: the other candidates'
    warnings are dropped.

    Raises:
        InvalidParameterError: bad domain, epsilon or budget, or no candidate fits the budget (the message
            gives the smallest report size available).
    """
    dom, eps, budget = check_request(domain, epsilon, max_report_bits)
    built: list[Candidate] = []
    caught: dict[str, list[warnings.WarningMessage]] = {}
    for spec in specs:
        name = spec.name
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                params = spec.make(epsilon=eps, domain=dom, fields={})
            except InvalidParameterError as exc:
                built.append(
                    Candidate(
                        mechanism=name,
                        params=None,
                        variance=math.inf,
                        report_bits=0,
                        eligible=False,
                        note=f"cannot be built: {exc}",
                    )
                )
                continue
        caught[name] = list(record)
        variance = spec.variance(params)
        bits = spec.report_bits(params)
        fits = budget is None or bits <= budget
        note = "" if fits else f"needs {bits} bits > budget {budget}"
        built.append(
            Candidate(
                mechanism=name, params=params, variance=variance, report_bits=bits, eligible=fits, note=note
            )
        )
    eligible = sorted((c for c in built if c.eligible), key=lambda c: (c.variance, c.report_bits))
    eligible = _ties_to_smaller(eligible)
    rest = sorted((c for c in built if not c.eligible), key=lambda c: c.variance)
    if not eligible:
        smallest = min((c.report_bits for c in built if c.params is not None), default=0)
        raise InvalidParameterError(
            "max_report_bits", budget, f"at least {smallest} bits (the smallest report among the candidates)"
        )
    best = eligible[0]
    runner = eligible[1] if len(eligible) > 1 else None
    choice = AutoChoice(
        params=best.params,
        mechanism=best.mechanism,
        variance=best.variance,
        report_bits=best.report_bits,
        runner_up=runner,
        candidates=tuple(eligible + rest),
        reason=_reason(best, runner, rest, dom.size, eps, budget),
    )
    return choice, caught.get(best.mechanism, [])


def _ties_to_smaller(ordered: list[Candidate]) -> list[Candidate]:
    """Within a relative 1e-12 of the best variance, prefer the smaller report (then the listed order)."""
    if not ordered:
        return ordered
    top = ordered[0].variance
    tied = [c for c in ordered if c.variance <= top * (1.0 + _TIE_RTOL)]
    tied.sort(key=lambda c: c.report_bits)
    return tied + [c for c in ordered if c not in tied]


def _reason(
    best: Candidate,
    runner: Candidate | None,
    excluded: list[Candidate],
    d: int,
    epsilon: float,
    budget: int | None,
) -> str:
    text = (
        f"{best.mechanism} has the lowest variance among the eligible frequency oracles at d={d}, "
        f"epsilon={epsilon:g}: n*Var* = {best.variance:.6g} at f->0, {best.report_bits} bits per report"
    )
    if runner is not None:
        rel = (runner.variance / best.variance - 1.0) * 100.0 if best.variance > 0 else 0.0
        text += f"; runner-up {runner.mechanism}: {runner.variance:.6g} ({rel:.2f}% higher)"
    if budget is not None:
        text += f"; budget {budget} bits per report"
        out = [c for c in excluded if c.params is not None]
        if out:
            text += " excludes " + ", ".join(f"{c.mechanism} ({c.variance:.6g}, {c.note})" for c in out)
    return text
