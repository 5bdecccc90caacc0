"""Matplotlib figures for the run report (Agg, no pyplot global state).

Every function takes a `Run` and returns a `Figure`, or None when the run holds no data for that plot. The
shared colours and helpers are in figure_style.py, the comparison page's figures in compare_plots.py. The
report page looks each figure up here by name (`plots.rewards_figure`), so a test can swap one out. `DPI`,
`RUN_COLORS` and `to_png_base64` are re-exported (`X as X`) for the experiment pages, which draw through
`plots`.
"""

from __future__ import annotations

import warnings

import numpy as np
from matplotlib.figure import Figure

from populora.diagnostics.dynamics import (
    TASKS,
    child_recovery,
    complexity_curves,
    coverage_curve,
    matchup_matrix,
    operator_usage,
    proposer_roles,
    rating_history,
    smooth,
    solve_rates_by_type,
)
from populora.diagnostics.features import FEATURE_LABELS, FEATURES
from populora.diagnostics.probe import flaw_curves, probe_by_role
from populora.diagnostics.run import Run
from populora.report.figure_style import DPI as DPI
from populora.report.figure_style import (
    MANY,
    ROLE_COLOR,
    ROLE_LABEL,
    TASK_COLOR,
    TASK_LABEL,
    _fig,
    _legend,
    _mark_evolution,
    _plot_line,
    _single_point_xlim,
    _window,
    member_colors,
)
from populora.report.figure_style import RUN_COLORS as RUN_COLORS
from populora.report.figure_style import to_png_base64 as to_png_base64
from populora.report.games import RESULTS, member_games, role_games

# -- single-run figures ---------------------------------------------------------------------------------


def rewards_figure(run: Run) -> Figure | None:
    """Left: reward per member and role mean. Right: valid-proposal rate of the proposers."""
    if run.n_steps == 0:
        return None
    fig, axes = _fig(ncols=2)
    steps, colors = run.steps, member_colors(run)
    ax = axes[0, 0]
    drawn = False
    for m in run.members:
        drawn |= _plot_line(
            ax, steps, run.member_series(m, "reward"), color=colors[m], linewidth=0.7, alpha=0.35
        )
    for role in run.roles:
        drawn |= _plot_line(
            ax,
            steps,
            smooth(run.role_series(role, "reward"), _window(run)),
            color=ROLE_COLOR[role],
            linewidth=2.2,
            label=f"{ROLE_LABEL[role]} (mean)",
        )
    _mark_evolution(ax, run)
    ax.set_title("reward per step", fontsize=10)
    ax.set_xlabel("step")
    _legend(ax, loc="best")
    ax = axes[0, 1]
    for m in run.members_with_role(*proposer_roles(run)):
        _plot_line(
            ax,
            steps,
            smooth(run.member_series(m, "valid_rate"), _window(run)),
            color=colors[m],
            linewidth=0.9,
            alpha=0.6,
            label=m,
        )
    drawn |= _plot_line(
        ax,
        steps,
        smooth(run.role_series(proposer_roles(run), "valid_rate"), _window(run)),
        color="#212529",
        linewidth=2.2,
        label="mean",
    )
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("valid-proposal rate (smoothed)", fontsize=10)
    ax.set_xlabel("step")
    _legend(ax, loc="lower right", ncol=4)
    for a in axes.flat:
        _single_point_xlim(a, steps)
    return fig if drawn else None


def invalid_reasons(run: Run, top: int = 8) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(reasons, counts in the first half of the steps, counts in the second half), most frequent first.

    Reasons beyond the `top` most frequent are pooled as "other"; long reasons are cut at 70 characters.
    """
    bad = [p for p in run.problems if p.get("valid") is False]
    if not bad:
        return [], np.zeros(0), np.zeros(0)
    steps = sorted({int(p["step"]) for p in run.problems})
    mid = steps[len(steps) // 2] if len(steps) > 1 else steps[0] + 1
    from collections import Counter

    def key(p: dict) -> str:
        r = str(p.get("reason") or "unknown")
        return r if len(r) <= 70 else r[:69] + "…"

    total = Counter(key(p) for p in bad)
    keep = [r for r, _ in total.most_common(top)]
    labels = keep + (["other"] if len(total) > top else [])
    early, late = np.zeros(len(labels)), np.zeros(len(labels))
    for p in bad:
        r = key(p)
        i = labels.index(r) if r in keep else len(labels) - 1
        (early if int(p["step"]) < mid else late)[i] += 1
    return labels, early, late


def invalid_figure(run: Run) -> Figure | None:
    """Horizontal bars: why proposals failed validation, first half vs second half of the run."""
    labels, early, late = invalid_reasons(run)
    if not labels:
        return None
    fig, axes = _fig(size=(9.0, 1.2 + 0.32 * len(labels)))
    ax = axes[0, 0]
    y = np.arange(len(labels))[::-1]
    two = late.any() and early.any()
    ax.barh(y, early, color="#adb5bd", label="first half of the steps" if two else None)
    ax.barh(y, late, left=early, color="#d9480f", label="second half" if two else None)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("invalid proposals")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(axis="y", visible=False)
    _legend(ax, loc="lower right")
    return fig


def solve_rate_figure(run: Run) -> Figure | None:
    """Solver solve rate per task type: raw (thin) and smoothed (bold), evolution marked."""
    rates = solve_rates_by_type(run)
    if not any(np.isfinite(v).any() for v in rates.values()):
        return None
    fig, axes = _fig(ncols=3, sharey=True)
    steps, w = run.steps, _window(run)
    for ax, task in zip(axes.flat, TASKS, strict=True):
        y = rates[task]
        _plot_line(ax, steps, y, color=TASK_COLOR[task], linewidth=0.8, alpha=0.35)
        _plot_line(
            ax,
            steps,
            smooth(y, w),
            color=TASK_COLOR[task],
            linewidth=2.2,
            label=f"smoothed (window {w})" if w > 1 else "per step",
        )
        _plot_line(
            ax,
            steps,
            smooth(rates["all"], w),
            color="#adb5bd",
            linewidth=1.2,
            linestyle="--",
            label="all types",
        )
        _mark_evolution(ax, run, label=False)
        ax.set_title(TASK_LABEL[task], fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylim(-0.03, 1.03)
        _single_point_xlim(ax, steps)
    axes[0, 0].set_ylabel("solve rate")
    _legend(axes[0, 0], loc="lower left")
    return fig


def role_metric_figure(run: Run) -> Figure | None:
    """Policy entropy (left) and response length (right) per role."""
    if run.n_steps == 0:
        return None
    fig, axes = _fig(ncols=2)
    steps, colors, drawn = run.steps, member_colors(run), False
    for ax, key, title in (
        (axes[0, 0], "entropy", "policy entropy (nats/token)"),
        (axes[0, 1], "response_len", "response length (tokens)"),
    ):
        for m in run.members:
            _plot_line(ax, steps, run.member_series(m, key), color=colors[m], linewidth=0.6, alpha=0.3)
        for role in run.roles:
            drawn |= _plot_line(
                ax,
                steps,
                smooth(run.role_series(role, key), _window(run)),
                color=ROLE_COLOR[role],
                linewidth=2.2,
                label=ROLE_LABEL[role],
            )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        _single_point_xlim(ax, steps)
        _legend(ax, loc="best")
    return fig if drawn else None


def ratings_figure(run: Run) -> Figure | None:
    """TrueSkill mu (line) and mu ± sigma (band) per member; evolution events as labelled dotted lines."""
    hist = rating_history(run)
    if not hist:
        return None
    fig, axes = _fig(size=(9.0, 3.8), ncols=2, sharey=True)
    steps, colors = run.steps, member_colors(run)
    for ax, role in zip(axes.flat, ("teacher", "student"), strict=True):
        mids = [m for m in hist if run.role_of(m) == role]
        many = len(mids) > MANY
        events = [e for e in run.events_of("evolution") if e.get("role") == role]
        for m in mids:
            mu, sigma = hist[m]
            _plot_line(
                ax, steps, mu, color=colors[m], linewidth=1.4 if many else 1.8, label=None if many else m
            )
            ax.fill_between(
                steps, mu - sigma, mu + sigma, color=colors[m], alpha=0.05 if many else 0.08, linewidth=0
            )
            if many and np.isfinite(mu[-1]):  # with many members, name only the survivors, at the right edge
                ax.annotate(
                    m,
                    xy=(steps[-1], mu[-1]),
                    xytext=(3, 0),
                    textcoords="offset points",
                    fontsize=7,
                    color=colors[m],
                    va="center",
                )
        ax.axhline(25.0, color="#adb5bd", linewidth=0.8, linestyle="--")
        for e in events:
            ax.axvline(e["step"], color="#868e96", linestyle=":", linewidth=0.8 if many else 1.0, zorder=0)
            child, cmu = e.get("child"), e.get("child_mu")
            if isinstance(cmu, int | float):
                # the child's birth rating, joined to its first logged rating
                col = colors.get(child, "#495057")
                ax.plot([e["step"]], [cmu], marker="*", markersize=7 if many else 9, color=col, zorder=3)
                mu_c = hist.get(child, (np.full(steps.size, np.nan),))[0]
                later = np.flatnonzero((steps > e["step"]) & np.isfinite(mu_c))
                if later.size:
                    ax.plot(
                        [e["step"], steps[later[0]]],
                        [cmu, mu_c[later[0]]],
                        color=col,
                        linewidth=1.0,
                        linestyle="--",
                    )
            if len(events) <= 12:  # beyond that the labels overlap; the stars still mark every birth
                ax.annotate(
                    f"{e.get('operator', '?')}→{e.get('child', '?')}",
                    xy=(e["step"], 1.0),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    color="#495057",
                    rotation=90,
                    ha="right",
                    va="top",
                )
        ax.set_title(f"{role}s: TrueSkill μ (band: μ ± σ; ★ child at birth)", fontsize=10)
        ax.set_xlabel("step")
        _single_point_xlim(ax, steps)
        _legend(ax, loc="lower left", ncol=4)
    axes[0, 0].set_ylabel("μ")
    return fig


def matchup_figure(run: Run) -> Figure | None:
    """Student-by-teacher solve-rate heatmap, annotated with the rate and the number of problems."""
    students, teachers, mat, cnt = matchup_matrix(run)
    if not students:
        return None
    w = min(9.0, 2.2 + 0.75 * len(teachers))
    h = min(6.0, 1.4 + 0.42 * len(students))
    fig, axes = _fig(size=(max(4.2, w), max(2.4, h)))
    ax = axes[0, 0]
    ax.grid(False)
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="RdYlBu", vmin=0, vmax=1, aspect="auto")
    fs = 8 if len(teachers) <= 16 and len(students) <= 16 else 6
    ax.set_xticks(range(len(teachers)), teachers, fontsize=fs, rotation=90 if len(teachers) > 16 else 0)
    ax.set_yticks(range(len(students)), students, fontsize=fs)
    ax.set_xlabel("teacher")
    ax.set_ylabel("student")
    annotate = len(students) <= 10 and len(teachers) <= 10
    for i in range(len(students) if annotate else 0):
        for j in range(len(teachers)):
            if cnt[i, j]:
                ax.text(
                    j,
                    i,
                    f"{mat[i, j]:.2f}\n({cnt[i, j]})",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="#212529",
                )
    fig.colorbar(im, ax=ax, label="solve rate", shrink=0.9)
    return fig


RESULT_COLOR = {"win": "#2b8a3e", "draw": "#adb5bd", "loss": "#c92a2a"}


def games_figure(run: Run) -> Figure | None:
    """Left: each role's cumulative wins, draws and losses over steps. Right: each member's totals (stacked)."""
    steps, by_role = role_games(run)
    totals = member_games(run)
    if not by_role or not totals:
        return None
    fig, axes = _fig(ncols=2, width_ratios=[3, 2])
    ax = axes[0, 0]
    # One game per matchup, zero-sum: a teacher's win is its student's loss, so three lines tell it all (six
    # would draw each one twice, on top of each other).
    if "teacher" in by_role:
        t = by_role["teacher"]
        lines = {"teachers won": t["win"], "drawn": t["draw"], "students won": t["loss"]}
    else:
        s_ = by_role["student"]
        lines = {"teachers won": s_["loss"], "drawn": s_["draw"], "students won": s_["win"]}
    colors = {
        "teachers won": ROLE_COLOR["teacher"],
        "drawn": RESULT_COLOR["draw"],
        "students won": ROLE_COLOR["student"],
    }
    for label, counts in lines.items():
        _plot_line(ax, steps, counts, color=colors[label], label=label)
    ax.set_title("cumulative games (one per matchup)", fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel("games")
    _single_point_xlim(ax, steps)
    _legend(ax, loc="upper left", ncol=2)
    ax = axes[0, 1]
    mids = [m for m in run.members if m in totals] + sorted(m for m in totals if m not in run.members)
    left = np.zeros(len(mids))
    for k in RESULTS:
        vals = np.array([totals[m][k] for m in mids], dtype=float)
        ax.barh(mids, vals, left=left, color=RESULT_COLOR[k], label=k)
        left += vals
    ax.invert_yaxis()
    ax.set_title("games per member", fontsize=10)
    ax.tick_params(axis="y", labelsize=7 if len(mids) > 16 else 8)
    _legend(ax, loc="lower right", ncol=3)
    return fig


def evolution_figure(run: Run) -> Figure | None:
    """Left: children per operator. Right: each child's reward minus its parents' level, vs steps since birth."""
    usage = operator_usage(run)
    if not usage:
        return None
    recs = child_recovery(run)
    fig, axes = _fig(ncols=2, width_ratios=[1, 2])
    ax = axes[0, 0]
    ops = sorted(usage)
    bars = ax.bar(
        ops, [usage[o] for o in ops], color=["#1c7ed6" if o.startswith("X") else "#d9480f" for o in ops]
    )
    for bar, op in zip(
        bars, ops, strict=True
    ):  # median recovery (steps) of the operator's recovered children
        done = [r.steps for r in recs if r.operator == op and r.steps is not None]
        if done:
            ax.annotate(
                f"{np.median(done):.0f}",
                xy=(bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                color="#495057",
            )
    ax.set_title("children per operator\n(number on bar: median steps to recover)", fontsize=9)
    ax.set_ylabel("children")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.tick_params(axis="x", labelsize=8)
    ax = axes[0, 1]
    steps = run.steps
    colors = member_colors(run)
    scored = [r for r in recs if r.parent_level is not None]
    many = len(scored) > MANY
    horizon = 0
    curves = []
    for r in scored:
        after = steps > r.born_step
        y = smooth(run.member_series(r.child, "reward")[after] - r.parent_level, 3)
        x = steps[after] - r.born_step
        if many:
            keep = x <= 30  # recovery happens early; the tail of a long-lived child only adds clutter
            x, y = x[keep], y[keep]
            curves.append((x, y))
        if np.isfinite(y).any():
            horizon = max(horizon, int(x[np.isfinite(y)].max()))
        _plot_line(
            ax,
            x,
            y,
            color=colors.get(r.child, "#495057"),
            linewidth=0.8 if many else 1.4,
            alpha=0.35 if many else 1.0,
            label=None if many else f"{r.child} ({r.operator})",
        )
    if many and horizon:
        grid = np.arange(1, horizon + 1)
        stack = np.full((len(curves), grid.size), np.nan)
        for i, (x, y) in enumerate(curves):
            idx = np.searchsorted(grid, x)
            ok = (idx < grid.size) & (grid[np.minimum(idx, grid.size - 1)] == x)
            stack[i, idx[ok]] = y[ok]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmedian(stack, axis=0)
        _plot_line(ax, grid, mean, color="#212529", linewidth=2.4, label=f"median of {len(scored)} children")
    ax.axhline(0.0, color="#212529", linewidth=1.0, linestyle="--")
    ax.set_title("child reward − parents' level at birth (smoothed)", fontsize=10)
    ax.set_xlabel("steps since birth")
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend(ax, loc="best", ncol=1 if many else 3)
    return fig


def complexity_figure(run: Run) -> Figure | None:
    """The four structural metrics of valid proposer programs: mean per step and ± std band."""
    curves = complexity_curves(run)
    if not curves or not any(np.isfinite(c[1]).any() for c in curves.values()):
        return None
    fig, axes = _fig(size=(9.0, 4.6), ncols=2, nrows=2)
    color = ROLE_COLOR[proposer_roles(run)[0]]
    colors = member_colors(run)
    proposers = run.members_with_role(*proposer_roles(run))
    for ax, f in zip(axes.flat, FEATURES, strict=True):
        st, mean, std = curves[f]
        ax.fill_between(st, mean - std, mean + std, color=color, alpha=0.10, linewidth=0)
        if len(proposers) > 1:  # each teacher's own mean (metrics.jsonl), faint
            for m in proposers:
                _plot_line(
                    ax,
                    run.steps,
                    run.member_series(m, ["complexity", f, "mean"]),
                    color=colors[m],
                    linewidth=0.7,
                    alpha=0.45,
                    label=m if f == FEATURES[0] and len(proposers) <= MANY else None,
                )
        _plot_line(
            ax,
            st,
            smooth(mean, _window(run)),
            color=color,
            linewidth=2.4,
            label="all teachers (smoothed)" if f == FEATURES[0] and len(proposers) > 1 else None,
        )
        ax.set_title(FEATURE_LABELS[f], fontsize=10)
        _single_point_xlim(ax, np.asarray(st))
    for ax in axes[1]:
        ax.set_xlabel("step")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, labels, loc="outside lower center", ncol=min(8, len(labels)), frameon=False, fontsize=8
        )
    return fig


def coverage_figure(run: Run) -> Figure | None:
    """Cumulative CVT coverage (% of 4096 cells) over steps; None while no cell is filled."""
    steps, cov, cells = coverage_curve(run)
    if not np.isfinite(cov).any() or not np.nanmax(cov) > 0:
        return None
    fig, axes = _fig(size=(9.0, 3.0))
    ax = axes[0, 0]
    color = ROLE_COLOR[proposer_roles(run)[0]]
    _plot_line(ax, steps, 100 * cov, color=color, linewidth=2.2, label=run.label)
    ax.fill_between(steps, 0, 100 * np.nan_to_num(cov), color=color, alpha=0.1, linewidth=0)
    _mark_evolution(ax, run)
    ax.set_ylabel("cells filled (%)")
    ax.set_xlabel("step")
    ax.set_ylim(bottom=0)
    n_cells = 4096
    sec = ax.secondary_yaxis("right", functions=(lambda p: p * n_cells / 100, lambda c: c * 100 / n_cells))
    sec.set_ylabel("cells")
    _single_point_xlim(ax, steps)
    _legend(ax, loc="lower right")
    return fig


def phase_time_figure(run: Run) -> Figure | None:
    """Seconds per step spent in each phase (stacked)."""
    phases: list[str] = []
    for rec in run.metrics:
        for p in rec.get("phase_s") or {}:
            if p not in phases:
                phases.append(p)
    if not phases:
        return None
    data = np.vstack([np.nan_to_num(run.series(["phase_s", p])) for p in phases])
    if not data.any():
        return None
    fig, axes = _fig(size=(9.0, 3.0))
    ax = axes[0, 0]
    cmap = ["#4263eb", "#d9480f", "#fab005", "#1c7ed6", "#40c057", "#ae3ec9", "#868e96", "#212529"]
    steps = run.steps
    if steps.size <= 60:  # one bar per step: the phases of a step are discrete, not a continuum
        bottom = np.zeros(steps.size)
        for i, p in enumerate(phases):
            ax.bar(steps, data[i], bottom=bottom, color=cmap[i % len(cmap)], label=p, width=0.8)
            bottom += data[i]
    else:
        ax.stackplot(
            steps, data, labels=phases, colors=[cmap[i % len(cmap)] for i in range(len(phases))], alpha=0.85
        )
    ax.set_ylabel("seconds")
    ax.set_xlabel("step")
    _single_point_xlim(ax, steps)
    ax.legend(frameon=False, fontsize=8, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.25))
    return fig


def probe_figure(run: Run, which: str = "probe") -> Figure | None:
    """Fixed-probe accuracy per role (rows) and task type (columns): mean member (line), best and worst
    member (band edges) at every probed step, step 0 being the base model before any update.
    `which="probe_valid"`: the teachers' valid-proposal rate on the fixed teacher prompts; `"probe_sampled"`:
    the members' sampled pass@1 (diagnostics.probe_samples)."""
    curves = probe_by_role(run, which)
    if not curves:
        return None
    roles = [r for r in ("teacher", "student", "single") if r in curves]
    keys = ("all", *TASKS)
    fig, axes = _fig(size=(9.0, 2.6 * len(roles) + 0.4), ncols=len(keys), nrows=len(roles), sharey=True)
    tops = [np.nanmax(c.best) for r in roles for c in curves[r].values() if np.isfinite(c.best).any()]
    top = max(0.2, 1.15 * max(tops, default=0.0))
    for row, role in zip(axes, roles, strict=True):
        for ax, key in zip(row, keys, strict=True):
            c = curves[role][key]
            color = ROLE_COLOR[role]
            ax.fill_between(c.steps, c.worst, c.best, color=color, alpha=0.15, linewidth=0)
            _plot_line(ax, c.steps, c.best, color=color, linewidth=1.0, linestyle="--", label="best member")
            _plot_line(ax, c.steps, c.mean, color=color, linewidth=2.2, marker="o", ms=3, label="mean")
            _plot_line(ax, c.steps, c.worst, color=color, linewidth=1.0, linestyle=":", label="worst member")
            _mark_evolution(ax, run, label=False)
            ax.set_title(f"{ROLE_LABEL[role]}: {key}", fontsize=9)
            ax.set_ylim(-0.02, min(1.02, top))
            _single_point_xlim(ax, c.steps)
        row[0].set_ylabel(
            {"probe_valid": "valid proposals", "probe_sampled": "sampled pass@1"}.get(which, "probe accuracy")
        )
    for ax in axes[-1]:
        ax.set_xlabel("step")
    _legend(axes[0, 0], loc="best")
    return fig


def flaws_figure(run: Run) -> Figure | None:
    """The misconception probe of the solvers per task type (columns): each planted class's greedy right rate
    (solid) and misconceived rate (dotted, same colour), mean over the solver members, step 0 being the base."""
    right, wrong = flaw_curves(run, "right"), flaw_curves(run, "misconceived")
    if not right:
        return None
    tasks = [t for t in ("code_o", "code_i") if t in right]
    fig, axes = _fig(size=(9.0, 3.4), ncols=len(tasks), sharey=True)
    classes = sorted({c for t in tasks for c in right[t]})
    colors = {c: RUN_COLORS[i % len(RUN_COLORS)] for i, c in enumerate(classes)}
    for ax, task in zip(axes[0], tasks, strict=True):
        for c, (steps, y) in right[task].items():
            _plot_line(ax, steps, y, color=colors[c], linewidth=2.0, marker="o", ms=3, label=c)
            _plot_line(ax, steps, wrong[task][c][1], color=colors[c], linewidth=1.0, linestyle=":")
            _single_point_xlim(ax, steps)
        _mark_evolution(ax, run, label=False)
        ax.axhline(0.5, color="0.6", linewidth=0.8, linestyle="--")  # a class counts as repaired above this
        ax.set_title(f"solvers: {task}", fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("greedy right (solid) / misconceived (dotted)")
    _legend(axes[0, -1], loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
