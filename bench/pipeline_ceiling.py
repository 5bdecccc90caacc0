"""How fast a `tiny-learn` step could be if the update ran beside the next step's generation (one step
off-policy, the two halves pipelined over the two cores), measured on this machine before building it.

Two worker processes each build the same `tiny-learn` trainer (same seed, lean path, the speed benchmark's
overrides: no evolution, no probe) and run `--steps` + 1 steps, recording every `engine.generate` call of the
timed steps (requests, seed, each row's length) and every `engine.train_step` batch (the speed benchmark's `Meter`,
populora/train/bench.py). Then the parent has them
replay that work, alone or at the same time, alternated `--reps` times:

- `gen_old`: the generation through the engine's original decode loop (`gen_path="forward"`), one thread;
- `gen_new`: the lean path as the trainer runs it (prefill on `train.threads` = 2, decoding on one);
- `gen_1t`: the lean path all on one thread (what a generation lane pinned to one core would do);
- `gen_new_int8`, `gen_1t_int8`: the same two with the frozen base's `Linear`s in int8 (`model.gen_dtype=int8`,
  engine/gen_dtype.py);
- `update_2t`, `update_1t`: the recorded update batches, `train_step` on two threads and on one;
- `pipelined`: `gen_1t` in one process and `update_1t` in the other at the same time, each on its own core;
  `pipelined_int8` the same with `gen_1t_int8`.

Each row of generation is held to the length the trainer generated (EOS off), so every replay decodes the
trainer's rows, prompts and lengths, though not its tokens (the adapters have trained since); the update
replays change the adapters, which does not change their cost either.
Two processes rather than two threads: this is the ceiling, without the interpreter lock's share.

Per step: the sequential old step is gen_old + update_2t, the sequential new one gen_new + update_2t (and
`new_int8` with gen_new_int8), the pipelined one the wall-clock of `pipelined` (the slower lane, with both cores'
memory traffic at once), `update_free` generation alone on one core (as if the update cost nothing); each plus
the trainer's measured validation and scoring seconds, which a pipelined step would keep on the generation lane. Issue 30 asked for a step 3x faster than the old path's.

python bench/pipeline_ceiling.py [--steps 5] [--reps 2] [--out bench/results/pipeline_ceiling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
PRESET = "tiny-learn"
OVERRIDES = ["evolution.every=0", "diagnostics.probe_every=0", "train.overlap=false"]
SOLO = ["gen_old", "gen_new", "gen_1t", "gen_new_int8", "gen_1t_int8", "update_2t", "update_1t"]
# the two lanes of a pipelined step, run at the same time in the two processes
PAIRS = {"pipelined": ("gen_1t", "update_1t"), "pipelined_int8": ("gen_1t_int8", "update_1t")}


# ------------------------------------------------------------------------------------------------ worker
def record(steps: int, run_dir: Path):
    """Build the trainer and run `steps` + 1 steps (the first untimed); returns it, its `Meter` (the speed
    benchmark's: the raw `generate` and `train_step`), each timed step's generate calls and train batches, and
    the timed steps' mean validation plus scoring seconds."""
    from populora.config import load_config
    from populora.train.bench import Meter
    from populora.train.trainer import Trainer

    cfg = load_config(PRESET, [*OVERRIDES, f"train.steps={steps + 1}"])
    tr = Trainer(cfg, run_dir, quiet=True)
    tr.setup()
    tr.engine.gen_path = "lean"
    meter = Meter(tr.engine)
    meter.install()
    recorded, sandbox_s = [], []
    for step in range(1, steps + 2):
        meter.calls, meter.batches = [], []
        res = tr.step(step)
        if step > 1:
            recorded.append({"calls": meter.calls, "batches": meter.batches})
            sandbox_s.append(res.record["phase_s"]["validate"] + res.record["phase_s"]["score"])
    meter.uninstall()
    return tr, meter, recorded, sum(sandbox_s) / len(sandbox_s)


def replay_generation(tr, meter, recorded, path: str, prefill_threads: int, low=None) -> dict:
    """Every recorded generate call again, in the trainer's order, on one decoding thread, every row held to its
    recorded length; `low`: the engine's generation weights for another dtype (`HFEngine.generation_weights`).
    `same_lengths`: whether every row came out at that length (so the replay did the trainer's work)."""
    from populora.train.bench import eos_off, held_to_length

    eng = tr.engine
    saved = eng.gen_path, eng.prefill_threads, eng.gen_threads, eng.gen_weights
    eng.gen_path, eng.prefill_threads, eng.gen_threads = path, prefill_threads, 1
    eng.gen_weights = low
    tokens, same = 0, True
    try:
        with eos_off(eng):
            for step in recorded:
                for call in step["calls"]:
                    reqs = held_to_length([call])
                    out = meter.generate_fn(reqs, seed=call["seed"])
                    tokens += sum(len(g.token_ids) for g in out)
                    same = same and [len(g.token_ids) for g in out] == [r.max_new_tokens for r in reqs]
    finally:
        eng.gen_path, eng.prefill_threads, eng.gen_threads, eng.gen_weights = saved
    return {"tokens": tokens, "same_lengths": same}


def replay_update(tr, meter, recorded, threads: int) -> dict:
    eng = tr.engine
    saved, eng.train_threads = eng.train_threads, threads
    try:
        rows = 0
        for step in recorded:
            for batch in step["batches"]:
                meter.train_fn(batch)
                rows += len(batch.rows)
    finally:
        eng.train_threads = saved
    return {"rows": rows}


def _int8(tr):
    """The engine's int8 generation weights, made on first use (`model.gen_dtype=int8`, engine/gen_dtype.py)."""
    if not hasattr(tr, "int8_weights"):
        tr.int8_weights = tr.engine.generation_weights("int8")
    return tr.int8_weights


WORK = {
    "gen_old": lambda tr, *r: replay_generation(tr, *r, "forward", 1),
    "gen_new": lambda tr, *r: replay_generation(tr, *r, "lean", tr.engine.train_threads),
    "gen_1t": lambda tr, *r: replay_generation(tr, *r, "lean", 1),
    "gen_new_int8": lambda tr, *r: replay_generation(tr, *r, "lean", tr.engine.train_threads, _int8(tr)),
    "gen_1t_int8": lambda tr, *r: replay_generation(tr, *r, "lean", 1, _int8(tr)),
    "update_2t": lambda tr, *r: replay_update(tr, *r, 2),
    "update_1t": lambda tr, *r: replay_update(tr, *r, 1),
}


def worker(steps: int) -> None:
    """Record, say `ready`, then run each named work item the parent sends and answer with its timings."""
    import torch

    torch.manual_seed(0)
    out = sys.stdout
    sys.stdout = sys.stderr  # only the protocol's lines on the pipe
    with tempfile.TemporaryDirectory(prefix="populora-pipeline-") as tmp:
        tr, meter, recorded, sandbox_s = record(steps, Path(tmp) / "run")
        try:
            print(json.dumps({"ready": True, "sandbox_s": sandbox_s}), file=out, flush=True)
            for line in sys.stdin:
                name = line.strip()
                if not name:
                    break
                t, c = time.perf_counter(), time.process_time()
                info = WORK[name](tr, meter, recorded)
                res = {"work": name, "wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c}
                print(json.dumps({**res, **info}), file=out, flush=True)
        finally:
            tr.close()


# ------------------------------------------------------------------------------------------------ parent
class Worker:
    def __init__(self, steps: int) -> None:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "--worker", "--steps", str(steps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def send(self, name: str) -> None:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped (exit code {self.proc.wait()}); its error is above")
        return json.loads(line)

    def run(self, name: str) -> dict:
        self.send(name)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)


def summarise(reps: list[dict], steps: int, sandbox_s: float) -> dict:
    """Per-step seconds of each measurement (the best of the reps: the least disturbed by other jobs) and the
    steps they add up to."""

    def best(key: str) -> float:
        return min(r[key] for r in reps) / steps

    per_step = {k: best(k) for k in [*SOLO, *PAIRS]}
    step = {
        "old": per_step["gen_old"] + per_step["update_2t"],
        "new": per_step["gen_new"] + per_step["update_2t"],
        "new_int8": per_step["gen_new_int8"] + per_step["update_2t"],
        "pipelined": per_step["pipelined"],
        "pipelined_int8": per_step["pipelined_int8"],
        "update_free": per_step["gen_1t"],  # if the update cost nothing and hid completely
        "update_free_int8": per_step["gen_1t_int8"],
    }
    step = {k: v + sandbox_s for k, v in step.items()}
    return {
        "per_step_s": per_step,
        "sandbox_s_per_step": sandbox_s,
        "step_s": step,
        "speedup_vs_old": {k: step["old"] / v for k, v in step.items() if k != "old"},
        "pipelined_vs_new": step["new"] / step["pipelined"],
        # how much the two lanes slow each other down through shared memory bandwidth and caches
        "contention": {k: per_step[k] / max(per_step[a], per_step[b]) for k, (a, b) in PAIRS.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="timed steps recorded (after one untimed step)")
    ap.add_argument("--reps", type=int, default=2, help="rounds of the alternated measurements")
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default: print only)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps < 1 or args.reps < 1:
        ap.error("--steps and --reps must be at least 1")
    if args.worker:
        worker(args.steps)
        return

    t0 = time.perf_counter()
    gen, upd = Worker(args.steps), Worker(args.steps)
    try:
        sandbox_s = gen.read()["sandbox_s"]
        upd.read()
        print(f"recorded {args.steps} steps in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        reps, same_lengths = [], {}
        for rep in range(args.reps):
            r = {}
            for name in SOLO:
                lane = gen if name.startswith("gen") else upd
                res = lane.run(name)
                r[name] = res["wall_s"]
                if "same_lengths" in res:
                    same_lengths[name] = same_lengths.get(name, True) and res["same_lengths"]
            for pair, (g, u) in PAIRS.items():
                t = time.perf_counter()
                gen.send(g)
                upd.send(u)
                a, b = gen.read(), upd.read()
                r[pair] = time.perf_counter() - t
                r[pair + "_lanes"] = {g: a["wall_s"], u: b["wall_s"]}
            reps.append(r)
            print(
                f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {r[k]:.1f} s" for k in [*SOLO, *PAIRS]),
                file=sys.stderr,
            )
    finally:
        gen.close()
        upd.close()

    result = {
        "benchmark": "pipeline_ceiling",
        "command": "python bench/pipeline_ceiling.py " + " ".join(sys.argv[1:]),
        "preset": PRESET,
        "overrides": OVERRIDES,
        "steps": args.steps,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_1min_at_end": round(os.getloadavg()[0], 2),
        },
        "reps": reps,
        # every generation replay decoded each row to the trainer's length (the same work on every path)
        "same_lengths": same_lengths,
        **summarise(reps, args.steps, sandbox_s),
    }
    s = result
    print(f"{'step':18}{'s/step':>8}{'x old':>8}")
    for k, v in s["step_s"].items():
        print(f"{k:18}{v:8.2f}{s['step_s']['old'] / v:8.2f}")
    print(f"replays made every row at the trainer's length: {same_lengths}")
    for pair, (g, u) in PAIRS.items():
        p = s["per_step_s"]
        print(
            f"{pair}: {g} {p[g]:.2f} s and {u} {p[u]:.2f} s per step alone, {p[pair]:.2f} s together "
            f"(contention {s['contention'][pair]:.2f}x)"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
