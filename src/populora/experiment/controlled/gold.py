"""Controlled check of the update, without self-play: can one adapter learn the gold answers it is given?

For each learning rate: 24 code_o probe problems (probe set items 128-151) get one training row each, the
gold answer with advantage +1 (what a correct rollout earns after whitening), for 8 optimiser steps of the
real engine (rank-4 q/k/v/o LoRA, AdamW, the trainer's loss). Greedy accuracy on those 24 problems and on 48
other probe problems (items 0-47) is measured every 2 steps. If the update is signed and sized right, the
trained problems' accuracy rises within a few steps; a flat line means the step is too small to change
greedy outputs, which is what a 30-step RL run would then also show.

populora experiment control gold [--lrs 1e-3,3e-3,1e-2] [--model tiny]
Writes runs/controls/learning_controls.json (--out; the recorded history: bench/results/learning_controls.json).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from populora.config import load_config
from populora.engine import TrainBatch, TrainRow
from populora.sandbox import Sandbox
from populora.tasks import get
from populora.train.probe import probe_subset, score_members
from populora.train.setup import build_engine


def run_lr(lr: float, model: str, sb, steps: int = 8) -> dict:
    cfg = load_config(
        "tiny", ["population.teachers=1", "population.students=1", f"rl.lr={lr}", f"model.name={model}"]
    )
    eng = build_engine(cfg)
    probe = probe_subset(256)["code_o"]
    train, held = {"code_o": probe[128:152]}, {"code_o": probe[:48]}
    task = get("code_o")
    rows = []
    for p in train["code_o"]:
        gold = task.render_answer(task.gold_answer(p), template="compact")
        ids = eng.tokenizer(gold, add_special_tokens=False)["input_ids"] + [eng.tokenizer.eos_token_id]
        rows.append(
            TrainRow(
                slot=0,
                prompt_ids=eng.encode(task.student_prompt(p, template="compact")),
                response_ids=ids,
                advantages=1.0,
            )
        )
    curve = []

    def measure(step: int) -> None:
        tr = score_members(eng, {"s": 0}, train, sb)["s"]["code_o"]
        he = score_members(eng, {"s": 0}, held, sb)["s"]["code_o"]
        curve.append({"step": step, "trained": tr, "held_out": he})
        print(f"lr {lr:g} step {step}: trained {tr:.3f} held-out {he:.3f}", flush=True)

    measure(0)
    for step in range(1, steps + 1):
        eng.train_step(TrainBatch(rows))
        if step % 2 == 0:
            measure(step)
    eng.close()
    return {"lr": lr, "curve": curve}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="populora experiment control gold", description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", default="1e-3,3e-3,1e-2")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out", default="runs/controls/learning_controls.json")
    args = ap.parse_args(argv)
    t0 = time.time()
    with Sandbox(workers=2) as sb:
        results = [run_lr(float(x), args.model, sb) for x in args.lrs.split(",")]
    out = {
        "what": "8 steps of advantage +1 on the gold answers of 24 code_o probe problems; greedy accuracy",
        "model": args.model,
        "results": results,
        "seconds": round(time.time() - t0, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'lr':>8} {'trained 0 -> 8':>16} {'held-out 0 -> 8':>16}")
    for r in results:
        a, b = r["curve"][0], r["curve"][-1]
        print(
            f"{r['lr']:>8g} {a['trained']:>7.3f} -> {b['trained']:.3f} {a['held_out']:>7.3f} -> {b['held_out']:.3f}"
        )


if __name__ == "__main__":
    main()
