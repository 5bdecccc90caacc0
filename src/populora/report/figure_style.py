"""The look every report figure shares: colours per role, task and run, the figure size and resolution, a
figure factory with the house grid and spines, and the small drawing helpers the figures reuse (a line that
survives NaN gaps and single points, evolution markers, a quiet legend); `to_png_base64` turns a figure into
the data a page embeds.

The figures themselves live in plots.py (one run), compare_plots.py (several runs) and hall.py (the hall of
fame); the experiment pages draw with these helpers too.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from matplotlib.figure import Figure

from populora.diagnostics.dynamics import smoothing_window
from populora.diagnostics.run import Run

ROLE_COLOR = {"teacher": "#d9480f", "student": "#1c7ed6", "single": "#7048e8"}
ROLE_LABEL = {"teacher": "teachers", "student": "students", "single": "single agent"}
TASK_COLOR = {"code_i": "#2b8a3e", "code_o": "#e67700", "code_f": "#5f3dc4", "all": "#343a40"}
TASK_LABEL = {
    "code_i": "code_i (infer input)",
    "code_o": "code_o (infer output)",
    "code_f": "code_f (infer function)",
    "all": "all types",
}
RUN_COLORS = ["#1c7ed6", "#d9480f", "#2b8a3e", "#7048e8", "#e67700", "#c2255c", "#0c8599", "#5c940d"]
# Warm hues for teachers, cool hues for students, each list ordered for maximal contrast between neighbours.
_TEACHER_SHADES = ["#d9480f", "#c2255c", "#f59f00", "#862e9c", "#a61e1e", "#e8590c", "#e64980", "#946c00"]
_STUDENT_SHADES = ["#1c7ed6", "#0ca678", "#5f3dc4", "#15aabf", "#2f9e44", "#364fc7", "#66a80f", "#0b7285"]

WIDE = (9.0, 3.4)
MANY = 8  # above this many members in a plot, per-member legends give way to direct labels or none
DPI = 100


def _fig(size: tuple[float, float] = WIDE, ncols: int = 1, nrows: int = 1, **kw):
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    for ax in axes.flat:
        ax.grid(True, color="#e9ecef", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes


def to_png_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def member_colors(run: Run) -> dict[str, str]:
    out, ti, si = {}, 0, 0
    for m in run.members:
        role = run.role_of(m)
        if role == "teacher":
            out[m] = _TEACHER_SHADES[ti % len(_TEACHER_SHADES)]
            ti += 1
        elif role == "student":
            out[m] = _STUDENT_SHADES[si % len(_STUDENT_SHADES)]
            si += 1
        else:
            out[m] = ROLE_COLOR["single"]
    return out


def _window(run: Run) -> int:
    return smoothing_window(run.n_steps)


def _plot_line(ax, x, y, **kw) -> bool:
    """Plot y against x (NaN gaps kept); a single finite point is drawn as a marker. True if drawn."""
    y = np.asarray(y, dtype=float)
    fin = np.isfinite(y)
    if not fin.any():
        return False
    if fin.sum() == 1:
        kw = {k: v for k, v in kw.items() if k not in ("linestyle", "ls")}
        ax.plot(np.asarray(x)[fin], y[fin], marker="o", linestyle="none", **kw)
    else:
        ax.plot(x, y, **kw)
    return True


def _mark_evolution(ax, run: Run, label: bool = True) -> None:
    steps = sorted({int(e["step"]) for e in run.events_of("evolution")})
    for i, s in enumerate(steps):
        ax.axvline(
            s,
            color="#868e96",
            linestyle=":",
            linewidth=1.0,
            label="evolution" if (label and i == 0) else None,
            zorder=1.5,
        )


def _legend(ax, **kw) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(frameon=False, fontsize=8, **kw)


def _single_point_xlim(ax, steps: np.ndarray) -> None:
    if steps.size == 1:
        ax.set_xlim(steps[0] - 1, steps[0] + 1)
