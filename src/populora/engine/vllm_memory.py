"""The vllm backend's sizes, known before vLLM starts (the preflight, `populora doctor`, `populora eval`).

The `max_lora_rank` vLLM accepts for a LoRA rank (`vllm_lora_rank`), the base's weight bytes on disk and
KV-cache bytes per token (read from the model folder), the CPU KV cache's default size, and the memory a vLLM
engine holds beside the hf engine's copy of the base (`held_bytes`). Nothing here imports vLLM; every name is
also importable from `populora.engine.vllm`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from populora.engine.types import EngineError

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts
MIB, GIB = 2**20, 2**30


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of rank `rank` (rounded up as verl does)."""
    r = next((v for v in VLLM_RANKS if v >= int(rank)), None)
    if r is None:
        raise EngineError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank {VLLM_RANKS[-1]}.")
    return r


def _model_config(folder: str | Path) -> dict:
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def weight_bytes(folder: str | Path) -> int:
    """Bytes of the base weights on disk (safetensors, else .bin)."""
    f = Path(folder)
    return sum(p.stat().st_size for p in f.glob("*.safetensors")) or sum(
        p.stat().st_size for p in f.glob("*.bin")
    )


def kv_bytes_per_token(folder: str | Path, dtype_bytes: int = 4) -> int:
    """KV-cache bytes one token costs for the model in `folder` (keys + values, every layer)."""
    c = _model_config(folder)
    try:
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads") or heads)
        hd = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
        return 2 * int(c["num_hidden_layers"]) * kv * hd * dtype_bytes
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        return 0


def default_cpu_kv_cache_bytes(folder: str | Path, max_model_len: int | None = None) -> int:
    """A small CPU KV cache derived from the model: its weight size (at most 4 GiB), but at least two
    full-length sequences and 64 MiB. vLLM's own default on CPU is a fraction of all RAM."""
    c = _model_config(folder)
    length = int(max_model_len or c.get("max_position_embeddings") or 4096)
    two_seqs = 2 * length * kv_bytes_per_token(folder)
    need = max(min(weight_bytes(folder), 4 * GIB), two_seqs, 64 * MIB)
    return int(math.ceil(need / MIB) * MIB)


def cpu_kv_cache_bytes(folder: str | Path, kv_cache_gb: float = 0.0, max_model_len: int | None = None) -> int:
    """The CPU KV-cache size in bytes: `kv_cache_gb` when > 0, else the derived default."""
    if kv_cache_gb > 0:
        return int(kv_cache_gb * GIB)
    return default_cpu_kv_cache_bytes(folder, max_model_len)


def held_bytes(
    folder: str | Path,
    device: str,
    *,
    gpu_memory_utilization: float = 0.5,
    kv_cache_gb: float = 0.0,
    device_total_bytes: int | None = None,
) -> int:
    """Memory the vLLM engine holds on top of the hf engine's copy of the base (for the preflight).

    On a GPU vLLM reserves `gpu_memory_utilization` of the device (its copy of the base + KV cache); on CPU
    it holds a second copy of the base plus its KV cache.
    """
    if str(device).startswith("cuda"):
        total = device_total_bytes
        if total is None:
            import torch

            total = torch.cuda.get_device_properties(0).total_memory
        return int(gpu_memory_utilization * total)
    kv = kv_cache_gb * GIB if kv_cache_gb > 0 else default_cpu_kv_cache_bytes(folder)
    return weight_bytes(folder) + int(kv)
