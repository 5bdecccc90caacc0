"""The train step's memory measured, not reckoned (issue 51): `paper-7b`'s real training step (the hf engine's
`train_step`: multi-LoRA layers, chunked lm_head log-probs, the policy loss, backward, clipping and the AdamW
step) at the Qwen2.5-Coder-7B shape, on the CPU, under PyTorch's fake-tensor mode (no weights, no compute: only
shapes) with `torch.distributed._tools.mem_tracker.MemTracker` counting every live tensor, so the peak is the
sum of what is allocated at the worst moment. The shape comes from transformers' `Qwen2Config` with the known
7B sizes (hidden 3584, 28 layers, 28 heads, 4 KV heads, intermediate 18944, vocabulary 152064); nothing is
downloaded.

Cases: the longest row (one 2,048-token prompt + 4,096 new tokens: `memory.longest_micro_batch`) and a full
micro-batch (8 rollouts of one prompt filling `rl.micro_batch_tokens`), each with activation checkpointing on
and off. Each is compared with `MemoryPlan`'s terms for the same tokens (`populora.engine.memory` /
`activations.train_step_bytes`): the static memory (base + LoRA weights + AdamW moments) and the step's
overhead (activations, gradients, temporaries) over it. What fake tensors cannot say: the CUDA contexts,
vLLM's share and the allocator's fragmentation (`MemoryPlan`'s other terms). Scalars the step reads back
(metrics, step counts) read as 0.0 / 1 under fake tensors: the memory does not depend on them.

Usage: PYTHONPATH=src python bench/memory_fake_7b.py [--out bench/results/memory_fake_7b.json] [--small]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from populora.doctor import KNOWN_SHAPES

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30
# Qwen2.5-Coder-7B's shape, from the table `populora doctor` sizes hub models by (nothing downloaded).
SHAPE_7B = {
    k: KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"][0][k]
    for k in (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "num_hidden_layers",
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
        "max_position_embeddings",
        "tie_word_embeddings",
    )
}
# A small Qwen2 for the test (same code path, seconds).
SHAPE_SMALL = dict(
    hidden_size=256,
    intermediate_size=704,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=4,
    vocab_size=4096,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)


class _Tokenizer:
    """What the engine reads of a tokenizer in a train step."""

    pad_token_id = 0
    eos_token_id = 1
    bos_token_id = 1


@contextlib.contextmanager
def _fake_scalars():
    """Scalars read back from fake tensors (metrics, AdamW step counts) read as 0.0 / 1; the slot indices of the
    LoRA layers' `SlotContext` are built as real tensors (they are Python lists, and the layers branch on them)."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    from populora.lora.layers import SlotContext

    def one(t):
        return 0.0 if t.dtype.is_floating_point else 1

    fakes = {
        "__float__": lambda t: 0.0,
        "__int__": lambda t: 1,
        "__index__": lambda t: 1,
        "__bool__": lambda t: True,
        "item": one,
        "tolist": lambda t: torch.full(tuple(t.shape), one(t)).tolist(),
    }
    orig = {name: getattr(torch.Tensor, name) for name in fakes}

    def wrap(name):
        def method(self, *args):
            return fakes[name](self) if isinstance(self, FakeTensor) else orig[name](self, *args)

        return method

    set_orig = SlotContext.set

    def set_real(self, slots):
        with unset_fake_temporarily():
            return set_orig(self, slots)

    SlotContext.set = set_real
    for name in fakes:
        setattr(torch.Tensor, name, wrap(name))
    try:
        yield
    finally:
        for name in fakes:
            setattr(torch.Tensor, name, orig[name])
        SlotContext.set = set_orig


def _tracker():
    """A MemTracker that counts totals only: its per-module statistics refuse a module called twice in a step
    (the chunked lm_head), and its grad hooks refuse frozen weights."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class Totals(MemTracker):
        def _pre_fw_hook(self, *args):
            pass

        def _post_fw_hook(self, *args):
            pass

        def _pre_bw_hook(self, *args):
            pass

        def _post_bw_hook(self, *args):
            pass

    return Totals()


def _total(snapshot: dict) -> int:
    return sum(int(s["Total"]) for s in snapshot.values())


def _rows(case: str, prompt_tokens: int, new_tokens: int, micro_batch_tokens: int, rollouts: int):
    from populora.engine.types import TrainRow

    if case == "longest row":
        return [TrainRow(0, list(range(2, 2 + prompt_tokens)), list(range(2, 2 + new_tokens)), 1.0)]
    per = micro_batch_tokens // rollouts  # 8 rollouts of one prompt, each half prompt, half response
    prompt = list(range(2, 2 + per // 2))
    return [TrainRow(0, prompt, list(range(3, 3 + per - per // 2)), 1.0 - 0.25 * k) for k in range(rollouts)]


def measure(
    shape: dict,
    *,
    case: str,
    checkpointing: bool,
    rank: int = 32,
    n_slots: int = 8,
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj"),
    prompt_tokens: int = 2048,
    new_tokens: int = 4096,
    micro_batch_tokens: int = 4096,
    rollouts: int = 8,
) -> dict:
    """Build the model and the hf engine under fake tensors and run one `train_step` under a MemTracker; the
    static bytes (before the step) and the peak (during it), with the numbers of base parameters."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora.engine.hf import HFEngine
    from populora.engine.types import TrainBatch

    config = Qwen2Config(**shape, pad_token_id=0, bos_token_id=1, eos_token_id=1)
    config._attn_implementation = "sdpa"  # as on a GPU: the engine's path and memory.py's measurement
    rows = _rows(case, prompt_tokens, new_tokens, micro_batch_tokens, rollouts)
    t0 = time.perf_counter()
    with FakeTensorMode(allow_non_fake_inputs=True):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)  # the weights born in bf16 (a fake model cannot be cast)
        try:
            model = Qwen2ForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
        base_params = sum(p.numel() for p in model.parameters())
        model.to = lambda *a, **k: model  # the engine's .to("cpu") would try to swap fake parameters
        engine = HFEngine(
            model,
            _Tokenizer(),
            n_slots=n_slots,
            rank=rank,
            alpha=2.0 * rank,
            targets=list(targets),
            micro_batch_tokens=micro_batch_tokens,
            activation_checkpointing=checkpointing,
            train_threads=None,
        )
        tracker = _tracker()
        tracker.track_external(engine.model, *engine.optimizer.exp_avg, *engine.optimizer.exp_avg_sq)
        with tracker, _fake_scalars():
            static = _total(tracker.get_tracker_snapshot("current"))
            groups = engine._batches(rows)
            with torch.autograd.grad_mode.enable_grad():
                engine.train_step(TrainBatch(rows=rows))
        peak = _total(tracker.get_tracker_snapshot("peak"))
    tokens = max(len(g) * max(len(rows[i].prompt_ids) + len(rows[i].response_ids) for i in g) for g in groups)
    return dict(
        case=case,
        activation_checkpointing=checkpointing,
        rows=len(rows),
        tokens=tokens,
        shared_prompt_forward=engine._shares_prompt_forward(),
        base_params=base_params,
        static=static,
        peak=peak,
        seconds=round(time.perf_counter() - t0, 1),
    )


def planned(shape: dict, base_params: int, tokens: int, checkpointing: bool, **lora) -> dict:
    """`MemoryPlan`'s terms for the same model, LoRA and tokens: base, slots (fp32 weights, grads, two AdamW
    moments) and the activations of `tokens` tokens (measured at 1-2 layers, extrapolated, and the plan's
    factor without checkpointing: `memory.step_activation_bytes`)."""
    from populora.engine.activations import measure_activations
    from populora.engine.memory import estimate_memory, step_activation_bytes
    from populora.rl.logprobs import LOGIT_CHUNK_TOKENS

    config = dict(model_type="qwen2", **shape)
    rank = lora.get("rank", 32)
    targets = list(lora.get("targets", ("q_proj", "k_proj", "v_proj", "o_proj")))
    n_slots = lora.get("n_slots", 8)
    folder = Path(tempfile.mkdtemp(prefix="populora-fake-shape-"))
    try:
        (folder / "config.json").write_text(json.dumps(config))
        with open(folder / "model.safetensors", "wb") as f:
            f.truncate(2 * base_params)  # sparse: bf16 weights' size, no disk used
        base, slot = estimate_memory(folder, rank, targets)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    profile = measure_activations(config, rank, targets, "bfloat16")
    act = step_activation_bytes(
        profile,
        layers=shape["num_hidden_layers"],
        vocab=shape["vocab_size"],
        tokens=tokens,
        checkpointing=checkpointing,
        logit_chunk_tokens=LOGIT_CHUNK_TOKENS,
    )
    return dict(base=base, slots=n_slots * slot, activations=act)


def compare(shape: dict, m: dict, **lora) -> dict:
    """One table row: measured static and step overhead against the plan's (the step adds the activations and
    the LoRA gradients, a quarter of the slots' bytes; the static holds base, LoRA weights and two moments)."""
    p = planned(shape, m["base_params"], m["tokens"], m["activation_checkpointing"], **lora)
    plan_static = p["base"] + 3 * p["slots"] // 4
    plan_step = p["activations"] + p["slots"] // 4
    measured_step = m["peak"] - m["static"]
    return dict(
        **{k: v for k, v in m.items() if k not in ("static", "peak")},
        measured_static_gib=round(m["static"] / GIB, 2),
        plan_static_gib=round(plan_static / GIB, 2),
        measured_step_gib=round(measured_step / GIB, 2),
        plan_step_gib=round(plan_step / GIB, 2),
        plan_activations_gib=round(p["activations"] / GIB, 2),
        measured_peak_gib=round(m["peak"] / GIB, 2),
        plan_peak_gib=round((plan_static + plan_step) / GIB, 2),
        step_ratio=round(measured_step / plan_step, 3),
        bytes=dict(
            measured_static=m["static"],
            plan_static=plan_static,
            measured_step=measured_step,
            plan_step=plan_step,
        ),
    )


def run(shape: dict, **kw) -> list[dict]:
    """Every case (longest row, full micro-batch) x checkpointing (off, on), measured and compared."""
    lora = {k: kw[k] for k in ("rank", "targets", "n_slots") if k in kw}
    return [
        compare(shape, measure(shape, case=case, checkpointing=ckpt, **kw), **lora)
        for case in ("longest row", "full micro-batch")
        for ckpt in (False, True)
    ]


def table(rows: list[dict]) -> str:
    head = "case              ckpt  tokens  static GiB (plan)  step GiB (plan)   peak GiB (plan)   step/plan"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['case']:<17} {'on' if r['activation_checkpointing'] else 'off':<4} {r['tokens']:>7}  "
            f"{r['measured_static_gib']:>7.2f} ({r['plan_static_gib']:>6.2f})  "
            f"{r['measured_step_gib']:>6.2f} ({r['plan_step_gib']:>6.2f})  "
            f"{r['measured_peak_gib']:>6.2f} ({r['plan_peak_gib']:>6.2f})  {r['step_ratio']:>8.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "bench/results/memory_fake_7b.json"))
    ap.add_argument("--small", action="store_true", help="a small Qwen2 (seconds), for a quick look")
    args = ap.parse_args()
    shape = SHAPE_SMALL if args.small else SHAPE_7B
    kw = dict(prompt_tokens=256, new_tokens=512, micro_batch_tokens=512) if args.small else {}
    rows = run(shape, **kw)
    print(table(rows))
    result = dict(
        command=" ".join(["python", *sys.argv]),
        model="Qwen2.5-Coder-7B shape" if not args.small else "small Qwen2",
        shape=shape,
        lora=dict(rank=32, targets=["q_proj", "k_proj", "v_proj", "o_proj"], n_slots=8),
        torch=torch.__version__,
        note="static: base + LoRA weights + AdamW moments; step: peak - static (activations, LoRA grads, "
        "temporaries); plan: memory.estimate_memory + activations.train_step_bytes for the same tokens",
        rows=rows,
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
