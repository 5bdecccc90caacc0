"""Will the base model and N adapter slots fit? Estimates from a model folder, and the check that fails early.

`estimate_memory(folder, rank, targets)` reads the folder's weights and config.json (targets: "attention", "all-linear"
or module names; rank: the slots' storage width, i.e. the largest rank with mixed ranks); `check_memory` compares
base + n_slots adapters with what is free (`available_bytes(device)`, or the config's `model.memory_gb`) and
raises `ConfigError` naming the keys to change. Nothing here loads a model.
"""

from __future__ import annotations

import json
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
