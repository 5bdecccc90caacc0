"""`populora bench dist`: the same generate + train_step work on 2 Ray workers against 1 process.

Both engines hold the bundled tiny model (a random tiny Qwen2 when it is absent) with 4 slots of rank 4 (the
tiny preset's 2T+2S) and get identical work each round: one mixed generation batch (every slot, sampled, the
same seed) and one train_step on the same rows. Rounds alternate between the two engines so the load of a
shared machine hits both alike; the first round of each is a warm-up. For training the 1-process engine uses
`threads` torch threads and each of the 2 workers half of them (what `dist.workers=2` does on one
machine), so both use the same cores; generation uses one thread per process (the engine's default), so
there 2 workers use two threads against one.

Reported per engine: median wall seconds of generate and of train_step; for the workers also the median of
the slowest worker's own seconds, so `wall - slowest worker` is the cost of distribution (Ray calls,
pickling requests and results, the gradient all-reduce's wait), and the all-reduce time alone. Start-up
(Ray + actors + model loads) is measured once. On one small CPU machine 2 workers cannot be faster than one
process with the same threads: the point is the overhead, which is what a multi-GPU run pays per step.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("bench/results/dist.json")
PROMPTS = [
    "def f(x):\n    return",
    "# Write a function that adds two numbers\ndef add(a, b):",
    "x = [1, 2, 3]\nprint(",
    "def g(s):\n    out = ''\n    for c in s:",
    "Input: 3\nOutput:",
    "def h(n):\n    if n < 2:\n        return n\n",
    "print(sorted(",
    "# reverse a string\n",
]


def _model():
    from populora.engine import EngineError, resolve_model

    try:
        resolve_model("tiny")
        return "tiny", None, "tiny (bundled)"
    except EngineError:
        from populora.engine.testing import random_model

        model, tok = random_model(seed=0)
        return model, tok, "random tiny qwen2 (bundled tiny model missing)"


def _requests(slots: int, per_slot: int, max_new: int):
    from populora.engine import GenRequest

    return [
        GenRequest(slot=s, prompt=PROMPTS[(i + s) % len(PROMPTS)], max_new_tokens=max_new, temperature=1.0)
        for i in range(per_slot)
        for s in range(slots)
    ]


def _rows(gens, seed: int):
    from populora.engine import TrainRow

    rng = random.Random(seed)
    return [
        TrainRow(
            g.slot, g.prompt_ids, g.token_ids, advantages=rng.choice([-1.0, 1.0]), old_logprobs=g.logprobs
        )
        for g in gens
        if g.token_ids
    ]


def _max_diff(a, b) -> float:
    return max(
        float((x - y).abs().max()) for k in a.modules for x, y in zip(a.modules[k], b.modules[k], strict=True)
    )


def run(quick: bool = False, out: Path | None = None, workers: int = 2, threads: int = 2) -> dict[str, Any]:
    """Run the benchmark, print a table, write JSON (default bench/results/dist.json)."""
    from rich.console import Console
    from rich.table import Table

    from populora.engine import TrainBatch, build

    console = Console()
    slots, rounds = 4, (2 if quick else 5)
    per_slot, max_new = (4, 24) if quick else (8, 48)
    model, tok, model_desc = _model()
    opts = dict(n_slots=slots, rank=4, alpha=8, lr=1e-3, train_threads=threads, seed=0)
    console.print(
        f"[bold]dist bench[/]: {model_desc}, {slots} slots, {slots * per_slot} requests x {max_new} tokens "
        f"per round, {rounds} timed rounds, {workers} workers vs 1 process ({threads} threads in all)"
    )
    t0 = time.perf_counter()
    one = build(model, tokenizer=tok, **opts)
    start_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    many = build(model, tokenizer=tok, workers=workers, **opts)
    start_many = time.perf_counter() - t0
    res: dict[str, dict[str, list[float]]] = {
        "one": {"generate": [], "train": []},
        "many": {"generate": [], "train": [], "gen_worker": [], "train_worker": [], "allreduce": []},
    }
    try:
        reqs = _requests(slots, per_slot, max_new)
        for r in range(rounds + 1):
            timed = r > 0
            rows = None
            for name, eng in (("one", one), ("many", many)) if r % 2 == 0 else (("many", many), ("one", one)):
                t = time.perf_counter()
                gens = eng.generate(reqs, seed=r)
                gen_s = time.perf_counter() - t
                if rows is None:  # both engines train on the same rows: the first engine's samples
                    rows = _rows(gens, r)
                t = time.perf_counter()
                eng.train_step(TrainBatch(rows))
                train_s = time.perf_counter() - t
                if not timed:
                    if name == "many":
                        many.last_dist_stats()
                    continue
                res[name]["generate"].append(gen_s)
                res[name]["train"].append(train_s)
                if name == "many":
                    st = many.last_dist_stats()
                    res["many"]["gen_worker"].append(max(st["generate"]["s"]))
                    res["many"]["train_worker"].append(max(st["train"]["s"]))
                    res["many"]["allreduce"].append(max(st["train"]["allreduce_s"]))
        drift = max(_max_diff(many.get_adapter(s), one.get_adapter(s)) for s in range(slots))
    finally:
        many.close()

    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in res.items()}
    one_m, many_m = med["one"], med["many"]
    results = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": os.getloadavg()[0],  # a shared box: other jobs skew the wall times
        },
        "model": model_desc,
        "config": {
            "slots": slots,
            "rank": 4,
            "requests": len(reqs),
            "max_new_tokens": max_new,
            "rounds": rounds,
            "workers": workers,
            "threads_total": threads,
        },
        "one_process": {
            "start_s": start_one,
            "generate_s": one_m["generate"],
            "train_step_s": one_m["train"],
        },
        "workers": {
            "start_s": start_many,
            "generate_s": many_m["generate"],
            "generate_slowest_worker_s": many_m["gen_worker"],
            "generate_overhead_s": many_m["generate"] - many_m["gen_worker"],
            "train_step_s": many_m["train"],
            "train_slowest_worker_s": many_m["train_worker"],
            "train_overhead_s": many_m["train"] - many_m["train_worker"],
            "allreduce_s": many_m["allreduce"],
        },
        "ratio_workers_over_one": {
            "generate": many_m["generate"] / one_m["generate"],
            "train_step": many_m["train"] / one_m["train"],
            "step": (many_m["generate"] + many_m["train"]) / (one_m["generate"] + one_m["train"]),
        },
        "adapter_max_abs_diff_after_all_rounds": drift,
        "raw": res,
    }

    table = Table(title=f"Same work: {workers} Ray workers vs 1 process (median wall seconds, same run)")
    for col in ("", "1 process", f"{workers} workers", "slowest worker", "overhead", "ratio"):
        table.add_column(col, justify="right" if col else "left")
    w = results["workers"]
    table.add_row(
        "generate",
        f"{one_m['generate']:.3f}",
        f"{w['generate_s']:.3f}",
        f"{w['generate_slowest_worker_s']:.3f}",
        f"{w['generate_overhead_s']:.3f}",
        f"{results['ratio_workers_over_one']['generate']:.2f}x",
    )
    table.add_row(
        "train_step",
        f"{one_m['train']:.3f}",
        f"{w['train_step_s']:.3f}",
        f"{w['train_slowest_worker_s']:.3f}",
        f"{w['train_overhead_s']:.3f} (all-reduce {w['allreduce_s']:.3f})",
        f"{results['ratio_workers_over_one']['train_step']:.2f}x",
    )
    table.add_row("start-up", f"{start_one:.1f}", f"{start_many:.1f}", "", "Ray + actors + model loads", "")
    console.print(table)
    console.print(
        f"adapters after {rounds + 1} identical steps: max |workers - 1 process| = {drift:.2e} "
        "(float summation order, amplified by AdamW's sign-like early steps on near-zero gradients)"
    )
    out = Path(out or DEFAULT_OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {out}")
    return results
