"""PNG plots of simulations (matplotlib, Agg backend, no global pyplot state).

:func:`plot_run`: the estimates of one repeat with their confidence intervals against the truth (items with
the largest true counts), and below it the histogram of the standardized errors (estimate - truth) /
std_error over every item and repeat, against the standard normal density it should follow when the
estimator is unbiased and its standard errors are right.

:func:`plot_sweep`: frequency-scale errors against the swept value (log scales for users and for ranges
spanning more than a factor of 20); with a target error, the users needed and the error reached.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulations.runners import SimulationResult, SweepResult

__all__ = ["plot_run", "plot_sweep"]

_MAX_TICK_LABELS = 40
_LABEL_CHARS = 14


def _save(fig: Figure, path: str | Path) -> None:
    FigureCanvasAgg(fig)  # attaches the Agg canvas: no display, no pyplot state
    fig.savefig(str(path), format="png", dpi=110)


def _short(label: str) -> str:
    return label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 1] + "…"


def plot_run(result: SimulationResult, path: str | Path, *, max_items: int = 40, repeat: int = 0) -> None:
    """Write a PNG: estimates with interval bars vs truth (top), standardized errors (bottom)."""
    truth = result.truth[repeat].astype(np.float64)
    order = np.argsort(-truth, kind="stable")[:max_items]
    est = result.estimates[repeat, order]
    lo = result.ci_low[repeat, order]
    hi = result.ci_high[repeat, order]
    x = np.arange(order.size)

    fig = Figure(figsize=(11, 8.5))
    ax, ax_z = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    conf = result.config.confidence
    yerr = np.vstack([np.maximum(est - lo, 0.0), np.maximum(hi - est, 0.0)])
    ax.errorbar(
        x, est, yerr=yerr, fmt="o", ms=4, capsize=2, color="tab:blue", label=f"estimate, {conf:.0%} interval"
    )
    ax.plot(x, truth[order], "_", ms=14, mew=2, color="black", label="truth")
    if result.detected is not None:
        det = result.detected[repeat, order]
        ax.plot(x[det], est[det], "o", ms=8, mfc="none", color="tab:green", label="detected")
    positive = truth[order][truth[order] > 0]
    if positive.size and positive.max() / positive.min() > 100:
        # Counts over several decades: symlog keeps negative estimates visible near zero.
        linthresh = max(1.0, float(np.median(result.std_errors[repeat, order])))
        ax.set_yscale("symlog", linthresh=linthresh)
    ax.set_ylabel("users (count)")
    shown = (
        f"top {order.size} of {len(result.labels)} items" if order.size < len(result.labels) else "all items"
    )
    cfg = result.config
    ax.set_title(
        f"{result.params.name}, eps={result.epsilon:.3g}, {cfg.population}, N={cfg.n_users:,}, "
        f"{cfg.mode} runner; repeat {repeat}, {shown} by true count"
    )
    if order.size <= _MAX_TICK_LABELS:
        ax.set_xticks(x)
        ax.set_xticklabels([_short(result.labels[i]) for i in order.tolist()], rotation=90, fontsize=7)
    else:
        ax.set_xlabel("item rank by true count")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)

    se = result.std_errors
    ok = se > 0
    z = (result.estimates[ok] - result.truth[ok]) / se[ok]
    if z.size:
        lim = max(4.0, float(np.max(np.abs(z))))
        bins = np.linspace(-lim, lim, min(60, max(10, int(math.sqrt(z.size)) + 1)))
        ax_z.hist(z, bins=bins, density=True, color="tab:blue", alpha=0.6, label="(estimate - truth) / SE")
        grid = np.linspace(-lim, lim, 400)
        ax_z.plot(grid, np.exp(-0.5 * grid**2) / math.sqrt(2 * math.pi), color="black", label="N(0, 1)")
    cov = result.metrics.coverage
    cov_text = f"coverage {cov:.3f}" if cov is not None else ""
    ax_z.set_title(
        f"standardized errors over {result.truth.size:,} (item, repeat) pairs; {cov_text}, "
        f"MSE/variance {result.metrics.mse_over_variance or float('nan'):.3f}",
        fontsize=9,
    )
    ax_z.legend(fontsize=8)
    ax_z.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)


def _numeric_values(sweep: SweepResult) -> tuple[np.ndarray, bool]:
    """The swept values as floats if they all are numbers (else positions), and whether to use log x."""
    vals: list[float] = []
    for p in sweep.points:
        try:
            vals.append(float(p.value))
        except (TypeError, ValueError):
            return np.arange(len(sweep.points), dtype=np.float64), False
    arr = np.asarray(vals, dtype=np.float64)
    log = bool(np.all(arr > 0) and (sweep.over == "users" or arr.max() / arr.min() > 20))
    return arr, log


def plot_sweep(sweep: SweepResult, path: str | Path) -> None:
    """Write a PNG of the errors (and users needed, with a target) against the swept value."""
    x, log_x = _numeric_values(sweep)
    points = sweep.points
    rmse = np.array([p.result.rmse_frequency for p in points])
    pred = np.array([p.result.predicted_rmse_frequency for p in points])
    max_se = np.array([p.result.max_std_error_frequency for p in points])
    xlabel = sweep.over or "point"
    title = f"{sweep.base.mechanism} on {sweep.base.population} ({sweep.base.mode} runner)"

    if sweep.target_error is None:
        fig = Figure(figsize=(8, 5.5))
        ax = fig.subplots()
        ax.plot(x, rmse, "o-", label="RMSE of frequencies (observed)")
        ax.plot(x, pred, "s--", label="RMSE predicted by the estimator's variances")
        ax.plot(x, max_se, "^:", label="largest std error of a frequency")
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("error (frequency scale)")
        users = {p.result.config.n_users for p in points}
        ax.set_title(title + (f", N={users.pop():,}" if len(users) == 1 else ""))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    else:
        target = sweep.target_error
        needed = np.array([p.required_users or 0 for p in points], dtype=np.float64)
        achieved = np.array([p.result.error(sweep.error_metric) for p in points])
        fig = Figure(figsize=(12, 5))
        ax_n, ax_e = fig.subplots(1, 2)
        ax_n.plot(x, needed, "o-", color="tab:red")
        ax_n.set_yscale("log")
        ax_n.set_ylabel("users needed")
        ax_n.set_title(f"users for {sweep.error_metric} <= {target:g}")
        ax_e.plot(x, achieved, "o-", label=f"{sweep.error_metric} reached at that N")
        ax_e.axhline(target, color="black", ls="--", label="target")
        ax_e.set_yscale("log")
        ax_e.set_ylabel("error (frequency scale)")
        ax_e.set_title("verification by simulation")
        ax_e.legend(fontsize=8)
        for a in (ax_n, ax_e):
            a.set_xlabel(xlabel)
            if log_x:
                a.set_xscale("log")
            a.grid(alpha=0.3, which="both")
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
