"""GPU readiness check (run by `bench/gpu_check.sh`): the `paper-7b` run's own path, nothing downloaded.

A random-weight model is written from the config shipped in `bench/configs/qwen2.5-coder-7b.json` (config
only; the tokenizer is the bundled tiny model's: every id it makes exists in the 7B vocabulary) to a scratch
folder, and the `paper-7b` preset is pointed at it. Every engine is built the way the trainer builds it
(`populora.train.setup.build_engine`: the preflight, then the run's settings, i.e. vLLM's memory share and
sleep, activation checkpointing, chunked log-probs, `rl.micro_batch_tokens`). The checks, one pass/fail line
each, in this order:

- `preflight`: the run's memory preflight on this GPU (when it refuses, the checks below still run, to
  measure what it refused);
- `vllm_colocated`: vLLM next to the HF trainer with 8 rank-32 LoRA slots: its memory vs its configured
  share, and mixed 8-slot generation (tokens/s);
- `train_max_row`: one train step with a maximum-length row (the preflight's prompt bound + the preset's
  longest response) after vLLM has taken its share: the device's peak memory (all processes, polled) against
  the preflight's estimate (`populora.engine.memory.memory_plan`); fails when the estimate is lower;
- `adapter_refresh`: writing + reloading the 8 trained adapters into vLLM (seconds, bytes in the scratch
  folder), then a generation that uses them;
- `sandbox`: jobs/s of the sandbox on the node's cores vs the preset's `sandbox.workers` vs 1 worker;
- `run_2_steps`: a 2-step `paper-7b`-shaped run through the CLI (evolution after step 1, checkpoints) with
  `dist.workers` = the GPUs present (`--workers`), shorter prompts and responses so it fits the time;
- `hf_slots`: the HF engine alone, 8 mixed slots vs 1 slot on the same rows (tokens/s ratio, memory per
  added slot), as before.
Without vLLM the vLLM checks say "skipped: vLLM not installed" and the rest run on the hf backend.
`--set KEY=VALUE` (repeatable) applies the real run's overrides to every check.

Writes one JSON (`bench/results/gpu_check.json` on a GPU; with `--shrink` or on a CPU a file in the temp
folder unless `--out` says where, so a test never overwrites the GPU record) after every check, prints the
lines, exits 1 when a check failed. `--shrink` runs the same path on a CPU: a tiny config of the same family
(`SHRUNK`), short responses, float32 (the vLLM lane of `make test` runs it). A time budget (`--budget-s`)
skips what would not finish: the whole check fits 10 minutes on one GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "qwen2.5-coder-7b.json"
DEFAULT_OUT = HERE / "results" / "gpu_check.json"
SHRUNK_OUT = Path(tempfile.gettempdir()) / "populora-gpu-check-shrunk.json"
PRESET = "paper-7b"
SHRUNK = dict(  # the same family at a few MB, for a CPU: GQA as the 7B (head_dim 64, which vLLM's CPU
    hidden_size=256,  # attention supports), a vocabulary that holds the tokenizer's ids and positions for
    intermediate_size=512,  # the preset's long prompts
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_window_layers=2,
    vocab_size=2048,
    max_position_embeddings=8192,
    bos_token_id=0,  # the bundled tokenizer's (the 7B ids are outside this vocabulary)
    eos_token_id=0,
)
GIB, MIB = 2**30, 2**20
# Seconds a check needs at least on a GPU (model load, vLLM start-up, compile): skipped below that.
NEEDS_S = {"colocated": 150, "sandbox": 20, "run_2_steps": 150, "hf_slots": 60}


def load_config(shrink: bool) -> dict:
    cfg = json.loads(CONFIG.read_text())
    if shrink:
        cfg.update(SHRUNK)
    return cfg


def have_vllm() -> str | None:
    """vLLM's version, or None when it is not installed (the vLLM checks are then skipped)."""
    try:
        import vllm
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "?"))


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


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _mem(device: str) -> tuple[int, int]:
    """(allocated, peak allocated) bytes on the GPU; (resident set size, 0) on CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.memory_allocated()), int(torch.cuda.max_memory_allocated())
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE"), 0


def _gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


class DevicePeak:
    """The device's used memory (every process: this trainer and vLLM's engine core) polled every 2 ms in a
    thread while the block runs; `peak` in bytes (None on CPU, where there is no device to poll). `mark()`
    ends a phase: it returns the phase's peak and starts the next one."""

    def __init__(self, device: str) -> None:
        self.device, self.peak = device, None
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        import torch

        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            with self._lock:
                self.peak = max(self.peak or 0, total - free)
            time.sleep(0.002)

    def mark(self) -> int | None:
        with self._lock:
            peak, self.peak = self.peak, None
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


def _device_used(device: str) -> tuple[int, int] | None:
    """(bytes in use on the device by every process, total bytes), or None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free), int(total)


class Checks:
    """The result record: one entry per check with its status ('pass', 'fail' or 'skipped: why') and the
    line printed for it; written to `out` after every check, so a run stopped by its time limit leaves what
    it measured."""

    def __init__(self, out: Path, res: dict, budget_s: float, gpu: bool) -> None:
        self.out, self.res, self.gpu = out, res, gpu
        self.t0, self.budget_s = time.perf_counter(), budget_s
        res["checks"] = {}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def room_for(self, name: str, key: str | None = None) -> bool:
        """False (and the check recorded as skipped) when less time is left than it needs on a GPU."""
        need = NEEDS_S.get(key or name, 0) if self.gpu else 0
        if self.left() < need:
            self.skip(name, f"time budget ({self.left():.0f} s left, needs about {need} s; raise --budget-s)")
            return False
        return True

    def record(self, name: str, ok: bool, line: str, **details) -> None:
        self.res["checks"][name] = {"status": "pass" if ok else "fail", "line": line, **details}
        self._show(name)

    def skip(self, name: str, why: str, **details) -> None:
        self.res["checks"][name] = {"status": f"skipped: {why}", "line": why, **details}
        self._show(name)

    def fail(self, name: str, err: BaseException, **details) -> None:
        msg = str(err).strip().splitlines()
        self.record(name, False, f"{type(err).__name__}: {msg[-1] if msg else ''}"[:500], **details)

    def _show(self, name: str) -> None:
        c = self.res["checks"][name]
        tag = c["status"].split(":")[0].upper()
        print(f"{tag:7} {name:16} {c['line']}", flush=True)
        self.write()

    def write(self) -> None:
        self.res["wall_s"] = round(time.perf_counter() - self.t0, 1)
        self.out.write_text(json.dumps(self.res, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------------
# The run's configuration


def run_overrides(folder: Path, args, device: str, backend: str, workers: int) -> list[str]:
    """`--set` overrides that point `paper-7b` at the random folder on this machine; nothing else changes on
    a GPU, except what `--shrink` needs to run on a CPU (float32, short responses, few threads)."""
    sets = [f"model.name={folder}", f"model.backend={backend}", f"dist.workers={workers}"]
    if device == "cpu":
        sets += ["model.device=cpu", "model.dtype=float32", "train.threads=1"]
        sets += [f"sandbox.workers={min(2, os.cpu_count() or 1)}"]
    if args.shrink:
        n = max(8, args.new_tokens)  # the config's floor
        sets += [f"tasks.teacher_max_new_tokens={n}", f"tasks.student_max_new_tokens={n}"]
    return sets + list(args.sets)  # the user's own, last: e.g. the memory settings the real run will use


def run_config(folder: Path, args, device: str, backend: str, workers: int = 1):
    from populora.config import load_config as load_run_config

    return load_run_config(PRESET, run_overrides(folder, args, device, backend, workers))


# ---------------------------------------------------------------------------------------------------------
# a-c: the run's engine (vLLM next to the trainer), a maximum-length train step, the adapter refresh


def engine_checks(checks: Checks, folder: Path, args, device: str, vllm_version: str | None) -> None:
    import torch

    from populora.config import ConfigError
    from populora.train.errors import TrainError
    from populora.train.setup import build_engine, gpu_plan, preflight

    backend = "vllm" if vllm_version else "hf"
    cfg = run_config(folder, args, device, backend)
    gpu = device.startswith("cuda")
    ctx_bytes = 0
    if gpu:  # what this process holds outside PyTorch's allocator (its CUDA context) before any engine
        torch.cuda.init()
        torch.zeros(1, device=device)
        ctx_bytes = _device_used(device)[0] - torch.cuda.memory_reserved()

    plan = gpu_plan(cfg, folder)  # the GPU plan, computed on the CPU (also printed on a CPU run)
    total = _device_used(device)[1] if gpu else None
    try:
        preflight(cfg)
        pre_ok, pre_line = True, "the run's memory preflight passes"
    except (TrainError, ConfigError) as err:  # measure what it refused: do the checks below bear it out?
        pre_ok, pre_line = False, str(err)
        cfg.model.memory_gb = 1e6
    sampling, training = plan.peaks(total) if total else (None, None)
    plan_d = {
        "base_bytes": plan.base,
        "slots_bytes": plan.slots,
        "activations_bytes": plan.activations,
        "longest_micro_batch_tokens": plan.tokens,
        "checkpointing": plan.checkpointing,
        "vllm_share": plan.vllm_share,
        "vllm_sleeps": plan.sleeps,
        "sampling_peak_bytes": sampling,
        "training_peak_bytes": training,
    }
    extra = f" (estimate: sampling {_gib(sampling)}, training {_gib(training)})" if gpu else ""
    checks.record("preflight", pre_ok, pre_line + extra, plan=plan_d)
    checks.res["settings"]["run"] = {
        "micro_batch_tokens": cfg.rl.micro_batch_tokens,
        "activation_checkpointing": cfg.rl.activation_checkpointing,
        "vllm_gpu_memory_utilization": cfg.model.vllm_gpu_memory_utilization,
        "vllm_sleep": cfg.model.vllm_sleep,
        "backend": backend,
        "dtype": cfg.model.dtype,
    }

    t = time.perf_counter()
    try:
        eng = build_engine(cfg)
    except Exception as err:  # noqa: BLE001 - one failed line, then the checks that need no engine
        first = "vllm_colocated" if vllm_version else "train_max_row"
        checks.fail(first, err)
        for name in ("vllm_colocated", "train_max_row", "adapter_refresh"):
            if name not in checks.res["checks"]:
                checks.skip(name, f"the engine did not build (see {first})")
        return
    build_s = time.perf_counter() - t
    try:
        _engine_checks(
            checks, eng, cfg, args, device, vllm_version, ctx_bytes, build_s, plan_d, sampling, training
        )
    finally:
        eng.close()
        del eng
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()


def _engine_checks(
    checks, eng, cfg, args, device, vllm_version, ctx_bytes, build_s, plan_d, sampling, training
):
    import torch

    from populora.engine import GenRequest, TrainBatch, TrainRow
    from populora.engine.memory import PROMPT_TOKENS, longest_micro_batch

    gpu = device.startswith("cuda")
    n_slots, vocab = eng.n_slots, len(eng.tokenizer)
    g = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:  # token ids the tokenizer knows (it decodes the samples)
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    reqs = [
        GenRequest(slot=i % n_slots, prompt=ids(args.prompt_len), max_new_tokens=args.new_tokens)
        for i in range(args.rows)
    ]

    def generate() -> tuple[float, int]:
        t = time.perf_counter()
        out = eng.generate(reqs, seed=0)
        _sync(device)
        if sorted({o.slot for o in out}) != list(range(n_slots)) or not all(o.token_ids for o in out):
            raise RuntimeError(
                f"generation returned empty rows or missed slots: {[len(o.token_ids) for o in out]}"
            )
        return time.perf_counter() - t, sum(len(o.token_ids) for o in out)

    # a. vLLM next to the trainer: its memory and a mixed 8-slot generation
    if vllm_version:
        try:
            used = _device_used(device)
            vllm_bytes = used[0] - torch.cuda.memory_reserved() - ctx_bytes if used else None
            first_s, _ = generate()  # loads the 8 adapters into vLLM
            gen_s, n_tok = generate()
            share = cfg.model.vllm_gpu_memory_utilization * used[1] if used else None
            # vLLM reserves its share up front; more than the share (+ its CUDA context) would squeeze training.
            ok = vllm_bytes is None or vllm_bytes <= share + GIB
            held = (
                f"vLLM holds {_gib(vllm_bytes)} of its share {cfg.model.vllm_gpu_memory_utilization:g} = "
                f"{_gib(share)}"
                if used
                else "vLLM next to the trainer (a CPU: no device memory to measure)"
            )
            checks.record(
                "vllm_colocated",
                ok,
                held + f"; {args.rows} rows on {n_slots} slots x "
                f"{args.new_tokens} tokens: {n_tok / gen_s:.0f} tokens/s (first call with adapter loading "
                f"{first_s:.1f} s); engine built in {build_s:.0f} s",
                vllm_bytes=vllm_bytes,
                share_bytes=share,
                engine_build_s=round(build_s, 1),
                first_generate_s=round(first_s, 2),
                gen_s=round(gen_s, 3),
                gen_tokens=n_tok,
                gen_tokens_per_s=round(n_tok / gen_s, 1),
            )
        except Exception as err:  # noqa: BLE001
            checks.fail("vllm_colocated", err)
    else:
        checks.skip("vllm_colocated", "vLLM not installed")

    # b. one train step with a maximum-length row (slot 0) + a short row on every other slot (so all 8
    # adapters change and c refreshes 8); the long row runs alone in its micro-batch, as in the run.
    longest = longest_micro_batch(cfg)
    response = max(cfg.tasks.teacher_max_new_tokens, cfg.tasks.student_max_new_tokens)
    rows = [TrainRow(slot=0, prompt_ids=ids(PROMPT_TOKENS), response_ids=ids(response), advantages=1.0)]
    rows += [
        TrainRow(slot=s, prompt_ids=ids(16), response_ids=ids(16), advantages=-1.0) for s in range(1, n_slots)
    ]
    batch = TrainBatch(rows)
    train_s = None
    phases: dict[str, float | int | None] = {}
    try:
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        before = _device_used(device)
        t = time.perf_counter()
        with DevicePeak(device) as peak:
            # vLLM sleeps for the step and wakes after it (model.vllm_sleep): the two phases' peaks are told
            # apart by timing the engine's own sleep/wake (instance attributes over its methods, removed after).
            if gpu and getattr(eng, "sleep_mode", False):
                sleep, wake = eng.sleep, eng.wake

                def timed_sleep():
                    t0 = time.perf_counter()
                    sleep()
                    phases["sleep_s"] = round(time.perf_counter() - t0, 2)

                def timed_wake():
                    phases["train_peak"] = peak.mark()  # the step, vLLM asleep
                    t0 = time.perf_counter()
                    wake()
                    phases["wake_s"] = round(time.perf_counter() - t0, 2)

                eng.sleep, eng.wake = timed_sleep, timed_wake
            try:
                metrics = eng.train_step(batch)
                _sync(device)
            finally:
                eng.__dict__.pop("sleep", None)
                eng.__dict__.pop("wake", None)
        train_s = time.perf_counter() - t
        finite = all(math.isfinite(float(v)) for v in metrics.values() if isinstance(v, int | float))
        details = dict(
            row_tokens=PROMPT_TOKENS + response,
            longest_micro_batch_tokens=longest,
            batch_tokens=batch.n_tokens,
            train_s=round(train_s, 2),
            estimate=plan_d,
            metrics_finite=finite,
            **{k: v for k, v in phases.items() if k.endswith("_s")},
        )
        if gpu:
            trainer_peak = int(torch.cuda.max_memory_allocated())
            step_peak = phases["train_peak"] if "train_peak" in phases else peak.peak
            wake_peak = peak.peak if "train_peak" in phases else None  # from vLLM's wake-up to the end
            details.update(
                device_peak_bytes=step_peak,
                device_peak_at_wake_bytes=wake_peak,
                device_used_before_bytes=before[0],
                trainer_peak_allocated_bytes=trainer_peak,
                trainer_peak_reserved_bytes=int(torch.cuda.max_memory_reserved()),
                estimate_over_measured=round(training / step_peak, 3) if step_peak else None,
            )
            step_ok = step_peak is not None and step_peak <= training
            wake_ok = wake_peak is None or wake_peak <= sampling
            ok = finite and step_ok and wake_ok
            line = (
                f"{PROMPT_TOKENS}+{response}-token row in {train_s:.1f} s: device peak {_gib(step_peak)} "
                f"(trainer {_gib(trainer_peak)}) vs the preflight's {_gib(training)}"
                + ("" if step_ok else " (UNDER-estimated)")
            )
            if wake_peak is not None:
                line += (
                    f"; at vLLM's wake-up {_gib(wake_peak)} vs its sampling estimate {_gib(sampling)}"
                    + ("" if wake_ok else " (UNDER-estimated)")
                    + f"; sleep {phases.get('sleep_s')} s + wake {phases.get('wake_s')} s"
                )
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            details.update(process_peak_rss_bytes=rss)
            ok = finite
            line = (
                f"{PROMPT_TOKENS}+{response}-token row in {train_s:.1f} s, process peak RSS {_gib(rss)} "
                "(no device memory on a CPU: the GPU estimate is in the JSON, not compared)"
            )
        checks.record("train_max_row", ok, line, **details)
    except Exception as err:  # noqa: BLE001 - an out-of-memory error is the finding
        checks.fail("train_max_row", err, row_tokens=PROMPT_TOKENS + response, estimate=plan_d)

    # c. the adapter refresh after that step: every slot written (PEFT folder) and reloaded into vLLM
    if not vllm_version:
        checks.skip("adapter_refresh", "vLLM not installed")
        return
    try:
        stale = len(eng._stale)  # the refresh generate() runs first; timed alone here
        t = time.perf_counter()
        eng._refresh()
        refresh_s = time.perf_counter() - t
        written = sum(p.stat().st_size for p in eng._scratch.rglob("*") if p.is_file())
        gen_s, n_tok = generate()  # with the refreshed adapters
        checks.record(
            "adapter_refresh",
            stale == n_slots,
            f"{stale} adapters written ({written / MIB:.0f} MiB in {eng._scratch.parent}) and reloaded in "
            f"{refresh_s:.2f} s ({refresh_s / max(stale, 1) * 1e3:.0f} ms each"
            + (f", {refresh_s / train_s:.2f}x the train step" if train_s else "")
            + f"); generation after it {n_tok / gen_s:.0f} tokens/s",
            adapters=stale,
            refresh_s=round(refresh_s, 3),
            written_bytes=written,
            scratch_root=str(eng._scratch.parent),
            train_step_s=round(train_s, 3) if train_s else None,
            gen_tokens_per_s=round(n_tok / gen_s, 1),
        )
    except Exception as err:  # noqa: BLE001
        checks.fail("adapter_refresh", err)


# ---------------------------------------------------------------------------------------------------------
# d: the sandbox on this node's cores


def sandbox_check(checks: Checks, args) -> None:
    from populora.config import load_config as load_run_config
    from populora.sandbox import Limits, Sandbox
    from populora.sandbox.bench import PROGRAM
    from populora.sandbox.pool import MAX_WORKERS

    cfg = load_run_config(PRESET, args.sets)  # the run's sandbox settings (a CPU run's own lower the workers)
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


# ---------------------------------------------------------------------------------------------------------
# e: a 2-step paper-7b-shaped run through the CLI


def run_check(checks: Checks, folder: Path, args, device: str, backend: str, workers: int) -> None:
    run = Path(args.work_dir) / "run"
    sets = run_overrides(folder, args, device, backend, workers)
    sets += [
        "train.steps=2",
        "train.checkpoint_every=1",
        "evolution.every=1",  # an evolution step after step 1 (never after the final step)
        "evolution.min_games=0",
        f"tasks.prompts={args.run_prompts}",
        f"rl.rollouts={args.run_rollouts}",
        f"tasks.teacher_max_new_tokens={args.run_new_tokens}",
        f"tasks.student_max_new_tokens={args.run_new_tokens}",
    ]
    cmd = [
        sys.executable,
        "-m",
        "populora.cli",
        "train",
        "--quiet",
        "--preset",
        PRESET,
        "--run-dir",
        str(run),
    ]
    for kv in sets:
        cmd += ["--set", kv]
    timeout = max(30, int(checks.left() - 30))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        checks.record("run_2_steps", False, f"timed out after {timeout} s", workers=workers, command=cmd)
        return
    wall = time.perf_counter() - t
    (Path(args.work_dir) / "run.log").write_text(res.stdout + res.stderr)  # kept with --work-dir
    steps = []
    with contextlib.suppress(OSError, ValueError):
        steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    events = []
    with contextlib.suppress(OSError, ValueError):
        events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    evolutions = sum(e.get("type") == "evolution" for e in events)
    ckpt = (run / "checkpoints" / "step_000002" / "state.json").is_file()
    ok = res.returncode == 0 and [m.get("step") for m in steps] == [1, 2] and ckpt and evolutions > 0
    err = res.stderr.strip().splitlines()[-1:] if res.returncode else []
    step_times = ", ".join(f"{m.get('step_s') or 0:.0f}" for m in steps)
    per_step = [{"step_s": m.get("step_s"), "phase_s": m.get("phase_s")} for m in steps]
    line = f"dist.workers={workers}, backend {backend}: " + (
        f"2 steps in {wall:.0f} s (steps {step_times} s), evolution ran, checkpoint written"
        if ok
        else f"exit {res.returncode}, steps {[m.get('step') for m in steps]}, checkpoint {ckpt}, "
        f"evolutions {evolutions}: {err[0] if err else ''}"
    )
    checks.record(
        "run_2_steps",
        ok,
        line,
        workers=workers,
        backend=backend,
        wall_s=round(wall, 1),
        steps=per_step,
        overrides=sets,
        stderr_tail=res.stderr[-2000:] if not ok else "",
    )


# ---------------------------------------------------------------------------------------------------------
# the HF engine alone: 8 mixed slots vs 1 slot on the same rows


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
        _sync(device)
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
        _sync(device)

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


def hf_slots_check(checks: Checks, cfg: dict, args, device: str, dtype) -> None:
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


# ---------------------------------------------------------------------------------------------------------


def _commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


ALL = ("engine", "sandbox", "run", "hf_slots")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shrink", action="store_true", help="tiny config of the same family (runs on CPU)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--rank", type=int, default=32, help="hf_slots: LoRA rank (the run uses the preset's)")
    ap.add_argument("--rows", type=int, default=32, help="sequences per generate (4 per slot)")
    ap.add_argument("--prompt-len", type=int, default=256, help="prompt tokens of the generation rows")
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
    ap.add_argument("--repeats", type=int, default=3, help="hf_slots: timed repeats (best is reported)")
    ap.add_argument("--workers", type=int, default=None, help="run_2_steps: dist.workers (default: the GPUs)")
    ap.add_argument("--run-prompts", type=int, default=3, help="run_2_steps: tasks.prompts (one per type)")
    ap.add_argument("--run-rollouts", type=int, default=2, help="run_2_steps: rl.rollouts")
    ap.add_argument("--run-new-tokens", type=int, default=256, help="run_2_steps: max new tokens per answer")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        dest="sets",
        metavar="KEY=VALUE",
        help="a run-config override on top of paper-7b for every check (repeatable), e.g. the real run's --set",
    )
    ap.add_argument(
        "--only", default=",".join(ALL), help=f"comma-separated parts to run (of {','.join(ALL)})"
    )
    ap.add_argument("--budget-s", type=float, default=540, help="skip checks that would not finish in time")
    ap.add_argument("--work-dir", default=None, help="scratch folder for the model and the run (deleted)")
    ap.add_argument(
        "--out", type=Path, default=None, help=f"default: {DEFAULT_OUT} on a GPU, else {SHRUNK_OUT}"
    )
    args = ap.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "gpu_check: --device cuda but torch sees no GPU; use --shrink --device cpu to test it."
        )
    if device == "cpu" and not args.shrink:
        raise SystemExit("gpu_check: no GPU found; the 7B shape needs one (use --shrink to test on a CPU).")
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if only - set(ALL):
        raise SystemExit(
            f"gpu_check: --only {sorted(only - set(ALL))}: unknown; choose from {','.join(ALL)}."
        )
    gpu = device.startswith("cuda")
    out = args.out or (SHRUNK_OUT if args.shrink or not gpu else DEFAULT_OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16 if gpu else torch.float32
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    workers = args.workers or max(1, n_gpu)
    vllm_version = have_vllm()
    cfg = load_config(args.shrink)
    res = {
        "what": f"the {PRESET} run's path at the Qwen2.5-Coder-7B shape (random weights), one line per check",
        "shrunk": args.shrink,
        "complete": False,
        "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
        "gpus": n_gpu,
        "cores": os.cpu_count(),
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "vllm": vllm_version,
        "commit": _commit(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    checks = Checks(out, res, args.budget_s, gpu)
    own_dir = args.work_dir is None
    args.work_dir = args.work_dir or tempfile.mkdtemp(prefix="populora-gpu-check-")
    folder = Path(args.work_dir) / "model"
    print(
        f"gpu_check on {res['device']} ({res['dtype']}{', SHRUNK config' if args.shrink else ''}), "
        f"vLLM {vllm_version or 'not installed'}",
        flush=True,
    )
    try:
        if only & {"engine", "sandbox", "run"}:
            res["model"] = write_model_folder(cfg, folder, device, dtype)
            checks.write()
        if "engine" in only and checks.room_for("engine", "colocated"):
            engine_checks(checks, folder, args, device, vllm_version)
        if "sandbox" in only and checks.room_for("sandbox"):
            sandbox_check(checks, args)
        if "run" in only and checks.room_for("run_2_steps"):
            run_check(checks, folder, args, device, "vllm" if vllm_version else "hf", workers)
        if "hf_slots" in only and checks.room_for("hf_slots"):
            hf_slots_check(checks, cfg, args, device, dtype)
    finally:
        if own_dir:
            shutil.rmtree(args.work_dir, ignore_errors=True)
    statuses = [c["status"] for c in res["checks"].values()]
    res["passed"] = "fail" not in statuses
    res["complete"] = True
    checks.write()
    n_pass, n_fail = statuses.count("pass"), statuses.count("fail")
    print(
        f"{n_pass} passed, {n_fail} failed, {len(statuses) - n_pass - n_fail} skipped in {res['wall_s']} s; "
        f"wrote {out}"
    )
    return res


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
