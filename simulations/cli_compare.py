"""``ldp-sim compare``: several numeric mechanisms at the same epsilon (and delta for the Gaussian
mechanism) on the same population, one row each (issue 17; the model is :mod:`simulations.compare`).

Registered on the ``ldp-sim`` app (:mod:`simulations.cli_app`) by :mod:`simulations.cli`. Example::

    ldp-sim compare --mechanisms gaussian,laplace,piecewise,duchi --epsilon 1 --delta 1e-6
        --population normal:0,0.5 --users 100000 --repeat 20
"""

from __future__ import annotations

from typing import Annotated

import typer

from ldp_aggregator.cli_common import param_error_text
from ldp_client.errors import InvalidParameterError, LdpError
from simulations.cli_app import (
    ConfidenceOpt,
    JsonOpt,
    JsonOutOpt,
    PopulationOpt,
    RepeatOpt,
    SeedOpt,
    UsersOpt,
    _check_outputs,
    _emit_json,
    _fail,
    _option_for,
    _out,
    _run_failed,
)
from simulations.compare import compare_mechanisms, compare_table, compare_to_dict

__all__ = ["compare_cmd"]


def compare_cmd(
    mechanisms: Annotated[
        str,
        typer.Option(
            "--mechanisms",
            "-m",
            help="Comma-separated one-dimensional mean mechanisms, e.g. gaussian,laplace,piecewise,duchi.",
        ),
    ],
    epsilon: Annotated[float, typer.Option("--epsilon", "-e", help="epsilon > 0 of one report, for all.")],
    delta: Annotated[
        float | None,
        typer.Option(
            "--delta", help="delta in (0, 1) of the mechanisms that take one (gaussian).", show_default=False
        ),
    ] = None,
    population: PopulationOpt = "normal:0,0.5",
    users: UsersOpt = 100_000,
    repeat: RepeatOpt = 20,
    seed: SeedOpt = 0,
    confidence: ConfidenceOpt = 0.95,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
) -> None:
    """Compare numeric mechanisms at the same epsilon on the same population: MSE, reported variance,
    their ratio and the intervals' coverage."""
    _check_outputs(json_out, None)
    try:
        result = compare_mechanisms(
            mechanisms.split(","),
            epsilon=epsilon,
            delta=delta,
            population=population,
            users=users,
            repeats=repeat,
            seed=seed,
            confidence=confidence,
        )
    except InvalidParameterError as exc:
        option = "--mechanisms" if exc.field == "mechanisms" else "--delta" if exc.field == "delta" else None
        _fail(f"invalid {option or _option_for(exc.field)}: {param_error_text(exc)}")
    except LdpError as exc:
        _run_failed(exc)
    if not as_json:
        _out().print(compare_table(result))
    _emit_json(compare_to_dict(result), as_json, json_out)
