"""Time a step's score phase both ways on the same traces: `Trainer.score(batched=False)` (one `run_many` per
problem and round) and the default `tasks.score_many` path (one `run_many` per round for the whole step).

The traces are a tiny-preset trainer's, with hand-written student answers (a random tiny model writes no
parsable answers, so its step would run no sandbox job): PROBLEMS problems of each task type, ROLLOUTS answers
each (right, wrong, unparsable and, per problem, one looping answer when --loop is given).
Usage: PYTHONPATH=src python bench/score_batch.py [--problems 8] [--rollouts 6] [--reps 5] [--workers 2] [--loop]
       [--out bench/results/score_batch.json]   (appends this case's row to the JSON; prints the table so far)
"""

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from populora.config import load_config
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.train.records import ProposalTrace
from populora.train.trainer import Trainer


def traces_for(tr, n_problems: int, rollouts: int, loop: bool) -> list[ProposalTrace]:
    out = []

    def gen(prompt, text):
        ids = tr.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Generation(ids, text, [-1.0] * len(ids), "stop", tr.engine.encode(prompt), 2)

    for k in range(n_problems):
        prog = f"def f(x):\n    return x * {k + 2} + 1"
        prog_i = (
            f"def f(x):\n    if x == {k}:\n        return 1\n    while True:\n        pass" if loop else prog
        )
        for name, p_src, inputs in (
            ("code_i", prog_i, [str(k)]),
            ("code_o", prog, [str(k)]),
            ("code_f", prog, [str(k + j) for j in range(6)]),
        ):
            task = tr.tasks[name]
            p = task.problem_from(tr.sandbox, program=p_src, inputs=inputs, message="a linear map")
            gold = task.gold_answer(p)
            wrong = {"code_i": str(k + 1), "code_o": "-1", "code_f": "def f(x):\n    return x"}[name]
            looping = {
                "code_i": str(k + 1),
                "code_o": "-1",
                "code_f": "def f(x):\n    while True:\n        pass",
            }
            answers = [gold, wrong, "((", *[gold, wrong] * rollouts][:rollouts]
            if loop:
                answers[-1] = looping[name]
            trace = ProposalTrace("T0", "S0", name, problem=p)
            prompt = task.student_prompt(p, template="compact")
            trace.answers = [gen(prompt, task.render_answer(a, template="compact")) for a in answers]
            out.append(trace)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=8, help="problems per task type")
    ap.add_argument("--rollouts", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--loop", action="store_true", help="one looping answer per problem")
    ap.add_argument("--out", type=Path, default=Path("bench/results/score_batch.json"))
    a = ap.parse_args()
    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny", [f"sandbox.workers={a.workers}", "tasks.template=compact", "sandbox.timeout_s=1"]
    )
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    with tempfile.TemporaryDirectory() as d:
        tr = Trainer(cfg, Path(d) / "run", engine=engine, quiet=True)
        tr.setup()
        try:
            base = traces_for(tr, a.problems, a.rollouts, a.loop)
            times = {False: [], True: []}
            solves = {}
            for _ in range(a.reps):
                for batched in (False, True):
                    traces = copy.deepcopy(base)
                    t0 = time.perf_counter()
                    tr.score(traces, batched=batched)
                    times[batched].append(time.perf_counter() - t0)
                    solves[batched] = [t.solves for t in traces]
            assert solves[False] == solves[True], "batched verdicts differ"
            old, new = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"{len(base)} problems x {a.rollouts} answers, {a.workers} workers, loop={a.loop}: "
                f"per-problem {old:.2f} s, batched {new:.2f} s (medians of {a.reps}), ratio {old / new:.2f}x"
            )
            row = {
                "problems": len(base),
                "answers_each": a.rollouts,
                "workers": a.workers,
                "loop": a.loop,
                "per_problem_s": round(old, 4),
                "batched_s": round(new, 4),
                "ratio": round(old / new, 3),
                "reps": a.reps,
                "load_before": os.getloadavg()[0],
            }
            rows = json.loads(a.out.read_text())["rows"] if a.out.is_file() else []
            rows = [r for r in rows if (r["problems"], r["loop"]) != (row["problems"], row["loop"])] + [row]
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps({"bench": "score_batch", "rows": rows}, indent=1) + "\n")
            print("| problems | loop | per-problem s | batched s | ratio |")
            for r in rows:
                print(
                    f"| {r['problems']} | {r['loop']} | {r['per_problem_s']} | {r['batched_s']} | {r['ratio']}x |"
                )
        finally:
            tr.close()


if __name__ == "__main__":
    main()
