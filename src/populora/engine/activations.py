"""How much memory a train step's activations take: measured on the real architecture, extrapolated per layer.

`measure_saved_bytes(config, layers, tokens, ...)` builds the model of a `config.json` (its real transformers
class, any width) at reduced depth with LoRA slots injected as the engine injects them, runs one forward with
gradients on and adds up the tensors autograd keeps for the backward pass (each storage once; the frozen
weights, which are counted with the base, excluded). `measure_activations` does it at 1 and 2 layers and two
token counts, which separates the per-layer, per-token bytes from the rest (embedding output, final norm).

`train_step_bytes` turns those into the peak of one micro-batch of T tokens:
- without activation checkpointing every layer keeps its activations: `T * (L * per_layer + fixed)`;
- with it each layer keeps only its input (`T * hidden * dtype`), and the backward pass recomputes one layer
  at a time: `T * (L * hidden * dtype + per_layer + fixed)`;
- plus one layer's worth more for the backward pass's gradient buffers, and the lm_head's chunk of float32
  logits and log-softmax temporaries (`populora.rl.logprobs`): `chunk * V * 14` bytes.
The longest micro-batch is `max(rl.micro_batch_tokens, longest row)`: a row longer than the budget runs alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import torch

# Bytes per vocabulary entry per token in the lm_head chunk: the bf16 logits, their float32 copy, the float32
# log-softmax, its exp and the product summed for the entropy.
LOGIT_BYTES_PER_ENTRY = 2 + 4 * 3


@dataclass(frozen=True)
class ActivationProfile:
    """Saved bytes per token: `per_layer` (one decoder layer), `fixed` (outside the layers), `layer_input`
    (what a checkpointed layer keeps: its input hidden state)."""

    per_layer: float
    fixed: float
    layer_input: float


def _build(config: dict, layers: int, dtype: torch.dtype) -> torch.nn.Module:
    """The config's model class at `layers` layers and a 256-token vocabulary (the vocabulary only sizes the
    embedding and head, which `train_step_bytes` counts apart), zero weights: sizes are all that is measured."""
    from transformers import AutoConfig, AutoModelForCausalLM

    c = dict(config)
    model_type = c.pop("model_type")
    for key in (
        "architectures",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "auto_map",
        "quantization_config",
    ):
        c.pop(key, None)
    c.update(num_hidden_layers=layers, vocab_size=256, max_window_layers=layers)
    if isinstance(c.get("layer_types"), list):  # one entry per layer (transformers 5 checks the count)
        c["layer_types"] = c["layer_types"][:layers]
    c.update(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    cfg = AutoConfig.for_model(model_type, **c)
    cfg._attn_implementation = "sdpa"  # as on a GPU: attention keeps O(T) (no [T, T] probabilities)
    with torch.device("meta"):  # no random init of full-width weights (seconds a layer on a CPU)
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        except TypeError:  # transformers 4.x names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for t in (*model.parameters(), *model.buffers()):
            t.zero_()
    # to_empty left the rotary embedding's computed (non-persistent) buffers empty: rebuild those modules.
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], type(module)(config=cfg))
    return model


def _saved_bytes(model: torch.nn.Module, ctx, tokens: int) -> int:
    """Bytes autograd keeps after one forward of a `tokens`-token row through `model`'s decoder (each storage
    once; parameters and buffers, counted with the base, excluded)."""
    frozen = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in frozen:
            seen[s.data_ptr()] = s.nbytes()
        return t

    ids = torch.arange(tokens).remainder(256)[None]
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx.use([0]):
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    del hidden
    return sum(seen.values())


def measure_saved_bytes(
    config: dict,
    *,
    layers: int,
    tokens: int,
    rank: int,
    targets: list[str] | str | None,
    dtype: torch.dtype = torch.bfloat16,
) -> int:
    """Bytes autograd keeps after one forward of one row of `tokens` tokens through the decoder of `config`
    at `layers` layers, with one rank-`rank` LoRA slot on `targets` as the engine injects it."""
    return _measure_all(config, (layers,), (tokens,), rank, targets, dtype)[layers, tokens]


def _measure_all(config, depths, token_counts, rank, targets, dtype) -> dict[tuple[int, int], int]:
    from populora.lora.layers import inject_multi_lora

    model = _build(config, max(depths), dtype)
    ctx, lora = inject_multi_lora(model, 1, rank, 2.0 * rank, targets, seed=0)
    for layer in lora.values():
        layer.lora_A.requires_grad_(True)
        layer.lora_B.requires_grad_(True)
    decoder, out = model.get_decoder(), {}
    blocks = decoder.layers
    for n in depths:  # fewer layers: the same model with its first n blocks
        decoder.layers = blocks[:n]
        decoder.config.num_hidden_layers = n
        for t in token_counts:
            out[n, t] = _saved_bytes(model, ctx, t)
    decoder.layers = blocks
    return out


@lru_cache(maxsize=8)
def _profile(
    config_json: str, rank: int, targets: tuple[str, ...] | str | None, dtype: str
) -> ActivationProfile:
    config = json.loads(config_json)
    dt = getattr(torch, dtype)
    t1, t2 = 8, 16
    m = _measure_all(
        config, (1, 2), (t1, t2), rank, list(targets) if isinstance(targets, tuple) else targets, dt
    )
    per_layer = ((m[2, t2] - m[1, t2]) - (m[2, t1] - m[1, t1])) / (t2 - t1)
    fixed = (m[1, t2] - m[1, t1]) / (t2 - t1) - per_layer
    return ActivationProfile(per_layer, max(fixed, 0.0), float(config["hidden_size"] * dt.itemsize))


def measure_activations(
    config: dict, rank: int, targets: list[str] | str | None, dtype: str = "bfloat16"
) -> ActivationProfile:
    """Saved bytes per token of `config`'s architecture (a config.json's dict) with rank-`rank` LoRA on
    `targets`: per layer, outside the layers, and a checkpointed layer's input. Measured at 1 and 2 layers
    and 8 and 16 tokens on the CPU (seconds at 7B width; cached per config in the process)."""
    key = tuple(targets) if isinstance(targets, list) else targets
    return _profile(json.dumps(config, sort_keys=True), int(rank), key, dtype)


def train_step_bytes(
    profile: ActivationProfile,
    *,
    layers: int,
    vocab: int,
    tokens: int,
    checkpointing: bool,
    logit_chunk_tokens: int,
) -> int:
    """Peak activation bytes of one micro-batch of `tokens` tokens (see the module docstring)."""
    kept = profile.layer_input if checkpointing else profile.per_layer
    # + one layer: the recomputed layer (checkpointing) or the gradient buffers of the layer in backward.
    act = tokens * (layers * kept + profile.per_layer + profile.fixed)
    chunk = tokens if logit_chunk_tokens <= 0 else min(tokens, logit_chunk_tokens)
    return int(act + chunk * vocab * LOGIT_BYTES_PER_ENTRY)


__all__ = [
    "ActivationProfile",
    "measure_activations",
    "measure_saved_bytes",
    "train_step_bytes",
]
