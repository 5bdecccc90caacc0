"""What the fixed probe costs on the bundled model (train/probe.py), per probe size and scoring mode.

For 2 members (fresh adapters) at each probe size: the free greedy answers only (the probe before answer
styles were scored), the free answers plus both code_o styles forced and generated (forcing without reuse), and
the probe as it runs (the free answer reused as the forced answer of its own style, only the other style
generated). CPU seconds are this process's (the sandbox's workers are not counted; scoring is a small part),
wall seconds the clock's. Also counts the answers that ran into their token budget: stop strings at the end of
the answer block would save only those.

python bench/probe_speed.py [--sizes 64,256] [--members 2] [--out bench/results/probe_speed.json]

`--dtypes`: instead, the probe on the graded sets (`--sizes` items per task type, graded budgets) with the frozen
base generating in float32, in bfloat16 and with its `Linear`s in int8 (`model.gen_dtype`, engine/gen_dtype.py),
alternated `--reps` times in one run: CPU seconds, tokens per CPU-second, each dtype's accuracy per task and how
many verdicts agree with float32's (default output bench/results/probe_speed_dtypes.json).

`--threads`: instead, the graded probe (`--sizes` items per task type, graded budgets) with three thread
settings alternated `--reps` times in one run: everything on one thread (the lean path before 2026-12-06), the
prefill on two threads and decoding on one (the engine's default with `train.threads` 2), and everything on two;
wall and CPU seconds, and whether the accuracies agree (default output bench/results/probe_speed_threads.json).

`--paths`: instead, the probe as it runs through the engine's original decode loop (`gen_path="forward"`) and
the lean path (`"lean"`, engine/decode.py), alternated `--reps` times in one run, with a check that both give
the same answers (default output bench/results/probe_speed_paths.json).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from populora.config import load_config
from populora.engine import GenRequest
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.sandbox import Sandbox
from populora.tasks import get
from populora.train.probe import ANSWER_STYLES, PROBE_SEED, probe_members, probe_subset
from populora.train.setup import build_engine

STYLES = ANSWER_STYLES["compact"]


class Counting:
    """The engine, counting requests, generated tokens and answers cut by their token budget."""

    def __init__(self, engine):
        self.engine, self.requests, self.tokens, self.cut = engine, 0, 0, 0

    def generate(self, requests, seed=None, **kw):
        gens = self.engine.generate(requests, seed=seed, **kw)
        self.requests += len(gens)
        self.tokens += sum(len(g.token_ids) for g in gens)
        self.cut += sum(g.finish_reason == "length" for g in gens)
        return gens


def measure(fn) -> dict:
    w0, c0 = time.perf_counter(), time.process_time()
    counted = fn()
    return {
        "wall_s": round(time.perf_counter() - w0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
        "answers": counted.requests,
        "tokens": counted.tokens,
        "cut_by_budget": counted.cut,
        "load_1min": round(os.getloadavg()[0], 2),
    }


def alternate(engine, settings: dict, probe, reps: int, size: int) -> tuple[dict[str, list[dict]], dict]:
    """`probe(counting_engine)` under each setting in turn (`settings[name]()` puts it in force), `reps` rounds,
    so a shared machine's load hits every setting alike; returns each setting's measurements and the result of
    its last probe."""
    rows: dict[str, list[dict]] = {name: [] for name in settings}
    results: dict = {}
    for _ in range(reps):
        for name, apply in settings.items():
            apply()

            def run(name=name):
                eng = Counting(engine)
                results[name] = probe(eng)
                return eng

            rows[name].append(measure(run))
            print(f"size {size:>3} {name:<9} {rows[name][-1]}", flush=True)
    return rows, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--paths", action="store_true", help="old vs new generation path (see the docstring)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument(
        "--dtypes", action="store_true", help="float32 vs bfloat16 vs int8 generation (see the docstring)"
    )
    ap.add_argument(
        "--threads", action="store_true", help="prefill and decode thread counts (see the docstring)"
    )
    args = ap.parse_args()
    cfg = load_config("tiny-learn", [f"population.teachers={args.members}"])
    engine = build_engine(cfg)
    slots = {f"M{k}": k for k in range(args.members)}
    if args.paths:
        return compare_paths(engine, slots, args)
    if args.dtypes:
        return compare_dtypes(engine, slots, args)
    if args.threads:
        return compare_threads(engine, slots, args)
    args.out = args.out or Path("bench/results/probe_speed.json")
    code_o = get("code_o")
    results: dict = {"members": args.members, "threads": engine.gen_threads, "sizes": {}}
    with Sandbox(workers=2) as sb:
        probe_members(engine, slots, probe_subset(4), sb)  # warm-up
        for size in map(int, args.sizes.split(",")):
            problems = probe_subset(size)

            def free(problems=problems):
                eng = Counting(engine)
                probe_members(eng, slots, problems, sb)
                return eng

            def no_reuse(problems=problems):
                eng = Counting(engine)
                probe_members(eng, slots, problems, sb)
                reqs = [
                    GenRequest(
                        s, code_o.student_prompt(p, template="compact") + o, MAX_NEW_TOKENS["code_o"], 0.0
                    )
                    for o in STYLES["code_o"].values()
                    for p in problems["code_o"]
                    for s in slots.values()
                ]
                eng.generate(reqs, seed=PROBE_SEED)
                return eng

            def styled(problems=problems):
                eng = Counting(engine)
                probe_members(eng, slots, problems, sb, styles=STYLES)
                return eng

            row = {"free": measure(free), "styles_no_reuse": measure(no_reuse), "styles": measure(styled)}
            results["sizes"][size] = row
            for name, m in row.items():
                print(f"size {size:>3} {name:<16} {m}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


def compare_paths(engine, slots, args) -> None:
    """The probe with answer styles, old and new generation path alternated; CPU and wall seconds of each."""
    out = args.out or Path("bench/results/probe_speed_paths.json")
    results: dict = {"members": args.members, "threads": engine.gen_threads, "reps": args.reps, "sizes": {}}
    with Sandbox(workers=2) as sb:
        probe_members(engine, slots, probe_subset(4), sb, styles=STYLES)  # warm-up
        for size in map(int, args.sizes.split(",")):
            problems = probe_subset(size)
            row, texts = alternate(
                engine,
                {path: (lambda path=path: setattr(engine, "gen_path", path)) for path in ("forward", "lean")},
                lambda eng, problems=problems: probe_members(eng, slots, problems, sb, styles=STYLES).texts,
                args.reps,
                size,
            )
            cpu = {p: min(m["cpu_s"] for m in row[p]) for p in ("forward", "lean")}
            wall = {p: min(m["wall_s"] for m in row[p]) for p in ("forward", "lean")}
            row["speedup_cpu"] = cpu["forward"] / cpu["lean"]
            row["speedup_wall"] = wall["forward"] / wall["lean"]
            row["identical_answers"] = texts["forward"] == texts["lean"]
            results["sizes"][size] = row
            print(
                f"size {size}: lean {row['speedup_cpu']:.2f}x CPU, {row['speedup_wall']:.2f}x wall (best of "
                f"{args.reps}); identical answers: {row['identical_answers']}",
                flush=True,
            )
    engine.gen_path = "lean"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


def compare_dtypes(engine, slots, args) -> None:
    """The graded probe with float32, bfloat16 and int8 generation alternated; CPU seconds, rates and agreement."""
    import torch

    from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET
    from populora.pretrain.graded_probe import probe_selection

    out = args.out or Path("bench/results/probe_speed_dtypes.json")
    lows = {"float32": None, "bfloat16": torch.bfloat16, "int8": "int8"}
    weights = {name: engine.generation_weights(low) for name, low in lows.items()}
    results: dict = {"members": args.members, "threads": engine.gen_threads, "reps": args.reps, "sizes": {}}
    with Sandbox(workers=2) as sb:
        for size in map(int, args.sizes.split(",")):
            problems, _ = probe_selection("graded", size, ["code_i", "code_o", "code_f"])
            row, verdicts = alternate(
                engine,
                {
                    name: (lambda low=low: setattr(engine, "gen_weights", low))
                    for name, low in weights.items()
                },
                lambda eng, problems=problems: probe_members(
                    eng, slots, problems, sb, max_new_tokens=GRADED_BUDGET
                ),
                args.reps,
                size,
            )
            for m in (m for runs in row.values() for m in runs):
                m["tokens_per_cpu_s"] = round(m["tokens"] / max(m["cpu_s"], 1e-9), 1)
            engine.gen_weights = None
            cpu = {d: min(m["cpu_s"] for m in row[d]) for d in weights}
            rate = {d: max(m["tokens_per_cpu_s"] for m in row[d]) for d in weights}
            row["accuracy"] = {d: verdicts[d].accuracy() for d in verdicts}
            a = verdicts["float32"].correct["free"]
            for name in ("bfloat16", "int8"):
                b = verdicts[name].correct["free"]
                pairs = [(x, y) for m in a for t in a[m] for x, y in zip(a[m][t], b[m][t], strict=True)]
                # keys without a suffix are bfloat16's, as in the record of 2026-12-05
                key = "" if name == "bfloat16" else "_int8"
                row["speedup_cpu" + key] = cpu["float32"] / cpu[name]
                row["speedup_tokens_per_cpu_s" + key] = rate[name] / rate["float32"]
                row["verdicts_agree" + key] = sum(x == y for x, y in pairs) / len(pairs)
                row["verdicts"] = len(pairs)
                print(
                    f"size {size}: {name} {row['speedup_cpu' + key]:.2f}x less CPU, "
                    f"{row['speedup_tokens_per_cpu_s' + key]:.2f}x tokens per CPU-second (best of {args.reps}); "
                    f"verdicts agree {100 * row['verdicts_agree' + key]:.1f}% of {len(pairs)}",
                    flush=True,
                )
            results["sizes"][size] = row
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


def compare_threads(engine, slots, args) -> None:
    """The graded probe under three (decode, prefill) thread settings, alternated; wall and CPU seconds."""
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET
    from populora.pretrain.graded_probe import probe_selection

    out = args.out or Path("bench/results/probe_speed_threads.json")
    settings = {"all_1": (1, 1), "prefill_2": (1, 2), "all_2": (2, 2)}  # name: (gen_threads, prefill_threads)
    results: dict = {"members": args.members, "reps": args.reps, "settings": settings, "sizes": {}}

    def threads(gen: int, prefill: int) -> None:
        engine.gen_threads, engine.prefill_threads = gen, prefill

    with Sandbox(workers=2) as sb:
        for size in map(int, args.sizes.split(",")):
            problems, _ = probe_selection("graded", size, ["code_i", "code_o", "code_f"])
            row, accuracy = alternate(
                engine,
                {name: (lambda t=t: threads(*t)) for name, t in settings.items()},
                lambda eng, problems=problems: probe_members(
                    eng, slots, problems, sb, max_new_tokens=GRADED_BUDGET
                ).accuracy(),
                args.reps,
                size,
            )
            wall = {n: min(m["wall_s"] for m in row[n]) for n in settings}
            row["speedup_wall_vs_all_1"] = {n: wall["all_1"] / wall[n] for n in settings}
            row["same_accuracy"] = all(accuracy[n] == accuracy["all_1"] for n in settings)
            results["sizes"][size] = row
            print(
                f"size {size}: wall-clock over all on one thread (best of {args.reps}): "
                + ", ".join(f"{n} {row['speedup_wall_vs_all_1'][n]:.2f}x" for n in settings)
                + f"; same accuracy: {row['same_accuracy']}",
                flush=True,
            )
    engine.gen_threads, engine.prefill_threads = 1, engine.train_threads
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
