"""Controlled check of the RL update without self-play: does it fit what it sees, and does that transfer?

One student adapter and no teachers (`populora.experiment.controls`): the trainer's engine, loss, verifier rewards
(+1 / -0.5 / -1) and REINFORCE++-baseline advantages (group = one problem's rollouts, one whitening set).
Three measurements:

1. headroom   greedy accuracy against pass@1 and pass@k at the rollout temperature on the probe subset: RL can
              only turn pass@k into greedy accuracy where pass@k is above it.
2. fixed      the same problems every step (`--per-type` per task type): their solve rate must rise within a
              few steps if the update is signed and sized right (it can only fit, not generalise).
3. fresh      new problems from the pretraining generator every step (what an ideal teacher would propose: the
              probe's own distribution, never the probe's problems): the solve rate on problems it has not
              seen yet, and the greedy probe at step 0 and every `--probe-every` steps. Only this one says
              whether what the update learns transfers to held-out problems.

`--types` restricts the problems and the probe to some task types (`code_f`: RL on code_f alone); the solve rate
is also recorded per type (`solve_rate_by_type`). `--probe-set graded` probes on the graded probe sets
(`--probe-levels 1`: only their level-1 items, with the graded answer budgets) instead of the fixed ones.

populora experiment control rl [--lrs 3e-3,1e-2] [--model tiny] [--types code_f] [--probe-set graded] [--quick]
Writes runs/controls/learning_rl_controls.json (--out; the recorded history: bench/results/learning_rl_controls.json) (docs/learning.md, "Chasing it on the bundled asset").
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from populora.config import load_config
from populora.engine.models import resolve_model
from populora.experiment.controls import headroom, rl_step
from populora.names import TASKS
from populora.pretrain.graded import GradedError, parse_levels
from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET
from populora.pretrain.graded_probe import PROBE_SETS, probe_selection
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.sandbox import Limits, Sandbox
from populora.train.probe import score_members
from populora.train.setup import build_engine, graded_seed_levels, synthetic_seeds


def run(mode: str, lr: float, args, sb, pool: dict, probe: dict, probe_budget: dict | None) -> dict:
    """RL of one fresh adapter on `pool` problems: the same ones every step ('fixed') or new ones ('fresh')."""
    cfg = load_config(
        "tiny-learn",
        [
            "population.teachers=1",
            "population.students=1",
            f"rl.lr={lr}",
            f"model.name={args.model}",
            f"train.threads={args.threads}",
        ],
    )
    torch.manual_seed(args.seed)
    eng = build_engine(cfg)
    budget = dict.fromkeys(MAX_NEW_TOKENS, cfg.tasks.student_max_new_tokens)  # the trainer's answer budget
    rng = random.Random(args.seed)
    steps = args.steps_fixed if mode == "fixed" else args.steps_fresh
    order = {t: rng.sample(pool[t], len(pool[t])) for t in pool}  # fresh: each problem at most once
    fixed = [p for t in pool for p in order[t][: args.per_type]]
    solve, solve_by_type, probes, t0 = [], [], [], time.time()

    def measure(step: int) -> None:
        acc = score_members(eng, {"s": 0}, probe, sb, max_new_tokens=probe_budget)["s"]
        probes.append({"step": step, **acc, "all": statistics.fmean(acc.values())})
        print(f"{mode} lr {lr:g} probe at step {step}: {probes[-1]['all']:.3f} {acc}", flush=True)

    if mode == "fresh":
        measure(0)
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
                1000 * step + args.seed,
                sb,
                budget,
                by_type=counts,
            )
        )
        solve_by_type.append({t: round(c[0] / c[1], 4) for t, c in counts.items() if c[1]})
        if mode == "fresh" and step % args.probe_every == 0:
            measure(step)
        print(
            f"{mode} lr {lr:g} step {step}/{steps}: solve {solve[-1]:.2f} ({time.time() - t0:.0f}s)",
            flush=True,
        )
    eng.close()
    q = max(1, steps // 4)
    return {
        "mode": mode,
        "lr": lr,
        "steps": steps,
        "solve_rate": solve,
        "solve_rate_by_type": solve_by_type,
        "solve_first_quarter": statistics.fmean(solve[:q]),
        "solve_last_quarter": statistics.fmean(solve[-q:]),
        "probe": probes,
        "seconds": round(time.time() - t0, 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="populora experiment control rl", description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", default="3e-3,1e-2", help="learning rates, comma-separated")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--per-type", type=int, default=8, help="problems per task type and step")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts per problem (and k of pass@k)")
    ap.add_argument("--temperature", type=float, default=0.6, help="rollout temperature (tiny-learn's)")
    ap.add_argument("--steps-fixed", type=int, default=20)
    ap.add_argument("--steps-fresh", type=int, default=40)
    ap.add_argument("--probe-every", type=int, default=20)
    ap.add_argument("--probe-size", type=int, default=64, help="probe problems per task type")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--types",
        default=",".join(TASKS),
        help="task types to train and probe, comma-separated (e.g. code_f)",
    )
    ap.add_argument(
        "--probe-set",
        choices=PROBE_SETS,
        default="fixed",
        help="the probe's items: the fixed sets (level easy) or the graded ones (asset v2's levels)",
    )
    ap.add_argument(
        "--probe-levels",
        default="",
        help="with --probe-set graded: only items of these levels (1, 1,2 or 1-3); default all",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="fixed,fresh", help="which controls to run (fixed, fresh or both)")
    ap.add_argument("--no-headroom", action="store_true", help="skip the greedy vs pass@k measurement")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 problem per type, 2 rollouts, 2 steps, 4 probe problems",
    )
    ap.add_argument("--out", default="runs/controls/learning_rl_controls.json")
    args = ap.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    bad = [t for t in types if t not in TASKS]
    if bad or not types:
        ap.error(
            f"--types: unknown task type(s) {', '.join(bad) or '(none given)'}; pick from {', '.join(TASKS)}"
        )
    try:
        levels = parse_levels(args.probe_levels) if args.probe_levels.strip() else ()
    except GradedError as err:
        ap.error(f"--probe-levels: {err}")
    if levels and args.probe_set != "graded":
        ap.error("--probe-levels needs --probe-set graded (the fixed probe sets have no levels)")
    # answers as long as the chosen probe set's longest perfect answers (None: the fixed sets' budgets)
    probe_budget = GRADED_BUDGET if args.probe_set == "graded" else None
    if args.quick:
        args.per_type, args.rollouts, args.steps_fixed, args.steps_fresh = 1, 2, 2, 2
        args.probe_every, args.probe_size = 2, 4
    torch.set_num_threads(args.threads)
    t0 = time.time()
    with Sandbox(workers=2, limits=Limits(timeout_s=2.0, memory_mb=256)) as sb:
        # The generator the model was pretrained on (graded levels for asset v2, as the trainer's seeds), its
        # train split with a seed of its own: never the probe's problems.
        levels_of_model = graded_seed_levels(resolve_model(args.model))
        seeds = synthetic_seeds(
            args.per_type * (args.steps_fresh + 1) + 8, sb, 1000 + args.seed, levels_of_model, tuple(types)
        )
        pool = {t: [p for p in seeds if p.task == t] for t in types}
        probe, _ = probe_selection(args.probe_set, args.probe_size, types, levels)
        room = {}
        if not args.no_headroom:
            base = build_engine(
                load_config(
                    "tiny-learn",
                    [f"model.name={args.model}", "population.teachers=1", "population.students=1"],
                )
            )
            room = headroom(
                base,
                probe,
                args.rollouts,
                args.temperature,
                sb,
                probe_budget,
            )
            base.close()
        results = [
            run(mode, float(lr), args, sb, pool, probe, probe_budget)
            for lr in args.lrs.split(",")
            for mode in args.modes.split(",")
        ]
    out = {
        "what": "one student adapter, RL without teachers: the same problems every step (fixed) or new generator "
        "problems every step (fresh); greedy probe on held-out problems",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        # the graded levels the problems were drawn from (None: the v1 generator, for a model without them)
        "problem_levels": list(levels_of_model) if levels_of_model else None,
        "headroom": room,
        "results": results,
        "seconds": round(time.time() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    k = args.rollouts
    if room:
        print(
            f"\nheadroom at T={args.temperature:g}: "
            + ", ".join(
                f"{t} greedy {r['greedy']:.2f} pass@1 {r['pass@1']:.2f} pass@{k} {r[f'pass@{k}']:.2f}"
                for t, r in room.items()
            )
        )
    print(
        f"{'mode':>6} {'lr':>7} {'steps':>5} {'solve 1st -> last quarter':>26} {'probe (all) start -> end':>25}"
    )
    for r in results:
        pr = f"{r['probe'][0]['all']:.3f} -> {r['probe'][-1]['all']:.3f}" if r["probe"] else "-"
        print(
            f"{r['mode']:>6} {r['lr']:>7g} {r['steps']:>5} "
            f"{r['solve_first_quarter']:>12.2f} -> {r['solve_last_quarter']:.2f} {pr:>25}"
        )
    print(f"wrote {args.out} ({out['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
