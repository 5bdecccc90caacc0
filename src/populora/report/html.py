"""The self-contained HTML pages: `write_report(run_dir)` and `write_compare(run_dirs, out)`.

One file, no external resources: figures are PNGs embedded as base64 data URIs, styles are inline, and
there is no JavaScript. Every figure has a sentence under it saying what it shows (with the run's own
numbers where they help). Missing data never fails a page: a section without data says so instead.

This module assembles the two pages card by card; the frame and the figure card are in shell.py, the
captions in captions.py, the cards that are not figures in sections.py, the figures in plots.py (one run)
and compare_plots.py (several).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from populora.diagnostics.dynamics import (
    coverage_curve,
    nanmean,
    oscillation_by_type,
    proposer_roles,
    solver_roles,
)
from populora.diagnostics.run import Run, load_run
from populora.names import TASKS
from populora.report import captions, compare_plots, hall, plots, sections
from populora.report.shell import atomic_write, esc, figure_card, page, rate
from populora.report.text import display, plain_figures

__all__ = ["render_report", "write_report", "render_compare", "write_compare"]

_page = page  # the experiment pages (experiment/page.py) import the page frame from here under this name


def _any_matchup(run: Run) -> bool:
    return any(rec.get("matchups") for rec in run.metrics) or bool(run.events_of("matchup"))


def render_report(run: Run) -> str:
    """The report page of one run, as an HTML string."""
    run.label = display(run.label)
    with plain_figures():  # reasons, ids and folder names are drawn literally (never as mathtext)
        return _render_report(run)


def _render_report(run: Run) -> str:
    single = run.mode == "single"
    cards = [
        figure_card(
            "rewards",
            "Rewards and valid proposals",
            lambda: plots.rewards_figure(run),
            lambda: captions.rewards(run),
            "No rewards logged.",
        ),
        figure_card(
            "invalid",
            "Invalid proposals by reason",
            lambda: plots.invalid_figure(run),
            lambda: captions.invalid(run),
            "No invalid proposal logged.",
        ),
        figure_card(
            "solve",
            "Solve rate per task type",
            lambda: plots.solve_rate_figure(run),
            lambda: captions.solve(run),
            "No valid problem yet, so nothing to solve."
            if run.problems and not any(p.get("valid") for p in run.problems)
            else "No solve rates logged.",
        ),
        figure_card(
            "probe",
            "Fixed probe: held-out accuracy",
            lambda: plots.probe_figure(run),
            lambda: captions.probe(run),
            "No probe logged (enable it with --set diagnostics.probe_every=N).",
        ),
        figure_card(
            "probe_sampled",
            "Fixed probe: sampled pass@1",
            lambda: plots.probe_figure(run, "probe_sampled"),
            lambda: captions.probe_sampled(run),
            "No sampled probe logged (add it to the probe with --set diagnostics.probe_samples=8).",
        ),
        figure_card(
            "probe_flaws",
            "Misconception probe: planted classes",
            lambda: plots.flaws_figure(run),
            lambda: captions.probe_flaws(run),
            "No misconception probe logged (add it with --set diagnostics.probe_flaws=16; the tiny-flaws presets "
            "turn it on).",
        ),
        figure_card(
            "probe_valid",
            "Fixed probe: teachers' valid proposals",
            lambda: plots.probe_figure(run, "probe_valid"),
            lambda: captions.probe_valid(run),
            "No teacher validity probe logged (it runs with the probe: --set diagnostics.probe_every=N, "
            "diagnostics.probe_proposals > 0).",
        ),
        figure_card(
            "hof",
            "Hall of fame: games against frozen references",
            lambda: hall.hof_figure(run),
            lambda: esc(hall.hof_caption(run)),
            "No hall of fame logged (enable it with --set hof.every=N).",
        ),
        figure_card(
            "roles",
            "Policy entropy and response length",
            lambda: plots.role_metric_figure(run),
            lambda: captions.roles(run),
            "No entropy or response length logged.",
        ),
        figure_card(
            "ratings",
            "TrueSkill ratings",
            lambda: plots.ratings_figure(run),
            lambda: captions.ratings(run),
            "A single-agent run has no ratings." if single else "No ratings logged.",
        ),
        figure_card(
            "games",
            "Games won, drawn and lost",
            lambda: plots.games_figure(run),
            lambda: captions.games(run),
            "A single-agent run plays no rated games."
            if single
            else "No games logged (runs before the games key have none).",
        ),
        figure_card(
            "matchups",
            "Student × teacher solve rates",
            lambda: plots.matchup_figure(run),
            lambda: captions.matchups(run),
            "A single-agent run has no matchups."
            if single
            else (
                "No matchup has produced a valid problem yet." if _any_matchup(run) else "No matchups logged."
            ),
        ),
        figure_card(
            "evolution",
            "Evolution: operator usage and child recovery",
            lambda: plots.evolution_figure(run),
            lambda: captions.evolution(run),
            "A single-agent run does not evolve." if single else "No evolution event yet.",
        ),
        figure_card(
            "complexity",
            "Problem complexity",
            lambda: plots.complexity_figure(run),
            lambda: captions.complexity(run),
            "No valid program features logged.",
        ),
        figure_card(
            "coverage",
            "Problem-space coverage",
            lambda: plots.coverage_figure(run),
            lambda: captions.coverage(run),
            "No cell filled yet: no valid program so far."
            if np.isfinite(run.series("coverage")).any() or run.problems
            else "No coverage logged.",
        ),
        sections.examples(run),
        figure_card(
            "timing",
            "Time per step by phase",
            lambda: plots.phase_time_figure(run),
            lambda: captions.phase(run),
            "No phase timings logged.",
        ),
    ]
    return page(
        f"PopuLoRA report: {run.path.name}", sections.header(run) + sections.evaluation(run) + "".join(cards)
    )


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write `RUN_DIR/report.html` (or `out`) for a run folder and return its path."""
    run = load_run(run_dir)
    path = Path(out) if out else run.path / "report.html"
    atomic_write(path, render_report(run))
    return path


def render_compare(runs: Sequence[Run]) -> str:
    """A page overlaying several runs on the same axes."""
    for run in runs:
        run.label = display(run.label)
    with plain_figures():
        return _render_compare(runs)


def _render_compare(runs: Sequence[Run]) -> str:
    rows = []
    for run, color in zip(runs, compare_plots.run_colors(runs), strict=True):
        _, cov, _ = coverage_curve(run)
        sr = run.role_series(solver_roles(run), ["solve_rate", "all"])
        k = max(1, run.n_steps // 10)
        cov_s = f"{100 * cov[np.isfinite(cov)][-1]:.2f}%" if np.isfinite(cov).any() else "–"
        osc = oscillation_by_type(run)
        turns = " / ".join(str(osc[t].direction_changes) if osc[t].n_points else "–" for t in TASKS)
        vr = run.role_series(proposer_roles(run), "valid_rate")
        rows.append(
            f'<tr><td><span style="color:{color}">■</span> {esc(run.label)}</td>'
            f"<td>{esc(run.mode)}</td><td>{run.n_steps}</td><td>{esc(rate(nanmean(sr[-k:])))}</td>"
            f"<td>{esc(turns)}</td><td>{esc(rate(nanmean(vr[-k:])))}</td>"
            f"<td>{esc(cov_s)}</td><td>{len(run.events_of('evolution'))}</td></tr>"
        )
    table = (
        "<table><tr><th>run</th><th>mode</th><th>steps</th><th>solve rate (last 10%)</th>"
        "<th>direction changes i / o / f</th><th>valid rate (last 10%)</th>"
        f"<th>coverage</th><th>evolution events</th></tr>{''.join(rows)}</table>"
        '<p class="cap">Direction changes: turns of the smoothed solve-rate curve per task type that '
        "retrace more than the curve's noise (at least 0.05), a count of the oscillation the paper "
        "attributes to the arms race.</p>"
    )
    cards = [
        figure_card(
            "solve",
            "Solve rate",
            lambda: compare_plots.compare_solve_figure(runs),
            "Smoothed solve rate of each run's solvers (students, or the single agent on its own "
            "problems), overall and per task type. A plateau near 1 is the self-calibration fixed point; "
            "oscillation is the arms race.",
            "No solve rates logged.",
        ),
        figure_card(
            "probe",
            "Fixed probe: held-out accuracy",
            lambda: compare_plots.compare_probe_figure(runs),
            "Greedy accuracy on the fixed held-out probe sets of each run's solvers (students, or the single "
            "agent): the mean member (solid, with dots at the probed steps) and the best member (dashed); "
            "step 0 is the base model before any update.",
            "No run logged a probe (enable it with --set diagnostics.probe_every=N).",
        ),
        figure_card(
            "probe_valid",
            "Fixed probe: teachers' valid proposals",
            lambda: compare_plots.compare_probe_figure(runs, "probe_valid"),
            "Valid-proposal rate of each run's proposers (teachers, or the single agent) on the fixed teacher "
            "prompts (references from the probe sets, one fixed sampling seed): the mean member (solid) and the "
            "best member (dashed). Unlike the per-step valid rate, only the adapters change between points.",
            "No run logged a teacher validity probe (it runs with the probe: --set diagnostics.probe_every=N).",
        ),
        figure_card(
            "complexity",
            "Problem complexity",
            lambda: compare_plots.compare_complexity_figure(runs),
            "Mean of the four structural metrics of each run's valid proposer programs per step (smoothed).",
            "No program features logged.",
        ),
        figure_card(
            "coverage",
            "Problem-space coverage",
            lambda: compare_plots.compare_coverage_figure(runs),
            "Cumulative share of the 4,096 CVT cells filled by each run's valid programs.",
            "No coverage logged.",
        ),
        figure_card(
            "valid",
            "Valid proposals",
            lambda: compare_plots.compare_valid_figure(runs),
            "Smoothed share of each run's proposals that passed validation (teachers, or the single agent).",
            "No valid rates logged.",
        ),
        figure_card(
            "entropy",
            "Policy entropy",
            lambda: compare_plots.compare_metric_figure(runs, "entropy", "entropy"),
            "Mean per-token entropy of proposers (left) and solvers (right) per run (smoothed).",
            "No entropy logged.",
        ),
        figure_card(
            "length",
            "Response length",
            lambda: compare_plots.compare_metric_figure(runs, "response_len", "response length"),
            "Mean response length in tokens of proposers (left) and solvers (right) per run.",
            "No response length logged.",
        ),
        figure_card(
            "reward",
            "Reward",
            lambda: compare_plots.compare_metric_figure(runs, "reward", "reward"),
            "Mean training reward of proposers and solvers per run (the single agent's reward mixes "
            "both roles, so compare shapes rather than levels).",
            "No rewards logged.",
        ),
        sections.compare_examples(runs),
    ]
    head = (
        f'<h1>PopuLoRA run comparison</h1><p class="sub">{len(runs)} runs · generated '
        f'{_dt.datetime.now().strftime("%Y-%m-%d %H:%M")}</p><section class="card">{table}</section>'
    )
    return page("PopuLoRA comparison", head + "".join(cards))


def write_compare(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """Write the comparison page of several run folders to `out` and return its path."""
    runs = [load_run(d) for d in run_dirs]
    labels = [r.label for r in runs]
    for r in runs:  # two runs with the same folder name still need distinct legend entries
        if labels.count(r.label) > 1:
            r.label = f"{r.label} [{r.path.parent.name}/{r.path.name}]"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, render_compare(runs))
    return out
