"""`populora experiment learning`: does a preset visibly learn? Seeds of one preset, and two numbers with CIs.

For each seed (OUT/runs/seed<S>/, resumable): the students' mean probe accuracy (mean over members and the
three task types) at step 0 and at the last probe, and the teachers' valid-proposal rate in the first and
last quarter of the steps. Over the seeds: the mean change and its 95% Student-t confidence interval (a
paired comparison: each seed's end minus its own start). Writes OUT/learning.json (and `--json` elsewhere,
e.g. bench/results/learning.json) and a figure of every seed's curves (OUT/learning.png, or `--figure`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from populora.experiment.runs import RunSpec, run_all


def _solver_role(run) -> str:
    return "single" if run.mode == "single" else "student"


def _proposer_role(run) -> str:
    return "single" if run.mode == "single" else "teacher"


def seed_numbers(run_dir: Path) -> dict:
    """One seed's learning numbers and curves, read through populora.diagnostics."""
    from populora.diagnostics.dynamics import proposer_roles
    from populora.diagnostics.run import load_run
    from populora.experiment.measures import as_list, edge_means, run_measures

    run = load_run(run_dir)
    m = run_measures(run)
    probe = m["probe"][_solver_role(run)]["all"]["mean"]
    vr = run.role_series(proposer_roles(run), "valid_rate")
    start, end = edge_means(vr)
    return {
        "path": str(run_dir),
        "steps": run.n_steps,
        "step_s": m["step_s"],
        "student_probe": {
            **probe,
            "per_task": {t: m["probe"][_solver_role(run)][t]["mean"] for t in ("code_i", "code_o", "code_f")},
        },
        "teacher_probe": m["probe"].get(_proposer_role(run), {}).get("all", {}).get("mean"),
        "teacher_valid_rate": {"start": start, "end": end, "change": None if start is None else end - start},
        "curves": {
            "probe_steps": m["curves"]["probe"][_solver_role(run)]["all"]["steps"],
            "student_probe_mean": m["curves"]["probe"][_solver_role(run)]["all"]["mean"],
            "student_probe_best": m["curves"]["probe"][_solver_role(run)]["all"]["best"],
            "student_probe_worst": m["curves"]["probe"][_solver_role(run)]["all"]["worst"],
            "steps": [int(s) for s in run.steps],
            "teacher_valid_rate": as_list(vr),
            "student_solve_rate": m["curves"]["solve_rate"]["all"],
        },
    }


def learning_figure(seeds: dict[int, dict], path: Path) -> Path:
    """Every seed's student probe curve and teacher valid-rate curve, with the seed mean."""
    from populora.diagnostics.dynamics import smooth
    from populora.report import plots

    fig, axes = plots._fig(size=(9.0, 3.4), ncols=2)
    ax1, ax2 = axes[0]
    ys, vs = [], []
    for i, (seed, d) in enumerate(sorted(seeds.items())):
        c = d["curves"]
        color = plots.RUN_COLORS[i % len(plots.RUN_COLORS)]
        y = 100 * np.array([np.nan if v is None else v for v in c["student_probe_mean"]], float)
        v = np.array([np.nan if x is None else x for x in c["teacher_valid_rate"]], float)
        ax1.plot(
            c["probe_steps"], y, color=color, linewidth=1.0, marker="o", ms=3, alpha=0.7, label=f"seed {seed}"
        )
        ax2.plot(c["steps"], smooth(v, 5), color=color, linewidth=1.0, alpha=0.7, label=f"seed {seed}")
        ys.append(y)
        vs.append(v)
    if ys and all(len(y) == len(ys[0]) for y in ys):
        ax1.plot(
            seeds[min(seeds)]["curves"]["probe_steps"],
            np.nanmean(ys, axis=0),
            color="#212529",
            linewidth=2.4,
            label="mean over seeds",
        )
    if vs and all(len(v) == len(vs[0]) for v in vs):
        ax2.plot(
            seeds[min(seeds)]["curves"]["steps"],
            smooth(np.nanmean(vs, axis=0), 5),
            color="#212529",
            linewidth=2.4,
            label="mean over seeds",
        )
    ax1.set_title("students: mean probe accuracy (%, held-out, greedy)", fontsize=10)
    ax2.set_title("teachers: valid-proposal rate (smoothed, window 5)", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xlabel("step")
    plots._legend(ax1, loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=plots.DPI)
    return path


def run_learning(
    out: Path,
    preset: str = "tiny-learn",
    seeds: int = 3,
    overrides: list[str] | tuple = (),
    json_out: Path | None = None,
    figure: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    from populora.experiment.measures import mean_ci

    out = Path(out)
    specs = [
        RunSpec(f"seed {s}", preset, [*overrides, f"train.seed={s}"], out / "runs" / f"seed{s}", {"seed": s})
        for s in range(seeds)
    ]
    t0 = time.time()
    seconds = run_all(specs, log=log)
    per_seed = {s.meta["seed"]: seed_numbers(s.path) for s in specs}
    result = {
        "kind": "learning",
        "preset": preset,
        "overrides": list(overrides),
        "seeds": sorted(per_seed),
        "question": "students' mean probe accuracy at the end minus step 0 (paired per seed); teachers' "
        "valid-proposal rate, last quarter of the steps minus first quarter",
        "student_probe_change": mean_ci([d["student_probe"]["change"] for d in per_seed.values()]),
        "student_probe_start": mean_ci([d["student_probe"]["start"] for d in per_seed.values()]),
        "student_probe_end": mean_ci([d["student_probe"]["end"] for d in per_seed.values()]),
        "teacher_valid_rate_change": mean_ci([d["teacher_valid_rate"]["change"] for d in per_seed.values()]),
        "per_seed": {str(k): v for k, v in per_seed.items()},
        "run_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "command_seconds": round(time.time() - t0, 1),
        "load_average": os.getloadavg()[0],
    }
    ci = result["student_probe_change"]
    result["excludes_zero"] = bool(ci["lo"] is not None and (ci["lo"] > 0 or ci["hi"] < 0))
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) + "\n"
    (out / "learning.json").write_text(text)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(text)
    fig_path = learning_figure(per_seed, Path(figure) if figure else out / "learning.png")
    result["figure"] = str(fig_path)
    log(f"wrote {out / 'learning.json'}{' and ' + str(json_out) if json_out else ''}, figure {fig_path}")
    return result
