"""`populora bench engine`: one mixed multi-LoRA batch vs the alternatives, measured in the same run.

For each model (the bundled tiny model, or a tiny random Qwen2 when it is absent; and a random model with
Qwen2.5-0.5B's shape), with 8 adapter slots:
(a) generation tokens/s: one mixed batch of 8 slots vs the same rows on 1 slot vs looping the slots one at
    a time vs PEFT's own mixed-adapter `generate(adapter_names=...)`;
(b) `train_step` time: 8 slots mixed vs the same rows on 1 slot vs PEFT per-adapter passes (`set_adapter`,
    forward/backward per adapter, one AdamW step);
(c) memory: 8 slots vs one adapter vs 8 model copies (parameters + LoRA grads + AdamW state, computed), and
    the measured peak RSS of a subprocess running 8 slots vs 1 slot (tiny model only);
(d) mixed ranks (issue 34): the same engine with every other slot holding a rank-r/8 adapter (the storage stays at
    rank r) vs all slots at rank r: generate and train_step, the same rows (`mixed_ranks` in the JSON).
Timings use 1 torch thread and process CPU time (one thread is the fair baseline on shared CPUs). Ratios, not absolute times,
are the result: the machine may be shared.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QWEN05_SHAPE = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=4096,
)
DEFAULT_OUT = Path("bench/results/engine.json")


WALL: dict[str, float] = {}


WARMUP = [True]


def _timeit(fn, repeats: int, key: str = "") -> float:
    """Best-of-`repeats` process CPU seconds of `fn()` after one warm-up (best wall seconds go to WALL[key]).

    CPU time (all threads of this process) is what the ratios use: on a shared machine, wall time mostly
    measures the other processes.
    """
    if WARMUP[0]:
        fn()
    best, best_wall = float("inf"), float("inf")
    for _ in range(repeats):
        t, w = time.process_time(), time.perf_counter()
        fn()
        best, best_wall = min(best, time.process_time() - t), min(best_wall, time.perf_counter() - w)
    if key:
        WALL[key] = best_wall
    return best


def _load(which: str):
    from populora.engine.models import TINY_DIR, load_model_and_tokenizer
    from populora.engine.testing import random_model

    if which == "tiny":
        if (TINY_DIR / "config.json").is_file():
            model, tok, _ = load_model_and_tokenizer("tiny")
            return model, tok, "tiny (bundled)"
        model, tok = random_model(
            "qwen2",
            seed=0,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
        )
        return model, tok, "tiny (random Qwen2 4.2M-shape, bundled model absent)"
    model, tok = random_model("qwen2", seed=0, **QWEN05_SHAPE)
    return model, tok, "random Qwen2.5-0.5B shape"


def _bench_model(
    which: str,
    n_slots: int,
    rank: int,
    rows_per_slot: int,
    prompt_len: int,
    new_tokens: int,
    train_len: int,
    repeats: int,
    warmup: bool = True,
    threads: int = 1,
) -> dict[str, Any]:
    import torch
    from peft import LoraConfig, get_peft_model

    from populora.engine import GenRequest, TrainBatch, TrainRow, build
    from populora.lora.peft_io import quiet_peft_deprecation

    WARMUP[0] = warmup
    model, tok, label = _load(which)
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    vocab = min(len(tok), model.config.vocab_size)
    n_rows = n_slots * rows_per_slot
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=g).tolist() for _ in range(n_rows)]
    slots = [i % n_slots for i in range(n_rows)]
    responses = [torch.randint(0, vocab, (train_len,), generator=g).tolist() for _ in range(n_rows)]
    advs = torch.randn(n_rows, generator=g).tolist()
    out: dict[str, Any] = {
        "model": label,
        "params_M": round(n_params / 1e6, 1),
        "n_slots": n_slots,
        "rank": rank,
        "rows": n_rows,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "train_tokens_per_row": train_len,
    }

    # ---- PEFT first (on the clean base), then unload it and build our engine on the same weights.
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    cfg = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0, init_lora_weights=False
    )
    with quiet_peft_deprecation():
        pm = get_peft_model(model, cfg, adapter_name="a0")
        for s in range(1, n_slots):
            pm.add_adapter(f"a{s}", cfg)
    pm.eval()
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)
    names = [f"a{s}" for s in slots]

    def peft_gen():
        with torch.no_grad():
            pm.generate(
                input_ids=ids,
                attention_mask=mask,
                adapter_names=names,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )

    torch.set_num_threads(threads)
    t_peft_gen = _timeit(peft_gen, repeats, "gen_peft")
    seqs = torch.tensor([p + r for p, r in zip(prompts, responses, strict=True)])
    lora_params = [p for n, p in pm.named_parameters() if "lora_" in n]
    opt = torch.optim.AdamW(lora_params, lr=1e-5)

    def peft_train():
        opt.zero_grad()
        for s in range(n_slots):
            pm.set_adapter(f"a{s}")  # makes only a{s} trainable
            rows = [i for i in range(n_rows) if slots[i] == s]
            logits = pm(input_ids=seqs[rows]).logits[:, prompt_len - 1 : -1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, seqs[rows, prompt_len:, None])[..., 0]
            adv = torch.tensor([advs[i] for i in rows])[:, None]
            (-(adv * logp).sum() / logp.numel()).backward()
        opt.step()

    torch.set_num_threads(threads)
    t_peft_train = _timeit(peft_train, repeats, "train_peft")
    opt.state.clear()
    base = pm.unload()

    # ---- our engine, 8 slots; randomise B so adapters differ (cost does not depend on values)
    eng = build(
        base,
        tokenizer=tok,
        n_slots=n_slots,
        rank=rank,
        alpha=2 * rank,
        lr=1e-5,
        gen_threads=threads,
        train_threads=threads,
    )
    eng.eos_ids = set()  # force exactly new_tokens tokens per row, like min_new_tokens for PEFT
    with torch.no_grad():
        for layer in eng.layers.values():
            layer.lora_B.normal_(0, 0.01, generator=g)

    def gen(slot_of_row, rows=None):
        rows = range(n_rows) if rows is None else rows
        return eng.generate([GenRequest(slot_of_row(i), prompts[i], new_tokens, 0.0) for i in rows])

    t_mixed = _timeit(lambda: gen(lambda i: slots[i]), repeats, "gen_mixed")
    t_one = _timeit(lambda: gen(lambda i: 0), repeats, "gen_one")

    def loop():
        for s in range(n_slots):
            gen(lambda i: slots[i], [i for i in range(n_rows) if slots[i] == s])

    t_loop = _timeit(loop, repeats, "gen_loop")
    tokens = n_rows * new_tokens
    out["generate"] = {
        "tok_per_cpu_s": {
            "mixed_8_slots": tokens / t_mixed,
            "same_rows_1_slot": tokens / t_one,
            "loop_slots": tokens / t_loop,
            "peft_mixed_adapter_names": tokens / t_peft_gen,
        },
        "mixed_speed_vs_1_slot": t_one / t_mixed,
        "mixed_speedup_vs_loop": t_loop / t_mixed,
        "mixed_speedup_vs_peft": t_peft_gen / t_mixed,
        "wall_s": {k: WALL[k] for k in ("gen_mixed", "gen_one", "gen_loop", "gen_peft")},
    }

    def batch(slot_of_row):
        return TrainBatch(
            [TrainRow(slot_of_row(i), prompts[i], responses[i], advs[i]) for i in range(n_rows)]
        )

    t_train_mixed = _timeit(lambda: eng.train_step(batch(lambda i: slots[i])), repeats, "train_mixed")
    t_train_one = _timeit(lambda: eng.train_step(batch(lambda i: 0)), repeats, "train_one")
    out["train_step"] = {
        "cpu_s": {
            "mixed_8_slots": t_train_mixed,
            "same_rows_1_slot": t_train_one,
            "peft_per_adapter_passes": t_peft_train,
        },
        "mixed_time_vs_1_slot": t_train_mixed / t_train_one,
        "mixed_speedup_vs_peft": t_peft_train / t_train_mixed,
        "train_tokens": n_rows * train_len,
        "wall_s": {k: WALL[k] for k in ("train_mixed", "train_one", "train_peft")},
    }

    out["mixed_ranks"] = _bench_mixed_ranks(
        eng, rank, gen, batch, slots, repeats, t_mixed, t_train_mixed, tokens
    )

    # ---- memory (computed): fp32 parameters; an adapter also carries its grad and AdamW's two moments
    base_b = 4 * sum(p.numel() for n, p in eng.model.named_parameters() if "lora_" not in n)
    adapter_b = 4 * sum(p[0].numel() for p in eng.params)
    per_adapter_training = 4 * adapter_b
    out["memory_MB"] = {
        "base": base_b / 2**20,
        "one_adapter_weights": adapter_b / 2**20,
        "engine_1_slot": (base_b + per_adapter_training) / 2**20,
        "engine_8_slots": (base_b + n_slots * per_adapter_training) / 2**20,
        "8_model_copies": n_slots * (base_b + per_adapter_training) / 2**20,
    }
    m = out["memory_MB"]
    m["8_slots_vs_1_slot"] = m["engine_8_slots"] / m["engine_1_slot"]
    m["8_copies_vs_8_slots"] = m["8_model_copies"] / m["engine_8_slots"]
    return out


def _bench_mixed_ranks(eng, rank, gen, batch, slots, repeats, t_gen_uniform, t_train_uniform, tokens) -> dict:
    """(d): odd slots re-written at rank max(1, rank // 8) (their top components), then the same generate and
    train_step as the uniform measurement; the engine keeps its rank-`rank` storage (docs/engine.md)."""
    small = max(1, rank // 8)
    for s in range(1, eng.n_slots, 2):
        ad = eng.get_adapter(s)
        ad.modules = {k: (a[:small].clone(), b[:, :small].clone()) for k, (a, b) in ad.modules.items()}
        eng.set_adapter(s, ad)
    t_gen = _timeit(lambda: gen(lambda i: slots[i]), repeats, "gen_mixed_ranks")
    t_train = _timeit(lambda: eng.train_step(batch(lambda i: slots[i])), repeats, "train_mixed_ranks")
    return {
        "ranks": eng.slot_ranks(),
        "storage_rank": eng.rank,
        "generate_tok_per_cpu_s": tokens / t_gen,
        "generate_time_vs_uniform": t_gen / t_gen_uniform,
        "train_step_cpu_s": t_train,
        "train_time_vs_uniform": t_train / t_train_uniform,
        "wall_s": {k: WALL[k] for k in ("gen_mixed_ranks", "train_mixed_ranks")},
    }


def _peak_rss_child(n_slots: int, rank: int) -> float:
    """Peak RSS (MB, VmHWM: ru_maxrss would include the forking parent) of a fresh process that builds an
    engine with `n_slots` slots and runs generate + train."""
    code = f"""
import torch
from populora.engine.bench import _load
from populora.engine import build, GenRequest, TrainBatch, TrainRow
m, tok, _ = _load("tiny")
eng = build(m, tokenizer=tok, n_slots={n_slots}, rank={rank}, alpha={2 * rank})
eng.generate([GenRequest(i % {n_slots}, [5] * 32, 32, 0.0) for i in range(32)])
eng.train_step(TrainBatch([TrainRow(i % {n_slots}, [5] * 32, [6] * 64, 1.0) for i in range(32)]))
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024)
"""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return float(res.stdout.strip().splitlines()[-1])


def run(quick: bool = False, out: Path | None = None) -> dict[str, Any]:
    """Run the benchmark, print a rich table, write JSON (default bench/results/engine.json)."""
    import torch
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # One torch thread everywhere: on a shared 2-core machine a second thread mostly measures the other
    # processes (its spin time even counts as our CPU time), and ratios are what this benchmark reports.
    results: dict[str, Any] = {
        "quick": quick,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": {"generate": 1, "train": 1},
        "timing": "best-of-N process CPU seconds after a warm-up (tiny); one run (0.5B)",
        "load_avg_start": os.getloadavg(),
        "models": [],
    }
    t0 = time.perf_counter()
    if quick:
        plans = [("tiny", dict(rows_per_slot=4, prompt_len=16, new_tokens=32, train_len=32, repeats=1))]
    else:
        plans = [
            ("tiny", dict(rows_per_slot=8, prompt_len=32, new_tokens=64, train_len=64, repeats=3)),
            (
                "qwen05",
                dict(rows_per_slot=2, prompt_len=16, new_tokens=8, train_len=16, repeats=1, warmup=False),
            ),
        ]
    for which, kw in plans:
        console.print(f"[bold]engine bench[/]: {which} {kw}")
        results["models"].append(_bench_model(which, n_slots=8, rank=32 if which == "tiny" else 16, **kw))
    console.print("measuring peak RSS in subprocesses (tiny model) ...")
    rss8, rss1 = _peak_rss_child(8, 32), _peak_rss_child(1, 32)
    results["peak_rss_MB_tiny"] = {"8_slots": rss8, "1_slot": rss1, "ratio": rss8 / rss1}
    results["wall_s"] = time.perf_counter() - t0
    results["load_avg_end"] = os.getloadavg()

    table = Table(title="Multi-LoRA engine, 8 slots on one base (CPU-time ratios, same run)")
    for col in (
        "model",
        "measure",
        "8 slots mixed",
        "same rows 1 slot",
        "loop slots",
        "PEFT",
        "mixed / 1 slot",
        "mixed vs loop",
        "mixed vs PEFT",
    ):
        table.add_column(col, justify="right" if col not in ("model", "measure") else "left")
    for r in results["models"]:
        gtok, gr = r["generate"]["tok_per_cpu_s"], r["generate"]
        table.add_row(
            r["model"],
            "generate tok/CPU-s",
            f"{gtok['mixed_8_slots']:.0f}",
            f"{gtok['same_rows_1_slot']:.0f}",
            f"{gtok['loop_slots']:.0f}",
            f"{gtok['peft_mixed_adapter_names']:.0f}",
            f"{gr['mixed_speed_vs_1_slot']:.2f}x speed",
            f"{gr['mixed_speedup_vs_loop']:.2f}x faster",
            f"{gr['mixed_speedup_vs_peft']:.2f}x faster",
        )
        ts, tr = r["train_step"]["cpu_s"], r["train_step"]
        table.add_row(
            "",
            "train_step CPU-s",
            f"{ts['mixed_8_slots']:.2f}",
            f"{ts['same_rows_1_slot']:.2f}",
            "",
            f"{ts['peft_per_adapter_passes']:.2f}",
            f"{tr['mixed_time_vs_1_slot']:.2f}x time",
            "",
            f"{tr['mixed_speedup_vs_peft']:.2f}x faster",
        )
    console.print(table)
    mr = Table(title="Mixed ranks: every other slot at rank r/8 (storage rank r) vs all slots at rank r")
    for col in ("model", "ranks", "generate time / uniform", "train_step time / uniform"):
        mr.add_column(col, justify="left" if col in ("model", "ranks") else "right")
    for r in results["models"]:
        x = r["mixed_ranks"]
        mr.add_row(
            r["model"],
            ",".join(map(str, sorted(set(x["ranks"])))),
            f"{x['generate_time_vs_uniform']:.2f}x",
            f"{x['train_time_vs_uniform']:.2f}x",
        )
    console.print(mr)
    mem = Table(title="Memory: parameters + LoRA grads + AdamW moments (fp32, computed)")
    for col in (
        "model",
        "base MB",
        "engine 1 slot MB",
        "engine 8 slots MB",
        "8 model copies MB",
        "8 slots / 1 slot",
        "8 copies / 8 slots",
    ):
        mem.add_column(col, justify="left" if col == "model" else "right")
    for r in results["models"]:
        mm = r["memory_MB"]
        mem.add_row(
            r["model"],
            f"{mm['base']:.0f}",
            f"{mm['engine_1_slot']:.0f}",
            f"{mm['engine_8_slots']:.0f}",
            f"{mm['8_model_copies']:.0f}",
            f"{mm['8_slots_vs_1_slot']:.2f}x",
            f"{mm['8_copies_vs_8_slots']:.1f}x",
        )
    p = results["peak_rss_MB_tiny"]
    mem.add_row(
        "tiny, measured peak RSS",
        "",
        f"{p['1_slot']:.0f}",
        f"{p['8_slots']:.0f}",
        "",
        f"{p['ratio']:.2f}x",
        "",
    )
    console.print(mem)
    out = Path(out) if out else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {out}")
    return results


def matmul_rate(threads: int = 1, size: int = 1024, shape: tuple[int, int, int] | None = None) -> float:
    """Measured float32 matmul rate on this CPU in GFLOP/s (best of 5 after a warm-up, process CPU time):
    `size`^3 by default (the CPU's compute peak), or `shape = (m, k, n)` (e.g. a decode step's small matmul,
    which memory traffic rather than arithmetic limits)."""
    import torch

    m, k, n = shape or (size, size, size)
    a, b = torch.randn(m, k), torch.randn(k, n)
    reps = max(1, int(2e9 // (2 * m * k * n)))  # about 2 GFLOP per timing
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a @ b
        best = float("inf")
        for _ in range(5):
            t = time.process_time()
            for _ in range(reps):
                a @ b
            best = min(best, time.process_time() - t)
    finally:
        torch.set_num_threads(prev)
    return 2 * m * k * n * reps / max(best, 1e-9) / 1e9


def flops_per_token(model, context: float = 0.0) -> float:
    """Forward FLOPs of one generated token: 2 x the weights of every `nn.Linear` (the transformer blocks and the
    vocabulary projection; LoRA's rank-r factors add < 1% and are left out) plus attention over `context`
    cached positions (2 x 2 x layers x heads x head_dim per position: scores and the weighted sum)."""
    from torch import nn

    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * context
    return 2.0 * linear + attn


def arithmetic_limit(model, context: float, threads: int = 1, batch_rows: int = 16) -> dict[str, float]:
    """How fast generation could be on this CPU if only arithmetic counted: FLOPs per token (at `context`
    cached positions) against the measured matmul rate, as tokens per CPU-second; also the rate of a
    decode-shaped matmul (`batch_rows` rows through the widest block matrix), the bound that memory traffic
    sets on a small batch."""
    cfg = model.config
    peak = matmul_rate(threads)
    small = matmul_rate(threads, shape=(batch_rows, cfg.hidden_size, cfg.intermediate_size))
    fpt = flops_per_token(model, context)
    return {
        "flops_per_token": fpt,
        "context_positions": context,
        "matmul_gflops_peak": peak,
        "matmul_gflops_decode_shape": small,
        "decode_shape_rows": batch_rows,
        "limit_tokens_per_cpu_s": peak * 1e9 / fpt,
        "limit_tokens_per_cpu_s_decode_shape": small * 1e9 / fpt,
    }
