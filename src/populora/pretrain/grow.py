"""Grow a pretrained tiny model deeper without changing what it computes (`pretrain-tiny --grow-layers N`).

A new decoder layer is a copy of the layer before it whose two residual writes, the attention output
projection `o_proj` and the MLP's `down_proj`, are zero: it adds nothing to the residual stream, so the grown
model's logits equal the original's (to float rounding) and continued pretraining starts from everything the
original knew, with more depth to learn with. The copies are spread evenly through the stack (after every
`L / N`-th original layer) rather than stacked at the end, as in block expansion (LLaMA Pro, Wu et al. 2024).
Training moves the zero projections first (their gradient is the block's output, which is not zero); the
copied weights make the new block's features those of its neighbour from the first step.

Only Qwen2-architecture models (the bundled tiny model's) with full attention in every layer are grown.
"""

from __future__ import annotations

import copy


class GrowError(ValueError):
    """The model or the requested growth cannot be used; the message names the fix."""


def insert_after(n_layers: int, n_new: int) -> list[int]:
    """Indices of the original layers each new layer follows, spread evenly: 4 layers + 2 -> [1, 3]
    (the new layers sit after the 2nd and the 4th), 4 + 1 -> [3], 4 + 4 -> [0, 1, 2, 3]."""
    if n_layers < 1:
        raise GrowError(f"the model has {n_layers} layers; nothing to copy")
    if not 1 <= n_new <= n_layers:
        raise GrowError(
            f"--grow-layers must be between 1 and the model's layer count ({n_layers}), got {n_new}; "
            "grow again from the grown model for more"
        )
    return [((k + 1) * n_layers) // n_new - 1 for k in range(n_new)]


def grow_depth(model, n_new: int):
    """A deeper copy of `model` (a transformers Qwen2ForCausalLM) with `n_new` identity layers inserted
    (`insert_after`); `model` itself is not changed. The config's `num_hidden_layers` and `layer_types` follow,
    and every layer's `layer_idx` is renumbered (the KV cache is indexed by it)."""
    import torch

    config = model.config
    if getattr(config, "model_type", None) != "qwen2":
        raise GrowError(
            f"only qwen2 models can be grown, this one is {getattr(config, 'model_type', None)!r}"
        )
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)
    if any(t != "full_attention" for t in types):
        raise GrowError("only models with full attention in every layer can be grown (no sliding window)")
    after = insert_after(config.num_hidden_layers, n_new)
    grown = copy.deepcopy(model)
    old_layers = list(grown.model.layers)
    layers = []
    for i, layer in enumerate(old_layers):
        layers.append(layer)
        for _ in range(after.count(i)):
            new = copy.deepcopy(layer)
            with torch.no_grad():
                for residual_write in (new.self_attn.o_proj, new.mlp.down_proj):
                    for p in residual_write.parameters():  # weight, and a bias where there is one
                        p.zero_()
            layers.append(new)
    for idx, layer in enumerate(layers):
        layer.self_attn.layer_idx = idx  # the attention's key into the KV cache
    grown.model.layers = torch.nn.ModuleList(layers)
    grown.config.num_hidden_layers = len(layers)
    grown.config.layer_types = ["full_attention"] * len(layers)
    return grown
