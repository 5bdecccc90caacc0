"""`populora experiment learning`: does a preset visibly learn? Seeds of one preset, and its numbers with CIs.

For each seed (OUT/runs/seed<S>/, resumable): the students' mean probe accuracy (mean over members and the
three task types) at step 0 and at the last probe; the teachers' valid-proposal rate on the fixed teacher
prompts (`probe_valid`, train/probe.py) at the same two probes; and, for comparison, the valid rate logged
every step (prompts from the run's own buffers) in the first and last quarter of the steps. Over the seeds:
each mean change and its 95% Student-t confidence interval (a paired comparison: each seed's end minus its
own start). Writes OUT/learning.json (and `--json` elsewhere,
e.g. bench/results/learning.json) and a figure of every seed's curves (OUT/learning.png, or `--figure`).

The intervals that decide a claim are under `intervals` (experiment/contrasts.py): the mean and best solver's
probe change with a bootstrap over seeds and probe items together. `--control shuffled` also runs every seed
with the students' rewards permuted within each step (`rl.student_rewards=shuffled`, into
OUT/runs/shuffled/seed<S>/) and reports the real minus the shuffled change, paired by seed: the part of the
gain that follows the reward.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from populora.experiment.measures import as_array
from populora.experiment.runs import RunSpec, run_all
from populora.names import TASKS

CONTROLS: dict[str, list[str]] = {"shuffled": ["rl.student_rewards=shuffled"]}


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
    proposer = _proposer_role(run)
    valid_probe = m["probe_valid"].get(proposer, {})
    valid_curve = m["curves"]["probe_valid"].get(proposer, {}).get("all", {})
    return {
        "path": str(run_dir),
        "steps": run.n_steps,
        "step_s": m["step_s"],
        "student_probe": {
            **probe,
            "per_task": {t: m["probe"][_solver_role(run)][t]["mean"] for t in ("code_i", "code_o", "code_f")},
        },
        "teacher_probe": m["probe"].get(_proposer_role(run), {}).get("all", {}).get("mean"),
        "teacher_valid_probe": {
            **valid_probe.get("all", {}).get("mean", {"start": None, "end": None, "change": None}),
            "per_task": {
                t: valid_probe[t]["mean"] for t in ("code_i", "code_o", "code_f") if t in valid_probe
            },
        },
        "teacher_valid_rate": {"start": start, "end": end, "change": None if start is None else end - start},
        "curves": {
            "probe_steps": m["curves"]["probe"][_solver_role(run)]["all"]["steps"],
            "student_probe_mean": m["curves"]["probe"][_solver_role(run)]["all"]["mean"],
            "student_probe_best": m["curves"]["probe"][_solver_role(run)]["all"]["best"],
            "student_probe_worst": m["curves"]["probe"][_solver_role(run)]["all"]["worst"],
            "steps": [int(s) for s in run.steps],
            "teacher_valid_probe_mean": valid_curve.get("mean", []),
            "teacher_valid_rate": as_list(vr),
            "student_solve_rate": m["curves"]["solve_rate"]["all"],
        },
    }


def learning_figure(seeds: dict[int, dict], path: Path) -> Path:
    """Every seed's curves with the seed mean: the students' probe, the teachers' validity probe (fixed
    prompts) and the teachers' per-step valid-proposal rate (the run's own prompts, smoothed)."""
    from populora.diagnostics.dynamics import smooth
    from populora.report import plots

    fig, axes = plots._fig(size=(13.0, 3.4), ncols=3)
    ax1, ax2, ax3 = axes[0]
    panels: list[tuple] = [
        (ax1, "probe_steps", "student_probe_mean", False),
        (ax2, "probe_steps", "teacher_valid_probe_mean", False),
        (ax3, "steps", "teacher_valid_rate", True),
    ]
    for ax, xkey, ykey, smoothed in panels:
        ys = []
        for i, (seed, d) in enumerate(sorted(seeds.items())):
            c = d["curves"]
            y = 100 * as_array(c.get(ykey, []))
            if y.size == 0:
                continue
            ax.plot(
                c[xkey],
                smooth(y, 5) if smoothed else y,
                color=plots.RUN_COLORS[i % len(plots.RUN_COLORS)],
                linewidth=1.0,
                marker=None if smoothed else "o",
                ms=3,
                alpha=0.7,
                label=f"seed {seed}",
            )
            ys.append(y)
        if ys and all(len(y) == len(ys[0]) for y in ys):
            mean = np.nanmean(ys, axis=0)
            ax.plot(
                seeds[min(seeds)]["curves"][xkey],
                smooth(mean, 5) if smoothed else mean,
                color="#212529",
                linewidth=2.4,
                label="mean over seeds",
            )
        ax.set_xlabel("step")
    ax1.set_title("students: mean probe accuracy (%, held-out, greedy)", fontsize=10)
    ax2.set_title("teachers: valid proposals (%, fixed prompts)", fontsize=10)
    ax3.set_title("teachers: valid proposals (%, own prompts, window 5)", fontsize=10)
    plots._legend(ax1, loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=plots.DPI)
    return path


def game_shares(run_dirs: list[Path]) -> dict:
    """{role: {"win", "draw", "loss": count, "games": n, "win_share": w / n, ...}} summed over the runs' rated
    games (metrics.jsonl `games`); {} for runs without games (single mode, older runs)."""
    from populora.diagnostics.run import load_run
    from populora.report.games import RESULTS, role_games

    totals: dict[str, dict[str, int]] = {}
    for d in run_dirs:
        _, by_role = role_games(load_run(d))
        for role, counts in by_role.items():
            t = totals.setdefault(role, dict.fromkeys(RESULTS, 0))
            for k in RESULTS:
                t[k] += int(counts[k][-1]) if len(counts[k]) else 0
    out = {}
    for role, t in totals.items():
        n = sum(t.values())
        out[role] = {**t, "games": n, **{f"{k}_share": (t[k] / n if n else None) for k in RESULTS}}
    return out


def run_learning(
    out: Path,
    preset: str = "tiny-learn",
    seeds: int = 3,
    overrides: list[str] | tuple = (),
    json_out: Path | None = None,
    figure: Path | None = None,
    log: Callable[[str], None] = print,
    control: str | None = None,
    quick: bool = False,
) -> dict:
    from populora.experiment.ablation import QUICK
    from populora.experiment.contrasts import contrasts
    from populora.experiment.measures import mean_ci

    if control is not None and control not in CONTROLS:
        from populora.config import ConfigError

        raise ConfigError(f"--control {control!r}: unknown control; use one of {', '.join(CONTROLS)}.")
    out = Path(out)
    overrides = [*(QUICK if quick else []), *overrides]
    specs = [
        RunSpec(f"seed {s}", preset, [*overrides, f"train.seed={s}"], out / "runs" / f"seed{s}", {"seed": s})
        for s in range(seeds)
    ]
    controls = [
        RunSpec(
            f"{control} seed {s}",
            preset,
            [*overrides, *CONTROLS[control], f"train.seed={s}"],
            out / "runs" / control / f"seed{s}",
            {"seed": s},
        )
        for s in range(seeds)
        if control
    ]
    t0 = time.time()
    seconds = run_all(specs + controls, log=log)
    per_seed = {s.meta["seed"]: seed_numbers(s.path) for s in specs}
    dirs = {"real": [s.path for s in specs]}
    if control:
        dirs[control] = [s.path for s in controls]
    seed_lists = dict.fromkeys(dirs, list(range(seeds)))
    pairs = [("real", control)] if control else []
    intervals = contrasts(dirs, seed_lists, pairs)
    # The same changes with code_o's answer style forced (the probe's `probe_style`): a gain that survives
    # with the style held fixed is skill, one that vanishes was the switch of style.
    style_fixed = {style: contrasts(dirs, seed_lists, pairs, answers=style) for style in ("trace", "bare")}
    per_task = {t: contrasts(dirs, seed_lists, pairs, task=t) for t in TASKS}
    # The sampled probe (diagnostics.probe_samples), when the runs logged it: each item's sampled pass@1, what
    # RL sharpens before the greedy answer moves.
    sampled = contrasts(dirs, seed_lists, pairs, answers="sampled")
    sampled = (
        {"all": sampled, **{t: contrasts(dirs, seed_lists, pairs, answers="sampled", task=t) for t in TASKS}}
        if sampled["arms"]
        else None
    )
    result = {
        "kind": "learning",
        "preset": preset,
        "overrides": list(overrides),
        "seeds": sorted(per_seed),
        "question": "students' mean probe accuracy at the end minus step 0 (paired per seed); teachers' "
        "valid-proposal rate on the fixed teacher prompts (probe_valid), end minus step 0; teachers' valid rate "
        "on the run's own prompts, last quarter of the steps minus first quarter",
        "student_probe_change": mean_ci([d["student_probe"]["change"] for d in per_seed.values()]),
        "student_probe_start": mean_ci([d["student_probe"]["start"] for d in per_seed.values()]),
        "student_probe_end": mean_ci([d["student_probe"]["end"] for d in per_seed.values()]),
        "teacher_valid_probe_change": mean_ci(
            [d["teacher_valid_probe"]["change"] for d in per_seed.values()]
        ),
        "teacher_valid_probe_start": mean_ci([d["teacher_valid_probe"]["start"] for d in per_seed.values()]),
        "teacher_valid_rate_change": mean_ci([d["teacher_valid_rate"]["change"] for d in per_seed.values()]),
        "intervals": intervals,
        "style_fixed": style_fixed,
        "per_task": per_task,
        "sampled": sampled,
        "games": {arm: game_shares(paths) for arm, paths in dirs.items()},
        "control": control,
        "quick": quick,
        "per_seed": {str(k): v for k, v in per_seed.items()},
        "run_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "command_seconds": round(time.time() - t0, 1),
        "load_average": os.getloadavg()[0],
    }
    if control:
        result["control_per_seed"] = {str(s.meta["seed"]): seed_numbers(s.path) for s in controls}
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
