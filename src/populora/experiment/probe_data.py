"""One run's probe change as the array the statistics resample (experiment/stats.py): `[member, item]`.

Two sources, the finer one first:

- per item: `RUN_DIR/probe_items.jsonl` (one line per probe, written by the trainer's probe; read record by
  record with `Run.probe_items`, `{"step", "member", "task", "item", "correct", ...}`). The change of member m on item i is
  its correctness at the last probe minus the mean correctness of the step-0 members on that item (at step 0
  every member is the base model, and evolution may have replaced the members that were probed then);
- per task (every run with a probe): metrics.jsonl `probe`, `{member: {task: accuracy}}`. The item axis then
  has one entry, the member's mean over the task types minus the step-0 mean, and the bootstrap can only
  resample seeds (stats.py says which it did in `resampled`).

Members are the run's solvers (`student`, or the single agent `single`) alive at the last probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from populora.names import TASKS

ITEMS_FILE = "probe_items.jsonl"


@dataclass
class ProbeChange:
    """`values[member, item]`: a run's probe change; `items` names the item axis (`task/item` or `tasks`)."""

    members: list[str]
    items: list[str]
    values: np.ndarray
    source: str  # "items" or "tasks"


def solver_members(run, members) -> list[str]:
    return [m for m in members if run.role_of(m) in ("student", "single")]


def _from_items(
    run, answers: str = "free", task: str | None = None, level: int | None = None
) -> ProbeChange | None:
    """Per item from the run's probe_items.jsonl; `answers`: "free" (the greedy answers), "trace"/"bare"
    (code_o with that answer style forced: the skill with the style held fixed, tasks with two styles only) or
    "sampled" (each item's sampled pass@1, `diagnostics.probe_samples`: a share in [0, 1], not a 0/1);
    `level`: the graded probe's items of that difficulty level only."""
    rows = [
        (int(r["step"]), str(r["member"]), f"{r['task']}/{r['item']}", float(r["correct"]))
        for r in run.probe_items(answers)
        if (task is None or r["task"] == task) and (level is None or r.get("level") == level)
    ]
    steps = sorted({s for s, *_ in rows})
    if len(steps) < 2 or steps[0] != 0:
        return None
    end = steps[-1]
    start: dict[str, list[float]] = {}
    last: dict[tuple[str, str], float] = {}
    for s, m, item, ok in rows:
        if s == 0:
            start.setdefault(item, []).append(ok)
        elif s == end:
            last[(m, item)] = ok
    items = sorted(start)
    members = solver_members(run, sorted({m for m, _ in last}))
    if not members or not items or any((m, i) not in last for m in members for i in items):
        return None  # the last probe did not score every solver on every item: fall back to the tasks
    base = np.array([np.mean(start[i]) for i in items])
    values = np.array([[last[(m, i)] for i in items] for m in members]) - base[None, :]
    return ProbeChange(members, items, values, "items")


def _from_tasks(run, task: str | None = None) -> ProbeChange | None:
    probes = [p for p in run.probes if p.get("probe")]
    if len(probes) < 2 or int(probes[0]["step"]) != 0:
        return None

    def member_mean(acc: dict) -> float | None:
        vals = [acc[t] for t in TASKS if acc.get(t) is not None and task in (None, t)]
        return float(np.mean(vals)) if vals else None

    start = [v for v in (member_mean(a) for a in probes[0]["probe"].values()) if v is not None]
    end = {m: member_mean(a) for m, a in probes[-1]["probe"].items()}
    members = [m for m in solver_members(run, sorted(end)) if end[m] is not None]
    if not start or not members:
        return None
    base = float(np.mean(start))
    values = np.array([[end[m] - base] for m in members])
    return ProbeChange(members, [task or "tasks"], values, "tasks")


def probe_change(
    run_dir: Path, answers: str = "free", task: str | None = None, level: int | None = None
) -> ProbeChange | None:
    """The run's solvers' probe change per item (or per run when only per-task accuracy is logged); None
    when the run has no probe at step 0 and at a later step. `answers` other than "free" (a forced answer
    style) has no per-task fallback: None without per-item verdicts. `task` keeps that task type's items
    only; `level` the graded probe's items of that level (per item only: no per-task fallback either)."""
    from populora.diagnostics.run import load_run

    run = load_run(run_dir)
    found = _from_items(run, answers, task, level) if (Path(run_dir) / ITEMS_FILE).is_file() else None
    if answers != "free" or level is not None:
        return found
    return found or _from_tasks(run, task)


def arm_array(changes: list[ProbeChange | None]) -> np.ndarray | None:
    """Stack the seeds of one arm into `[seed, member, item]`; None when a seed has no probe. Seeds logged
    per item and per task are not mixed: all fall back to per task then (the item axes would differ)."""
    if not changes or any(c is None for c in changes):
        return None
    if len({tuple(c.items) for c in changes}) > 1 or len({len(c.members) for c in changes}) > 1:
        return None  # not the same probe items, or not the same number of solvers
    return np.stack([c.values for c in changes])


def per_task_fallback(run_dirs: list[Path], task: str | None = None) -> list[ProbeChange | None]:
    """Every seed read per task (what `arm_array` needs when some seeds log items and others do not)."""
    from populora.diagnostics.run import load_run

    return [_from_tasks(load_run(d), task) for d in run_dirs]


def arm_changes(
    run_dirs: list[Path], answers: str = "free", task: str | None = None, level: int | None = None
) -> tuple[np.ndarray | None, str]:
    """`([seed, member, item] array or None, source)` for the runs of one arm, per item when every seed has
    items on the same probe, else per task (for free answers; a forced style or a level has no per-task
    fallback)."""
    changes = [probe_change(d, answers, task, level) for d in run_dirs]
    arr = arm_array(changes)
    if arr is not None:
        return arr, changes[0].source
    if answers != "free" or level is not None:
        return None, "none"
    changes = per_task_fallback(run_dirs, task)
    arr = arm_array(changes)
    return arr, "tasks"


__all__ = ["ITEMS_FILE", "ProbeChange", "arm_array", "arm_changes", "probe_change"]
