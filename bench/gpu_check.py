"""GPU readiness check (run by `bench/gpu_check.sh`): the `paper-7b` run's own path, nothing downloaded.

A random-weight model is written once, from the config shipped in `bench/configs/qwen2.5-coder-7b.json`
(config only; the tokenizer is the bundled tiny model's: every id it makes exists in the 7B vocabulary), to a
scratch folder that is removed on any exit (SIGTERM and SIGHUP included: they raise SystemExit, so every
`finally` runs; bench/gpu_check.sh removes its scratch root as well), and the `paper-7b` preset is pointed at
it. Every engine is built the way the trainer builds it (`populora.train.setup.build_engine`). The checks,
one pass/fail line each, in this order; each prints its expected seconds before it starts and its measured
seconds after (the JSON keeps both):

- `vllm_import`: the preset samples with vLLM: on CUDA, vLLM not importable by this interpreter is a FAIL
  (the rest then runs on the hf backend, to show what it can); on a CPU without vLLM a skip;
- `preflight`: the run's memory preflight on this GPU (when it refuses, the checks below still run, to
  measure what it refused); `engine_build`: the trainer + vLLM built as the run builds them;
- `vllm_colocated`: vLLM next to the HF trainer with 8 rank-32 LoRA slots: its memory vs its configured
  share, and mixed 8-slot generation (tokens/s);
- `kv_pressure`: one generation whose rows need 1.25x the KV cache vLLM holds; every row must come back;
- `train_max_row`: one train step with a maximum-length row after vLLM has taken its share: the device's
  peak memory (all processes, polled; reset once vLLM sleeps) against the preflight's estimate; fails when
  the estimate is lower;
- `adapter_refresh`: writing + reloading the 8 trained adapters into vLLM, then a generation with them;
- `sleep_wake_greedy`: a fixed-seed greedy generation before vLLM's sleep and after its wake-up, adapters
  unchanged: the tokens must be equal (skipped on the hf backend);
- `sandbox`: jobs/s of the sandbox on the node's cores vs the preset's `sandbox.workers` vs 1 worker;
- `run_2_steps` then `resume`: step 1 of a `paper-7b`-shaped run through the CLI with `dist.workers` = the
  GPUs present, a few valid problems forced in (bench/forced_train.py) so the students generate, are scored
  and train, and a checkpoint; then a new process `--resume`s it for step 2;
- `hf_slots`: the HF engine alone, 8 mixed slots vs 1 slot on the same rows (tokens/s ratio, memory per
  added slot); last, and the first to be skipped by the time budget on a GPU.
`--set KEY=VALUE` (repeatable) applies the real run's overrides to every check.

Writes one JSON (`bench/results/gpu_check.json` on a GPU; with `--shrink` or on a CPU a file in the temp
folder unless `--out` says where, so a test never overwrites the GPU record) after every check, prints the
lines, exits 1 when a check failed. `--shrink` runs the same path on a CPU: a tiny config of the same family
(`SHRUNK`), short responses, float32. A time budget (`--budget-s`, 540 s) skips a check whose expected
seconds no longer fit: the whole check fits 10 minutes on one GPU.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however it is loaded
from gpu_check_steps import (  # noqa: E402
    GIB,
    MIB,
    DevicePeak,
    device_used,
    gib,
    hf_slots_check,
    kv_pressure_check,
    on_signals,
    run_check,
    sandbox_check,
    sleep_wake_check,
    sync,
    watch_sleep,
    write_model_folder,
)

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
# Seconds each check is expected to take: on one H100 (estimates from the review: vLLM's first 7B start
# with LoRA 1.5-3 min, a run process ~1.5 min to load both engines; not yet measured on a GPU) and with
# --shrink on a CPU (measured on the shared 2-core development machine under load, hf backend; with vLLM
# engine_build took 228 s, run_2_steps 395 s, resume 284 s). On a GPU a check is skipped when less of the
# budget is left than it expects; on a CPU nothing is skipped for time.
EXPECTED_S = {  # check: (seconds on one H100, seconds shrunk on a CPU)
    "vllm_import": (10, 15),
    "model": (45, 20),
    "preflight": (5, 1),
    "engine_build": (150, 60),
    "vllm_colocated": (20, 70),
    "kv_pressure": (45, 1),
    "train_max_row": (30, 5),
    "adapter_refresh": (10, 1),
    "sleep_wake_greedy": (20, 1),
    "sandbox": (15, 5),
    "run_2_steps": (100, 180),
    "resume": (80, 190),
    "hf_slots": (60, 10),
}


def load_config(shrink: bool) -> dict:
    cfg = json.loads(CONFIG.read_text())
    if shrink:
        cfg.update(SHRUNK)
    return cfg


def import_vllm() -> tuple[str | None, str | None]:
    """(vLLM's version, None) when this interpreter imports it, else (None, why not): the import itself,
    not only the package's presence (a broken install, e.g. torchaudio built for another torch, fails here
    as it would in the run)."""
    try:
        import vllm
    except ImportError as err:
        return None, f"{type(err).__name__}: {err}"
    except Exception as err:  # noqa: BLE001 - a broken install raises anything at import time
        return None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return str(getattr(vllm, "__version__", "?")), None


class Checks:
    """The result record: one entry per check with its status ('pass', 'fail' or 'skipped: why'), the line
    printed for it, its expected and measured seconds; written to `out` after every check, so a run stopped
    by its time limit leaves what it measured."""

    def __init__(self, out: Path, res: dict, budget_s: float, gpu: bool) -> None:
        self.out, self.res, self.gpu = out, res, gpu
        self.t0, self.budget_s = time.perf_counter(), budget_s
        self.expected = {name: s[0 if gpu else 1] for name, s in EXPECTED_S.items()}
        self._started: dict[str, float] = {}
        res["checks"] = {}

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def room_for(self, name: str) -> bool:
        """False (and the check recorded as skipped) when less time is left than it expects on a GPU."""
        need = self.expected.get(name, 0) if self.gpu else 0
        if self.left() < need:
            self.skip(
                name, f"time budget ({self.left():.0f} s left, expects about {need} s; raise --budget-s)"
            )
            return False
        return True

    def start(self, name: str) -> None:
        """Print the check's expected seconds before it runs (its measured ones come with its line)."""
        self._started[name] = time.perf_counter()
        where = "on one H100" if self.gpu else "shrunk, on a CPU"
        print(f"{'...':7} {name:16} expected ~{self.expected.get(name, '?')} s {where}", flush=True)

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
        took = ""
        if name in self._started:
            c["measured_s"] = round(time.perf_counter() - self._started.pop(name), 1)
            c["expected_s"] = self.expected.get(name)
            took = f" [{c['measured_s']:.0f} s, expected ~{c['expected_s']}]"
        tag = c["status"].split(":")[0].upper()
        print(f"{tag:7} {name:16} {c['line']}{took}", flush=True)
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
# the run's engine (vLLM next to the trainer): its checks, in order, on one engine

ENGINE_CHECKS = ("vllm_colocated", "kv_pressure", "train_max_row", "adapter_refresh", "sleep_wake_greedy")


def engine_checks(checks: Checks, folder: Path, args, device: str, vllm_version: str | None) -> None:
    import torch

    from populora.config import ConfigError
    from populora.train.errors import TrainError
    from populora.train.setup import build_engine, gpu_plan, preflight

    backend = "vllm" if vllm_version else "hf"
    cfg = run_config(folder, args, device, backend)
    gpu = device.startswith("cuda")
    checks.start("preflight")
    ctx_bytes = 0
    if gpu:  # what this process holds outside PyTorch's allocator (its CUDA context) before any engine
        torch.cuda.init()
        torch.zeros(1, device=device)
        ctx_bytes = device_used(device)[0] - torch.cuda.memory_reserved()

    plan = gpu_plan(cfg, folder)  # the GPU plan, computed on the CPU (also printed on a CPU run)
    total = device_used(device)[1] if gpu else None
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
    extra = f" (estimate: sampling {gib(sampling)}, training {gib(training)})" if gpu else ""
    checks.record("preflight", pre_ok, pre_line + extra, plan=plan_d)
    checks.res["settings"]["run"] = {
        "micro_batch_tokens": cfg.rl.micro_batch_tokens,
        "activation_checkpointing": cfg.rl.activation_checkpointing,
        "vllm_gpu_memory_utilization": cfg.model.vllm_gpu_memory_utilization,
        "vllm_sleep": cfg.model.vllm_sleep,
        "backend": backend,
        "dtype": cfg.model.dtype,
    }

    if not checks.room_for("engine_build"):
        return
    checks.start("engine_build")
    t = time.perf_counter()
    try:
        eng = build_engine(cfg)
    except Exception as err:  # noqa: BLE001 - one failed line, then the checks that need no engine
        checks.fail("engine_build", err)
        for name in ENGINE_CHECKS:
            checks.skip(name, "the engine did not build (see engine_build)")
        return
    build_s = time.perf_counter() - t
    checks.record(
        "engine_build",
        True,
        f"the trainer{' + vLLM' if vllm_version else ''} with {eng.n_slots} LoRA slots built in {build_s:.0f} s",
        build_s=round(build_s, 1),
    )
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
        sync(device)
        if sorted({o.slot for o in out}) != list(range(n_slots)) or not all(o.token_ids for o in out):
            raise RuntimeError(
                f"generation returned empty rows or missed slots: {[len(o.token_ids) for o in out]}"
            )
        return time.perf_counter() - t, sum(len(o.token_ids) for o in out)

    # vLLM next to the trainer: its memory and a mixed 8-slot generation
    no_vllm = checks.res.get("no_vllm", "vLLM not installed")
    if vllm_version:
        checks.start("vllm_colocated")
        try:
            used = device_used(device)
            vllm_bytes = used[0] - torch.cuda.memory_reserved() - ctx_bytes if used else None
            first_s, _ = generate()  # loads the 8 adapters into vLLM
            gen_s, n_tok = generate()
            share = cfg.model.vllm_gpu_memory_utilization * used[1] if used else None
            # vLLM reserves its share up front; more than the share (+ its CUDA context) would squeeze training.
            ok = vllm_bytes is None or vllm_bytes <= share + GIB
            held = (
                f"vLLM holds {gib(vllm_bytes)} of its share {cfg.model.vllm_gpu_memory_utilization:g} = "
                f"{gib(share)}"
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
        checks.skip("vllm_colocated", no_vllm)

    # one generation longer than the KV cache holds, while vLLM is awake and has its whole share
    checks.start("kv_pressure")
    kv_pressure_check(checks, eng, cfg, Path(cfg.model.name), args, device, ids)

    # one train step with a maximum-length row (slot 0) + a short row on every other slot (so all 8
    # adapters change and the refresh writes 8); the long row runs alone in its micro-batch, as in the run.
    longest = longest_micro_batch(cfg)
    response = max(cfg.tasks.teacher_max_new_tokens, cfg.tasks.student_max_new_tokens)
    rows = [TrainRow(slot=0, prompt_ids=ids(PROMPT_TOKENS), response_ids=ids(response), advantages=1.0)]
    rows += [
        TrainRow(slot=s, prompt_ids=ids(16), response_ids=ids(16), advantages=-1.0) for s in range(1, n_slots)
    ]
    batch = TrainBatch(rows)
    checks.start("train_max_row")
    train_s = None
    phases: dict[str, float | int | None] = {}
    try:
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        before = device_used(device)
        t = time.perf_counter()
        with DevicePeak(device) as peak:
            # vLLM sleeps for the step and wakes after it (model.vllm_sleep): its own sleep/wake split the
            # poller's phases, and the step's peak starts once vLLM has slept (gpu_check_steps.watch_sleep).
            with (
                watch_sleep(eng, peak, phases)
                if gpu and getattr(eng, "sleep_mode", False)
                else contextlib.nullcontext()
            ):
                metrics = eng.train_step(batch)
                sync(device)
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
        if "awake_peak" in phases:  # before vLLM slept: its share + the trainer (not the step's)
            details["device_peak_before_sleep_bytes"] = phases["awake_peak"]
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
                f"{PROMPT_TOKENS}+{response}-token row in {train_s:.1f} s: device peak {gib(step_peak)} "
                f"(trainer {gib(trainer_peak)}) vs the preflight's {gib(training)}"
                + ("" if step_ok else " (UNDER-estimated)")
            )
            if wake_peak is not None:
                line += (
                    f"; at vLLM's wake-up {gib(wake_peak)} vs its sampling estimate {gib(sampling)}"
                    + ("" if wake_ok else " (UNDER-estimated)")
                    + f"; sleep {phases.get('sleep_s')} s + wake {phases.get('wake_s')} s"
                )
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            details.update(process_peak_rss_bytes=rss)
            ok = finite
            line = (
                f"{PROMPT_TOKENS}+{response}-token row in {train_s:.1f} s, process peak RSS {gib(rss)} "
                "(no device memory on a CPU: the GPU estimate is in the JSON, not compared)"
            )
        checks.record("train_max_row", ok, line, **details)
    except Exception as err:  # noqa: BLE001 - an out-of-memory error is the finding
        checks.fail("train_max_row", err, row_tokens=PROMPT_TOKENS + response, estimate=plan_d)

    # the adapter refresh after that step: every slot written (PEFT folder) and reloaded into vLLM
    if not vllm_version:
        checks.skip("adapter_refresh", no_vllm)
        sleep_wake_check(checks, eng, device, None, ids, args)
        return
    checks.start("adapter_refresh")
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

    # greedy before vLLM's sleep = greedy after its wake-up, with the trained adapters unchanged between
    checks.start("sleep_wake_greedy")
    sleep_wake_check(checks, eng, device, vllm_version, ids, args)


# ---------------------------------------------------------------------------------------------------------


def _commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


ALL = ("engine", "sandbox", "run", "hf_slots")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shrink", action="store_true", help="tiny config of the same family (runs on CPU)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--rank", type=int, default=32, help="hf_slots: LoRA rank (the run uses the preset's)")
    ap.add_argument("--rows", type=int, default=32, help="sequences per generate (4 per slot)")
    ap.add_argument("--prompt-len", type=int, default=256, help="prompt tokens of the generation rows")
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
    ap.add_argument("--repeats", type=int, default=3, help="hf_slots: timed repeats (best is reported)")
    ap.add_argument("--kv-prompt-len", type=int, default=None, help="kv_pressure: prompt tokens (2048; 32)")
    ap.add_argument("--kv-new-tokens", type=int, default=None, help="kv_pressure: new tokens (256; 8)")
    ap.add_argument(
        "--kv-rows", type=int, default=4, help="kv_pressure: rows when the KV capacity is unknown"
    )
    ap.add_argument("--kv-max-rows", type=int, default=1024, help="kv_pressure: at most this many rows")
    ap.add_argument("--workers", type=int, default=None, help="run_2_steps: dist.workers (default: the GPUs)")
    ap.add_argument("--run-prompts", type=int, default=3, help="run_2_steps: tasks.prompts (one per type)")
    ap.add_argument("--run-rollouts", type=int, default=2, help="run_2_steps: rl.rollouts")
    ap.add_argument("--run-new-tokens", type=int, default=None, help="run_2_steps: new tokens (256; 16)")
    ap.add_argument("--force-valid", type=int, default=4, help="run_2_steps: valid problems forced per step")
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
    ap.add_argument("--work-dir", default=None, help="scratch folder for the model and the run (kept)")
    ap.add_argument(
        "--scratch-root",
        default=None,
        help="where the deleted scratch folder is made (default: the temp dir)",
    )
    ap.add_argument(
        "--out", type=Path, default=None, help=f"default: {DEFAULT_OUT} on a GPU, else {SHRUNK_OUT}"
    )
    args = ap.parse_args(argv)
    small = args.shrink  # the CPU sizes of the KV and run checks
    args.kv_prompt_len = args.kv_prompt_len or (32 if small else 2048)
    args.kv_new_tokens = args.kv_new_tokens or (8 if small else 256)
    args.run_new_tokens = args.run_new_tokens or (16 if small else 256)
    return args


def vllm_check(checks: Checks, args, gpu: bool) -> str | None:
    """`vllm_import`: does the run's backend (paper-7b's vLLM unless --set says otherwise) import here? On
    CUDA a vLLM preset without an importable vLLM FAILS (the GPU run would die at its first generate); the
    checks then run on the hf backend, to show what they can. Returns vLLM's version when it is used."""
    from populora.config import ConfigError
    from populora.config import load_config as load_run_config

    try:
        backend = load_run_config(PRESET, args.sets).model.backend
    except ConfigError as err:
        raise SystemExit(f"gpu_check: --set: {err}") from None
    checks.start("vllm_import")
    if backend != "vllm":
        checks.res["no_vllm"] = f"model.backend={backend}: vLLM not used"
        checks.skip("vllm_import", checks.res["no_vllm"])
        return None
    version, why = import_vllm()
    if version:
        checks.record(
            "vllm_import", True, f"vLLM {version} imported by {sys.executable}", python=sys.executable
        )
        return version
    checks.res["no_vllm"] = "vLLM not installed" if not gpu else "vLLM not importable (see vllm_import)"
    if not gpu:  # a CPU check of the hf path (the vLLM lane of make test runs the vLLM one)
        checks.skip("vllm_import", f"vLLM not installed ({why}); a CPU: the hf backend runs")
        return None
    checks.record(
        "vllm_import",
        False,
        f"{PRESET} samples with vLLM, but {sys.executable} cannot import it ({why}); run "
        "`bash bench/gpu_check.sh --python PYTHON` with the GPU install's interpreter (docs/engine.md, "
        "GPU install), or add --set model.backend=hf to check the hf path only. The checks below use hf.",
        python=sys.executable,
        error=why,
    )
    return None


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    on_signals()  # SIGTERM/SIGHUP -> SystemExit: the finally below removes the model, the engine closes

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
    cfg = load_config(args.shrink)
    res = {
        "what": f"the {PRESET} run's path at the Qwen2.5-Coder-7B shape (random weights), one line per check",
        "shrunk": args.shrink,
        "complete": False,
        "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
        "gpus": n_gpu,
        "cores": os.cpu_count(),
        "dtype": str(dtype).removeprefix("torch."),
        "python": sys.executable,
        "torch": torch.__version__,
        "vllm": None,
        "commit": _commit(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    checks = Checks(out, res, args.budget_s, gpu)
    print(
        f"gpu_check on {res['device']} ({res['dtype']}{', SHRUNK config' if args.shrink else ''}), "
        f"interpreter {sys.executable}, time budget {args.budget_s:.0f} s",
        flush=True,
    )
    vllm_version = res["vllm"] = vllm_check(checks, args, gpu)
    backend = "vllm" if vllm_version else "hf"
    own_dir = args.work_dir is None
    if own_dir:
        args.work_dir = tempfile.mkdtemp(prefix="populora-gpu-check-", dir=args.scratch_root)
    folder = Path(args.work_dir) / "model"
    try:
        if only & {"engine", "run"}:  # written once; every check and both run processes load it
            checks.start("model")
            try:
                res["model"] = write_model_folder(cfg, folder, device, dtype)
            except Exception as err:  # noqa: BLE001 - e.g. a full disk: nothing below can run
                checks.fail("model", err)
                only &= {"sandbox", "hf_slots"}
            else:
                m = res["model"]
                checks.record(
                    "model",
                    True,
                    f"random {m['params'] / 1e9:.2f}B-parameter model written to {folder} "
                    f"({m['weight_bytes'] / GIB:.1f} GiB; removed at exit)",
                    **m,
                )
        if "engine" in only:
            engine_checks(checks, folder, args, device, vllm_version)
        if "sandbox" in only and checks.room_for("sandbox"):
            checks.start("sandbox")
            sandbox_check(checks, args)
        if "run" in only:
            run_check(
                checks,
                folder,
                args,
                device,
                backend,
                workers,
                run_overrides(folder, args, device, backend, workers),
            )
        if "hf_slots" in only and checks.room_for("hf_slots"):
            checks.start("hf_slots")
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
