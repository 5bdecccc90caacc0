"""Crossover retention with specialists that really specialise (issue 31 §4): `populora experiment retention
--specialists gold`.

Why gold: the retention test asks whether a crossover child keeps what each parent gained on its own task. RL
specialists of the tiny model gain a few points at most in 30 steps (docs/learning.md), which leaves a child
nothing to keep and every ratio noise. A gold specialist is made by the engine's own update, advantage +1 on the
gold answer (what a correct rollout earns) of fresh training problems of its task each step, drawn from the
model's graded generator on its train split (the split is on programs with literals masked, so no probe
program has a twin there: `pretrain/graded.py`). It aims at least `MIN_GAIN` above the base model on its task.
The two task types are code_o and code_i by default; `tasks=` takes any two (`--tasks arith,code_o`): a task
type of another installed family trains on that family's seed problems (`registry.seed_problems`, which avoid
its probe items) and is scored on its fixed probe items (`registry.probe_items`). On the bundled model such a
type can host a specialist where AZR's cannot: the asset was pretrained on AZR's distribution, so more of it
moves nothing, while `arith`, which it never saw, gains 10-20 points in 20-30 steps (docs/learning.md).

Then, for every crossover operator and operator seed, the child of the two specialists (first task's parent
first) is scored at birth, greedy, on the probe of both tasks, with the base model and both parents, all in mixed
batches of the same engine. The measure is the share of each parent's gain the child keeps on that parent's
task, `(child - base) / (parent - base)`; its 95% interval is a bootstrap over the probe items and the operator
seeds together (crossed, as in stats.py). No recovery steps here (the RL form of the command has them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

SPECIALISTS: tuple[str, ...] = ("code_o", "code_i")
MIN_GAIN = 0.10  # issue 31 §4: a parent at least 10 points above the base on its task
B = 2000


def gold_rows(engine, task_name: str, problems: Sequence, slot: int, trace: bool = True) -> list:
    """One training row per problem: its gold answer (compact template, then EOS) at advantage +1. `trace`: a
    code_o answer opens with the program's execution trace, as the graded asset was pretrained to answer
    (pretrain/corpus.py); a bare gold answer would train it away from its own style."""
    from populora.engine import TrainRow
    from populora.pretrain.trace import render_trace
    from populora.tasks import get

    task = get(task_name)
    eos = engine.tokenizer.eos_token_id
    rows = []
    for p in problems:
        answer = task.render_answer(task.gold_answer(p), template="compact")
        if trace and task_name == "code_o":
            answer = render_trace(p.program, p.inputs[0], general=True) + answer
        ids = engine.tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
        prompt = engine.encode(task.student_prompt(p, template="compact"))
        rows.append(TrainRow(slot=slot, prompt_ids=prompt, response_ids=ids, advantages=1.0))
    return rows


def train_specialist(
    engine,
    slot: int,
    task: str,
    steps: int,
    per_step: int,
    sandbox,
    seed: int,
    levels,
    log: Callable = print,
    every: int = 0,
    checkpoint: Callable[[int], None] | None = None,
) -> None:
    """`steps` updates of slot `slot` on the gold answers of `per_step` fresh training problems of `task`
    (AZR's: the graded generator at `levels`; another family's: its seed problems); `checkpoint(step)` after
    every `every` steps (0: never)."""
    from populora.engine import TrainBatch
    from populora.tasks import TASK_NAMES, registry
    from populora.train.setup import synthetic_seeds

    for step in range(1, steps + 1):
        stream = seed * 100_003 + step
        if task in TASK_NAMES:
            problems = synthetic_seeds(per_step, sandbox, stream, levels, types=(task,))
        else:
            problems = registry.seed_problems(task, per_step, sandbox, stream)
        engine.train_step(TrainBatch(gold_rows(engine, task, problems, slot)))
        if step % 10 == 0 or step == steps:
            log(f"  {task} specialist: step {step}/{steps}")
        if every and checkpoint is not None and step % every == 0:
            checkpoint(step)


def kept_interval(child: np.ndarray, parent: np.ndarray, base: np.ndarray, seed: int = 12_345) -> dict:
    """Share of the parent's gain the child keeps: `(mean child - mean base) / (mean parent - mean base)`.

    `child[seed, item]` (one row per operator seed), `parent[item]`, `base[item]`: 0/1 verdicts on one task's
    probe items. The interval resamples items (shared by all three) and the child's seeds, crossed."""
    child, parent, base = (np.asarray(x, dtype=float) for x in (child, parent, base))

    def ratio(c, p, b) -> float:
        gain = p.mean() - b.mean()
        return float((c.mean() - b.mean()) / gain) if gain > 0 else float("nan")

    point = ratio(child, parent, base)
    rng = np.random.default_rng(seed)
    n_s, n_i = child.shape
    reps = []
    for _ in range(B):
        s, i = rng.integers(0, n_s, n_s), rng.integers(0, n_i, n_i)
        reps.append(ratio(child[s][:, i], parent[i], base[i]))
    reps = np.array([r for r in reps if np.isfinite(r)])
    lo, hi = (
        (float(np.percentile(reps, 2.5)), float(np.percentile(reps, 97.5))) if reps.size else (None, None)
    )
    return {"kept": point, "lo": lo, "hi": hi, "seeds": n_s, "items": n_i}


def specialist_tasks(tasks: Sequence[str] | None) -> tuple[str, str]:
    """The two task types of the specialists (default code_o, code_i), checked: two different task types,
    each AZR's or an installed family's; a ConfigError names the problem and the installed types."""
    from populora.config import ConfigError
    from populora.tasks import registry

    pair = tuple(tasks or SPECIALISTS)
    known = registry.task_types(registry.names())
    if len(pair) != 2 or pair[0] == pair[1]:
        raise ConfigError(
            f"--tasks {','.join(pair)}: give two different task types, e.g. --tasks arith,code_o"
        )
    for t in pair:
        if not registry.is_task_type(t):
            raise ConfigError(
                f"--tasks: {t!r} is not an installed task type; choose from {', '.join(known)} "
                "(`populora tasks list`; a plugin family adds its own)"
            )
    return pair[0], pair[1]


def run_gold_retention(
    out: Path,
    preset: str = "tiny-learn",
    quick: bool = False,
    specialist_steps: int | None = None,
    operators: Sequence[str] | None = None,
    seeds: int | None = None,
    overrides: Sequence[str] = (),
    log: Callable[[str], None] = print,
    probe_every: int = 0,
    tasks: Sequence[str] | None = None,
) -> dict:
    """Train the gold specialists, make every child per operator seed, score them at birth; write
    OUT/experiment.json and return it (see the module docstring). `probe_every` K > 0 also scores each
    specialist on its own task every K steps against the base (`specialist_curve`): how its gain grows.
    `tasks`: the specialists' two task types (default code_o, code_i; `specialist_tasks`)."""
    from populora.config import load_config
    from populora.engine.models import resolve_model
    from populora.experiment.retention import CROSSOVERS
    from populora.operators import apply
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET
    from populora.pretrain.graded_probe import probe_selection
    from populora.sandbox import Sandbox
    from populora.tasks import TASK_NAMES, registry
    from populora.train.probe import probe_members
    from populora.train.setup import build_engine, graded_seed_levels

    pair = specialist_tasks(tasks)
    out = Path(out)
    steps = specialist_steps or (2 if quick else 40)
    ops = list(operators or (("X1", "X2") if quick else CROSSOVERS))
    n_seeds = seeds or (2 if quick else 3)
    per_step = 8 if quick else 32  # fresh training problems per update
    size = ["diagnostics.probe_size=4"] if quick else []
    # 8 slots: base, two parents, and children scored 5 at a time in one mixed batch
    cfg = load_config(preset, [*size, *overrides, "population.teachers=4", "population.students=4"])
    levels = graded_seed_levels(resolve_model(cfg.model.name, cfg.model.revision or None))
    azr = [t for t in pair if t in TASK_NAMES]
    problems, item_levels = probe_selection("graded", cfg.diagnostics.probe_size, azr)
    budget = dict(GRADED_BUDGET)
    for t in pair:
        if t not in TASK_NAMES:  # another family's fixed probe items, at the run's answer budget
            problems[t] = list(registry.probe_items(t))[: cfg.diagnostics.probe_size]
            budget[t] = cfg.tasks.student_max_new_tokens
    t0 = time.time()
    engine = build_engine(cfg)
    try:
        with Sandbox(workers=2) as sb:
            engine.reset_slot(0, seed=0)  # slot 0 stays at B = 0: the base model
            verdicts: dict = {}

            def score(slots: dict[str, int], tasks: Sequence[str] = pair) -> dict:
                found = probe_members(engine, slots, {t: problems[t] for t in tasks}, sb, "compact", budget)
                return {m: {t: np.array(found.correct["free"][m][t]) for t in tasks} for m in slots}

            # the base once, first: the specialists' curve and the children's kept shares both read it
            verdicts.update(score({"base": 0}))
            base_acc = {t: float(v.mean()) for t, v in verdicts["base"].items()}
            curve: dict[str, list[dict]] = {}
            for k, task in enumerate(pair):
                engine.reset_slot(k + 1, seed=cfg.train.seed + k)
                log(f"gold specialist on {task}: {steps} steps of {per_step} problems ...")
                curve[task] = []

                def checkpoint(step: int, task: str = task, slot: int = k + 1) -> None:
                    acc = float(score({"specialist": slot}, (task,))["specialist"][task].mean())
                    gain = acc - base_acc[task]
                    curve[task].append({"step": step, "accuracy": acc, "gain": gain})
                    log(f"  {task} specialist at step {step}: {100 * acc:.1f}% ({100 * gain:+.1f} pts)")

                train_specialist(
                    engine,
                    k + 1,
                    task,
                    steps,
                    per_step,
                    sb,
                    cfg.train.seed + k,
                    levels,
                    log,
                    every=probe_every,
                    checkpoint=checkpoint,
                )
            parents = [engine.get_adapter(k + 1) for k in range(len(pair))]
            children = {(op, s): apply(op, parents=parents, seed=s) for op in ops for s in range(n_seeds)}

            verdicts.update(score({f"{t} specialist": k + 1 for k, t in enumerate(pair)}))
            keys = list(children)
            for c in range(0, len(keys), 5):
                batch = keys[c : c + 5]
                for j, key in enumerate(batch):
                    engine.set_adapter(3 + j, children[key])
                log(f"scoring children {c + 1}-{c + len(batch)} of {len(keys)} ...")
                verdicts.update(score({f"{op} seed {s}": 3 + j for j, (op, s) in enumerate(batch)}))
    finally:
        engine.close()
    base = verdicts["base"]
    acc = {m: {t: float(v[t].mean()) for t in pair} for m, v in verdicts.items()}
    gains = {t: acc[f"{t} specialist"][t] - acc["base"][t] for t in pair}
    rows = {}
    for op in ops:
        rows[op] = {
            t: kept_interval(
                np.stack([verdicts[f"{op} seed {s}"][t] for s in range(n_seeds)]),
                verdicts[f"{t} specialist"][t],
                base[t],
            )
            for t in pair
        }
        for t in pair:
            rows[op][t]["accuracy"] = float(np.mean([acc[f"{op} seed {s}"][t] for s in range(n_seeds)]))
    result = {
        "kind": "retention",
        "specialists": "gold",
        "tasks": list(pair),
        "preset": preset,
        "quick": quick,
        "overrides": list(overrides),
        "specialist_steps": steps,
        "operator_seeds": n_seeds,
        "operators": ops,
        "probe_items": {t: len(problems[t]) for t in pair},
        "probe_levels": {t: list(item_levels[t]) for t in azr} if item_levels and azr else None,
        "accuracy": acc,
        "specialist_gain": gains,
        "specialists_specialise": {t: gains[t] >= MIN_GAIN for t in pair},
        "probe_every": probe_every,
        "specialist_curve": curve if probe_every else None,
        "kept": rows,
        "command_seconds": round(time.time() - t0, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out / 'experiment.json'}")
    return result


def gold_rows_table(result: dict) -> tuple[list[str], list[list[str]]]:
    """The console table: each operator's kept share of each parent's gain, with its interval."""

    def cell(k: dict) -> str:
        if k["kept"] is None or not np.isfinite(k["kept"]):
            return "-"
        ci = f" [{k['lo']:+.2f}, {k['hi']:+.2f}]" if k["lo"] is not None else ""
        return f"{k['kept']:+.2f}{ci}"

    pair = result.get("tasks", SPECIALISTS)  # results written before `tasks` existed: the AZR pair
    head = ["operator", *(f"kept of the {t} gain" for t in pair)]
    rows = [[op, *(cell(result["kept"][op][t]) for t in pair)] for op in result["operators"]]
    gains = ", ".join(f"{t} {100 * g:+.1f} pts" for t, g in result["specialist_gain"].items())
    rows.append(["specialists' gain over the base", gains, ""])
    ok = result["specialists_specialise"]
    verdict = "yes" if all(ok.values()) else "no: the kept shares read noise (a smaller gain is a few items)"
    rows.append([f"parents >= +{100 * MIN_GAIN:.0f} pts on their task", verdict, ""])
    return head, rows


__all__ = [
    "gold_rows",
    "gold_rows_table",
    "kept_interval",
    "run_gold_retention",
    "specialist_tasks",
    "train_specialist",
]
