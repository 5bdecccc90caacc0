"""Benchmark: where one smol step's time goes on this machine (issue 18), smol vs smol-azr in the same run.

python bench/smol.py [--presets smol,smol-azr] [--steps 1] [--out bench/results/smol.json]

For each preset it trains `--steps` steps in a temporary run folder and records, per phase, wall-clock and the
process's CPU seconds (all torch threads; the sandbox workers are other processes), the mean prompt length of
teacher and student generations, generated and trained tokens, valid proposals and solves, and `uptime`'s load
average before and after. On a shared machine the wall-clock is inflated by the other processes' load (recorded
with each measurement); CPU seconds / threads is the wall-clock the step would take on idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from populora.config import load_config
from populora.train.trainer import Trainer

PHASES = ("teacher", "validate", "student", "score", "update", "evolution")


class TimedTrainer(Trainer):
    """The trainer with each phase's process CPU time recorded next to its wall-clock."""

    cpu: dict[str, float]

    @contextmanager
    def _phase(self, timings, name):
        c0 = time.process_time()
        with super()._phase(timings, name):
            yield
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c0


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 1) if xs else None


def measure(preset: str, steps: int, overrides: list[str]) -> dict:
    cfg = load_config(preset, [f"train.steps={steps}", "train.checkpoint_every=1000", *overrides])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tr = TimedTrainer(cfg, Path(tmp) / "run", quiet=True)
        t0 = time.perf_counter()
        try:
            tr.setup()
            setup_s = time.perf_counter() - t0
            out_steps = []
            for step in range(1, steps + 1):
                tr.cpu = {}
                c0 = time.process_time()
                res = tr.step(step)
                cpu_step = time.process_time() - c0
                traces = res.traces
                answers = [g for t in traces for g in t.answers]
                rec = res.record
                out_steps.append(
                    {
                        "step": step,
                        "wall_s": round(rec["step_s"], 1),
                        "cpu_s": round(cpu_step, 1),
                        "idle_estimate_s": round(cpu_step / cfg.train.threads, 1),
                        "phase_wall_s": {p: round(rec["phase_s"].get(p, 0.0), 1) for p in PHASES},
                        "phase_cpu_s": {p: round(tr.cpu.get(p, 0.0), 1) for p in PHASES},
                        "teacher_prompts": len(traces),
                        "teacher_prompt_tokens_mean": _mean([len(t.gen.prompt_ids) for t in traces]),
                        "teacher_response_tokens_mean": _mean([len(t.gen.token_ids) for t in traces]),
                        "valid_proposals": sum(t.valid for t in traces),
                        "student_rollouts": len(answers),
                        "student_prompt_tokens_mean": _mean([len(g.prompt_ids) for g in answers]),
                        "student_response_tokens_mean": _mean([len(g.token_ids) for g in answers]),
                        "solved_rollouts": sum(sum(t.solves) for t in traces if t.solves),
                        "generated_tokens": rec["tokens"],
                        "train_tokens": rec["train_tokens"],
                    }
                )
                print(json.dumps({"preset": preset, **out_steps[-1]}), flush=True)
        finally:
            tr.close()
    return {
        "preset": preset,
        "template": cfg.tasks.template,
        "prompts_per_matchup": cfg.tasks.prompts,
        "references": cfg.tasks.references,
        "rollouts": cfg.rl.rollouts,
        "token_budgets": [cfg.tasks.teacher_max_new_tokens, cfg.tasks.student_max_new_tokens],
        "threads": cfg.train.threads,
        "setup_s": round(setup_s, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "steps": out_steps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="smol,smol-azr")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="extra config overrides (repeatable)")
    ap.add_argument("--out", default="bench/results/smol.json")
    args = ap.parse_args()
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "note": "shared machine: see loadavg; idle_estimate_s = cpu_s/threads",
        },
        "runs": [measure(p, args.steps, args.set) for p in args.presets.split(",")],
    }
    print(
        f"\n{'preset':<10} {'wall s':>7} {'cpu s':>7} {'idle~s':>7}  phases wall (teacher/student/update)  load"
    )
    for r in results["runs"]:
        for s in r["steps"]:
            ph = s["phase_wall_s"]
            print(
                f"{r['preset']:<10} {s['wall_s']:>7} {s['cpu_s']:>7} {s['idle_estimate_s']:>7}  "
                f"{ph['teacher']}/{ph['student']}/{ph['update']}  {r['loadavg_before'][0]}"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
