"""The numbers `experiment learning` and `experiment ablation` report about arms, with their intervals.

For every arm: the solvers' mean probe change and the best solver's, each with the crossed seeds x items
bootstrap of stats.py. For every contrast asked (`(a, b)`: arm a minus arm b): the difference of the mean
change, paired by seed when both arms ran the same seeds; and when b is the single agent, a's best member
against the best of as many single-agent seeds (never against the single mean). Each entry says what it
resampled (`resampled`: "seeds and items" when every run logged per-item probe results, else "seeds") and its
sample sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from populora.experiment import stats
from populora.experiment.probe_data import arm_changes


def arm_summary(arr) -> dict:
    return {
        "mean_change": stats.bootstrap(arr, stats.mean_stat),
        "best_change": stats.bootstrap(arr, stats.best_stat),
        "members": int(arr.shape[1]),
    }


def contrasts(
    dirs: dict[str, list[Path]],
    seeds: dict[str, list[int]],
    pairs: Sequence[tuple[str, str]],
    single: str | None = None,
    answers: str = "free",
    task: str | None = None,
    level: int | None = None,
) -> dict:
    """`{"arms": {arm: summary}, "differences": {"a - b": interval}, "best_vs_single": {arm: ...}, "source"}`.

    `seeds[arm]` are the seeds the arm ran (pairing needs the same list); `single` names the single-agent
    arm, against which every population arm's best member is also compared. Arms without a probe at step 0
    and later are left out (with a note under "missing"). `answers`: "free" (the greedy answers) or a forced
    answer style ("trace", "bare": code_o's items with that opening forced, so style and skill are apart);
    `task` keeps one task type's items (a gain on one type can hide behind a loss on another); `level` the
    graded probe's items of one difficulty level (per-item runs only)."""
    arrays, sources, missing = {}, set(), []
    for arm, run_dirs in dirs.items():
        arr, source = arm_changes(run_dirs, answers, task, level)
        if arr is None:
            missing.append(arm)
            continue
        arrays[arm], _ = arr, sources.add(source)
    if len(sources) > 1 and answers == "free":  # an arm with items, one without: compare per task
        from populora.experiment.probe_data import arm_array, per_task_fallback

        arrays = {a: arm_array(per_task_fallback(dirs[a], task)) for a in arrays}
        sources = {"tasks"}
    out: dict = {
        "source": "per item" if sources == {"items"} else "per task (per-item probe results not logged)",
        "arms": {a: arm_summary(x) for a, x in arrays.items()},
        "differences": {},
        "best_vs_single": {},
        "missing": missing,
    }
    for a, b in pairs:
        if a not in arrays or b not in arrays or arrays[a].shape[2] != arrays[b].shape[2]:
            continue
        paired = seeds[a] == seeds[b]
        out["differences"][f"{a} - {b}"] = stats.difference(arrays[a], arrays[b], paired=paired)
    if single in arrays:
        for a, x in arrays.items():
            if a != single and x.shape[2] == arrays[single].shape[2]:
                out["best_vs_single"][a] = stats.best_vs_single(x, arrays[single])
    return out


def fmt(ci: dict | None, k: float = 100.0) -> str:
    """`+4.48 [+1.2, +7.6]` in points; `-` when missing."""
    if not ci or ci.get("mean") is None:
        return "-"
    if ci.get("lo") is None:
        return f"{k * ci['mean']:+.2f}"
    return f"{k * ci['mean']:+.2f} [{k * ci['lo']:+.2f}, {k * ci['hi']:+.2f}]"


__all__ = ["arm_summary", "contrasts", "fmt"]
