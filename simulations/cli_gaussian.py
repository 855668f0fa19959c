"""``ldp-sim privacy gaussian``: the noise an (epsilon, delta) request costs (a command to register).

:func:`gaussian_cmd` is a Typer command (options ``--epsilon``, ``--delta``, ``--sensitivity``, ``--grid``,
``--json``, ``--json-out``) printing :func:`ldp_client.mechanisms.numeric.gaussian.gaussian_report`: the
classical and analytic sigmas with the exact delta of each, and the discrete Gaussian the ``gaussian``
mechanism samples for that request. It is registered on the ``privacy`` command group by the module that
creates the group (``privacy_app.command("gaussian")(cli_gaussian.gaussian_cmd)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer

from ldp_aggregator.cli_common import param_error_text
from ldp_client.errors import InvalidParameterError
from ldp_client.mechanisms.numeric.gaussian import gaussian_report
from simulations.cli_app import _emit_json, _fail, _out

__all__ = ["gaussian_cmd"]


def gaussian_cmd(
    epsilon: Annotated[float, typer.Option("--epsilon", help="epsilon > 0 of one report.")],
    delta: Annotated[float, typer.Option("--delta", help="delta in [1e-30, 1) of one report.")],
    sensitivity: Annotated[
        float,
        typer.Option("--sensitivity", help="L2 sensitivity: hi - lo of a value, 2 B of a vector of norm B."),
    ] = 1.0,
    grid: Annotated[
        int | None, typer.Option("--grid", help="grid steps K of the discrete mechanism.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result document as JSON.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="Also write the JSON here.")] = None,
) -> None:
    """The Gaussian mechanism's sigma for (epsilon, delta): classical, analytic (Balle-Wang), and discrete."""
    try:
        rep = gaussian_report(epsilon, delta, sensitivity, grid=grid)
    except InvalidParameterError as exc:
        # Every field of the report is one of this command's options (--epsilon, --delta, ...).
        option = exc.field if exc.field in ("epsilon", "delta", "sensitivity", "grid") else "epsilon"
        _fail(f"invalid --{option}: {param_error_text(exc)}")
    doc = {"format": "ldp-sim.privacy-gaussian.v1", **rep}
    if not as_json:
        from rich.table import Table

        table = Table(
            title=f"Gaussian mechanism: epsilon {epsilon:g}, delta {delta:g}, sensitivity {sensitivity:g}"
        )
        table.add_column("calibration")
        table.add_column("sigma", justify="right")
        table.add_column("exact delta at epsilon", justify="right")
        table.add_row(
            "analytic (Balle-Wang 2018)", f"{rep['analytic_sigma']:.6g}", f"{rep['analytic_delta']:.4g}"
        )
        if rep["classical_sigma"] is None:
            table.add_row("classical (Dwork-Roth)", "-", str(rep["classical_note"]))
        else:
            table.add_row(
                "classical (Dwork-Roth)", f"{rep['classical_sigma']:.6g}", f"{rep['classical_delta']:.4g}"
            )
        disc = cast(dict[str, Any], rep["discrete"])
        table.add_row(
            f"discrete Gaussian, grid {disc['grid']} (the mechanism)",
            f"{disc['sigma']:.6g}",
            f"{disc['delta']:.4g} at epsilon {disc['epsilon']:.6g}",
        )
        _out().print(table)
    _emit_json(doc, as_json, json_out)
