"""What the students of a `tiny-learn` run learned on code_o: to write the execution trace before answering.

The bundled asset was pretrained with `--trace-fraction 0.5` (docs/tiny-model.md): half of its code_o answers
carry a ```trace block, half answer bare, so its greedy answer starts bare while sampled answers trace about a
third of the time, and traced answers are right more often. This bench reads the final checkpoint of each
run folder given, puts every student adapter on the base model and answers the run's code_o probe problems
greedy: the share of answers that carry a trace and the accuracy of traced and bare answers, against the base
model (step 0) on the same problems. It also forces the trace (the prompt ends with "```trace") on the base
model, which bounds what learning to trace can give.

populora experiment control trace-share runs/learning/runs/seed0 [more run folders] [--out JSON]
Writes runs/controls/learning_trace_share.json (--out; the recorded history: bench/results/learning_trace_share.json) by default (docs/learning.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from populora.config import resume_config
from populora.diagnostics.run import load_run
from populora.engine import GenRequest
from populora.lora.peft_io import load_peft
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.pretrain.trace import TRACE_LANG
from populora.sandbox import Limits, Sandbox
from populora.tasks import get
from populora.train.checkpoint import latest_checkpoint
from populora.train.probe import probe_subset
from populora.train.setup import build_engine

TRACE_OPEN = f"```{TRACE_LANG}"


def style_numbers(engine, slot: int, problems: list, sandbox, prefix: str = "") -> dict:
    """Greedy code_o answers of `slot`: trace share and accuracy overall, traced and bare."""
    task = get("code_o")
    prompts = [task.student_prompt(p, template="compact") + prefix for p in problems]
    reqs = [
        GenRequest(slot=slot, prompt=q, max_new_tokens=MAX_NEW_TOKENS["code_o"], temperature=0.0)
        for q in prompts
    ]
    texts = [prefix + g.text for g in engine.generate(reqs, seed=0)]
    right = [
        bool(task.score(p, [task.parse_answer(t, template="compact")], sandbox)[0])
        for p, t in zip(problems, texts, strict=True)
    ]
    traced = [TRACE_OPEN in t for t in texts]

    def acc(keep: bool) -> float | None:
        flags = [r for r, t in zip(right, traced, strict=True) if t == keep]
        return sum(flags) / len(flags) if flags else None

    return {
        "accuracy": sum(right) / len(right),
        "trace_share": sum(traced) / len(traced),
        "accuracy_traced": acc(True),
        "accuracy_bare": acc(False),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="populora experiment control trace-share", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (each with a checkpoint)")
    ap.add_argument("--out", type=Path, default=Path("runs/controls/learning_trace_share.json"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    results = {"runs": {}}
    with Sandbox(workers=2, limits=Limits(timeout_s=2.0, memory_mb=256)) as sb:
        engine = None
        for run in args.runs:
            found = latest_checkpoint(run)
            if found is None:
                raise SystemExit(f"error: {run} has no checkpoint; give a finished run folder")
            step, ckpt = found
            # The run's own config (as `populora train --resume` reads it), with this bench's thread count.
            cfg = resume_config(load_run(run).config, [f"train.threads={args.threads}"])
            problems = probe_subset(cfg.diagnostics.probe_size, ["code_o"])["code_o"]
            if engine is None:
                engine = build_engine(cfg)
                base = style_numbers(engine, 0, problems, sb)
                forced = style_numbers(engine, 0, problems, sb, prefix=TRACE_OPEN + "\n")
                results["base"] = base
                results["base_trace_forced"] = forced
                results["probe_problems"] = len(problems)
                print(f"{'base model (step 0)':<34} {_row(base)}")
                print(f"{'base, trace forced':<34} {_row(forced)}")
            students = sorted(d.name for d in (ckpt / "adapters").iterdir() if d.name.startswith("S"))
            per = {}
            for s in students:
                engine.set_adapter(1, load_peft(ckpt / "adapters" / s))
                per[s] = style_numbers(engine, 1, problems, sb)
                print(f"{f'{run.name} {s} (step {step})':<34} {_row(per[s])}")
            results["runs"][str(run)] = {"step": step, "students": per}
    finals = [m for r in results["runs"].values() for m in r["students"].values()]
    results["students_mean"] = {
        k: statistics.mean(m[k] for m in finals if m[k] is not None) for k in ("accuracy", "trace_share")
    }
    results["seconds"] = round(time.time() - t0, 1)
    print(
        f"{'students at the end (mean)':<34} accuracy {results['students_mean']['accuracy']:.3f}  "
        f"trace share {results['students_mean']['trace_share']:.3f}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


def _row(m: dict) -> str:
    fmt = lambda v: "  -  " if v is None else f"{v:.3f}"  # noqa: E731
    return (
        f"accuracy {m['accuracy']:.3f}  trace share {m['trace_share']:.3f}  "
        f"traced {fmt(m['accuracy_traced'])}  bare {fmt(m['accuracy_bare'])}"
    )


if __name__ == "__main__":
    main()
