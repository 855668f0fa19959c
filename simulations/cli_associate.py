"""``ldp-sim associate``: simulate a paired campaign and its association estimate (issue 5).

Registered on the ``ldp-sim`` app (:mod:`simulations.cli_app`) by :mod:`simulations.cli`. Example (one line)::

    ldp-sim associate --first rappor --second rr --param first.k=32 --param first.m=16
        --param second.epsilon=1 --population zipf:1.1 --domain 5 --dependence 0.5 --users 100000

The model and the figures are described in :mod:`simulations.association`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ldp_aggregator.cli_common import param_error_text
from ldp_client import registry
from ldp_client.errors import InvalidParameterError, LdpError
from ldp_client.mechanisms.paired import PairedParams
from ldp_client.params import make_params
from simulations.association import AssociationConfig, association_table, describe, simulate_association
from simulations.cli_app import (
    JsonOpt,
    JsonOutOpt,
    _check_outputs,
    _emit_json,
    _fail,
    _out,
    _parse_params,
    _run_failed,
)

__all__ = ["associate_cmd"]

_SIDES = "rr, grr, rappor, basic-rappor or boolean-rappor"


def associate_cmd(
    first: Annotated[str, typer.Option("--first", help=f"Mechanism of the first variable: {_SIDES}.")],
    second: Annotated[str, typer.Option("--second", help=f"Mechanism of the second variable: {_SIDES}.")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="Side field first.NAME=VALUE or second.NAME=VALUE (k, h, m, f, p, q, epsilon, domain, ...).",
        ),
    ] = None,
    population: Annotated[str, typer.Option(help="Population of the first variable.")] = "zipf:1.1",
    domain: Annotated[int, typer.Option(help="Number of values of the first variable.")] = 5,
    second_population: Annotated[str, typer.Option(help="Population of the second variable.")] = "uniform",
    second_domain: Annotated[int, typer.Option(help="Number of values of the second variable.")] = 2,
    dependence: Annotated[float, typer.Option(help="lambda in [0, 1]: 0 independent, 1 V = U mod D2.")] = 0.5,
    users: Annotated[int, typer.Option(help="Users per repeat.")] = 100_000,
    repeat: Annotated[int, typer.Option(help="Independent repeats.")] = 1,
    seed: Annotated[int, typer.Option(help="Root seed.")] = 0,
    extra_candidates: Annotated[int, typer.Option(help="False strings added to string-RAPPOR sides.")] = 0,
    alpha: Annotated[float, typer.Option(help="Level of the independence test.")] = 0.05,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
) -> None:
    """Simulate a paired campaign: joint distribution, intervals and independence test vs the truth."""
    _check_outputs(json_out, None)
    fields: dict[str, object] = dict(_parse_params(param or []))
    fields["first"] = first
    fields["second"] = second
    # A declared-domain side (grr, basic-rappor) takes the simulated domain unless given explicitly.
    for side, mech, d in (("first", first, domain), ("second", second, second_domain)):
        spec = registry.find_named(mech)
        if spec is not None and spec.takes_domain:
            fields.setdefault(f"{side}.domain", str(d))
    try:
        params = make_params("paired", fields=fields)
        if not isinstance(params, PairedParams):  # unreachable
            raise InvalidParameterError("mechanism", params.name, "paired")
        cfg = AssociationConfig(
            params=params,
            first_population=population,
            second_population=second_population,
            first_domain=domain,
            second_domain=second_domain,
            dependence=dependence,
            n_users=users,
            repeats=repeat,
            seed=seed,
            alpha=alpha,
            extra_candidates=extra_candidates,
        )
        result = simulate_association(cfg)
    except InvalidParameterError as exc:
        _fail(f"invalid option ({exc.field}): {param_error_text(exc)}")
    except LdpError as exc:
        _run_failed(exc)
    if as_json:
        _emit_json(result.to_dict(), as_json, json_out)
        return
    table = association_table(result)
    out = _out()
    out.print(table)
    for line in describe(result):
        out.print(line)
    _emit_json(result.to_dict(), as_json, json_out)
