"""Simulation output: JSON documents and rich terminal tables.

JSON (``ldp-sim run --json`` on stdout, or ``--json-out PATH`` into a file)::

    {
      "summary": {
        "format": "ldp-sim.run.v1",
        "mechanism": "rappor", "params": {"k": 128, ...}, "epsilon": 1.07, "epsilon_inf": 4.39,
        "mode": "sum", "population": "zipf:1.1", "domain": 1000, "n_users": 1000000, "repeats": 1,
        "seed": 0, "confidence": 0.95, "n_items": 1000, "elapsed_s": 0.8,
        "metrics": {"n_repeats": 1, "n_items": 1000, "mse": ..., "mse_over_variance": ...,
                    "total_variation": ..., "max_abs_error": ..., "coverage": ..., "detected": ...,
                    "false_positives": ..., "false_negatives": ..., "allocated_mass": ...,
                    "rmse_frequency": ..., "predicted_rmse_frequency": ..., "max_std_error_frequency": ...},
        "detection": {"method": "...", "alpha": 0.05, "z": 4.26} | null,
        "grpc": {"client": "batch", "workers": 2, "batch_size": 50000, "server": null} | null
      },
      "items": [{"label": "0", "repeat": 0, "true_count": 123, "estimate": 120.5, "std_error": 9.1,
                 "ci_low": 102.7, "ci_high": 138.3, "detected": true}, ...]
    }

``items`` has one object per (repeat, item), repeat-major; counts are on the count scale (users), and
``detected`` is present only for string RAPPOR. Metrics that were not computed are ``null``.

``ldp-sim sweep --json`` gives ``{"summary": {...}, "points": [...]}`` (see :func:`sweep_to_dict`).

Non-finite numbers: JSON has no NaN or Infinity, so they are written as the strings ``"nan"``,
``"inf"`` and ``"-inf"`` (for example ``epsilon_inf`` of rr and grr, which have no longitudinal bound, is
``"inf"``), the convention of both command lines (:mod:`ldp_aggregator.cli_common`); every other number is
a JSON number. Documents are produced with ``allow_nan=False``, so they are always strict JSON.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ldp_aggregator.cli_common import json_safe, json_text
from ldp_client.params import Domain, MechanismParams
from simulations.runners import SimulationResult, SweepResult

__all__ = [
    "RUN_FORMAT",
    "SWEEP_FORMAT",
    "items_table",
    "json_safe",
    "metrics_table",
    "params_to_dict",
    "run_header_table",
    "run_to_dict",
    "sweep_table",
    "sweep_to_dict",
    "write_json",
]

RUN_FORMAT = "ldp-sim.run.v1"
SWEEP_FORMAT = "ldp-sim.sweep.v1"
DETECTION_METHOD = (
    "one-sided z-test with Bonferroni correction: detected iff estimate / std_error > z_(1 - alpha/M) "
    "for M candidates"
)


def write_json(path: str | Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as strict JSON (non-finite numbers as strings, see the module docstring)."""
    Path(path).write_text(json_text(data) + "\n", encoding="utf-8")


def _plain(value: Any) -> Any:
    """A parameter field as JSON: a domain as its size, also inside tuples (calm's attributes)."""
    if isinstance(value, Domain):
        return value.size
    if isinstance(value, tuple):
        return [_plain(x) for x in value]
    return value


def params_to_dict(params: MechanismParams) -> dict[str, Any]:
    """The parameter dataclass's init fields (a domain as its size), plus the effective rates: an
    oracle's support rates (``q_star``, ``p_star``), RAPPOR's bit rates (``prob_one_if_set``,
    ``prob_one_if_clear``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(params):
        if not f.init:
            continue
        value = getattr(params, f.name)
        if f.name == "inner":  # issue 6: a set-valued campaign's inner oracle, as a nested object
            out[f.name] = {"mechanism": value.name, **params_to_dict(value)}
            continue
        out[f.name] = _plain(value)
    for rate in ("q_star", "p_star", "prob_one_if_set", "prob_one_if_clear"):
        value = getattr(params, rate, None)
        if value is not None:
            out[rate] = value
    return out


def _metrics_dict(result: SimulationResult) -> dict[str, Any]:
    out: dict[str, Any] = dict(result.metrics.to_dict())
    out["rmse_frequency"] = result.rmse_frequency
    out["predicted_rmse_frequency"] = result.predicted_rmse_frequency
    out["max_std_error_frequency"] = result.max_std_error_frequency
    return out


def run_summary(result: SimulationResult) -> dict[str, Any]:
    """The ``summary`` object of a run (module docstring)."""
    cfg = result.config
    detection = None
    if result.detection_z is not None:
        detection = {"method": DETECTION_METHOD, "alpha": cfg.detection_alpha, "z": result.detection_z}
    grpc_info = None
    if cfg.mode == "grpc":
        grpc_info = {
            "client": cfg.grpc_client,
            "workers": cfg.workers,
            "batch_size": cfg.batch_size,
            "server": cfg.server,
        }
    return {
        "format": RUN_FORMAT,
        "mechanism": result.params.name,
        "params": params_to_dict(result.params),
        "epsilon": result.epsilon,
        "epsilon_inf": result.epsilon_inf,
        "mode": cfg.mode,
        "population": cfg.population,
        "domain": result.domain_size,
        "n_users": cfg.n_users,
        "repeats": cfg.repeats,
        "seed": cfg.seed,
        "confidence": cfg.confidence,
        "n_items": len(result.labels),
        "elapsed_s": result.elapsed_s,
        "metrics": _metrics_dict(result),
        "detection": detection,
        "grpc": grpc_info,
        **({"range_metrics": result.range_metrics} if result.range_metrics is not None else {}),
        **({"marginal_metrics": result.marginal_metrics} if result.marginal_metrics is not None else {}),
    }


def run_items(result: SimulationResult) -> list[dict[str, Any]]:
    """The ``items`` list: one object per (repeat, item), repeat-major."""
    truth = result.truth.tolist()
    est = result.estimates.tolist()
    se = result.std_errors.tolist()
    lo = result.ci_low.tolist()
    hi = result.ci_high.tolist()
    det = result.detected.tolist() if result.detected is not None else None
    out: list[dict[str, Any]] = []
    for r in range(len(truth)):
        for i, label in enumerate(result.labels):
            row: dict[str, Any] = {
                "label": label,
                "repeat": r,
                "true_count": truth[r][i],
                "estimate": est[r][i],
                "std_error": se[r][i],
                "ci_low": lo[r][i],
                "ci_high": hi[r][i],
            }
            if det is not None:
                row["detected"] = det[r][i]
            out.append(row)
    return out


def run_to_dict(result: SimulationResult) -> dict[str, Any]:
    """The JSON document of a run: ``{"summary": ..., "items": [...]}``."""
    return {"summary": run_summary(result), "items": run_items(result)}


def _point_dict(sweep: SweepResult, i: int) -> dict[str, Any]:
    p = sweep.points[i]
    res = p.result
    out: dict[str, Any] = {
        "value": p.value,
        "n_users": res.config.n_users,
        "epsilon": res.epsilon,
        "params": params_to_dict(res.params),
        "elapsed_s": res.elapsed_s,
        "metrics": _metrics_dict(res),
    }
    if sweep.target_error is not None:
        out["required_users"] = p.required_users
        out["predicted_error"] = p.predicted_error
        out["achieved_error"] = res.error(sweep.error_metric)
        out["achieved_over_target"] = res.error(sweep.error_metric) / sweep.target_error
        out["pilot_n_users"] = p.pilot.config.n_users if p.pilot is not None else None
    return out


def sweep_to_dict(sweep: SweepResult) -> dict[str, Any]:
    """The JSON document of a sweep: ``{"summary": {...}, "points": [...]}``, one point per value."""
    cfg = sweep.base
    summary = {
        "format": SWEEP_FORMAT,
        "mechanism": cfg.mechanism,
        "population": cfg.population,
        "mode": cfg.mode,
        "over": sweep.over or None,
        "values": list(sweep.values),
        "n_users": cfg.n_users,
        "repeats": cfg.repeats,
        "seed": cfg.seed,
        "target_error": sweep.target_error,
        "error_metric": sweep.error_metric if sweep.target_error is not None else None,
        "elapsed_s": sweep.elapsed_s,
    }
    return {"summary": summary, "points": [_point_dict(sweep, i) for i in range(len(sweep.points))]}


# ------------------------------------------------------------------------------------------ tables


def _num(x: float | None, fmt: str = ".4g") -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    return format(x, fmt)


def _count(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e15:
        return f"{x:.4g}"
    return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def run_header_table(result: SimulationResult) -> Table:
    """What was simulated: mechanism, parameters, epsilon, population, users, mode, time."""
    cfg = result.config
    t = Table(title="ldp-sim run", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    params = ", ".join(
        f"{k}={_num(v) if isinstance(v, float) else v}" for k, v in params_to_dict(result.params).items()
    )
    t.add_row("mechanism", f"{result.params.name} ({params})")
    eps = f"{result.epsilon:.6g} per report"
    if math.isfinite(result.epsilon_inf):
        eps += f", eps_inf {result.epsilon_inf:.6g}"
    t.add_row("epsilon", eps)
    t.add_row("population", f"{cfg.population} over {result.domain_size} values")
    t.add_row("users", f"{cfg.n_users:,} per repeat, {cfg.repeats} repeat(s), seed {cfg.seed}")
    mode: str = cfg.mode
    if mode == "grpc":
        where = cfg.server or "in-process aggregator"
        mode += f" ({cfg.grpc_client} client, {cfg.workers} workers, {where})"
    t.add_row("mode", mode)
    t.add_row("time", f"{result.elapsed_s:.2f} s")
    return t


def metrics_table(result: SimulationResult) -> Table:
    """The metrics against the truth, averaged over repeats (count scale unless marked)."""
    m = result.metrics
    conf = result.config.confidence
    t = Table(title="metrics against the truth", title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("meaning")
    t.add_row("MSE", _num(m.mse), "mean over items and repeats of (estimate - truth)^2")
    t.add_row("MSE / variance", _num(m.mse_over_variance), "about 1 when the reported std errors are right")
    t.add_row("RMSE (frequency)", _num(result.rmse_frequency), "sqrt(MSE) / N")
    t.add_row("max std error (frequency)", _num(result.max_std_error_frequency), "largest item SE / N")
    t.add_row("total variation", _num(m.total_variation), "between true and estimated distributions")
    t.add_row("max abs error", _num(m.max_abs_error), "largest |estimate - truth| (mean over repeats)")
    t.add_row(f"coverage of {conf:.0%} intervals", _num(m.coverage), "over items and repeats")
    if m.detected is not None:
        alpha = result.config.detection_alpha
        t.add_row(
            "detected",
            _num(m.detected),
            f"candidates with z > {_num(result.detection_z, '.3f')} (Bonferroni, alpha {alpha:g})",
        )
        t.add_row("false positives", _num(m.false_positives), "detected but held by no user")
        t.add_row("false negatives", _num(m.false_negatives), "held by some user but not detected")
        t.add_row("allocated mass", _num(m.allocated_mass), "sum of detected estimates / N")
    return t


def items_table(result: SimulationResult, *, max_rows: int = 20, repeat: int = 0) -> Table:
    """Per-item estimates of one repeat, the items with the largest true counts first."""
    truth = result.truth[repeat]
    order = np.argsort(-truth, kind="stable")
    shown = order[:max_rows]
    n_items = len(result.labels)
    title = f"estimates (repeat {repeat}"
    title += f", top {len(shown)} of {n_items} items by true count)" if len(shown) < n_items else ")"
    t = Table(title=title, title_justify="left")
    for col in (
        "item",
        "true count",
        "estimate",
        "std error",
        f"{result.config.confidence:.0%} interval",
        "z",
    ):
        t.add_column(col, justify="left" if col == "item" else "right")
    if result.detected is not None:
        t.add_column("detected", justify="center")
    for i in shown.tolist():
        est = float(result.estimates[repeat, i])
        se = float(result.std_errors[repeat, i])
        z = (est - float(truth[i])) / se if se > 0 else math.nan
        row = [
            result.labels[i],
            f"{int(truth[i]):,}",
            _count(est),
            _count(se),
            f"[{_count(float(result.ci_low[repeat, i]))}, {_count(float(result.ci_high[repeat, i]))}]",
            _num(z, "+.2f"),
        ]
        if result.detected is not None:
            row.append("yes" if result.detected[repeat, i] else "")
        t.add_row(*row)
    return t


def sweep_table(sweep: SweepResult) -> Table:
    """One row per sweep point: the errors, and with a target error the users needed."""
    target = sweep.target_error
    title = "sweep" + (f" over {sweep.over}" if sweep.over else "")
    if target is not None:
        title += f": users needed for {sweep.error_metric} <= {target:g}"
    t = Table(title=title, title_justify="left")
    axis_column = bool(sweep.over) and sweep.over not in ("epsilon", "users")
    if axis_column:
        t.add_column(sweep.over, justify="right")
    t.add_column("epsilon", justify="right")
    t.add_column("users needed" if target is not None else "users", justify="right")
    for name in ("RMSE (freq)", "max SE (freq)", "TV", "coverage", "MSE/var"):
        t.add_column(name, justify="right")
    if target is not None:
        t.add_column("achieved/target", justify="right")
    for p in sweep.points:
        r = p.result
        row = [_num(p.value, ".4g") if isinstance(p.value, float) else str(p.value)] if axis_column else []
        row += [
            _num(r.epsilon, ".4g"),
            f"{r.config.n_users:,}",
            _num(r.rmse_frequency, ".3g"),
            _num(r.max_std_error_frequency, ".3g"),
            _num(r.metrics.total_variation, ".3g"),
            _num(r.metrics.coverage, ".3f"),
            _num(r.metrics.mse_over_variance, ".3f"),
        ]
        if target is not None:
            row.append(_num(r.error(sweep.error_metric) / target, ".3f"))
        t.add_row(*row)
    return t
