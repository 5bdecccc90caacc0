"""Matplotlib figures for the comparison page: several runs overlaid on the same axes, one colour per run.

Every function takes the list of runs and returns a `Figure`, or None when no run holds data for that plot.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from matplotlib.figure import Figure

from populora.diagnostics.dynamics import (
    TASKS,
    complexity_curves,
    coverage_curve,
    proposer_roles,
    smooth,
    solve_rates_by_type,
    solver_roles,
)
from populora.diagnostics.features import FEATURE_LABELS, FEATURES
from populora.diagnostics.probe import probe_by_role
from populora.diagnostics.run import Run
from populora.report.figure_style import RUN_COLORS, TASK_LABEL, _fig, _legend, _plot_line, _window


def run_colors(runs: Sequence[Run]) -> list[str]:
    return [RUN_COLORS[i % len(RUN_COLORS)] for i in range(len(runs))]


def compare_solve_figure(runs: Sequence[Run]) -> Figure | None:
    """Solver solve rate (all types, smoothed) of every run on one axis, plus per-type panels."""
    fig, axes = _fig(size=(9.0, 5.4), ncols=2, nrows=2, sharey=True)
    drawn = False
    for run, color in zip(runs, run_colors(runs), strict=True):
        rates = solve_rates_by_type(run)
        for ax, task in zip(axes.flat, ("all", *TASKS), strict=True):
            drawn |= _plot_line(
                ax, run.steps, smooth(rates[task], _window(run)), color=color, linewidth=2.0, label=run.label
            )
            ax.set_title(TASK_LABEL[task], fontsize=10)
            ax.set_ylim(-0.03, 1.03)
    _legend(axes[0, 0], loc="lower right")
    for ax in axes[1]:
        ax.set_xlabel("step")
    return fig if drawn else None


def compare_probe_figure(runs: Sequence[Run], which: str = "probe") -> Figure | None:
    """Fixed-probe accuracy of each run's solvers (students, or the single agent): the mean member (solid)
    and the best member (dashed), over all task types and per type. `which="probe_valid"`: the proposers'
    valid-proposal rate on the fixed teacher prompts."""
    fig, axes = _fig(size=(9.0, 5.4), ncols=2, nrows=2, sharey=True)
    drawn = False
    label = "valid proposals" if which == "probe_valid" else "probe"
    for run, color in zip(runs, run_colors(runs), strict=True):
        curves = probe_by_role(run, which)
        roles = proposer_roles(run) if which == "probe_valid" else solver_roles(run)
        role = next((r for r in roles if r in curves), None)
        if role is None:
            continue
        for ax, key in zip(axes.flat, ("all", *TASKS), strict=True):
            c = curves[role][key]
            drawn |= _plot_line(
                ax, c.steps, c.mean, color=color, linewidth=2.0, marker="o", ms=3, label=run.label
            )
            _plot_line(ax, c.steps, c.best, color=color, linewidth=1.0, linestyle="--")
            ax.set_title(f"{label}: {TASK_LABEL[key]}", fontsize=10)
    _legend(axes[0, 0], loc="best")
    for ax in axes[1]:
        ax.set_xlabel("step")
    return fig if drawn else None


def compare_metric_figure(runs: Sequence[Run], key: str, title: str) -> Figure | None:
    """A per-role metric (entropy, response length, reward) of every run: proposers left, solvers right."""
    fig, axes = _fig(ncols=2, sharey=True)
    drawn = False
    for run, color in zip(runs, run_colors(runs), strict=True):
        for ax, roles in ((axes[0, 0], proposer_roles(run)), (axes[0, 1], solver_roles(run))):
            drawn |= _plot_line(
                ax,
                run.steps,
                smooth(run.role_series(roles, key), _window(run)),
                color=color,
                linewidth=2.0,
                label=run.label,
            )
    axes[0, 0].set_title(f"{title}: proposers (teachers / single agent)", fontsize=10)
    axes[0, 1].set_title(f"{title}: solvers (students / single agent)", fontsize=10)
    for ax in axes.flat:
        ax.set_xlabel("step")
    _legend(axes[0, 1], loc="best")
    return fig if drawn else None


def compare_valid_figure(runs: Sequence[Run]) -> Figure | None:
    """Valid-proposal rate of every run's proposers (smoothed)."""
    fig, axes = _fig(size=(9.0, 3.0))
    ax = axes[0, 0]
    drawn = False
    for run, color in zip(runs, run_colors(runs), strict=True):
        drawn |= _plot_line(
            ax,
            run.steps,
            smooth(run.role_series(proposer_roles(run), "valid_rate"), _window(run)),
            color=color,
            linewidth=2.0,
            label=run.label,
        )
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("step")
    ax.set_ylabel("valid-proposal rate")
    _legend(ax, loc="lower right")
    return fig if drawn else None


def compare_complexity_figure(runs: Sequence[Run]) -> Figure | None:
    fig, axes = _fig(size=(9.0, 4.8), ncols=2, nrows=2)
    drawn = False
    for run, color in zip(runs, run_colors(runs), strict=True):
        curves = complexity_curves(run)
        for ax, f in zip(axes.flat, FEATURES, strict=True):
            if f in curves:
                st, mean, _ = curves[f]
                drawn |= _plot_line(
                    ax, st, smooth(mean, _window(run)), color=color, linewidth=2.0, label=run.label
                )
            ax.set_title(FEATURE_LABELS[f], fontsize=10)
    _legend(axes[0, 0], loc="best")
    for ax in axes[1]:
        ax.set_xlabel("step")
    return fig if drawn else None


def compare_coverage_figure(runs: Sequence[Run]) -> Figure | None:
    fig, axes = _fig(size=(9.0, 3.0))
    ax = axes[0, 0]
    drawn = False
    for run, color in zip(runs, run_colors(runs), strict=True):
        steps, cov, _ = coverage_curve(run)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            drawn |= _plot_line(ax, steps, 100 * cov, color=color, linewidth=2.2, label=run.label)
    ax.set_ylabel("cells filled (%)")
    ax.set_xlabel("step")
    ax.set_ylim(bottom=0)
    _legend(ax, loc="upper left")
    return fig if drawn else None
