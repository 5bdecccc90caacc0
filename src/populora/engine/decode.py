"""The lean decode step of `HFEngine.generate`: one token per row through a Llama-family decoder (Qwen2,
Llama, SmolLM: RMSNorm, rotary attention, SwiGLU MLP) with a preallocated KV cache (grown by doubling).

Why: on a CPU with a small model, a decode step through the transformers `forward` costs several
milliseconds of Python (output dataclasses, mask building, config look-ups, a `torch.cat` of every layer's
whole cache per token) for a few hundred microseconds of arithmetic. This step calls the same modules and
the same functions for the maths (the layers' `Linear`s and LoRA slots, the model's rotary embedding,
transformers' `apply_rotary_pos_emb` and sdpa attention with the mask transformers would build), writes each
new key/value into a buffer allocated ahead (doubled when full) and skips everything else. The prompt's prefill
still runs through the model's own `forward` (one call per batch; its cache is copied into the buffers).

`LeanDecoder.for_model(model)` returns None for a model it does not know (another architecture, a sliding
window, a non-sdpa attention implementation): the engine then decodes through `forward` as before.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

# model_type values whose decoder layers have the structure `step` runs (checked again module by module).
SUPPORTED = ("qwen2", "llama")


class LeanDecoder:
    """The decode step of one loaded model (see the module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        base = model.model
        self.embed = base.embed_tokens
        self.layers = list(base.layers)
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.head = model.get_output_embeddings()
        self.attention = sdpa_attention_forward
        attn = self.layers[0].self_attn
        # transformers' own rotary function of this architecture (bitwise the maths of `forward`)
        self.apply_rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.head_dim = attn.head_dim
        self.kv_heads = model.config.num_key_value_heads

    @classmethod
    def for_model(cls, model: nn.Module) -> LeanDecoder | None:
        """A decoder for `model`, or None when `model` is not a plain Llama-family decoder on sdpa attention."""
        cfg = getattr(model, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
            return None
        if getattr(cfg, "_attn_implementation", None) != "sdpa":
            return None
        if getattr(cfg, "use_sliding_window", False) or any(
            t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])
        ):
            return None
        base = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if base is None or not all(hasattr(base, n) for n in needed):
            return None
        for layer in base.layers:
            attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            if attn is None or mlp is None or not hasattr(layer, "post_attention_layernorm"):
                return None
            if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")):
                return None
            if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
                return None
        return cls(model)

    # ------------------------------------------------------------------ the cache
    def start(self, cache, batch: int, width: int, capacity: int) -> list[torch.Tensor]:
        """Buffers `[k_0, v_0, k_1, v_1, ...]`, each `[batch, kv_heads, capacity, head_dim]`, holding the
        prefill's cache (`width` positions) of a transformers `DynamicCache`."""
        bufs = []
        for i in range(len(self.layers)):
            k, v = _layer_kv(cache, i)
            for t in (k, v):
                buf = t.new_empty((batch, t.shape[1], capacity, t.shape[3]))
                buf[:, :, :width] = t
                bufs.append(buf)
        return bufs

    @staticmethod
    def grow(bufs: list[torch.Tensor], filled: int, capacity: int) -> list[torch.Tensor]:
        """The buffers with room for `capacity` positions, holding their first `filled` ones. The engine starts
        small and doubles (a generation's budget may be far longer than what its rows generate)."""
        out = []
        for buf in bufs:
            new = buf.new_empty((buf.shape[0], buf.shape[1], capacity, buf.shape[3]))
            new[:, :, :filled] = buf[:, :, :filled]
            out.append(new)
        return out

    # ------------------------------------------------------------------ one token
    def step(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        bufs: list[torch.Tensor],
        length: int,
        key_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Logits `[b, V]` of the next token of every row, given its last token `ids [b]` at `positions [b]`;
        writes the token's keys/values at index `length` of the buffers. `key_mask [b, length + 1]` (bool,
        True = attend) or None when every row attends every position (no left padding)."""
        b = ids.shape[0]
        h = self.embed(ids[:, None])
        cos, sin = self.rotary(h, positions[:, None])
        mask = key_mask[:, None, None, :] if key_mask is not None else None
        end = length + 1
        for i, layer in enumerate(self.layers):
            attn, mlp = layer.self_attn, layer.mlp
            residual = h
            x = _rms(layer.input_layernorm, h)
            q = attn.q_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(b, 1, -1, self.head_dim).transpose(1, 2)
            q, k = self.apply_rotary(q, k, cos, sin)
            kb, vb = bufs[2 * i], bufs[2 * i + 1]
            kb[:, :, length:end] = k
            vb[:, :, length:end] = v
            out, _ = self.attention(
                attn, q, kb[:, :, :end], vb[:, :, :end], mask, dropout=0.0, scaling=attn.scaling
            )
            h = residual + attn.o_proj(out.reshape(b, 1, -1).contiguous())
            residual = h
            x = _rms(layer.post_attention_layernorm, h)
            h = residual + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        h = _rms(self.norm, h)
        return self.head(h)[:, -1]


def _rms(norm: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm (Qwen2RMSNorm / LlamaRMSNorm), the same operations in the same order."""
    dtype = h.dtype
    x = h.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * x.to(dtype)


def _layer_kv(cache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `i`'s keys and values in a transformers cache (5.x: `cache.layers[i]`; 4.x: `key_cache[i]`)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return layers[i].keys, layers[i].values
    return cache.key_cache[i], cache.value_cache[i]
