"""Why the teachers' valid-proposal rate does not rise: one teacher, rewarded for validity alone.

`populora.experiment.teacher_controls`: the trainer's prompts (buffer references), sandbox validation and
REINFORCE++-baseline update of one teacher adapter, reward 0 valid / -1 invalid, no students. Arms, per seed:

  none        the same loop with no update (the prompts still drift as the buffers fill with its proposals)
  lr=L        a correctly signed update at each learning rate of --lrs
  negated     advantages times -1 at --negated-lr (rewards invalid proposals): the update's power to move
              validity at all

With --credits sequence,span each signed arm also runs with rl.teacher_credit=span: an invalid proposal's negative
advantage only on the tokens of the block validation rejected (its bad input, its program), 0 on the rest.

With --per-prompt m (= rl.teacher_group) every prompt is sampled m times and its proposals share a per-prompt
baseline (the students' n rollouts have one; at the paper's 1, a group of one keeps its raw reward).

The valid rate is measured at T=1 (tiny-learn's teacher temperature) on --eval-rounds x --prompts fresh
proposals before and after (no update, no buffer change); so is the mean per-token log-probability of the
sampled proposals (it falls when the distribution spreads). Compared against `none` in the same run.

populora experiment control teacher [--seeds 2] [--steps 30] [--prompts 24] [--lrs 1e-3,3e-3,1e-2]
       [--per-prompt 4 --prompts 6 --eval-rounds 32] [--credits sequence,span] [--negated-lr 0] [--workers 2]
       [--set rl.token_weighted=false] [--out JSON]
       [--quick]
Writes runs/controls/learning_teacher_controls.json (--out; the recorded history: bench/results/learning_teacher_controls.json) (docs/learning.md, "Why the teachers' valid rate is flat").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from populora.config import load_config
from populora.experiment.teacher_controls import TeacherControl
from populora.train.trainer import Trainer


def run_arm(arm: dict, args: dict) -> dict:
    """One arm on one seed in its own process (its own sandbox and engine)."""
    overrides = [
        "population.teachers=1",
        "population.students=1",
        f"rl.lr={arm['lr'] or 1e-3}",  # `none` never steps the optimiser; any valid value
        f"tasks.prompts={args['prompts']}",
        f"train.threads={args['threads']}",
        f"train.seed={arm['seed']}",
        f"model.name={args['model']}",
        "diagnostics.probe_every=0",
        "sandbox.workers=1",
        f"rl.teacher_group={args['per_prompt']}",
        f"rl.teacher_credit={arm.get('credit', 'sequence')}",
        *args["set"],
    ]
    cfg = load_config("tiny-learn", overrides)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(cfg, Path(tmp) / "run", quiet=True)
        tr.setup()
        try:
            ctl = TeacherControl(tr, sign=arm["sign"], update=arm["lr"] > 0)
            before = ctl.measure(args["eval_rounds"], 0)
            curve = [ctl.step(s) for s in range(1, args["steps"] + 1)]
            after = ctl.measure(args["eval_rounds"], 1)
        finally:
            tr.close()
    return arm | {
        "before": before,
        "after": after,
        "change": after["valid"] - before["valid"],
        "logprob_change": after["logprob"] - before["logprob"],
        "updates": sum(c["updated"] for c in curve),
        "curve_valid": [round(c["valid"], 4) for c in curve],
        "seconds": round(time.time() - t0, 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="populora experiment control teacher", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=24, help="prompts per step (tiny-learn: 6 per matchup)")
    ap.add_argument(
        "--per-prompt",
        type=int,
        default=1,
        help="proposals per prompt, sharing a per-prompt baseline (sets rl.teacher_group; the paper's: 1)",
    )
    ap.add_argument("--lrs", default="1e-3,3e-3,1e-2", help="learning rates of the signed arms")
    ap.add_argument("--negated-lr", type=float, default=1e-2, help="0 leaves the negated arm out")
    ap.add_argument(
        "--credits",
        default="sequence",
        help="rl.teacher_credit of the signed arms, comma-separated: sequence (the paper's), span "
        "(an invalid proposal's advantage only on the block validation rejected)",
    )
    ap.add_argument("--eval-rounds", type=int, default=8, help="measurement proposals = this x --prompts")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="arms run in parallel processes")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        help="key=value config override of every arm (repeatable), "
        "e.g. rl.token_weighted=false (whiten per proposal instead of per token)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke: 1 seed, 3 steps, 6 prompts, 1 eval round")
    ap.add_argument("--out", default="runs/controls/learning_teacher_controls.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.prompts, args.eval_rounds, args.lrs = 1, 3, 6, 1, "3e-3"
        args.credits, args.negated_lr = "sequence,span", 1e-2
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lrs = [float(x) for x in args.lrs.split(",")]
    credits = [c.strip() for c in args.credits.split(",") if c.strip()]
    arms = [
        {"arm": name, "lr": lr, "sign": sign, "seed": seed, "credit": credit}
        for seed in range(args.seeds)
        for name, lr, sign, credit in [("none", 0.0, 1.0, "sequence")]
        + [
            (f"lr={lr:g}" + ("" if credit == "sequence" else f" {credit}"), lr, 1.0, credit)
            for credit in credits
            for lr in lrs
        ]
        + (
            [(f"negated lr={args.negated_lr:g}", args.negated_lr, -1.0, "sequence")]
            if args.negated_lr
            else []
        )
    ]
    t0 = time.time()
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "quick", "workers")}
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run_arm, arm, settings) for arm in arms]
        results = []
        for i, f in enumerate(futures, 1):
            r = f.result()
            results.append(r)
            print(
                f"[{i}/{len(arms)}] seed {r['seed']} {r['arm']:<18} valid {r['before']['valid']:.3f} -> "
                f"{r['after']['valid']:.3f}  ({time.time() - t0:.0f}s)",
                flush=True,
            )
    names = list(dict.fromkeys(r["arm"] for r in results))
    summary = {}
    for name in names:
        rs = [r for r in results if r["arm"] == name]
        summary[name] = {
            "valid_before": statistics.fmean(r["before"]["valid"] for r in rs),
            "valid_after": statistics.fmean(r["after"]["valid"] for r in rs),
            "change": statistics.fmean(r["change"] for r in rs),
            "per_seed_change": [round(r["change"], 4) for r in rs],
            "logprob_change": statistics.fmean(r["logprob_change"] for r in rs),
            "code_f_after": statistics.fmean(r["after"].get("code_f", 0.0) for r in rs),
        }
    out = {
        "what": "one teacher adapter, reward 0 valid / -1 invalid, no students; valid rate at T=1 on fresh "
        "proposals before and after, against the same loop with no update",
        "settings": settings,
        "summary": summary,
        "results": results,
        "seconds": round(time.time() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    n_eval = args.eval_rounds * args.prompts
    print(f"\nvalid rate of {n_eval} fresh T=1 proposals, mean over {args.seeds} seed(s), {args.steps} steps")
    print(f"{'arm':<18} {'before':>7} {'after':>7} {'change':>8} {'per seed':>20} {'logprob chg':>12}")
    for name, s in summary.items():
        seeds = ", ".join(f"{c:+.2f}" for c in s["per_seed_change"])
        print(
            f"{name:<18} {s['valid_before']:>7.3f} {s['valid_after']:>7.3f} {s['change']:>+8.3f} {seeds:>20} "
            f"{s['logprob_change']:>+12.3f}"
        )
    print(f"wrote {args.out} ({out['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
