"""The hall-of-fame card of the run report: the members' unrated games against the frozen hall
(metrics.jsonl `hof`, docs/hall-of-fame.md), as curves per role and hall entry, and the caption's numbers.

Against `base` (the base model, in the hall from the first round to the end) the curves are on an absolute
scale: the same opponent at every round, whatever the population does. A snapshot's curve starts the round
after it was frozen and ends when a newer one takes its slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

from populora.diagnostics.run import Run
from populora.report.figure_style import _fig, _legend, _plot_line, _single_point_xlim

# The two sides of the game: a member as teacher (the hall's students solve its proposals) and as student
# (it solves the hall's teachers' exams).
SIDES = {
    "teacher": "teachers: the hall solves\ntheir problems (lower = harder)",
    "student": "students: solve the hall\nteachers' exams (higher = stronger)",
}
SIDE_COLOR = {"teacher": "#d9480f", "student": "#1c7ed6"}


@dataclass
class HofCurves:
    """Per side: the rounds' steps, the member-mean solve rate against each hall entry, the mean valid rate."""

    steps: list[int] = field(default_factory=list)
    solve: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # side -> entry -> per round
    valid: dict[str, list[float]] = field(default_factory=dict)  # side -> per round


def _mean(xs: list) -> float:
    vals = [x for x in xs if isinstance(x, int | float)]
    return float(np.mean(vals)) if vals else float("nan")


def hof_curves(run: Run) -> HofCurves | None:
    """The `hof` records of a run as curves (None when the run has no hall of fame)."""
    recs = [r for r in run.metrics if isinstance(r.get("hof"), dict)]
    if not recs:
        return None
    out = HofCurves(steps=[int(r["step"]) for r in recs])
    for side in SIDES:
        entries = sorted(
            {
                h
                for r in recs
                for m in r["hof"].get("members", {}).values()
                for h in (m.get(side) or {}).get("solve", {})
            },
            key=lambda h: (h != "base", h),
        )
        if not entries:
            continue
        out.solve[side] = {h: [] for h in entries}
        out.valid[side] = []
        for r in recs:
            games = [m[side] for m in r["hof"].get("members", {}).values() if isinstance(m.get(side), dict)]
            out.valid[side].append(_mean([g.get("valid") for g in games]))
            for h in entries:
                out.solve[side][h].append(_mean([(g.get("solve") or {}).get(h) for g in games]))
    return out


def hof_figure(run: Run) -> Figure | None:
    """Left and middle: the member-mean solve rate against each hall entry per side (base: thick black line);
    right: the mean valid rate per side (teachers' valid proposals, students' parsed answers)."""
    c = hof_curves(run)
    if c is None or not c.solve:
        return None
    steps = np.asarray(c.steps)
    fig, axes = _fig(size=(9.0, 3.2), ncols=3, sharey=True)
    for ax, side in zip(axes[0][:2], SIDES, strict=True):
        for i, (h, ys) in enumerate(c.solve.get(side, {}).items()):
            base = h == "base"
            _plot_line(
                ax,
                steps,
                ys,
                color="#212529" if base else SIDE_COLOR[side],
                alpha=1.0 if base else 0.35 + 0.5 * (i % 2),
                linewidth=2.4 if base else 1.0,
                label="vs base model" if base else ("vs snapshots" if i == 1 else None),
            )
        ax.set_title(SIDES[side], fontsize=9)
        _single_point_xlim(ax, steps)
        _legend(ax, loc="best")
    ax = axes[0][2]
    for side, ys in c.valid.items():
        _plot_line(ax, steps, ys, color=SIDE_COLOR[side], linewidth=2.0, label=side + "s")
    ax.set_title("valid proposals (teachers),\nparsed answers (students)", fontsize=9)
    _single_point_xlim(ax, steps)
    _legend(ax, loc="best")
    axes[0][0].set_ylabel("rate")
    for ax in axes[0]:
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
    return fig


def hof_caption(run: Run) -> str:
    """What the card shows, then the first and last round's numbers against the base model."""
    c = hof_curves(run)
    text = (
        "Unrated games against the hall of fame every hof.every steps (docs/hall-of-fame.md): the base model "
        "and frozen snapshots of the best teacher and student by LCB. Teachers propose to fixed prompts and the "
        "hall's students answer (lower = harder problems); students answer each hall teacher's fixed exam "
        "(higher = stronger). The base model's line is an absolute scale: the same opponent at every round."
    )
    bits = []
    for side, label in (
        ("teacher", "the base model solves the teachers' problems"),
        ("student", "the students solve the base model's exam"),
    ):
        ys = np.asarray((c.solve.get(side) or {}).get("base", []) if c else [], dtype=float)
        fin = np.flatnonzero(np.isfinite(ys))
        if fin.size:
            a, b = fin[0], fin[-1]
            bits.append(f"{label}: {ys[a]:.2f} at step {c.steps[a]} → {ys[b]:.2f} at step {c.steps[b]}")
    if not bits:
        return text
    said = "; ".join(bits)
    return f"{text} {said[0].upper()}{said[1:]}."


__all__ = ["HofCurves", "hof_caption", "hof_curves", "hof_figure"]
