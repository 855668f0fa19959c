"""``auto``: the frequency oracle with the lowest variance for a domain size, an epsilon and an upload budget.

Every candidate is built exactly as a campaign would build it (``from_epsilon`` with its optimal free
parameter: g for OLH, k for subset selection), so the comparison uses the 32-bit quantized rates the
encoders really sample with. The criterion is the per-item variance of the unbiased frequency estimate at
f -> 0,

    n Var*[f_hat_v] = q*(1 - q*) / (p* - q*)^2                (Wang et al., USENIX Security 2017, §4)

the term that dominates for all but the most frequent items (the full variance adds
f_v (1 - p* - q*)/(p* - q*), see :meth:`ldp_client.params.OUEParams.variance`). Candidates: GRR, OUE,
SUE, OLH, BLH, SS (subset selection) and HR (Hadamard response), each with its upload size in bits per
report (GRR ceil(log2 d); OUE, SUE and SS d; OLH and BLH 128 bits of hash seed plus ceil(log2 g); HR
log2 K). With ``max_report_bits`` the candidates that need more bits are excluded; among the rest the
lowest variance wins, ties (within a relative 1e-12) going to the smaller report.

Regimes this reproduces (reference table, ``ldp-formulas.md`` §1.2): GRR for d < 3 e^eps + 2; SS,
which is never worse than GRR or OUE, otherwise; OLH or HR/BLH when the budget excludes d-bit reports.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from ldp_client import registry
from ldp_client._oracle_math import oracle_variance
from ldp_client.errors import InvalidParameterError
from ldp_client.params import (
    MAX_DOMAIN_SIZE,
    BLHParams,
    Domain,
    HadamardParams,
    InnerOracleParams,
    OLHParams,
    OUEParams,
    SubsetSelectionParams,
    SUEParams,
    oracle_rates,
    oracle_report_bits,
)

__all__ = [
    "AUTO_CANDIDATES",
    "AutoChoice",
    "Candidate",
    "auto_choice",
    "choose_mechanism",
    "make_auto_params",
]

AUTO_CANDIDATES: tuple[str, ...] = ("grr", "oue", "sue", "olh", "blh", "ss", "hr")
"""Mechanisms ``auto`` compares, in the order used to list them."""

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
    params: InnerOracleParams | None
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

    params: InnerOracleParams
    mechanism: str
    variance: float
    report_bits: int
    runner_up: Candidate | None
    candidates: tuple[Candidate, ...]
    reason: str


def _build(name: str, domain: Domain, epsilon: float) -> InnerOracleParams:
    spec = registry.find_named(name)
    if spec is not None:  # a registered candidate (grr): at epsilon, as make_params builds it
        return spec.make(epsilon=epsilon, domain=domain, fields={})  # type: ignore[no-any-return]
    if name == "oue":
        return OUEParams.from_epsilon(domain, epsilon)
    if name == "sue":
        return SUEParams.from_epsilon(domain, epsilon)
    if name == "olh":
        return OLHParams.from_epsilon(domain, epsilon)
    if name == "blh":
        return BLHParams.from_epsilon(domain, epsilon)
    if name == "ss":
        return SubsetSelectionParams.from_epsilon(domain, epsilon)
    return HadamardParams.from_epsilon(domain, epsilon)


def _check_budget(max_report_bits: object) -> int | None:
    if max_report_bits is None:
        return None
    if isinstance(max_report_bits, bool) or not isinstance(max_report_bits, int) or max_report_bits < 1:
        raise InvalidParameterError("max_report_bits", max_report_bits, "an integer >= 1 (bits per report)")
    return max_report_bits


def choose_mechanism(
    domain: int | Domain | list[str] | tuple[str, ...],
    epsilon: float,
    *,
    max_report_bits: int | None = None,
    mechanisms: tuple[str, ...] = AUTO_CANDIDATES,
) -> AutoChoice:
    """Pick the frequency oracle with the lowest variance at f -> 0 (module docstring).

    Args:
        domain: the domain (a size d, labels, or a :class:`~ldp_client.params.Domain`).
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
    dom = Domain.of(domain)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not math.isfinite(epsilon):
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    if epsilon <= 0:
        raise InvalidParameterError("epsilon", epsilon, "a finite number > 0")
    budget = _check_budget(max_report_bits)
    names = tuple(mechanisms)
    unknown = [m for m in names if m not in AUTO_CANDIDATES]
    if unknown or not names:
        raise InvalidParameterError(
            "mechanisms", unknown or names, f"names among {', '.join(AUTO_CANDIDATES)}"
        )
    built: list[Candidate] = []
    caught: dict[str, list[warnings.WarningMessage]] = {}
    for name in names:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                params = _build(name, dom, float(epsilon))
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
        p_star, q_star = oracle_rates(params)
        variance = oracle_variance(p_star, q_star)
        bits = oracle_report_bits(params)
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
    for w in caught.get(best.mechanism, []):
        warnings.warn(w.message, w.category, stacklevel=2)
    if best.params is None:  # unreachable: eligible candidates are built; narrows the type
        raise InvalidParameterError("mechanisms", names, "at least one buildable mechanism")
    return AutoChoice(
        params=best.params,
        mechanism=best.mechanism,
        variance=best.variance,
        report_bits=best.report_bits,
        runner_up=runner,
        candidates=tuple(eligible + rest),
        reason=_reason(best, runner, rest, dom.size, float(epsilon), budget),
    )


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


def make_auto_params(
    *, epsilon: float | None, domain: object, fields: dict[str, object]
) -> InnerOracleParams:
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
