"""`SlotContext.dropout` (lora.dropout) is PEFT's lora_dropout: a real PEFT model with the same rate, in
train mode, from the same torch seed, gives the same logits; 0 (the default, and all of generation) draws
nothing."""

from __future__ import annotations

import copy

import torch
from peft import LoraConfig, get_peft_model

from populora.engine.testing import add_peft_adapter, random_model
from populora.lora.layers import get_slot_adapter, inject_multi_lora


def _setup():
    torch.set_num_threads(1)
    base, _ = random_model("qwen2", seed=3)
    multi = copy.deepcopy(base)
    ctx, layers = inject_multi_lora(multi, 2, 4, 8.0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in layers.values():
            layer.lora_A.copy_(torch.randn(layer.lora_A.shape, generator=g) * 0.3)
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=g) * 0.3)
    return base, multi, ctx, layers


def test_dropout_matches_peft_lora_dropout():
    base, multi, ctx, layers = _setup()
    adapter = get_slot_adapter(layers, 1)
    cfg = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.3,
        init_lora_weights=False,
    )
    pm = get_peft_model(copy.deepcopy(base), cfg)
    add_peft_adapter(pm, adapter, "default")
    pm.train()  # PEFT drops only in train mode (the tiny Qwen2's own attention dropout is 0)
    ids = torch.randint(0, 256, (3, 9), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(7)
    ref = pm(input_ids=ids).logits
    with ctx.use([1, 1, 1]):
        torch.manual_seed(7)
        ctx.dropout = 0.3
        ours = multi(input_ids=ids).logits
        ctx.dropout = 0.0
        clean = multi(input_ids=ids).logits
    assert (ours - ref).abs().max().item() <= 1e-5
    assert (clean - ref).abs().max().item() > 1e-3  # the masks matter at this rate


def test_no_dropout_draws_no_random_numbers():
    _, multi, ctx, _ = _setup()
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(0))
    state = torch.get_rng_state()
    with ctx.use([0, 1]):
        multi(input_ids=ids)
    assert torch.equal(state, torch.get_rng_state())
