"""Mixed ranks in one multi-slot model (issue 34): slots of ranks 1, 2 and 4 in one batch match PEFT holding
each adapter alone (forward on every evaluation path, gradients), the padded components get exactly zero
gradient, and a slot takes the rank of the adapter written into it. Tolerances as test_multi_lora_layers."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.engine.testing import peft_model_with, random_model
from populora.lora import AdapterError, LoRAAdapter
from populora.lora.layers import (
    find_targets,
    get_slot_adapter,
    inject_multi_lora,
    resolve_targets,
    set_slot_adapter,
    slot_ranks,
)

ALPHA, ATOL = 8.0, 1e-5
RANKS = [1, 4, 2]  # slot 0 rank 1, slot 1 rank 4, slot 2 rank 2; stored at width 6 (a later M6 may grow)


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    base, tok = random_model("qwen2", seed=3)
    multi = copy.deepcopy(base)
    ctx, layers = inject_multi_lora(multi, 3, RANKS, ALPHA, max_rank=6)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in layers.values():
            for s, r in enumerate(RANKS):
                layer.lora_A[s, :r] = torch.randn(r, layer.in_features, generator=g) * 0.2
                layer.lora_B[s, :, :r] = torch.randn(layer.out_features, r, generator=g) * 0.2
    g = torch.Generator().manual_seed(0)
    lens = [7, 5, 7, 3, 6]
    ids = torch.full((5, 7), tok.pad_token_id)
    mask = torch.zeros((5, 7), dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, 7 - n :] = torch.randint(0, 256, (n,), generator=g)
        mask[i, 7 - n :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return base, multi, ctx, layers, ids, mask, pos


def test_slot_ranks_cycle_and_targets_names():
    assert slot_ranks([1, 8], 5) == [1, 8, 1, 8, 1]
    assert slot_ranks(4, 2) == [4, 4]
    with pytest.raises(AdapterError, match=">= 1"):
        slot_ranks([2, 0], 2)
    assert resolve_targets("attention") == resolve_targets(["attention"]) == resolve_targets(None)
    assert resolve_targets(["all-linear"]) == "all-linear"
    base, _ = random_model("qwen2", seed=3)
    assert len(find_targets(base, ["all-linear"])) == 2 * 7 and len(find_targets(base, "attention")) == 2 * 4


def test_adapters_keep_their_own_rank_and_scale(setup):
    _, _, _, layers, *_ = setup
    for s, r in enumerate(RANKS):
        ad = get_slot_adapter(layers, s)
        assert ad.rank == r and ad.scale == ALPHA / r


@pytest.mark.parametrize("mode", ["bmm", "runs", "gather"])
@pytest.mark.parametrize("slots", [[0, 2, 1, 2, 0], [0, 0, 1, 2, 2], [1, 1, 1, 1, 1], [-1, 0, -1, 2, 2]])
def test_mixed_rank_forward_matches_peft_alone(setup, mode, slots):
    base, multi, ctx, layers, ids, mask, pos = setup
    ctx.mode = mode
    try:
        with torch.no_grad(), ctx.use(slots):
            mixed = multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    finally:
        ctx.mode = "auto"
    for s in sorted(set(slots)):
        rows = [i for i, x in enumerate(slots) if x == s]
        model = base if s < 0 else peft_model_with(base, get_slot_adapter(layers, s))
        with torch.no_grad():
            ref = model(input_ids=ids[rows], attention_mask=mask[rows], position_ids=pos[rows]).logits
        m = mask[rows].bool()
        assert (mixed[rows][m] - ref[m]).abs().max() <= ATOL, (s, mode)


@pytest.mark.parametrize("mode", ["bmm", "runs"])
def test_mixed_rank_gradients_match_peft_and_padding_gets_zero(setup, mode):
    base, multi, ctx, layers, ids, mask, pos = setup
    slots = [0, 0, 1, 2, 2]
    ctx.mode = mode
    w = torch.randn(*ids.shape, multi.config.vocab_size, generator=torch.Generator().manual_seed(5))
    w = w * mask[..., None]
    for p in multi.parameters():
        p.grad = None
    with ctx.use(slots):
        (multi(input_ids=ids, attention_mask=mask, position_ids=pos).logits * w).sum().backward()
    ctx.mode = "auto"
    for s, r in enumerate(RANKS):
        rows = [i for i, x in enumerate(slots) if x == s]
        pm = peft_model_with(base, get_slot_adapter(layers, s))
        for n, p in pm.named_parameters():
            p.requires_grad_("lora_" in n)
        (
            pm(input_ids=ids[rows], attention_mask=mask[rows], position_ids=pos[rows]).logits * w[rows]
        ).sum().backward()
        for name, layer in layers.items():
            mod = pm.base_model.model.get_submodule(name)
            ga, gb = layer.lora_A.grad[s], layer.lora_B.grad[s]
            for ours, ref in (
                (ga[:r], mod.lora_A["default"].weight.grad),
                (gb[:, :r], mod.lora_B["default"].weight.grad),
            ):
                assert (ours - ref).abs().max() <= ATOL * ref.abs().max().clamp(min=1.0), name
            # the padded components of a smaller-rank slot: exactly zero, so AdamW never moves them
            assert torch.count_nonzero(ga[r:]) == 0 and torch.count_nonzero(gb[:, r:]) == 0
    for p in multi.parameters():
        p.grad = None


def test_slot_takes_the_written_adapters_rank(setup):
    _, _, _, layers, *_ = setup
    name = "model.layers.0.self_attn.q_proj"
    saved = get_slot_adapter(layers, 0)
    try:
        four = get_slot_adapter(layers, 1)
        set_slot_adapter(layers, 0, four)  # rank 1 -> 4
        assert layers[name].slot_ranks[0] == 4 and get_slot_adapter(layers, 0).rank == 4
        set_slot_adapter(layers, 0, saved)  # back to rank 1: the rest of the storage is zeroed
        assert torch.count_nonzero(layers[name].lora_A[0, 1:]) == 0
        assert torch.count_nonzero(layers[name].lora_B[0, :, 1:]) == 0
        big = LoRAAdapter(
            {
                k: (torch.zeros(7, a.shape[1]), torch.zeros(b.shape[0], 7))
                for k, (a, b) in four.modules.items()
            },
            alpha=ALPHA,
        )
        with pytest.raises(AdapterError, match="largest rank 6"):
            set_slot_adapter(layers, 0, big)
    finally:
        set_slot_adapter(layers, 0, saved)


def test_config_rank_lists_range_and_targets():
    from populora.config import ConfigError, load_config

    c = load_config("tiny", ["lora.rank=8,1", "lora.rank_range=1,16", "lora.targets=all-linear"])
    assert (c.lora.rank, c.lora.rank_range, c.lora.targets, c.lora.max_rank()) == (
        [8, 1],
        [1, 16],
        ["all-linear"],
        16,
    )
    assert load_config("tiny", ["lora.rank=[4]"]).lora.rank == 4 and load_config("tiny").lora.max_rank() == 4
    for bad, msg in (
        ("lora.rank=8,0", "lora.rank: must be >= 1"),
        ("lora.rank_range=4,2", "lora.rank_range: must be"),
        ("lora.rank_range=1,2", "outside lora.rank_range"),
        ("lora.targets=all-linear,q_proj", "stands alone"),
        ("lora.rank=x", "integer or a list of integers"),
    ):
        with pytest.raises(ConfigError, match=msg) as err:
            load_config("tiny", [bad])
        assert "\n" not in str(err.value)
