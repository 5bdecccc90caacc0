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

populora experiment control rl [--lrs 3e-3,1e-2] [--model tiny] [--quick]
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
from populora.experiment.controls import headroom, rl_step
from populora.names import TASKS
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.sandbox import Limits, Sandbox
from populora.train.probe import probe_subset, score_members
from populora.train.setup import build_engine, synthetic_seeds


def run(mode: str, lr: float, args, sb, pool: dict, probe: dict) -> dict:
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
    solve, probes, t0 = [], [], time.time()

    def measure(step: int) -> None:
        acc = score_members(eng, {"s": 0}, probe, sb)["s"]
        probes.append({"step": step, **acc, "all": statistics.fmean(acc.values())})
        print(f"{mode} lr {lr:g} probe at step {step}: {probes[-1]['all']:.3f} {acc}", flush=True)

    if mode == "fresh":
        measure(0)
    k = args.per_type
    for step in range(1, steps + 1):
        problems = (
            fixed if mode == "fixed" else [p for t in pool for p in order[t][k * step : k * (step + 1)]]
        )
        solve.append(
            rl_step(eng, problems, args.rollouts, args.temperature, 1000 * step + args.seed, sb, budget)
        )
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
    if args.quick:
        args.per_type, args.rollouts, args.steps_fixed, args.steps_fresh = 1, 2, 2, 2
        args.probe_every, args.probe_size = 2, 4
    torch.set_num_threads(args.threads)
    t0 = time.time()
    with Sandbox(workers=2, limits=Limits(timeout_s=2.0, memory_mb=256)) as sb:
        # The generator's train split with a seed of its own: never the probe's problems.
        seeds = synthetic_seeds(args.per_type * (args.steps_fresh + 1) + 8, sb, 1000 + args.seed)
        pool = {t: [p for p in seeds if p.task == t] for t in TASKS}
        probe = probe_subset(args.probe_size)
        room = {}
        if not args.no_headroom:
            base = build_engine(
                load_config(
                    "tiny-learn",
                    [f"model.name={args.model}", "population.teachers=1", "population.students=1"],
                )
            )
            room = headroom(base, probe, args.rollouts, args.temperature, sb)
            base.close()
        results = [
            run(mode, float(lr), args, sb, pool, probe)
            for lr in args.lrs.split(",")
            for mode in args.modes.split(",")
        ]
    out = {
        "what": "one student adapter, RL without teachers: the same problems every step (fixed) or new generator "
        "problems every step (fresh); greedy probe on held-out problems",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
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
