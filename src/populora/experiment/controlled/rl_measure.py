"""The held-out measure of `populora experiment control rl`, read as a reviewer would, and its summary.

What RL with verifiable rewards moves first is the sampled answer (sharpening): a right answer the model
already samples becomes more likely. So every measurement reads the same held-out probe items three ways:
greedy (the secondary number: it moves only once the right answer becomes the argmax) and sampled pass@1 at
each evaluation temperature (`samples` answers per item, one fixed evaluation seed, so an unchanged adapter
reads the same twice). The base model is also read at a sweep of temperatures: its best pass@1 is the
sharpening baseline (an update that only lowered the temperature would reach it, no more).

The summary compares arms run on the same problem stream and seeds: `real` rewards, `shuffled` rewards (the
control that breaks the cause) and `none` (no update: its held-out reading is the base's by construction; its
solve rate on the stream shows how much the stream's difficulty alone moves that number). Intervals are the
crossed seeds x items bootstrap of `experiment.stats`, in points; "all" pools the items of every task type.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from populora.experiment import stats
from populora.train.probe import probe_members
from populora.train.probe_sampled import sampled_solves

ARMS = ("real", "shuffled", "none")


# Seconds per unit of work, measured by this command's own runs on the shared 2-core machine at load 5-10
# (bench/results/learning_rl_control_*.json, 2026-12-07), per task type (code_o's traced answers and code_f's
# programs are several times longer than code_i's inputs): a rollout that is scored and trained on, one only
# scored (the no-update arm), one held-out answer (greedy or sampled).
TRAINED_ROLLOUT_S = {"code_i": 0.055, "code_o": 0.17, "code_f": 0.17}
SCORED_ROLLOUT_S = {"code_i": 0.02, "code_o": 0.06, "code_f": 0.06}
EVAL_ANSWER_S = {"code_i": 0.04, "code_o": 0.14, "code_f": 0.14}


def estimate_seconds(
    runs: Sequence[tuple[str, str]],
    steps: Mapping[str, int],
    per_type: int,
    rollouts: int,
    eval_answers_per_type: int,
    types: Sequence[str],
) -> float:
    """Seconds of `runs` ((mode, arm) pairs): each step's `per_type` problems of every type x `rollouts`, trained
    unless the arm is "none", and the held-out measure at the end (`eval_answers_per_type` answers per type; none
    for the no-update arm, whose reading is the base's)."""
    train = sum(TRAINED_ROLLOUT_S[t] for t in types) * per_type * rollouts
    scored = sum(SCORED_ROLLOUT_S[t] for t in types) * per_type * rollouts
    evaluate = sum(EVAL_ANSWER_S[t] for t in types) * eval_answers_per_type
    return sum(
        steps[mode] * (scored if arm == "none" else train) + (arm != "none") * evaluate for mode, arm in runs
    )


def temperature_key(t: float) -> str:
    return f"{t:g}"


def measure(engine, probe: Mapping[str, Sequence], sandbox, samples: int, temperatures, budget) -> dict:
    """`{"greedy": {task: [0/1 per item]}, "sampled": {T: {task: [solves of `samples` per item]}}}` of slot 0."""
    greedy = probe_members(engine, {"s": 0}, probe, sandbox, max_new_tokens=budget).correct["free"]["s"]
    sampled = {
        temperature_key(t): sampled_solves(engine, {"s": 0}, probe, sandbox, samples, t, budget)["s"]
        for t in dict.fromkeys(temperatures)
    }
    return {"greedy": {t: list(v) for t, v in greedy.items()}, "sampled": sampled}


#: which items a summary row pools: `{task: item indices, or None for all of that task's items}`
Selection = Mapping[str, Sequence[int] | None]


def item_scores(m: Mapping, reading: str, samples: int, types: Sequence[str] | Selection) -> np.ndarray:
    """One number in [0, 1] per item of `types` (concatenated in order; a `Selection` picks items within each
    type): `reading` is "greedy" or a temperature key (sampled pass@1 of that item: solves / samples)."""
    selection = types if isinstance(types, Mapping) else dict.fromkeys(types)
    parts = []
    for t, idx in selection.items():
        if reading == "greedy":
            v = np.asarray(m["greedy"][t], dtype=float)
        else:
            v = np.asarray(m["sampled"][reading][t], dtype=float) / samples
        parts.append(v if idx is None else v[list(idx)])
    return np.concatenate(parts) if parts else np.zeros(0)


def item_groups(
    types: Sequence[str], tags: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Selection]:
    """The rows of a summary: each task type, "all"; with the items' tags (`--probe-set flaws`: a planted
    class, `unflawed`, or another tag for graded items that carry a class) also one row per task type and class
    (`code_o/range_end_inclusive`), "flawed" (every class-set item) and "unflawed" (graded items no class's
    misreading changes: the "nothing else broke" check)."""
    from populora.pretrain.flaw_probe_sets import UNFLAWED
    from populora.pretrain.flaws import CLASSES

    groups: dict[str, Selection] = {t: {t: None} for t in types}
    groups["all"] = dict.fromkeys(types)
    if not tags:
        return groups
    flawed: dict[str, list[int]] = {}
    unflawed: dict[str, list[int]] = {}
    for t in types:
        tt = list(tags.get(t, ()))
        for c in CLASSES:
            idx = [i for i, x in enumerate(tt) if x == c]
            if idx:
                groups[f"{t}/{c}"] = {t: idx}
                flawed.setdefault(t, []).extend(idx)
        plain = [i for i, x in enumerate(tt) if x == UNFLAWED]
        if plain:
            unflawed[t] = plain
    if flawed:
        groups["flawed"] = {t: sorted(v) for t, v in flawed.items()}
    if unflawed:
        groups["unflawed"] = unflawed
    return groups


def base_best_temperature(
    base: Mapping, samples: int, groups: Sequence[str] | Mapping[str, Selection]
) -> dict:
    """Per row (each task type and "all", or the rows of `item_groups`): the temperature at which the base's
    sampled pass@1 is highest, and that pass@1."""
    rows = groups if isinstance(groups, Mapping) else item_groups(groups)
    out = {}
    for name, sel in rows.items():
        rates = {k: float(item_scores(base, k, samples, sel).mean()) for k in base["sampled"]}
        best = max(rates, key=lambda k: (rates[k], -float(k)))
        out[name] = {"temperature": float(best), "pass@1": round(rates[best], 4), "by_temperature": rates}
    return out


def headroom(base: Mapping, samples: int, temperature: str, types: Sequence[str]) -> dict:
    """Per task type: greedy accuracy, pass@1 and pass@`samples` at `temperature` (RL can only turn pass@k into
    greedy accuracy where pass@k is above it)."""
    out = {}
    for t in types:
        counts = base["sampled"][temperature][t]
        out[t] = {
            "greedy": statistics.fmean(base["greedy"][t]),
            "pass@1": statistics.fmean(c / samples for c in counts),
            f"pass@{samples}": statistics.fmean(c > 0 for c in counts),
        }
    return out


def in_points(ci: dict) -> dict:
    """An interval in points (x100), rounded."""
    return {
        k: (round(100 * v, 2) if isinstance(v, float) and k in ("mean", "lo", "hi") else v)
        for k, v in ci.items()
    }


def summarise(
    base: Mapping,
    runs: Mapping[str, Mapping],
    settings: Mapping,
    tags: Mapping[str, Sequence[str]] | None = None,
) -> dict:
    """Every reading's change over the base per arm, real - shuffled (paired by seed), and real against the base's
    best-temperature pass@1, per task type and over all items (with the items' `tags`: also per class, flawed and
    unflawed, `item_groups`); plus the stream's solve rate per arm."""
    types = list(settings["types"])
    samples = settings["eval_samples"]
    readings = ["greedy", *(temperature_key(t) for t in settings["eval_temperatures"])]
    rows = item_groups(types, tags)
    best = base_best_temperature(base, samples, rows)
    out: dict = {"base_best_temperature": best, "held_out": {}, "stream": {}}
    groups = {}  # (mode, lr) -> {arm: {seed: run}}
    for r in runs.values():
        groups.setdefault((r["mode"], r["lr"]), {}).setdefault(r["arm"], {})[r["seed"]] = r
    for (mode, lr), arms in sorted(groups.items()):
        key = f"{mode} lr {lr:g}"
        held: dict = {}
        for reading in readings:
            for name, ts in rows.items():
                per_type: dict = {}
                start = item_scores(base, reading, samples, ts)
                change = {}
                for arm, by_seed in arms.items():
                    seeds = sorted(by_seed)
                    end = [
                        item_scores(by_seed[s]["end"], reading, samples, ts) if arm != "none" else start
                        for s in seeds
                    ]
                    change[arm] = (seeds, np.stack(end) - start)
                    per_type.setdefault("change", {})[arm] = in_points(stats.bootstrap(change[arm][1]))
                    per_type.setdefault("end", {})[arm] = round(100 * float(np.mean(end)), 2)
                per_type["base"] = round(100 * float(start.mean()), 2)
                if "real" in change and "shuffled" in change:
                    pair = common_seeds(change["real"], change["shuffled"])
                    if pair is not None:
                        per_type["real_minus_shuffled"] = in_points(stats.difference(*pair, paired=True))
                if "real" in arms:  # against the sharpening baseline: the base at its best temperature
                    t_best = temperature_key(best[name]["temperature"])
                    base_best = item_scores(base, t_best, samples, ts)
                    seeds = sorted(arms["real"])
                    ends = np.stack(
                        [item_scores(arms["real"][s]["end"], reading, samples, ts) for s in seeds]
                    )
                    per_type["real_minus_base_best_temperature"] = in_points(
                        stats.bootstrap(ends - base_best)
                    )
                held.setdefault(reading, {})[name] = per_type
        out["held_out"][key] = held
        out["stream"][key] = _stream(arms)
    return out


def common_seeds(a: tuple[list[int], np.ndarray], b: tuple[list[int], np.ndarray]):
    """Two arms' `(seeds, values[seed, ...])` cut to the seeds both ran, in one order (for a paired difference);
    None when they share no seed."""
    common = sorted(set(a[0]) & set(b[0]))
    if not common:
        return None
    return a[1][[a[0].index(s) for s in common]], b[1][[b[0].index(s) for s in common]]


def _stream(arms: Mapping[str, Mapping[int, Mapping]]) -> dict:
    """Solve rate on the stream's problems by quarter of the run, per arm (mean over seeds), and real - none per
    quarter paired by seed: the difficulty of the stream moves the first, only the update moves the second."""
    out: dict = {}
    quarters: dict = {}
    for arm, by_seed in arms.items():
        per_seed = []
        for s in sorted(by_seed):
            rates = by_seed[s]["solve_rate"]
            q = max(1, len(rates) // 4)
            per_seed.append([statistics.fmean(rates[i * q : (i + 1) * q] or rates[-q:]) for i in range(4)])
        quarters[arm] = (sorted(by_seed), np.asarray(per_seed))
        out[arm] = [round(100 * float(v), 2) for v in np.asarray(per_seed).mean(axis=0)]
    for other in ("none", "shuffled"):
        if "real" in quarters and other in quarters:
            pair = common_seeds(quarters["real"], quarters[other])
            if pair is not None:
                a, b = pair
                out[f"real_minus_{other}_by_quarter"] = [
                    in_points(stats.difference(a[:, i], b[:, i], paired=True)) for i in range(4)
                ]
    return out


__all__ = [
    "ARMS",
    "base_best_temperature",
    "common_seeds",
    "estimate_seconds",
    "headroom",
    "in_points",
    "item_groups",
    "item_scores",
    "measure",
    "summarise",
    "temperature_key",
]
