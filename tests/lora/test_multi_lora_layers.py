"""Multi-slot LoRA layers vs PEFT holding one adapter alone: logits and gradients, Qwen2 and Llama.

Tolerance: forward max|diff| <= 1e-5 (float32, same op order up to summation), gradients <= 1e-5 relative
to their scale.
"""

from __future__ import annotations

import copy

import pytest
import torch

from populora.engine.testing import peft_model_with, random_model
from populora.lora import AdapterError, LoRAAdapter
from populora.lora.layers import (
    MultiLoRALinear,
    find_targets,
    get_slot_adapter,
    inject_multi_lora,
    set_slot_adapter,
)

N_SLOTS, RANK, ALPHA = 3, 4, 8.0
ATOL = 1e-5


def _randomise(layers, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in layers.values():
            layer.lora_A.copy_(torch.randn(layer.lora_A.shape, generator=g) * 0.2)
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=g) * 0.2)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def setup(request):
    torch.set_num_threads(1)
    base, tok = random_model(request.param, seed=3)
    multi = copy.deepcopy(base)
    ctx, layers = inject_multi_lora(multi, N_SLOTS, RANK, ALPHA)
    _randomise(layers)
    # A left-padded batch: rows of slots [0, 2, 1, 2, 0], lengths differ.
    g = torch.Generator().manual_seed(0)
    lens = [7, 5, 7, 3, 6]
    ids = torch.full((5, 7), tok.pad_token_id)
    mask = torch.zeros((5, 7), dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, 7 - n :] = torch.randint(0, 256, (n,), generator=g)
        mask[i, 7 - n :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return base, multi, ctx, layers, ids, mask, pos, [0, 2, 1, 2, 0]


def test_targets_default_qkvo(setup):
    base, multi, ctx, layers, *_ = setup
    assert len(layers) == 2 * 4 and all(isinstance(m, MultiLoRALinear) for m in layers.values())
    assert sorted({n.rsplit(".", 1)[1] for n in layers}) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert "model.layers.1.self_attn.v_proj" in layers
    assert not any(p.requires_grad for n, p in multi.named_parameters() if "lora_" not in n)
    assert len(find_targets(base, "all-linear")) == 2 * 7  # q k v o gate up down, not lm_head
    with pytest.raises(AdapterError, match="no nn.Linear"):
        find_targets(base, ["nope_proj"])


LAYOUTS = {"interleaved": [0, 2, 1, 2, 0], "sorted-unequal": [0, 0, 1, 2, 2]}


@pytest.mark.parametrize("mode", ["bmm", "runs", "gather"])
@pytest.mark.parametrize("layout", ["interleaved", "sorted-unequal"])
def test_mixed_forward_matches_peft_alone(setup, mode, layout):
    base, multi, ctx, layers, ids, mask, pos, _ = setup
    slots = LAYOUTS[layout]
    ctx.mode = mode
    try:
        with torch.no_grad(), ctx.use(slots):
            mixed = multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    finally:
        ctx.mode = "auto"
    for s in range(N_SLOTS):
        rows = [i for i, x in enumerate(slots) if x == s]
        pm = peft_model_with(base, get_slot_adapter(layers, s))
        with torch.no_grad():
            ref = pm(input_ids=ids[rows], attention_mask=mask[rows], position_ids=pos[rows]).logits
        m = mask[rows].bool()
        assert (mixed[rows][m] - ref[m]).abs().max() <= ATOL


def test_base_rows_and_no_context_equal_base(setup):
    base, multi, ctx, layers, ids, mask, pos, _ = setup
    with torch.no_grad():
        ref = base(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        plain = multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits  # ctx.idx is None
        with ctx.use([-1, 0, -1, 1, -1]):
            part = multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    m = mask.bool()
    assert torch.equal(plain[m], ref[m])
    for i in (0, 2, 4):
        assert (part[i][m[i]] - ref[i][m[i]]).abs().max() <= ATOL
    assert (part[1][m[1]] - ref[1][m[1]]).abs().max() > 1e-3  # a real adapter changes the output


@pytest.mark.parametrize("mode", ["bmm", "runs"])
def test_mixed_gradients_match_peft_alone_and_stay_in_their_slot(setup, mode):
    base, multi, ctx, layers, ids, mask, pos, _ = setup
    slots = [0, 0, 1, 2, 2]  # as the engine orders rows: sorted by slot, unequal segments
    ctx.mode = mode
    g = torch.Generator().manual_seed(5)
    w = torch.randn(ids.shape[0], ids.shape[1], multi.config.vocab_size, generator=g) * mask[..., None]
    for p in multi.parameters():
        p.grad = None
    with ctx.use(slots):
        (multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits * w).sum().backward()
    for s in range(N_SLOTS):
        rows = [i for i, x in enumerate(slots) if x == s]
        pm = peft_model_with(base, get_slot_adapter(layers, s))
        for n, p in pm.named_parameters():
            p.requires_grad_("lora_" in n)
        (
            pm(input_ids=ids[rows], attention_mask=mask[rows], position_ids=pos[rows]).logits * w[rows]
        ).sum().backward()
        for name, layer in layers.items():
            mod = pm.base_model.model.get_submodule(name)
            for ours, ref in (
                (layer.lora_A.grad[s], mod.lora_A["default"].weight.grad),
                (layer.lora_B.grad[s], mod.lora_B["default"].weight.grad),
            ):
                scale = ref.abs().max().clamp(min=1.0)
                assert (ours - ref).abs().max() <= ATOL * scale, name
    # Isolation: without slot 1's row, slot 1 gets exactly zero gradient; slot 0's gradient is unchanged.
    before0 = [layer.lora_A.grad[0].clone() for layer in layers.values()]
    for p in multi.parameters():
        p.grad = None
    keep = [0, 1, 3, 4]  # drop the only row of slot 1
    with ctx.use([slots[i] for i in keep]):
        (
            multi(input_ids=ids[keep], attention_mask=mask[keep], position_ids=pos[keep]).logits * w[keep]
        ).sum().backward()
    for layer, b0 in zip(layers.values(), before0, strict=True):
        assert (
            torch.count_nonzero(layer.lora_A.grad[1]) == 0 and torch.count_nonzero(layer.lora_B.grad[1]) == 0
        )
        assert (layer.lora_A.grad[0] - b0).abs().max() <= ATOL * b0.abs().max().clamp(min=1.0)
    for p in multi.parameters():
        p.grad = None
    ctx.mode = "auto"


def test_slot_adapter_roundtrip_and_errors(setup):
    _, _, _, layers, *_ = setup
    ad = get_slot_adapter(layers, 1)
    assert isinstance(ad, LoRAAdapter) and ad.rank == RANK and ad.alpha == ALPHA
    name = "model.layers.0.self_attn.q_proj"
    assert torch.allclose(ad.delta(name), ALPHA / RANK * layers[name].lora_B[1] @ layers[name].lora_A[1])
    saved = get_slot_adapter(layers, 2)
    try:
        set_slot_adapter(layers, 2, ad)
        assert torch.equal(layers[name].lora_A[2], layers[name].lora_A[1])
        # Same rank, another alpha: B is rescaled so the effective update is preserved.
        half = LoRAAdapter(modules=ad.modules, alpha=ALPHA / 2)
        set_slot_adapter(layers, 2, half)
        assert torch.allclose(get_slot_adapter(layers, 2).delta(name), half.delta(name), atol=1e-6)
        with pytest.raises(AdapterError, match="largest rank"):  # above the storage width (mixed ranks)
            set_slot_adapter(
                layers,
                2,
                LoRAAdapter(
                    modules={
                        k: (torch.cat([a, a[:1]]), torch.cat([b, b[:, :1]], 1))
                        for k, (a, b) in ad.modules.items()
                    },
                    alpha=ALPHA,
                ),
            )
        with pytest.raises(AdapterError, match="missing"):
            set_slot_adapter(layers, 2, LoRAAdapter(modules={name: ad.modules[name]}, alpha=ALPHA))
        bad = dict(ad.modules)
        bad[name] = (torch.zeros(RANK, 5), torch.zeros(bad[name][1].shape))
        with pytest.raises(AdapterError, match="base model"):
            set_slot_adapter(layers, 2, LoRAAdapter(modules=bad, alpha=ALPHA))
        nan = dict(ad.modules)
        nan[name] = (torch.full_like(ad.modules[name][0], float("nan")), ad.modules[name][1])
        with pytest.raises(AdapterError, match="NaN"):
            set_slot_adapter(layers, 2, LoRAAdapter(modules=nan, alpha=ALPHA))
    finally:
        set_slot_adapter(layers, 2, saved)


def test_fresh_slots_equal_base_and_init_is_deterministic():
    base, _ = random_model("qwen2", seed=3)
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    _, l1 = inject_multi_lora(m1, 2, RANK, ALPHA, seed=7)
    _, l2 = inject_multi_lora(m2, 4, RANK, ALPHA, seed=7)
    for name in l1:
        assert torch.count_nonzero(l1[name].lora_B) == 0
        # slot s's init depends on (seed, s), not on the number of slots
        assert torch.equal(l1[name].lora_A[1], l2[name].lora_A[1])
        assert not torch.equal(l1[name].lora_A[0], l1[name].lora_A[1])
        bound = 1 / l1[name].in_features ** 0.5
        assert l1[name].lora_A.abs().max() <= bound
