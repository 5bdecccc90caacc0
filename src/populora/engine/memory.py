"""Will the base model and N adapter slots fit? Estimates from a model folder, and the check that fails early.

`estimate_memory(folder, rank, targets)` reads the folder's weights and config.json (targets: "attention", "all-linear"
or module names; rank: the slots' storage width, i.e. the largest rank with mixed ranks); `check_memory` compares
base + n_slots adapters with what is free (`available_bytes(device)`, or the config's `model.memory_gb`) and
raises `ConfigError` naming the keys to change. Nothing here loads a model.

On a GPU, `memory_plan` adds vLLM's share, the activations of the longest micro-batch (measured on the
real architecture at reduced depth, `populora.engine.activations`, and checked against the whole step under
fake tensors, bench/memory_fake_7b.py), the CUDA contexts and what a sleeping vLLM keeps; `check_plan` compares
the sampling and the training peak with the GPU's size, and `fastest_settings` picks the fastest checkpointing /
sleep setting that fits a GPU size; docs/engine.md ("Memory") has the 7B numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from populora.config import Config, ConfigError


def estimate_memory(folder: Path, rank: int, targets: list[str] | str) -> tuple[int, int]:
    """(bytes of the base weights on disk, bytes of one adapter slot with grads and AdamW moments).

    Every slot is stored at `rank` (with mixed ranks the largest one: smaller adapters are zero-padded)."""
    base = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors")) or sum(
        p.stat().st_size for p in Path(folder).glob("*.bin")
    )
    try:
        c = json.loads((Path(folder) / "config.json").read_text())
        h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads", heads))
        hd = int(c.get("head_dim") or h // heads)
        inter = int(c.get("intermediate_size", 4 * h))
    except (OSError, KeyError, ValueError, TypeError):
        return base, 0
    dims = {
        "q_proj": (h, heads * hd),
        "k_proj": (h, kv * hd),
        "v_proj": (h, kv * hd),
        "o_proj": (heads * hd, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    from populora.lora.layers import DEFAULT_TARGETS, resolve_targets

    resolved = resolve_targets(targets)
    if (
        resolved == "all-linear"
    ):  # the decoder's linears of a llama/qwen-style block (the head is never wrapped)
        resolved = list(dims)
    elif isinstance(resolved, str):  # a regex: count the attention projections (the usual case)
        resolved = list(DEFAULT_TARGETS)
    per_layer = sum(rank * sum(dims.get(t, (h, h))) for t in resolved)
    return base, 4 * 4 * per_layer * layers  # fp32 weights, grads, two AdamW moments


def available_bytes(device: str) -> int:
    """Free memory of `device`: the GPU's free bytes for cuda, else the system's (`available_memory_bytes`)."""
    if device.startswith("cuda"):
        try:
            return int(torch.cuda.mem_get_info()[0])
        except Exception:  # noqa: BLE001 - no driver, no device: fall back to system memory
            pass
    return available_memory_bytes()


def available_memory_bytes() -> int:
    """Free system memory (MemAvailable), or a large number where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 50


def check_memory(cfg: Config, base_bytes: int, slot_bytes: int, available_bytes: int) -> None:
    """Raise when base + n_slots adapters (+ optimiser state) cannot fit in the memory budget."""
    need = base_bytes + cfg.n_slots * slot_bytes
    if cfg.model.memory_gb > 0:
        available_bytes = int(cfg.model.memory_gb * 2**30)
    if need > available_bytes:
        fit = max(0, (available_bytes - base_bytes) // max(slot_bytes, 1))
        raise ConfigError(
            f"population.teachers + population.students: {cfg.n_slots} adapter slots need ~{need / 2**30:.1f} GiB "
            f"but only {available_bytes / 2**30:.1f} GiB is available; use at most {fit} slots, a smaller lora.rank, "
            "or raise model.memory_gb."
        )


__all__ = ["available_bytes", "available_memory_bytes", "check_memory", "estimate_memory"]


# ---------------------------------------------------------------------------------------------------------
# The GPU train step (issue 32): base + slots + vLLM's share + the activations of the longest micro-batch.
# Computed on the CPU (the driver needs no GPU); checked where the GPU is: in the process on one GPU, in
# each Ray worker with dist.workers > 1 (`check_plan_on_gpu`).

# A bound on a prompt's tokens for the preflight: AZR prompts with K = 6 reference programs run to ~1.6k tokens.
PROMPT_TOKENS = 2048
# Allocator fragmentation and the small tensors of a step (the train step's own temporaries are measured:
# bench/memory_fake_7b.py): kept free on every GPU. The CUDA contexts and the sleeping engine's residue, which
# this reserve covered until issue 51, are their own terms below.
GPU_RESERVE_BYTES = 1 * 2**30
# One CUDA context with its libraries' workspaces (cuBLAS, NCCL), outside PyTorch's allocator. vLLM's profiler
# reports this "non_torch_memory" as 0.39 GiB on a 16 GB GPU (vllm-project/vllm#11251) and 1.27 GiB on an 80 GB
# H100 (vllm-project/vllm#11743); 1 GiB each, for two processes with vLLM (trainer, vLLM's engine core).
CUDA_CONTEXT_BYTES = 1 * 2**30
# What a sleeping vLLM (level 1) keeps on the GPU: its CUDA-graph pool is not offloaded (vLLM 0.32; offloading
# it is vllm-project/vllm#45623, unmerged). vLLM logs 0.36 GiB of graphs at 16 capture sizes
# (gpustack/runner#251) and 1.40 GiB per rank at its defaults (vllm-project/vllm#47654); 1 GiB, until a GPU
# run measures it. Awake, the pool is inside vLLM's share (vLLM profiles graph memory since v0.21).
VLLM_ASLEEP_BYTES = 1 * 2**30


@dataclass(frozen=True)
class MemoryPlan:
    """What one GPU holds in a run (bytes), from the config and the model folder; `vllm_share` is a fraction of
    the GPU's total memory (0 without vLLM). `sleeps`: vLLM releases its memory during the train step, except
    `asleep_residue`. `contexts`: the CUDA contexts of the processes on the GPU (trainer, vLLM)."""

    base: int
    slots: int
    n_slots: int
    activations: int
    tokens: int
    checkpointing: bool
    vllm_share: float = 0.0
    sleeps: bool = False
    contexts: int = 0
    asleep_residue: int = 0

    def peaks(self, total: int) -> tuple[int, int]:
        """(sampling peak, training peak) in bytes on a GPU of `total` bytes."""
        vllm = int(self.vllm_share * total)
        resident = self.base + self.slots + self.contexts + GPU_RESERVE_BYTES
        during_step = self.asleep_residue if self.sleeps else vllm
        return resident + vllm, resident + self.activations + during_step

    def terms(self, total: int) -> dict[str, int]:
        """Each term of the training peak in bytes (they add up to `peaks(total)[1]`), for tables."""
        return dict(
            base=self.base,
            slots=self.slots,
            activations=self.activations,
            contexts=self.contexts,
            reserve=GPU_RESERVE_BYTES,
            vllm=self.asleep_residue if self.sleeps else int(self.vllm_share * total),
        )


# The whole step measured (bench/memory_fake_7b.py: the engine's train_step at the 7B shape under fake tensors,
# 6,144-token row) peaks 5.3% above `train_step_bytes`'s 1-2-layer extrapolation without checkpointing (39.6 vs
# 37.6 GiB: tensors alive at the backward's peak beyond the saved ones), and 19% below it with checkpointing.
UNCHECKPOINTED_FACTOR = 1.07


def step_activation_bytes(profile, *, checkpointing: bool, **kw) -> int:
    """`activations.train_step_bytes` as the plan counts it: times `UNCHECKPOINTED_FACTOR` without
    checkpointing, so that the plan covers the measured step."""
    from populora.engine.activations import train_step_bytes

    act = train_step_bytes(profile, checkpointing=checkpointing, **kw)
    return act if checkpointing else int(act * UNCHECKPOINTED_FACTOR)


def longest_micro_batch(cfg: Config) -> int:
    """Tokens of the longest micro-batch: the budget, or a longer row (prompt bound + max_new_tokens) alone."""
    row = PROMPT_TOKENS + max(cfg.tasks.teacher_max_new_tokens, cfg.tasks.student_max_new_tokens)
    return max(cfg.rl.micro_batch_tokens, row)


def memory_plan(cfg: Config, folder: Path, dtype: str = "bfloat16") -> MemoryPlan:
    """The plan of a GPU run (no GPU needed): activations measured on the real architecture at reduced depth
    (`populora.engine.activations`) and extrapolated to the model's layers. A folder without a readable
    config.json, or an architecture that cannot be built, counts no activations (the slot check still runs)."""
    from populora.engine.activations import measure_activations
    from populora.rl.logprobs import LOGIT_CHUNK_TOKENS

    base, slot = estimate_memory(folder, cfg.lora.max_rank(), cfg.lora.targets)
    tokens = longest_micro_batch(cfg)
    activations = 0
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
        profile = measure_activations(config, cfg.lora.max_rank(), cfg.lora.targets, dtype)
        activations = step_activation_bytes(
            profile,
            layers=int(config["num_hidden_layers"]),
            vocab=int(config["vocab_size"]),
            tokens=tokens,
            checkpointing=cfg.rl.activation_checkpointing,
            logit_chunk_tokens=LOGIT_CHUNK_TOKENS,
        )
    except Exception:  # noqa: BLE001 - an unknown architecture: no estimate rather than no run
        activations = 0
    vllm = cfg.model.backend == "vllm"
    return MemoryPlan(
        base=base,
        slots=cfg.n_slots * slot,
        n_slots=cfg.n_slots,
        activations=activations,
        tokens=tokens,
        checkpointing=cfg.rl.activation_checkpointing,
        vllm_share=cfg.model.vllm_gpu_memory_utilization if vllm else 0.0,
        sleeps=vllm and cfg.model.vllm_sleep,
        contexts=CUDA_CONTEXT_BYTES * (2 if vllm else 1),
        asleep_residue=VLLM_ASLEEP_BYTES if vllm else 0,
    )


def check_plan(
    plan: MemoryPlan, total_bytes: int, where: str = "the GPU", free_bytes: int | None = None
) -> None:
    """Raise ConfigError (one line, the keys to change) when `plan` does not fit a GPU of `total_bytes` of
    which `free_bytes` (default: all) are free; vLLM's share is a fraction of the total."""
    gib = 2**30
    sampling, training = plan.peaks(total_bytes)
    free = total_bytes if free_bytes is None else free_bytes
    has = f"{where} has {free / gib:.1f} GiB" + (" free" if free < total_bytes else "")
    if sampling > free:
        raise ConfigError(
            f"{has} but the base ({plan.base / gib:.1f} GiB), {plan.n_slots} "
            f"adapter slots ({plan.slots / gib:.1f} GiB) and vLLM's share ({plan.vllm_share:g}) need "
            f"{sampling / gib:.1f} GiB; lower model.vllm_gpu_memory_utilization, lora.rank or the slots."
        )
    if training > free:
        fixes = [] if plan.checkpointing else ["set rl.activation_checkpointing=true"]
        if plan.vllm_share and not plan.sleeps:
            fixes.append("set model.vllm_sleep=true")
        elif plan.vllm_share:
            fixes.append("lower model.vllm_gpu_memory_utilization")
        fixes.append(
            "lower tasks.teacher_max_new_tokens / tasks.student_max_new_tokens or rl.micro_batch_tokens"
        )
        raise ConfigError(
            f"{has} but a train step on the longest micro-batch ({plan.tokens} "
            f"tokens) needs ~{training / gib:.1f} GiB (activations {plan.activations / gib:.1f} GiB"
            f"{', checkpointed' if plan.checkpointing else ''}); {', or '.join(fixes)} (docs/engine.md, Memory)."
        )


# Memory settings per GPU size (issue 51), fastest first: checkpointing costs one more forward per micro-batch
# and turns off the shared prompt forward; sleep moves vLLM's weights to host memory and back every step, pins
# the base's size of host RAM per worker, and is the path a GPU has run least. So: neither, checkpointing alone,
# sleep alone, both (docs/engine.md, "Memory settings per GPU size").
SETTINGS_ORDER = ((False, False), (True, False), (False, True), (True, True))


def fastest_settings(
    cfg: Config, folder: Path, total_bytes: int, dtype: str = "bfloat16"
) -> dict[str, bool] | None:
    """The first of `SETTINGS_ORDER` whose plan fits a GPU of `total_bytes`, as {config key: value} (only
    rl.activation_checkpointing without vLLM); None when none fits."""
    import copy

    vllm = cfg.model.backend == "vllm"
    for ckpt, sleep in SETTINGS_ORDER:
        if sleep and not vllm:
            continue
        trial = copy.deepcopy(cfg)
        trial.rl.activation_checkpointing = ckpt
        trial.model.vllm_sleep = sleep
        try:
            check_plan(memory_plan(trial, folder, dtype), total_bytes)
        except ConfigError:
            continue
        return {"rl.activation_checkpointing": ckpt, **({"model.vllm_sleep": sleep} if vllm else {})}
    return None


def cuda_problem() -> str | None:
    """Why this process cannot use CUDA, with the fix, in one line (None when it can): a CPU-only torch build,
    or a CUDA build that sees no device. `torch.cuda.is_available` opens no context on the GPU."""
    import os

    if torch.cuda.is_available():
        return None
    if not torch.version.cuda:
        why = f"this torch ({torch.__version__}) is a CPU-only build"
    else:
        from populora.engine import cuda_driver

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        driver = cuda_driver.probe_driver()
        cause = cuda_driver.driver_problem(driver, torch.version.cuda) or (
            "no NVIDIA driver found (no nvidia-smi, no /proc/driver/nvidia/version)"
            if driver is None
            else f"NVIDIA driver {driver}"
        )
        why = (
            f"this torch (CUDA {torch.version.cuda}) sees no GPU (CUDA_VISIBLE_DEVICES={visible!r}; {cause})"
        )
    return (
        f"{why}; use the cpu device (model.device=cpu or auto), or install the GPU set "
        "(`pip install -e '.[gpu]' -c constraints/gpu.txt`, docs/engine.md, GPU install)"
    )


def check_plan_on_gpu(plan: MemoryPlan, device: str = "cuda") -> None:
    """`check_plan` against this process's GPU (a Ray worker's, or the single process's)."""
    index = torch.device(device).index or 0
    free, total = torch.cuda.mem_get_info(index)  # before this process loads anything: what the run can use
    check_plan(plan, int(total), f"GPU {index}", int(free))


__all__ += [
    "MemoryPlan",
    "check_plan",
    "check_plan_on_gpu",
    "cuda_problem",
    "fastest_settings",
    "longest_micro_batch",
    "memory_plan",
    "step_activation_bytes",
]
