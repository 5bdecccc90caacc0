"""Controlled check of the RL update without self-play: does it fit what it sees, and does that transfer?

One student adapter and no teachers (`populora.experiment.controls`): the trainer's engine, loss, verifier rewards
(+1 / -0.5 / -1) and REINFORCE++-baseline advantages (group = one problem's rollouts, one whitening set).

1. fixed   the same problems every step (`--per-type` per task type): their solve rate must rise within a few
           steps if the update is signed and sized right (it can only fit, not generalise).
2. fresh   new problems from the pretraining generator every step (what an ideal teacher would propose, never
           the probe's problems). Only this one says whether what the update learns transfers.

Measured as a reviewer would (`rl_measure.py`): on held-out probe items, at the start (the base) and at the end,
greedy and sampled pass@1 (`--eval-samples` answers per item at each `--eval-temperatures`, one fixed evaluation
seed); the base also at a sweep of temperatures (`--base-temperatures`): its best pass@1 is the sharpening
baseline. Arms on the same problem stream and seeds (`--arms`): real rewards, shuffled rewards (the control that
breaks the cause) and no update (how much the stream's difficulty alone moves the solve rate). Per task type
and overall, intervals over seeds and items. `--set rl.loss_norm=role_task` makes each task type a loss group of
its own, `--set rl.loss_agg=seq-mean-token-mean` weighs every answer alike (see docs/paper-choices.md).

Resumable: every finished (mode, lr, arm, seed) run is written to `--out` at once; the same command again runs
only what is missing (a different setting refuses, naming it).

populora experiment control rl [--types code_i] [--arms real,shuffled,none] [--seeds 3] [--quick]
Writes runs/controls/learning_rl_controls.json (--out; the recorded ones: bench/results/learning_rl_controls*.json)
(docs/learning.md, "The teacher-free control").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import torch

from populora.config import ConfigError, load_config
from populora.engine.models import resolve_model
from populora.estimate import long_line
from populora.experiment.controlled.rl_measure import (
    ARMS,
    EVAL_ANSWER_S,
    estimate_seconds,
    headroom,
    measure,
    summarise,
    temperature_key,
)
from populora.experiment.controls import rl_step
from populora.names import TASKS
from populora.pretrain.graded import GradedError, parse_levels
from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET
from populora.pretrain.graded_probe import PROBE_SETS, probe_selection
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.sandbox import Limits, Sandbox
from populora.train.setup import build_engine, graded_seed_levels, synthetic_seeds

#: settings that change what a finished run measured: a resumed --out must agree on every one of them
SAME_FOR_RESUME = (
    "model", "per_type", "rollouts", "temperature", "steps_fixed", "steps_fresh", "probe_size", "types",
    "probe_set", "probe_levels", "eval_samples", "eval_temperatures", "base_temperatures", "overrides",
    "flaw_per_class", "flaw_set", "problems",
)  # fmt: skip
#: what a file written before a setting existed measured (its value then)
OLD_DEFAULTS = {"problems": "graded"}
#: settings that decide the base model's measurement: --base-from needs them equal (the --set overrides do not
#: matter: every adapter starts at zero, so the base reads the same whatever the loss settings)
SAME_FOR_BASE = (
    "model", "temperature", "probe_size", "types", "probe_set", "probe_levels", "eval_samples",
    "eval_temperatures", "base_temperatures", "flaw_per_class", "flaw_set",
)  # fmt: skip


def _config(args, lr: float | None = None):
    """tiny-learn with one student slot, the run's model and threads, and the user's --set overrides."""
    sets = ["population.teachers=1", "population.students=1", f"model.name={args.model}"]
    sets += [f"train.threads={args.threads}", *args.overrides]
    return load_config("tiny-learn", sets + ([f"rl.lr={lr}"] if lr is not None else []))


def run(mode: str, lr: float, arm: str, seed: int, args, sb, pool: dict, probe: dict, budget: dict) -> dict:
    """RL of one fresh adapter on `pool` problems (the same ones every step: 'fixed'; new ones: 'fresh') with
    `arm`'s rewards; the held-out measure at the end (not for 'none', whose adapter never changes)."""
    cfg = _config(args, lr)
    torch.manual_seed(seed)
    eng = build_engine(cfg)
    train_budget = dict.fromkeys(
        MAX_NEW_TOKENS, cfg.tasks.student_max_new_tokens
    )  # the trainer's answer budget
    rng = random.Random(seed)
    steps = args.steps_fixed if mode == "fixed" else args.steps_fresh
    order = {t: rng.sample(pool[t], len(pool[t])) for t in pool}  # fresh: each problem at most once
    fixed = [p for t in pool for p in order[t][: args.per_type]]
    solve, solve_by_type, probes, t0 = [], [], [], time.time()
    k = args.per_type
    for step in range(1, steps + 1):
        problems = (
            fixed if mode == "fixed" else [p for t in pool for p in order[t][k * step : k * (step + 1)]]
        )
        counts: dict[str, list[int]] = {}
        solve.append(
            rl_step(
                eng,
                problems,
                args.rollouts,
                args.temperature,
                1000 * step + seed,  # the same rollout seeds in every arm: the same stream, read alike
                sb,
                train_budget,
                by_type=counts,
                rewards_order=random.Random(f"shuffle/{seed}/{step}") if arm == "shuffled" else None,
                update=arm != "none",
                loss_by_task=cfg.rl.loss_norm == "role_task",
            )
        )
        solve_by_type.append({t: round(c[0] / c[1], 4) for t, c in counts.items() if c[1]})
        if arm != "none" and args.probe_every and step % args.probe_every == 0 and step < steps:
            probes.append(
                {"step": step, **measure(eng, probe, sb, args.eval_samples, args.eval_temperatures, budget)}
            )
        print(
            f"{mode} lr {lr:g} {arm} seed {seed} step {step}/{steps}: solve {solve[-1]:.2f} "
            f"({time.time() - t0:.0f}s)",
            flush=True,
        )
    end = None
    if arm != "none":
        end = measure(eng, probe, sb, args.eval_samples, args.eval_temperatures, budget)
    eng.close()
    q = max(1, steps // 4)
    return {
        "mode": mode,
        "lr": lr,
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "solve_rate": solve,
        "solve_rate_by_type": solve_by_type,
        "solve_first_quarter": statistics.fmean(solve[:q]),
        "solve_last_quarter": statistics.fmean(solve[-q:]),
        "end": end,
        "probes": probes,  # --probe-every: the same held-out reading at those steps
        "seconds": round(time.time() - t0, 1),
    }


def _floats(text: str, what: str, ap) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"{what}: expected comma-separated numbers, got {text!r}")
    if not values or any(not v > 0 for v in values):
        ap.error(f"{what}: expected numbers > 0, got {text!r}")
    return values


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="populora experiment control rl", description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", default="3e-3", help="learning rates, comma-separated (default 3e-3)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--per-type", type=int, default=8, help="problems per task type and step")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts per problem")
    ap.add_argument("--temperature", type=float, default=1.0, help="rollout temperature (default 1.0)")
    ap.add_argument("--steps-fixed", type=int, default=20)
    ap.add_argument("--steps-fresh", type=int, default=30)
    ap.add_argument("--probe-size", type=int, default=130, help="held-out probe items per task type")
    ap.add_argument(
        "--probe-every",
        type=int,
        default=0,
        help="also read the held-out measure every K steps of a run (default: at the end only)",
    )
    ap.add_argument(
        "--no-headroom",
        action="store_true",
        help="read the base at the evaluation temperatures only, without the --base-temperatures sweep",
    )
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per arm: --seed, --seed + 1, ...")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--eval-samples", type=int, default=8, help="sampled answers per held-out item")
    ap.add_argument(
        "--eval-temperatures",
        default="1.0,0.6",
        help="temperatures of the held-out sampled pass@1 (default 1.0 and tiny-learn's 0.6)",
    )
    ap.add_argument(
        "--base-temperatures",
        default="0.2,0.4,0.6,0.8,1.0",
        help="the base model's sweep: its best pass@1 is the sharpening baseline",
    )
    ap.add_argument(
        "--types",
        default=",".join(TASKS),
        help="task types to train and probe, comma-separated (e.g. code_i)",
    )
    ap.add_argument(
        "--probe-set",
        choices=(*PROBE_SETS, "flaws"),
        default="graded",
        help="the probe's items: the graded sets (asset v2's levels, default), the fixed ones (level easy), or "
        "flaws: the misconception sets (--flaw-per-class items a planted class, code_o and code_i) beside the "
        "graded items, read per class, flawed and unflawed (the positive control on tiny-flaws)",
    )
    ap.add_argument(
        "--flaw-per-class",
        type=int,
        default=64,
        help="with --probe-set flaws: held-out items per planted class and task type (1-64, default 64)",
    )
    ap.add_argument(
        "--flaw-set",
        choices=("atoms", "graded"),
        default="atoms",
        help="with --probe-set flaws: atoms (one-statement programs around each class's feature, default) or "
        "graded (whole level 1-2 programs carrying the class)",
    )
    ap.add_argument(
        "--probe-levels",
        default="",
        help="with --probe-set graded: only items of these levels (1, 1,2 or 1-3); default all",
    )
    ap.add_argument(
        "--problems",
        choices=("graded", "atoms", "mixed"),
        default="graded",
        help="the RL stream's problems (train split): the graded generator the model was pretrained on "
        "(default), atoms (one-statement programs around a planted class's feature; code_o and code_i only), or "
        "mixed (half each): on tiny-flaws, where the misconceptions show",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="fresh", help="which controls to run (fixed, fresh or both)")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of every run (repeatable), e.g. rl.loss_norm=role_task, rl.loss_agg=...",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 problem per type, 2 rollouts, 2 steps, 4 probe items, 2 samples, 1 seed",
    )
    ap.add_argument(
        "--base-from",
        default="",
        metavar="JSON",
        help="take the base model's measurement from another control's --out with the same probe, evaluation and "
        "temperatures (another --set compares loss settings on one base; saves its temperature sweep)",
    )
    ap.add_argument("--out", default="runs/controls/learning_rl_controls.json")
    args = ap.parse_args(argv)
    args.types = [t.strip() for t in args.types.split(",") if t.strip()]
    bad = [t for t in args.types if t not in TASKS]
    if bad or not args.types:
        ap.error(
            f"--types: unknown task type(s) {', '.join(bad) or '(none given)'}; pick from {', '.join(TASKS)}"
        )
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not args.arms or any(a not in ARMS for a in args.arms):
        ap.error(f"--arms: {','.join(args.arms) or '(none)'}: pick from {', '.join(ARMS)}")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in ("fixed", "fresh") for m in args.modes):
        ap.error(f"--modes: {','.join(args.modes) or '(none)'}: pick from fixed, fresh")
    try:
        args.levels = parse_levels(args.probe_levels) if args.probe_levels.strip() else ()
    except GradedError as err:
        ap.error(f"--probe-levels: {err}")
    if args.levels and args.probe_set == "fixed":
        ap.error("--probe-levels needs --probe-set graded or flaws (the fixed probe sets have no levels)")
    if not 1 <= args.flaw_per_class <= 64:
        ap.error(
            f"--flaw-per-class must be in [1, 64] (the bundled sets hold 64 a class), got {args.flaw_per_class}"
        )
    if args.probe_set != "flaws":
        args.flaw_per_class = args.flaw_set = None  # not part of what a run measured
    args.lrs = _floats(args.lrs, "--lrs", ap)
    args.eval_temperatures = _floats(args.eval_temperatures, "--eval-temperatures", ap)
    args.base_temperatures = _floats(args.base_temperatures, "--base-temperatures", ap)
    if args.no_headroom:
        args.base_temperatures = list(args.eval_temperatures)
    if args.probe_every < 0:
        ap.error(f"--probe-every must be >= 0 (0 = at the end only), got {args.probe_every}")
    if args.seeds < 1 or args.eval_samples < 1:
        ap.error(f"--seeds and --eval-samples must be >= 1, got {args.seeds} and {args.eval_samples}")
    if args.quick:
        args.per_type, args.rollouts, args.steps_fixed, args.steps_fresh = 1, 2, 2, 2
        args.probe_size, args.eval_samples, args.seeds = 4, 2, 1
        args.flaw_per_class = 2 if args.flaw_per_class else None
        args.base_temperatures = [1.0]
    try:
        _config(args)  # the overrides, checked before anything runs
    except ConfigError as err:
        ap.error(f"--set: {err}")
    return args


def stream_pool(args, size: int, sb, seed: int, levels) -> dict[str, list]:
    """`{task: [Problem]}`, `size` a type, for one run seed (the same stream for every arm): `--problems` graded
    (`synthetic_seeds`: the generator the model was pretrained on), atoms (`flaw_atoms.AtomDrill`, class-balanced,
    validated in the sandbox; code_f stays graded) or mixed (half each, interleaved). All from the train split:
    never a probe item."""
    graded_types = [t for t in args.types if args.problems != "atoms" or t not in ("code_o", "code_i")]
    pool: dict[str, list] = {t: [] for t in args.types}
    if graded_types:
        problems = synthetic_seeds(size, sb, 1000 + seed, levels, tuple(graded_types))
        for p in problems:
            pool[p.task].append(p)
    if args.problems == "graded":
        return pool
    from populora.pretrain.flaw_atoms import AtomDrill
    from populora.tasks import InvalidProblem, get

    rng = random.Random(f"atoms/{1000 + seed}")
    for t in (t for t in args.types if t in ("code_o", "code_i")):
        drill, atoms = AtomDrill(rng, t), []
        want = size if args.problems == "atoms" else (size + 1) // 2
        while len(atoms) < want:
            item = drill.next()
            try:
                atoms.append(
                    get(t).problem_from(sb, item.program, [item.shown if t == "code_o" else item.right])
                )
            except InvalidProblem:
                continue
        if args.problems == "atoms":
            pool[t] = atoms
        else:  # mixed: atom, graded, atom, graded, ...
            graded = pool[t][: size - want]
            pool[t] = [p for pair in zip(atoms, graded, strict=False) for p in pair] + atoms[len(graded) :]
    return pool


def probe_items(args) -> tuple[dict[str, list], dict[str, list[str]] | None]:
    """The held-out items (`{task: [Problem]}`) and, with --probe-set flaws, each item's tag: the misconception
    sets' items (their class) first, then the graded items (`unflawed` where no class's misreading changes the
    answer on the item's input)."""
    if args.probe_set != "flaws":
        return probe_selection(args.probe_set, args.probe_size, args.types, args.levels)[0], None
    from populora.pretrain.flaw_probe_sets import UNFLAWED, flaw_probe_selection, unflawed_tags

    flawed, classes, _ = flaw_probe_selection(args.flaw_per_class, args.types, args.flaw_set)
    graded, _ = probe_selection("graded", args.probe_size, args.types, args.levels)
    # a graded item that carries a class is tagged "carries:<class>": the class rows read the misconception
    # sets' items only, "unflawed" the graded items no class's misreading changes
    plain = {t: [x if x == UNFLAWED else f"carries:{x}" for x in v] for t, v in unflawed_tags(graded).items()}
    probe = {t: [*flawed.get(t, []), *graded[t]] for t in args.types}
    tags = {t: [*classes.get(t, []), *plain.get(t, ["other"] * len(graded[t]))] for t in args.types}
    return probe, tags


def _load(path: Path, settings: dict) -> dict:
    """The experiment so far at `path` (its finished runs), or a new one; a file of other settings refuses."""
    if not path.exists():
        return {"settings": settings, "runs": {}}
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(
            f"--out {path}: not a readable experiment file ({err}); move it or pick another --out"
        ) from None
    was = old.get("settings", {})
    differ = [k for k in SAME_FOR_RESUME if was.get(k, OLD_DEFAULTS.get(k)) != settings.get(k)]
    if differ:
        raise SystemExit(
            f"--out {path} holds runs with other settings ({'; '.join(f'{k}: {was.get(k)!r} there, {settings.get(k)!r} now' for k in differ)});"
            " use another --out, or the same settings to continue it"
        )
    old["settings"] = settings  # arms, seeds, lrs and modes may grow
    old.setdefault("runs", {})
    return old


def _base_from(path: Path, settings: dict) -> dict:
    """The base measurement of another control's file, when it measured the same thing."""
    try:
        other = json.loads(path.read_text())
        base, was = other["base"], other["settings"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise SystemExit(f"--base-from {path}: no base measurement there ({err!r}); run without it") from None
    differ = [k for k in SAME_FOR_BASE if was.get(k) != settings.get(k)]
    if differ:
        raise SystemExit(
            f"--base-from {path}: its base was measured with other settings "
            f"({'; '.join(f'{k}: {was.get(k)!r} there, {settings.get(k)!r} here' for k in differ)})"
        )
    return base


def _save(path: Path, out: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    os.replace(tmp, path)  # a kill while writing leaves the last finished run's file whole


def probe_items_per_type(args) -> int:
    """Held-out items a task type reads at most (code_o's six planted classes with --probe-set flaws)."""
    from populora.pretrain.flaws import CLASSES

    return args.probe_size + (len(CLASSES) * args.flaw_per_class if args.flaw_per_class else 0)


def up_front_line(args, todo: list[tuple], measure_base: bool) -> str | None:
    """The line a run over 10 minutes prints before it starts: its estimate from this command's own timings."""
    per_item = 1 + args.eval_samples * len(args.eval_temperatures)
    seconds = estimate_seconds(
        [(mode, arm) for mode, _, arm, _ in todo],
        {"fixed": args.steps_fixed, "fresh": args.steps_fresh},
        args.per_type,
        args.rollouts,
        probe_items_per_type(args) * per_item,
        args.types,
    )
    if measure_base:  # the base's measure: every temperature of both sweeps
        temps = {*args.eval_temperatures, *args.base_temperatures, args.temperature}
        per_item = 1 + args.eval_samples * len(temps)
        seconds += probe_items_per_type(args) * per_item * sum(EVAL_ANSWER_S[t] for t in args.types)
    return long_line(
        seconds,
        "the same command continues where it stopped",
        "this command's runs on a 2-core CPU at load 5-10",
    )


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out_path = Path(args.out)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "levels")}
    out = _load(out_path, settings)
    out["what"] = (
        "one student adapter, RL without teachers, on new generator problems every step (fresh) or the same "
        "ones (fixed); arms real / shuffled rewards / no update on the same stream and seeds; held-out greedy "
        "and sampled pass@1 against the base"
    )
    probe_budget = dict(GRADED_BUDGET) if args.probe_set == "graded" else dict(MAX_NEW_TOKENS)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    seeds = list(range(args.seed, args.seed + args.seeds))
    todo = [
        (mode, lr, arm, seed)
        for seed in seeds
        for lr in args.lrs
        for mode in args.modes
        for arm in args.arms
        if f"{mode}/{lr:g}/{arm}/{seed}" not in out["runs"]
    ]
    print(f"control rl: {len(out['runs'])} runs done, {len(todo)} to run -> {out_path}", flush=True)
    line = up_front_line(args, todo, measure_base="base" not in out and not args.base_from)
    if line:
        print(line, flush=True)
    with Sandbox(workers=2, limits=Limits(timeout_s=2.0, memory_mb=256)) as sb:
        probe, tags = probe_items(args)
        if tags:
            out["probe_tags"] = tags
        levels_of_model = graded_seed_levels(resolve_model(args.model))
        out["problem_levels"] = list(levels_of_model) if levels_of_model else None
        if "base" not in out and args.base_from:
            out["base"], out["base_from"] = _base_from(Path(args.base_from), settings), args.base_from
            _save(out_path, out)
        if "base" not in out:
            base = build_engine(_config(args))
            temps = [*args.eval_temperatures, *args.base_temperatures, args.temperature]
            out["base"] = measure(base, probe, sb, args.eval_samples, temps, probe_budget)
            base.close()
            _save(out_path, out)
        pools: dict[int, dict] = {}
        for mode, lr, arm, seed in todo:
            if seed not in pools:
                # the generator the model was pretrained on, its train split with a seed of its own per run
                # seed (the same stream for every arm): never the probe's problems
                size = args.per_type * (args.steps_fresh + 1) + 8
                pools[seed] = stream_pool(args, size, sb, seed, levels_of_model)
            out["runs"][f"{mode}/{lr:g}/{arm}/{seed}"] = run(
                mode, lr, arm, seed, args, sb, pools[seed], probe, probe_budget
            )
            _save(out_path, out)
    k = temperature_key(args.temperature)
    out["headroom"] = headroom(out["base"], args.eval_samples, k, args.types)
    out["summary"] = summarise(out["base"], out["runs"], settings, out.get("probe_tags"))
    out["seconds_this_sitting"] = round(time.time() - t0, 1)
    _save(out_path, out)
    print_summary(out, args)
    print(f"wrote {out_path} ({out['seconds_this_sitting']:.0f}s this sitting)")


def print_summary(out: dict, args) -> None:
    """Per (mode, lr) and reading: the base, each arm's change and real - shuffled, over all items, in points."""
    best = out["summary"]["base_best_temperature"]["all"]
    print(
        f"\nbase best-temperature pass@1 (all items): {100 * best['pass@1']:.1f} at T={best['temperature']:g}"
    )
    for key, held in out["summary"]["held_out"].items():
        print(f"\n{key}: change on the held-out items, points [95% interval over seeds and items]")
        for reading, by_type in held.items():
            name = "greedy" if reading == "greedy" else f"pass@1 T={reading}"
            for t, row in by_type.items():
                cells = [f"base {row['base']:.1f}"]
                for arm, ci in row.get("change", {}).items():
                    if arm != "none":
                        cells.append(f"{arm} {ci_text(ci)}")
                if "real_minus_shuffled" in row:
                    cells.append(f"real-shuffled {ci_text(row['real_minus_shuffled'])}")
                print(f"  {name:<12} {t:<7} " + "  ".join(cells))
        stream = out["summary"]["stream"].get(key, {})
        for arm in args.arms:
            if arm in stream:
                print(
                    f"  stream solve rate by quarter, {arm}: " + " / ".join(f"{v:.1f}" for v in stream[arm])
                )


def ci_text(ci: dict) -> str:
    if ci.get("lo") is None:
        return f"{ci['mean']:+.1f}"
    return f"{ci['mean']:+.1f} [{ci['lo']:+.1f}, {ci['hi']:+.1f}]"


if __name__ == "__main__":
    main()
