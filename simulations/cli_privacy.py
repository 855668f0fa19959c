"""``ldp-sim privacy``: what several reports cost together, and what a shuffler buys (issue 17).

Registered on the ``ldp-sim`` app (:mod:`simulations.cli_app`) by :mod:`simulations.cli`, as the group
:data:`privacy_app`. The formulas and their sources are in :mod:`ldp_client.accounting` and
docs/privacy-accounting.md. Examples::

    ldp-sim privacy compose --mechanism pure:0.5x100 --delta 1e-6
    ldp-sim privacy compose --mechanism grr:1:16x30 --mechanism laplace:2x10 --mechanism gaussian:4 --json
    ldp-sim privacy shuffle --epsilon0 4 --n 1000000 --delta 1e-6

A mechanism is ``NAME:VALUES`` with an optional ``xCOUNT`` (that many runs of it):

- ``pure:EPS``: any eps-DP mechanism (its worst case, binary randomized response); rr, RAPPOR, every
  eps-LDP report;
- ``grr:EPS:D``: k-ary randomized response over D values (tighter than ``pure`` for D > 2);
- ``laplace:SCALE[:SENSITIVITY]``: Laplace noise of scale b (pure epsilon s/b);
- ``gaussian:SIGMA[:SENSITIVITY]``: Gaussian noise (no pure epsilon: only the numerical accountant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.table import Table

from ldp_aggregator.cli_common import param_error_text
from ldp_client.accounting import composition as comp
from ldp_client.accounting import pld, shuffle
from ldp_client.errors import InvalidParameterError
from simulations.cli_app import JsonOpt, JsonOutOpt, _check_outputs, _emit_json, _fail, _out

__all__ = ["compose_cmd", "privacy_app", "shuffle_cmd"]

privacy_app = typer.Typer(
    help="Privacy accounting: composition of reports (basic, advanced, optimal, numerical) and "
    "amplification by shuffling. Formulas and sources: docs/privacy-accounting.md.",
    no_args_is_help=True,
)

_MECHANISM_HELP = (
    "A mechanism run by the device, repeatable: pure:EPS (any eps-DP report), grr:EPS:D, "
    "laplace:SCALE[:SENSITIVITY], gaussian:SIGMA[:SENSITIVITY], each with an optional xCOUNT (that many "
    "runs), e.g. pure:0.5x100."
)
_NAMES = "pure:EPS, grr:EPS:D, laplace:SCALE[:SENSITIVITY] or gaussian:SIGMA[:SENSITIVITY], optional xCOUNT"


@dataclass(frozen=True)
class _Mechanism:
    text: str
    name: str
    values: tuple[float, ...]
    count: int

    @property
    def pure_epsilon(self) -> float | None:
        """Its pure epsilon (None for the Gaussian mechanism, which has none)."""
        if self.name in ("pure", "grr"):
            return self.values[0]
        if self.name == "laplace":
            sensitivity = self.values[1] if len(self.values) > 1 else 1.0
            return sensitivity / self.values[0]
        return None

    def loss_distribution(self, step: float) -> pld.PrivacyLossDistribution:
        v = self.values
        if self.name == "pure":
            one = pld.randomized_response(v[0], step=step)
        elif self.name == "grr":
            one = pld.randomized_response(v[0], _domain(self.text, v[1]), step=step)
        elif self.name == "laplace":
            one = pld.laplace(v[0], *v[1:], step=step)
        else:
            one = pld.gaussian(v[0], *v[1:], step=step)
        return one.self_compose(self.count) if self.count > 1 else one


# How many numbers each name takes (fewest, most).
_ARITY = {"pure": (1, 1), "grr": (2, 2), "laplace": (1, 2), "gaussian": (1, 2)}


def _domain(text: str, value: float) -> int:
    if not value.is_integer() or value < 2:
        raise InvalidParameterError("--mechanism", text, "grr:EPS:D with D an integer >= 2")
    return int(value)


def _parse_mechanism(text: str) -> _Mechanism:
    """``NAME:V1[:V2][xCOUNT]`` (module docstring)."""
    body, sep, count_text = text.strip().rpartition("x")
    if not sep:
        body, count_text = text.strip(), "1"
    name, _, rest = body.partition(":")
    arity = _ARITY.get(name.strip().lower())
    try:
        values = tuple(float(v) for v in rest.split(":")) if rest else ()
        count = int(count_text)
    except ValueError:
        raise InvalidParameterError("--mechanism", text, _NAMES) from None
    if arity is None or not arity[0] <= len(values) <= arity[1]:
        raise InvalidParameterError("--mechanism", text, _NAMES)
    if count < 1:
        raise InvalidParameterError("--mechanism", text, "a COUNT >= 1 after x")
    mech = _Mechanism(text=text, name=name.strip().lower(), values=values, count=count)
    if not all(math.isfinite(v) for v in values):
        raise InvalidParameterError("--mechanism", text, "finite numbers")
    if mech.name in ("pure", "grr"):
        if values[0] < 0:
            raise InvalidParameterError("--mechanism", text, f"{mech.name}:EPS with EPS >= 0")
        if mech.name == "grr":
            _domain(text, values[1])
    elif min(values) <= 0:
        raise InvalidParameterError("--mechanism", text, f"{mech.name}:NOISE[:SENSITIVITY], both > 0")
    return mech


def _rows_of(mechs: list[_Mechanism]) -> list[tuple[float, int]]:
    pure = [(m.pure_epsilon, m.count) for m in mechs]
    return [(e, c) for e, c in pure if e is not None]


def _compose(
    mechs: list[_Mechanism], delta: float, delta_prime: float, target: float | None, step: float
) -> dict[str, Any]:
    """The composition of ``mechs`` by every applicable method, as the JSON document."""
    pure = _rows_of(mechs)
    all_pure = len(pure) == len(mechs)
    total = sum(m.count for m in mechs)
    methods: list[dict[str, Any]] = []
    why_not = "a Gaussian mechanism has no pure epsilon: see the numerical accountant"
    if all_pure:
        per_report = [comp.Guarantee(e, 0.0) for e, c in pure for _ in range(c)]
        basic = comp.basic_composition(per_report)
        methods.append({"method": "basic", "epsilon": basic.epsilon, "delta": basic.delta, "note": ""})
        adv = comp.advanced_composition_heterogeneous(per_report, delta_prime)
        methods.append(
            {
                "method": "advanced",
                "epsilon": adv.epsilon,
                "delta": adv.delta,
                "note": f"delta'={delta_prime:g}",
            }
        )
        epsilons = {e for e, _ in pure}
        if len(epsilons) == 1:
            (e0,) = epsilons
            methods.append(
                {
                    "method": "optimal",
                    "epsilon": comp.optimal_composition_epsilon(e0, total, delta),
                    "delta": delta,
                    "note": "Kairouz-Oh-Viswanath: worst case of any eps-DP mechanism",
                }
            )
    else:
        methods.append({"method": "basic", "epsilon": math.nan, "delta": math.nan, "note": why_not})
    composed = pld.compose([m.loss_distribution(step) for m in mechs])
    methods.append(
        {
            "method": "numerical",
            "epsilon": composed.epsilon_for_delta(delta),
            "delta": delta,
            "note": f"privacy loss distribution, step {step:g}",
        }
    )
    doc: dict[str, Any] = {
        "mechanisms": [
            {"mechanism": m.name, "values": list(m.values), "count": m.count, "pure_epsilon": m.pure_epsilon}
            for m in mechs
        ],
        "reports": total,
        "delta": delta,
        "methods": methods,
    }
    if target is not None:
        doc["target_epsilon"] = target
        doc["delta_at_target"] = {"numerical": composed.delta_for_epsilon(target)}
        if all_pure and len({e for e, _ in pure}) == 1:
            doc["delta_at_target"]["optimal"] = comp.optimal_composition_delta(pure[0][0], total, target)
    return doc


def compose_cmd(
    mechanism: Annotated[list[str], typer.Option("--mechanism", "-m", help=_MECHANISM_HELP)],
    delta: Annotated[float, typer.Option(help="delta of the composed guarantee, in (0, 1).")] = 1e-6,
    delta_prime: Annotated[
        float | None,
        typer.Option(
            help="delta' of advanced composition (default: --delta, all of it).", show_default=False
        ),
    ] = None,
    target_epsilon: Annotated[
        float | None,
        typer.Option(help="Also give delta(epsilon) at this epsilon.", show_default=False),
    ] = None,
    step: Annotated[float, typer.Option(help="Loss grid of the numerical accountant.")] = pld.DEFAULT_STEP,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
) -> None:
    """(epsilon, delta) of a device's reports taken together: basic, advanced (Dwork-Rothblum-Vadhan),
    optimal (Kairouz-Oh-Viswanath, equal epsilons) and numerical (privacy loss distributions) composition."""
    _check_outputs(json_out, None)
    try:
        mechs = [_parse_mechanism(m) for m in mechanism]
        d = comp.check_delta("--delta", delta, allow_zero=False)
        dp = comp.check_delta("--delta-prime", d if delta_prime is None else delta_prime, allow_zero=False)
        target = None if target_epsilon is None else comp.check_epsilon("--target-epsilon", target_epsilon)
        doc = _compose(mechs, d, dp, target, step)
    except InvalidParameterError as exc:
        _fail(f"invalid option ({_option(exc.field)}): {param_error_text(exc)}")
    if as_json:
        _emit_json(doc, as_json, json_out)
        return
    table = Table("method", "epsilon", "delta", "note", title=f"{doc['reports']} reports composed")
    for row in doc["methods"]:
        table.add_row(row["method"], _num(row["epsilon"]), _num(row["delta"]), row["note"])
    out = _out()
    out.print(table)
    if target is not None:
        parts = ", ".join(f"{k} {_num(v)}" for k, v in doc["delta_at_target"].items())
        out.print(f"delta at epsilon = {target:g}: {parts}", markup=False)
    _emit_json(doc, as_json, json_out)


def _option(field: str) -> str:
    """The option an error's field comes from (the library names its arguments, the commands options)."""
    if field.startswith("--"):
        return field
    return {
        "epsilon": "--mechanism",
        "k": "--mechanism",
        "scale": "--mechanism",
        "sigma": "--mechanism",
        "sensitivity": "--mechanism",
        "step": "--step",
        "n": "--n",
        "epsilon0": "--epsilon0",
        "delta": "--delta",
        "tolerance": "--tolerance",
    }.get(field, field)


def _num(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.6g}"


def shuffle_cmd(
    epsilon0: Annotated[
        float, typer.Option("--epsilon0", help="Epsilon of one report (its local guarantee).")
    ],
    n: Annotated[
        list[int], typer.Option("--n", help="Reports shuffled together (repeatable: one row per value).")
    ],
    delta: Annotated[float, typer.Option(help="delta of the central guarantee, in (0, 1).")] = 1e-6,
    tolerance: Annotated[float, typer.Option(help="Precision of the numerical bound.")] = 1e-4,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
) -> None:
    """Central (epsilon, delta) of eps0-LDP reports shuffled in batches of n (Feldman-McMillan-Talwar 2021:
    the closed form of their Theorem 3.1 and the tighter numerical bound)."""
    _check_outputs(json_out, None)
    rows = []
    try:
        for size in n:
            declared = shuffle.ShufflerDeclaration(batch_reports=size, delta=delta)
            amp = shuffle.amplify(declared, epsilon0, numerical=False)
            numerical = shuffle.numerical_epsilon(size, epsilon0, delta, tolerance=tolerance)
            rows.append(
                {
                    "n": size,
                    "epsilon0": amp.local_epsilon,
                    "delta": amp.delta,
                    "closed_form_applies": amp.closed_form_applies,
                    "epsilon_closed_form": amp.epsilon_closed_form,
                    "epsilon_numerical": numerical,
                }
            )
    except InvalidParameterError as exc:
        field = (
            "--n" if exc.field == "shuffler.batch_reports" else _option(exc.field.removeprefix("shuffler."))
        )
        _fail(f"invalid option ({field}): {param_error_text(exc)}")
    doc = {"epsilon0": epsilon0, "delta": delta, "rows": rows}
    if as_json:
        _emit_json(doc, as_json, json_out)
        return
    table = Table(
        "n",
        "closed form (Thm 3.1)",
        "numerical",
        title=f"shuffled eps0 = {epsilon0:g} reports, delta = {delta:g}",
    )
    for row in rows:
        closed = _num(row["epsilon_closed_form"]) + ("" if row["closed_form_applies"] else " (n/a: eps0)")
        table.add_row(str(row["n"]), closed, _num(row["epsilon_numerical"]))
    _out().print(table)
    _emit_json(doc, as_json, json_out)
