"""hf engine with mixed ranks (issue 34): a rank-1 slot trained in a batch with rank-4 slots ends where a
uniform rank-1 engine ends, padded components never move (weight decay on), and PEFT folders carry each
slot's own rank (save, then load into a slot of another rank)."""

from __future__ import annotations

import pytest
import torch
from train_rows import random_rows

from populora.engine import TrainBatch
from populora.lora.peft_io import load_peft

TOL = 2e-6
OPTS = dict(lr=1e-2, eps=1.0, weight_decay=0.1)  # eps=1 as in test_engine_train: weights compare like grads


def _rows(slots, seed=0):
    return random_rows(slots, seed)


def test_mixed_rank_step_equals_a_uniform_engine_and_padding_stays_zero(make_engine, tmp_path):
    mixed = make_engine(n_slots=3, rank=[1, 4], randomise=False, max_rank=6, **OPTS)  # slots: 1, 4, 1
    assert mixed.slot_ranks() == [1, 4, 1] and mixed.rank == 6
    alone = make_engine(n_slots=1, rank=1, randomise=False, **OPTS)
    g = torch.Generator().manual_seed(3)
    ad = alone.get_adapter(0)
    ad.modules = {
        k: (torch.randn(a.shape, generator=g) * 0.3, torch.randn(b.shape, generator=g) * 0.3)
        for k, (a, b) in ad.modules.items()
    }
    for eng in (mixed, alone):
        eng.set_adapter(0, ad)
    rows = _rows([0, 1, 2, 1, 0, 2])
    for _ in range(2):
        mixed.train_step(TrainBatch(rows))
        alone.train_step(TrainBatch([r for r in rows if r.slot == 0]))
    got, want = mixed.get_adapter(0), alone.get_adapter(0)
    assert got.rank == 1
    for k in want.modules:
        for x, y in zip(got.modules[k], want.modules[k], strict=True):
            assert (x - y).abs().max() <= TOL
    for layer in mixed.layers.values():
        for s, r in enumerate(mixed.slot_ranks()):
            assert (
                torch.count_nonzero(layer.lora_A[s, r:]) == 0
                and torch.count_nonzero(layer.lora_B[s, :, r:]) == 0
            )
    # PEFT per rank: slot 1 (rank 4) saved with r=4, loaded into slot 0, which becomes rank 4
    mixed.save_adapter(1, tmp_path / "r4")
    assert load_peft(tmp_path / "r4").rank == 4
    mixed.load_adapter(0, tmp_path / "r4")
    assert mixed.slot_ranks()[0] == 4
    assert torch.equal(mixed.get_adapter(0).modules[k][0], mixed.get_adapter(1).modules[k][0])


def test_all_linear_mixed_ranks_export_loads_in_peft_with_the_same_logits(
    make_engine, base_and_tok, tmp_path
):
    import copy

    from peft import PeftModel

    base, _ = base_and_tok
    eng = make_engine(
        n_slots=2, rank=[1, 3], targets="all-linear"
    )  # randomised factors (padding re-zeroed below)
    for s in range(2):  # set_adapter re-zeroes the padded components the randomising filled
        eng.set_adapter(s, eng.get_adapter(s))
    assert {"gate_proj", "up_proj", "down_proj", "q_proj"} <= set(eng.targets)
    ids = torch.tensor([[5, 9, 77, 120, 3], [8, 8, 1, 2, 200]])
    for s, r in enumerate((1, 3)):
        eng.save_adapter(s, tmp_path / f"s{s}")
        cfg = load_peft(tmp_path / f"s{s}").metadata["peft_config"]
        assert cfg["r"] == r and "down_proj" in cfg["target_modules"]
        pm = PeftModel.from_pretrained(copy.deepcopy(base), tmp_path / f"s{s}").eval()
        with torch.no_grad():
            ref = pm(input_ids=ids).logits
            with eng.ctx.use([s, s]):
                ours = eng.model(input_ids=ids).logits
        assert (ours - ref).abs().max() <= 1e-5 * ref.abs().max()  # float32 rounding: scale applied to x A^T
    with pytest.raises(ValueError, match="largest rank 3"):
        big = eng.get_adapter(0)
        big.modules = {
            k: (torch.zeros(4, a.shape[1]), torch.zeros(b.shape[0], 4)) for k, (a, b) in big.modules.items()
        }
        eng.set_adapter(0, big)


def test_memory_estimate_counts_the_mlp_for_all_linear(tmp_path):
    from populora.engine.memory import estimate_memory

    (tmp_path / "config.json").write_text(
        '{"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, '
        '"num_key_value_heads": 1, "intermediate_size": 16}'
    )
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    # per unit of rank: q 8+8, k 8+4, v 8+4, o 8+8 = 56; gate 8+16, up 8+16, down 16+8 = 72 more.
    # rank 2, 2 layers, fp32 weights + grads + two AdamW moments = 16 bytes per parameter
    assert estimate_memory(tmp_path, 2, ["attention"]) == (100, 56 * 2 * 2 * 16)
    assert estimate_memory(tmp_path, 2, ["all-linear"]) == (100, 128 * 2 * 2 * 16)
