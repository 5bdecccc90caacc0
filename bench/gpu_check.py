"""GPU readiness check (run by `bench/gpu_check.sh`): the engine at Qwen2.5-Coder-7B shape, nothing downloaded.

Builds a random-weight model from the config shipped in `bench/configs/qwen2.5-coder-7b.json` (config only,
no weights), puts 8 LoRA slots (rank 32, q/k/v/o) on it in bfloat16 and measures, against one slot doing the
same rows (a second engine on a fresh model, built after the first is freed):
- mixed 8-slot generation: tokens/s, and the ratio to 1 slot (1.0 = a population costs nothing extra);
- a mixed 8-slot `train_step`: tokens/s, and the ratio to 1 slot;
- memory: bytes allocated after building each engine and peak bytes during its train step; per added slot
  = (8-slot - 1-slot) / 7;
- `dist.workers=2` (a short tiny-preset run against `dist.workers=1`) when two GPUs exist and this build has
  the `dist` config section; otherwise recorded as skipped with the reason.
Writes `bench/results/gpu.json` and prints a table. `--shrink` swaps in a tiny config of the same family so
the script's logic can run on a CPU (the test suite does that); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "qwen2.5-coder-7b.json"
DEFAULT_OUT = HERE / "results" / "gpu.json"
SHRUNK = dict(  # same family, a few MB: for checking this script on a CPU
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=1024,
    bos_token_id=0,
    eos_token_id=0,
)


def load_config(shrink: bool) -> dict:
    cfg = json.loads(CONFIG.read_text())
    if shrink:
        cfg.update(SHRUNK)
    return cfg


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
    return res  # the engine and model are freed with this frame (main collects before the next build)


def dist_check(device_count: int, timeout_s: int) -> dict:
    """`dist.workers=2` vs 1 on a short tiny-preset run, when two GPUs and the `dist` feature exist."""
    from populora import config as pconf

    if device_count < 2:
        return {"skipped": f"needs two GPUs, found {device_count}"}
    if "dist" not in getattr(pconf.Config, "__dataclass_fields__", {}):
        return {"skipped": "this build has no `dist` config section (multi-GPU training not present)"}
    out = {}
    for workers in (1, 2):
        run = Path(os.environ.get("TMPDIR", "/tmp")) / f"populora-gpu-check-dist{workers}-{os.getpid()}"
        cmd = [sys.executable, "-m", "populora.cli", "train", "--quiet", "--run-dir", str(run)]
        for kv in ("model.device=cuda", "train.steps=2", "evolution.every=0", f"dist.workers={workers}"):
            cmd += ["--set", kv]
        t = time.perf_counter()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            ok, err = res.returncode == 0, res.stderr.strip().splitlines()[-1:] if res.returncode else []
        except subprocess.TimeoutExpired:
            ok, err = False, [f"timed out after {timeout_s} s"]
        out[f"workers_{workers}"] = {"ok": ok, "wall_s": round(time.perf_counter() - t, 1), "error": err}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shrink", action="store_true", help="tiny config of the same family (runs on CPU)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--rows", type=int, default=32, help="sequences per generate / train step (4 per slot)")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats (best is reported) after a warm-up")
    ap.add_argument("--dist-timeout", type=int, default=120, help="seconds per dist run")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "gpu_check: --device cuda but torch sees no GPU; use --shrink --device cpu to test it."
        )
    if device == "cpu" and not args.shrink:
        raise SystemExit("gpu_check: no GPU found; the 7B shape needs one (use --shrink to test on a CPU).")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    cfg = load_config(args.shrink)
    t0 = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = {"shrunk": args.shrink, "complete": False}  # written after each part, in case of the time limit
    one = partial["one_slot"] = measure(cfg, 1, args, device, dtype)
    args.out.write_text(json.dumps(partial, indent=2) + "\n")
    gc.collect()
    eight = measure(cfg, 8, args, device, dtype)
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    res = {
        "what": "engine at Qwen2.5-Coder-7B shape (random weights), 8 slots rank 32 q/k/v/o vs 1 slot, same rows",
        "shrunk": args.shrink,
        "complete": False,
        "device": torch.cuda.get_device_name(0)
        if device.startswith("cuda")
        else platform.processor() or "cpu",
        "gpus": n_gpu,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "one_slot": one,
        "eight_slots": eight,
        "gen_throughput_ratio_8_vs_1": round(eight["gen_tokens_per_s"] / one["gen_tokens_per_s"], 3),
        "train_throughput_ratio_8_vs_1": round(eight["train_tokens_per_s"] / one["train_tokens_per_s"], 3),
        "bytes_per_added_slot": (eight["after_train_bytes"] - one["after_train_bytes"]) // 7,
        "peak_bytes_per_added_slot": (
            (eight["train_peak_bytes"] - one["train_peak_bytes"]) // 7 if one["train_peak_bytes"] else None
        ),
    }
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    res["dist"] = dist_check(n_gpu, args.dist_timeout)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["complete"] = True
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print_table(res)
    print(f"wrote {args.out}")
    return res


def print_table(res: dict) -> None:
    one, eight = res["one_slot"], res["eight_slots"]
    gib = 2**30
    print(f"gpu_check on {res['device']} ({res['dtype']}{', SHRUNK config' if res['shrunk'] else ''})")
    print(f"{'':22}{'1 slot':>14}{'8 slots mixed':>16}{'ratio 8/1':>11}")
    print(
        f"{'generate tokens/s':22}{one['gen_tokens_per_s']:>14.1f}{eight['gen_tokens_per_s']:>16.1f}"
        f"{res['gen_throughput_ratio_8_vs_1']:>11.3f}"
    )
    print(
        f"{'train tokens/s':22}{one['train_tokens_per_s']:>14.1f}{eight['train_tokens_per_s']:>16.1f}"
        f"{res['train_throughput_ratio_8_vs_1']:>11.3f}"
    )
    print(
        f"{'memory after train GiB':22}{one['after_train_bytes'] / gib:>14.3f}"
        f"{eight['after_train_bytes'] / gib:>16.3f}   per added slot {res['bytes_per_added_slot'] / 2**20:.1f} MiB"
    )
    if res["peak_bytes_per_added_slot"] is not None:
        print(
            f"{'train peak GiB':22}{one['train_peak_bytes'] / gib:>14.3f}{eight['train_peak_bytes'] / gib:>16.3f}"
            f"   per added slot {res['peak_bytes_per_added_slot'] / 2**20:.1f} MiB"
        )
    print(f"dist.workers=2: {res['dist']}")
    print(f"total {res['wall_s']} s")


if __name__ == "__main__":
    main()
