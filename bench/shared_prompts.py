"""The update with each distinct prompt's forward shared (`rl.share_prompt_forward`, engine/shared_prompts.py)
against the plain forward (every row's prompt again), on the rows of real training steps.

First a `--preset` trainer (default tiny-learn with 4 teachers + 4 students, the decisive experiment's 4T+4S arm;
no probe, no evolution) runs `--steps` steps and every `train_step`'s rows are kept. Then two engines with the
same adapters (random LoRA factors, so the adapters matter), one sharing and one not, run each kept step's
`accumulate_gradients` (forward and backward, no optimizer step) alternately `--reps` times, so the load of a
shared machine hits both alike. Reported per path: CPU seconds of this process per step, and per step the
positions the forwards run (raw: every row's prompt + response; padded: as the micro-batches run them), the
rows that share a prompt, and the largest difference between the two paths' gradients relative to their scale.

python bench/shared_prompts.py [--steps 3] [--reps 2] [--out bench/results/shared_prompts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from populora.config import load_config
from populora.engine import TrainRow, build
from populora.engine.shared_prompts import prompt_groups, shared_cost, split_shared
from populora.rl.loss import row_weights
from populora.train.trainer import Trainer


def collect_rows(preset: str, steps: int, overrides: list[str]) -> list[list[TrainRow]]:
    """The rows of every train step of a short run (the trainer's own engine keeps training)."""
    cfg = load_config(
        preset, ["diagnostics.probe_every=0", "evolution.every=0", f"train.steps={steps}", *overrides]
    )
    kept: list[list[TrainRow]] = []
    with tempfile.TemporaryDirectory(prefix="populora-bench-") as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", quiet=True)
        trainer.setup()
        real = trainer.engine.train_step

        def keep(batch, **kw):
            kept.append(list(batch.rows))
            return real(batch, **kw)

        trainer.engine.train_step = keep
        try:
            trainer.fit()
        finally:
            trainer.close()
    return kept


def padded_positions(engine, rows: list[TrainRow]) -> int:
    """Positions the micro-batches of `engine` run for `rows` (padding included)."""
    total = 0
    for group in engine._batches(rows):
        sub = [rows[i] for i in group]
        first, _ = prompt_groups(sub)
        if engine._shares_prompt_forward() and len(first) < len(sub):
            total += shared_cost([len(sub[i].prompt_ids) for i in first], [len(r.response_ids) for r in sub])
        else:
            total += len(sub) * max(len(r.prompt_ids) + len(r.response_ids) for r in sub)
    return total


def gradients(engine, rows: list[TrainRow]) -> tuple[list[torch.Tensor], float]:
    weights = row_weights([len(r.response_ids) for r in rows], [r.loss_key for r in rows], engine.loss_agg)
    c0 = time.process_time()
    engine.accumulate_gradients(rows, weights)
    cpu = time.process_time() - c0
    grads = [p.grad.clone() for p in engine.params]
    for p in engine.params:
        p.grad = None
    return grads, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny-learn")
    ap.add_argument("--teachers", type=int, default=4)
    ap.add_argument("--students", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="bench/results/shared_prompts.json")
    a = ap.parse_args()
    overrides = [f"population.teachers={a.teachers}", f"population.students={a.students}"]
    t0 = time.perf_counter()
    steps = collect_rows(a.preset, a.steps, overrides)
    cfg = load_config(a.preset, overrides)
    engines = {}
    for share in (False, True):
        engines[share] = build(
            cfg.model.name,
            n_slots=cfg.n_slots,
            rank=cfg.lora.rank,
            alpha=cfg.lora.alpha,
            device="cpu",
            seed=0,
            train_threads=cfg.train.threads,
            micro_batch_tokens=cfg.rl.micro_batch_tokens,
            share_prompts=share,
        )
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in engines[share].params:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    cpu: dict[bool, list[float]] = {False: [], True: []}
    per_step = []
    for k, rows in enumerate(steps):
        diffs = []
        for _ in range(a.reps):
            out = {}
            for share in (False, True):  # alternated: the machine's load hits both alike
                out[share], seconds = gradients(engines[share], rows)
                cpu[share].append(seconds)
            scale = max(x.abs().max().item() for x in out[False])
            diffs.append(
                max((x - y).abs().max().item() for x, y in zip(out[False], out[True], strict=True)) / scale
            )
        shared, alone = split_shared(rows)
        first, _ = prompt_groups(rows)
        per_step.append(
            {
                "step": k + 1,
                "rows": len(rows),
                "rows_sharing_a_prompt": len(shared),
                "distinct_prompts": len(first),
                "raw_positions_plain": sum(len(r.prompt_ids) + len(r.response_ids) for r in rows),
                "raw_positions_shared": sum(len(rows[i].prompt_ids) for i in first)
                + sum(len(r.response_ids) for r in rows),
                "padded_positions_plain": padded_positions(engines[False], rows),
                "padded_positions_shared": padded_positions(engines[True], rows),
                "max_grad_diff_over_scale": max(diffs),
            }
        )
    mean = {s: sum(v) / len(v) for s, v in cpu.items()}
    result = {
        "benchmark": "shared_prompts",
        "command": " ".join(["python bench/shared_prompts.py", *sys.argv[1:]]),
        "preset": a.preset,
        "overrides": overrides,
        "steps": a.steps,
        "reps": a.reps,
        "method": "accumulate_gradients (forward + backward) on the rows of real train steps, the two paths "
        "alternated; CPU seconds of this process",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_1min_at_end": os.getloadavg()[0],
        },
        "cpu_s_per_step": {"plain": mean[False], "shared": mean[True]},
        "cpu_s_all": {"plain": cpu[False], "shared": cpu[True]},
        "speedup": mean[False] / mean[True],
        "per_step": per_step,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(
        "| step | rows | sharing a prompt | raw positions plain -> shared | padded plain -> shared | grad diff / scale |"
    )
    print("|---|---|---|---|---|---|")
    for s in per_step:
        print(
            f"| {s['step']} | {s['rows']} | {s['rows_sharing_a_prompt']} | {s['raw_positions_plain']} -> "
            f"{s['raw_positions_shared']} | {s['padded_positions_plain']} -> {s['padded_positions_shared']} | "
            f"{s['max_grad_diff_over_scale']:.1e} |"
        )
    print(
        f"update CPU s per step: plain {mean[False]:.2f}, shared {mean[True]:.2f} -> {result['speedup']:.2f}x "
        f"(load {result['machine']['load_1min_at_end']:.1f})"
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
