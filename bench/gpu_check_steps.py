"""The GPU check's measuring pieces and its later checks (bench/gpu_check.py drives them; not a script).

Owns: the device-memory poller (`DevicePeak`) and `watch_sleep`, which tells a train step's peak from vLLM's
awake and wake-up peaks (the peak is reset once vLLM has gone to sleep: before, the step's peak included the
memory vLLM held before it slept, ~56 GiB at 7B against a 22 GiB train-step estimate, so `train_max_row`
failed on every GPU); the sleep/wake greedy equality check; the KV-cache pressure generation; the run check
(a `paper-7b`-shaped run through the CLI with valid problems forced in by bench/forced_train.py, so the
students generate, are scored and train, then a `--resume`); and `run_process`, which stops a child with
SIGTERM (then SIGKILL) when the check itself is stopped, so no run outlives it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB, MIB = 2**30, 2**20


def gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def device_used(device: str) -> tuple[int, int] | None:
    """(bytes in use on the device by every process, total bytes), or None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free), int(total)


class DevicePeak:
    """The device's used memory (every process: this trainer and vLLM's engine core) polled every 2 ms in a
    thread while the block runs; `peak` in bytes (None on CPU, where there is no device to poll). `mark()`
    ends a phase: it returns the phase's peak and starts the next one. A reading taken before a mark and
    stored after it is dropped (the epoch changed), so memory freed just before the mark never counts after."""

    def __init__(self, device: str) -> None:
        self.device, self.peak = device, None
        self._epoch = 0
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        import torch

        while not self._stop.is_set():
            with self._lock:
                epoch = self._epoch
            free, total = torch.cuda.mem_get_info()
            with self._lock:
                if epoch == self._epoch:
                    self.peak = max(self.peak or 0, total - free)
            time.sleep(0.002)

    def mark(self) -> int | None:
        with self._lock:
            peak, self.peak = self.peak, None
            self._epoch += 1
        return peak

    def __enter__(self) -> DevicePeak:
        if self.device.startswith("cuda"):
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@contextlib.contextmanager
def watch_sleep(eng, peak: DevicePeak, phases: dict) -> Iterator[None]:
    """While the block runs, `eng.sleep` / `eng.wake` (the engine's own, called by its `train_step`) are
    timed and split the poller's phases: the peak up to the end of the sleep (vLLM awake) goes to
    `phases["awake_peak"]`, the peak between sleep and wake (the train step proper, vLLM asleep, its residue
    included) to `phases["train_peak"]`; what follows the wake-up stays in `peak.peak`. Instance attributes
    over the methods, removed after the block."""
    sleep, wake = eng.sleep, eng.wake

    def timed_sleep():
        t0 = time.perf_counter()
        sleep()
        phases["sleep_s"] = round(time.perf_counter() - t0, 2)
        phases["awake_peak"] = peak.mark()  # the reset: the step's peak starts once vLLM's memory is gone

    def timed_wake():
        phases["train_peak"] = peak.mark()  # the step, vLLM asleep
        t0 = time.perf_counter()
        wake()
        phases["wake_s"] = round(time.perf_counter() - t0, 2)

    eng.sleep, eng.wake = timed_sleep, timed_wake
    try:
        yield
    finally:
        eng.__dict__.pop("sleep", None)
        eng.__dict__.pop("wake", None)


# ---------------------------------------------------------------------------------------------------------
# vLLM: greedy before sleep = greedy after wake; one generation under KV-cache pressure


def sleep_wake_check(checks, eng, device: str, vllm_version: str | None, ids, args) -> None:
    """A fixed-seed greedy generation on every slot, then vLLM's sleep (level 1) and wake-up, then the same
    generation: with the adapters unchanged between them, the tokens must be equal."""
    from populora.engine import GenRequest

    name = "sleep_wake_greedy"
    if not vllm_version:
        checks.skip(name, "the HF backend has no sleep mode (vLLM's; checked on the vLLM lane)")
        return
    try:
        reqs = [
            GenRequest(slot=s, prompt=ids(args.prompt_len), max_new_tokens=args.new_tokens, temperature=0.0)
            for s in range(eng.n_slots)
        ]
        before = eng.generate(reqs, seed=1234)  # refreshes any stale adapter first
        sync(device)
        slept = bool(getattr(eng, "sleep_mode", False))
        t0 = time.perf_counter()
        eng.sleep()
        sleep_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        eng.wake()
        wake_s = time.perf_counter() - t0
        after = eng.generate(reqs, seed=1234)
        sync(device)
    except Exception as err:  # noqa: BLE001
        checks.fail(name, err)
        return
    equal = [a.token_ids == b.token_ids for a, b in zip(before, after, strict=True)]
    lp = [
        abs(x - y)
        for a, b in zip(before, after, strict=True)
        for x, y in zip(a.logprobs, b.logprobs, strict=False)
        if math.isfinite(x) and math.isfinite(y)
    ]
    how = (
        f"after sleep(level 1) {sleep_s:.1f} s + wake {wake_s:.1f} s"
        if slept
        else "across two calls (vLLM's sleep mode is CUDA-only: nothing slept here)"
    )
    checks.record(
        name,
        all(equal),
        f"{sum(equal)}/{len(equal)} greedy rows ({args.new_tokens} tokens, one per slot) equal {how}; "
        f"log-probs differ by at most {max(lp, default=0.0):.2g}",
        rows_equal=sum(equal),
        rows=len(equal),
        slept=slept,
        sleep_s=round(sleep_s, 2),
        wake_s=round(wake_s, 2),
        max_logprob_diff=max(lp, default=0.0),
    )


def kv_capacity_tokens(eng, cfg, folder: Path, total: int | None) -> tuple[int | None, str]:
    """Tokens vLLM's KV cache holds, and how that is known: vLLM's own block count when its config has it,
    else an estimate (its share of the GPU less its weights, over the model's KV bytes per token)."""
    llm = getattr(eng, "llm", None)
    cache = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if isinstance(blocks, int) and isinstance(size, int) and blocks > 0:
        return blocks * size, "vLLM's block count"
    if llm is None or not total:
        return None, "no KV cache to fill (HF backend or a CPU)"
    from populora.engine.vllm import kv_bytes_per_token, weight_bytes

    free = cfg.model.vllm_gpu_memory_utilization * total - weight_bytes(folder)
    return max(0, int(free / kv_bytes_per_token(folder, 2))), "estimated from vLLM's share"


def kv_pressure_check(checks, eng, cfg, folder: Path, args, device: str, ids) -> None:
    """One generation whose rows need more KV cache than vLLM holds (on a GPU: 1.25x its capacity, long
    prompts and moderate answers, so vLLM must queue or preempt rows); every row must come back whole.
    On a CPU (`--shrink`) the same call runs at a small size: it shows the path, not the pressure."""
    from populora.engine import GenRequest

    name = "kv_pressure"
    total = device_used(device)[1] if device.startswith("cuda") else None
    try:
        cap, source = kv_capacity_tokens(eng, cfg, folder, total)
        prompt, new = args.kv_prompt_len, args.kv_new_tokens
        rows = args.kv_rows
        if total and cap:
            rows = min(args.kv_max_rows, math.ceil(1.25 * cap / (prompt + new)))
        reqs = [GenRequest(slot=i % eng.n_slots, prompt=ids(prompt), max_new_tokens=new) for i in range(rows)]
        t0 = time.perf_counter()
        out = eng.generate(reqs, seed=7)
        sync(device)
        wall = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001 - an out-of-memory error or a dead engine core is the finding
        checks.fail(name, err)
        return
    whole = sum(len(o.token_ids) == new or o.finish_reason == "stop" for o in out)
    demand = sum(len(r.prompt) for r in reqs) + sum(len(o.token_ids) for o in out)
    pressed = cap is not None and demand > cap
    ok = whole == rows and (pressed or not total or cap is None)  # a GPU must reach a known capacity
    line = (
        f"{rows} rows x ({prompt} + {new}) tokens in {wall:.0f} s: {whole}/{rows} whole; demand "
        f"{demand:,} tokens vs KV capacity "
        + (f"{cap:,} ({source}): {demand / cap:.2f}x" if cap else f"unknown ({source})")
        + ("" if pressed or not total or cap is None else " (NOT over capacity: raise --kv-max-rows)")
    )
    checks.record(
        name,
        ok,
        line,
        rows=rows,
        whole_rows=whole,
        prompt_tokens=prompt,
        new_tokens=new,
        demand_tokens=demand,
        kv_capacity_tokens=cap,
        kv_capacity_source=source,
        gen_s=round(wall, 2),
        gen_tokens_per_s=round(sum(len(o.token_ids) for o in out) / wall, 1),
    )


# ---------------------------------------------------------------------------------------------------------
# the run: step 1 with students forced to play, a checkpoint, then --resume for step 2


def run_process(cmd: list[str], timeout: float, env: dict, log: Path) -> tuple[int | None, str]:
    """Run `cmd` with stdout + stderr to `log`; (exit status or None on a timeout, the output). On a timeout
    or when this process is stopped (SIGTERM turned into SystemExit, Ctrl-C) the child gets SIGTERM, 30 s to
    close its engine (vLLM, the sandbox), then SIGKILL."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            rc = proc.wait(timeout=timeout)
        except (
            BaseException
        ) as err:  # the timeout, or this check being stopped: the child must not outlive it
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if not isinstance(err, subprocess.TimeoutExpired):
                raise
            rc = None
    return rc, log.read_text(errors="replace")


def _jsonl(path: Path) -> list[dict]:
    with contextlib.suppress(OSError, ValueError):
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return []


def students_played(step: dict) -> dict:
    """What a metrics.jsonl step says of the students: valid problems posed, students that generated
    answers (their mean response length), were scored (a solve rate) and were trained (a loss)."""
    members = step.get("members", {}).values()
    students = [m for m in members if m.get("role") == "student"]
    return {
        "valid_problems": sum(m.get("n_valid") or 0 for m in members if m.get("role") == "teacher"),
        "students": len(students),
        "generated": sum((m.get("response_len") or 0) > 0 for m in students),
        "scored": sum((m.get("solve_rate") or {}).get("all") is not None for m in students),
        "trained": sum(m.get("loss") is not None for m in students),
        "solve_rate": [(m.get("solve_rate") or {}).get("all") for m in students],
    }


def run_check(checks, folder: Path, args, device: str, backend: str, workers: int, sets: list[str]) -> None:
    """`run_2_steps`: step 1 of a `paper-7b`-shaped run through the CLI (valid problems forced in, so every
    phase runs, the students' included; a checkpoint); `resume`: a new process resumes it for step 2 (the
    evolution deferred from step 1 runs first), with the same checks. Both in `args.work_dir/run`."""
    run, work = Path(args.work_dir) / "run", Path(args.work_dir)
    sets = sets + [
        "train.steps=1",
        "train.checkpoint_every=1",
        "evolution.every=1",  # due after step 1, deferred (never after a final step), run by the resume
        "evolution.min_games=0",
        f"tasks.prompts={args.run_prompts}",
        f"rl.rollouts={args.run_rollouts}",
        f"tasks.teacher_max_new_tokens={args.run_new_tokens}",
        f"tasks.student_max_new_tokens={args.run_new_tokens}",
    ]
    if args.shrink:
        sets.append("tasks.references=1")  # a CPU: short prompts (the GPU keeps the preset's K = 6)
    runner = [sys.executable, str(HERE / "forced_train.py"), "--valid", str(args.force_valid), "--"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = [*runner, "--quiet", "--preset", "paper-7b", "--run-dir", str(run)]
    for kv in sets:
        first += ["--set", kv]
    second = [*runner, "--quiet", "--resume", str(run), "--set", "train.steps=2"]
    for name, cmd, want in (("run_2_steps", first, 1), ("resume", second, 2)):
        if name == "resume" and checks.res["checks"].get("run_2_steps", {}).get("status") != "pass":
            checks.skip(name, "nothing to resume (run_2_steps did not pass)")
            return
        if not checks.room_for(name):
            return
        checks.start(name)
        # on a GPU the budget bounds it; a CPU (--shrink, a loaded test machine) skips nothing for time
        timeout = max(30.0, checks.left() - 20) if checks.gpu else max(900.0, checks.left() - 20)
        t = time.perf_counter()
        rc, log = run_process(cmd, timeout, env, work / f"{name}.log")
        wall = time.perf_counter() - t
        steps = _jsonl(run / "metrics.jsonl")
        events = _jsonl(run / "events.jsonl")
        evolutions = sum(e.get("type") == "evolution" for e in events)
        ckpt = (run / "checkpoints" / f"step_{want:06d}" / "state.json").is_file()
        played = students_played(steps[-1]) if steps else {}
        students_ok = bool(played) and played["valid_problems"] > 0 and played["generated"] > 0
        students_ok = students_ok and played["scored"] > 0 and played["trained"] > 0
        numbers = [m.get("step") for m in steps]
        ok = rc == 0 and numbers == list(range(1, want + 1)) and ckpt and students_ok
        if name == "resume":
            ok = ok and evolutions > 0
        tail = [x for x in log.strip().splitlines() if x.strip()][-1:]
        what = (
            f"step {want} in {wall:.0f} s ({steps[-1].get('step_s') or 0:.0f} s in the step): "
            f"{played['valid_problems']} valid problems, {played['generated']}/{played['students']} students "
            f"generated, {played['scored']} scored, {played['trained']} trained; checkpoint step {want} written"
            + (f"; the deferred evolution ran ({evolutions})" if name == "resume" else "")
            if ok
            else f"exit {'timeout' if rc is None else rc}, steps {numbers}, checkpoint {ckpt}, students "
            f"{played or 'no metrics'}, evolutions {evolutions}: {tail[0] if tail else ''}"
        )
        checks.record(
            name,
            ok,
            f"dist.workers={workers}, backend {backend}: " + what,
            workers=workers,
            backend=backend,
            wall_s=round(wall, 1),
            steps=[{"step_s": m.get("step_s"), "phase_s": m.get("phase_s")} for m in steps],
            students=played,
            evolutions=evolutions,
            command=cmd,
            log_tail="" if ok else log[-2000:],
        )
        if not ok:
            if name == "run_2_steps":
                checks.skip("resume", "nothing to resume (run_2_steps failed)")
            return


def on_signals(handler: Callable[[int], None] | None = None) -> None:
    """SIGTERM (a `timeout`, a scheduler) and SIGHUP raise SystemExit(128 + signal) in the main thread, so
    every `finally` runs: the engine closes and the random model's folder is removed."""

    def stop(signum, _frame):
        if handler is not None:
            handler(signum)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


# ---------------------------------------------------------------------------------------------------------
# the random model; the HF engine alone: 8 mixed slots vs 1 slot on the same rows


def make_model(cfg: dict, device: str, dtype):
    """A random-init Qwen2 causal LM from a config dict, created directly on `device` in `dtype`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "torch_dtype")}
    conf = Qwen2Config(**keep)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(conf)
    finally:
        torch.set_default_dtype(prev)
    return model.eval()


def _mem(device: str) -> tuple[int, int]:
    """(allocated, peak allocated) bytes on the GPU; (resident set size, 0) on CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.memory_allocated()), int(torch.cuda.max_memory_allocated())
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE"), 0


def measure(cfg: dict, n_slots: int, args, device: str, dtype) -> dict:
    """Build an engine with `n_slots` slots and time generation and training of the same rows spread over them."""
    import torch

    from populora.engine import GenRequest, TrainBatch, TrainRow, build
    from populora.engine.testing import byte_tokenizer

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = _mem(device)[0]
    t0 = time.perf_counter()
    model = make_model(cfg, device, dtype)
    built_model_s = time.perf_counter() - t0
    base_alloc = _mem(device)[0]
    eng = build(
        model,
        tokenizer=byte_tokenizer(),  # prompts are token ids; only decoding uses it
        n_slots=n_slots,
        rank=args.rank,
        alpha=2 * args.rank,
        targets=["q_proj", "k_proj", "v_proj", "o_proj"],
        device=device,
        dtype=dtype,
        gen_batch_size=args.rows,  # one generation batch; training keeps the default 4096-token micro-batches
        gen_threads=None,
        train_threads=None,
    )
    engine_alloc = _mem(device)[0]
    g = torch.Generator().manual_seed(1)
    vocab = int(cfg["vocab_size"])
    prompts = [
        torch.randint(3, min(vocab, 256), (args.prompt_len,), generator=g).tolist() for _ in range(args.rows)
    ]
    slot_of = [i % n_slots for i in range(args.rows)]
    reqs = [
        GenRequest(slot=s, prompt=p, max_new_tokens=args.new_tokens, temperature=1.0)
        for s, p in zip(slot_of, prompts, strict=True)
    ]

    def gen():
        out = eng.generate(reqs, seed=0)
        sync(device)
        return out

    gens = gen()  # warm-up (and the rows the train step uses)
    gen_s, n_tok = [], 0
    for _ in range(args.repeats):
        t = time.perf_counter()
        gens = gen()
        gen_s.append(time.perf_counter() - t)
        n_tok = sum(len(x.token_ids) for x in gens)
    # every row trains on a fixed-length response so both engines see exactly the same token count
    resp = [
        torch.randint(3, min(vocab, 256), (args.new_tokens,), generator=g).tolist() for _ in range(args.rows)
    ]
    batch = TrainBatch(
        [
            TrainRow(slot=s, prompt_ids=p, response_ids=r, advantages=(1.0 if i % 2 else -1.0))
            for i, (s, p, r) in enumerate(zip(slot_of, prompts, resp, strict=True))
        ]
    )

    def train():
        eng.train_step(batch)
        sync(device)

    train()  # warm-up (allocates the optimiser state)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    train_s = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        train()
        train_s.append(time.perf_counter() - t)
    alloc, peak = _mem(device)
    res = {
        "slots": n_slots,
        "rows": args.rows,
        "model_build_s": round(built_model_s, 2),
        "gen_s": round(min(gen_s), 4),
        "gen_tokens": n_tok,
        "gen_tokens_per_s": round(n_tok / min(gen_s), 1),
        "train_s": round(min(train_s), 4),
        "train_tokens": batch.n_tokens,
        "train_tokens_per_s": round(batch.n_tokens / min(train_s), 1),
        "base_bytes": base_alloc - before,
        "engine_bytes": engine_alloc - before,
        "after_train_bytes": alloc - before,
        "train_peak_bytes": peak - before if peak else None,
    }
    return res  # the engine and model are freed with this frame (the caller collects before the next build)


def hf_slots_check(checks, cfg: dict, args, device: str, dtype) -> None:
    try:
        one = measure(cfg, 1, args, device, dtype)
        gc.collect()
        eight = measure(cfg, 8, args, device, dtype)
    except Exception as err:  # noqa: BLE001
        checks.fail("hf_slots", err)
        return
    gen_ratio = eight["gen_tokens_per_s"] / one["gen_tokens_per_s"]
    train_ratio = eight["train_tokens_per_s"] / one["train_tokens_per_s"]
    per_slot = (eight["after_train_bytes"] - one["after_train_bytes"]) // 7
    peak_per_slot = (
        (eight["train_peak_bytes"] - one["train_peak_bytes"]) // 7 if one["train_peak_bytes"] else None
    )
    checks.record(
        "hf_slots",
        gen_ratio > 0 and train_ratio > 0,
        f"8 mixed slots vs 1: generate {gen_ratio:.2f}x, train {train_ratio:.2f}x the tokens/s; "
        f"{per_slot / MIB:.1f} MiB per added slot",
        one_slot=one,
        eight_slots=eight,
        gen_throughput_ratio_8_vs_1=round(gen_ratio, 3),
        train_throughput_ratio_8_vs_1=round(train_ratio, 3),
        bytes_per_added_slot=per_slot,
        peak_bytes_per_added_slot=peak_per_slot,
    )


def write_model_folder(cfg: dict, folder: Path, device: str, dtype) -> dict:
    """Save a random-weight model of `cfg` with the bundled tiny model's tokenizer as a standard HF folder
    (what `model.name` takes): the trainer, vLLM and the CLI run load it as they would the real checkpoint.
    The special-token ids are the tokenizer's (a random model rarely samples them: responses run to length)."""
    import torch

    from populora.paths import TINY_MODEL_DIR

    t0 = time.perf_counter()
    tok_cfg = json.loads((TINY_MODEL_DIR / "config.json").read_text())
    specials = {k: tok_cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    model = make_model({**cfg, **specials}, device, dtype)
    model.generation_config.eos_token_id = specials["eos_token_id"]
    model.generation_config.pad_token_id = specials["pad_token_id"]
    built_s = time.perf_counter() - t0
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY_MODEL_DIR / name, folder / name)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return {
        "params": n_params,
        "weight_bytes": size,
        "build_s": round(built_s, 1),
        "save_s": round(time.perf_counter() - t0 - built_s, 1),
    }


# ---------------------------------------------------------------------------------------------------------
# the sandbox on this node's cores


def sandbox_check(checks, args) -> None:
    from populora.config import load_config as load_run_config
    from populora.sandbox import Limits, Sandbox
    from populora.sandbox.bench import PROGRAM
    from populora.sandbox.pool import MAX_WORKERS

    cfg = load_run_config(
        "paper-7b", args.sets
    )  # the run's sandbox settings (a CPU run's own lower the workers)
    cores = os.cpu_count() or 1
    node = min(cores, MAX_WORKERS)
    limits = Limits(timeout_s=cfg.sandbox.timeout_s, memory_mb=cfg.sandbox.memory_mb)
    per_worker = 20 if args.shrink else 200
    out, wrong = {}, 0
    try:
        for w in sorted({1, cfg.sandbox.workers, node}):
            t = time.perf_counter()
            with Sandbox(workers=w, limits=limits) as sb:
                start_s = time.perf_counter() - t
                sb.run_many([(PROGRAM, "f(1)")] * (2 * w))  # warm: every worker has run once
                jobs = [(PROGRAM, f"f({i})") for i in range(per_worker * w)]
                t = time.perf_counter()
                res = sb.run_many(jobs)
                wall = time.perf_counter() - t
            wrong += sum(r.value_repr != str(2 * i + 1) for i, r in enumerate(res))
            out[str(w)] = {
                "jobs": len(jobs),
                "jobs_per_s": round(len(jobs) / wall, 1),
                "start_s": round(start_s, 2),
            }
    except Exception as err:  # noqa: BLE001 - e.g. a container without user namespaces
        checks.fail("sandbox", err, workers=out)
        return
    best = out[str(node)]["jobs_per_s"]
    preset = out[str(cfg.sandbox.workers)]["jobs_per_s"]
    checks.record(
        "sandbox",
        wrong == 0,
        f"{node} workers (this node's cores): {best:.0f} jobs/s, {best / out['1']['jobs_per_s']:.1f}x 1 worker; "
        f"the preset's sandbox.workers={cfg.sandbox.workers}: {preset:.0f} jobs/s"
        + (f"; {wrong} WRONG results" if wrong else ""),
        cores=cores,
        preset_workers=cfg.sandbox.workers,
        workers=out,
        wrong=wrong,
    )
