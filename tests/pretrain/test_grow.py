"""Depth growth (`pretrain/grow.py`, `pretrain-tiny --grow-layers`): the grown model computes what the original
did, the copies sit where `insert_after` says, it trains and saves as a normal model folder, and bad requests
get errors that name the fix."""

from __future__ import annotations

import json

import pytest

from populora.pretrain.grow import GrowError, grow_depth, insert_after

MINI = dict(
    hidden_size=64,
    num_layers=2,
    num_heads=2,
    num_kv_heads=2,
    intermediate_size=128,
    vocab_size=600,
    n_examples=150,
    tokenizer_examples=150,
    val_examples=8,
    seq_len=512,
    batch_size=2,
    steps=3,
    warmup_steps=1,
    threads=1,
    bf16=False,
)


def test_insert_after_spreads_the_new_layers_through_the_stack():
    assert insert_after(4, 2) == [1, 3]
    assert insert_after(4, 1) == [3]
    assert insert_after(4, 4) == [0, 1, 2, 3]
    assert insert_after(6, 3) == [1, 3, 5]
    assert insert_after(5, 2) == [1, 4]
    with pytest.raises(GrowError, match="between 1 and the model's layer count"):
        insert_after(4, 5)
    with pytest.raises(GrowError, match="between 1"):
        insert_after(4, 0)


@pytest.fixture(scope="module")
def small_model():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg).eval()


def test_the_grown_model_gives_the_same_logits_and_greedy_tokens(small_model):
    import torch

    grown = grow_depth(small_model, 2).eval()
    assert grown.config.num_hidden_layers == 5 and len(grown.config.layer_types) == 5
    assert small_model.config.num_hidden_layers == 3  # the original is untouched
    assert [layer.self_attn.layer_idx for layer in grown.model.layers] == [0, 1, 2, 3, 4]
    # insert_after(3, 2) == [0, 2]: new layers at positions 1 and 4, copies of originals 0 and 2 with zero outputs
    for pos, src in ((1, 0), (4, 2)):
        new, old = grown.model.layers[pos], small_model.model.layers[src]
        assert torch.equal(new.self_attn.q_proj.weight, old.self_attn.q_proj.weight)
        assert not new.self_attn.o_proj.weight.any() and not new.mlp.down_proj.weight.any()
        assert old.self_attn.o_proj.weight.any()
    ids = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(grown(ids).logits, small_model(ids).logits, atol=1e-6)
        a = small_model.generate(ids[:1, :5], max_new_tokens=12, do_sample=False, pad_token_id=0)
        b = grown.generate(ids[:1, :5], max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(a, b)  # with the KV cache, indexed by the renumbered layer_idx


def test_only_full_attention_qwen2_models_are_grown(small_model):
    import copy

    sliding = copy.deepcopy(small_model)
    sliding.config.layer_types = ["full_attention", "sliding_attention", "full_attention"]
    with pytest.raises(GrowError, match="full attention"):
        grow_depth(sliding, 1)
    other = copy.deepcopy(small_model)
    other.config.model_type = "llama"
    with pytest.raises(GrowError, match="qwen2"):
        grow_depth(other, 1)


def test_pretrain_tiny_grows_a_model_and_trains_it_into_a_loadable_folder(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from populora.pretrain.train import PretrainConfig, pretrain

    pretrain(PretrainConfig(seed=1, **MINI), tmp_path / "base", progress=False)
    info = pretrain(
        PretrainConfig(seed=2, init_from=str(tmp_path / "base"), grow_layers=1, **MINI),
        tmp_path / "grown",
        progress=False,
    )
    assert info["config"]["grow_layers"] == 1 and info["history"][0]["seed"] == 1
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    grown = AutoModelForCausalLM.from_pretrained(tmp_path / "grown")
    assert grown.config.num_hidden_layers == 3
    assert info["parameters"] == sum(p.numel() for p in base.parameters()) + sum(
        p.numel() for p in base.model.layers[0].parameters()
    )
    # three steps moved the new layer's zero projections: it is trained, not a frozen identity
    assert grown.model.layers[2].mlp.down_proj.weight.abs().sum() > 0
    assert json.loads((tmp_path / "grown" / "config.json").read_text())["num_hidden_layers"] == 3
    ids = torch.tensor([[5, 6, 7, 8]])
    assert grown(input_ids=ids).logits.shape == (1, 4, 600)
    with pytest.raises(ValueError, match="needs init_from"):
        pretrain(PretrainConfig(seed=3, grow_layers=1, **MINI), tmp_path / "x", progress=False)


def test_pretrain_tiny_cli_rejects_bad_growth(tmp_path):
    from typer.testing import CliRunner

    from populora.cli import app
    from populora.pretrain.commands import ASSET_DIR

    res = CliRunner().invoke(app, ["pretrain-tiny", "--grow-layers", "1", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--grow-layers needs --init-from" in res.output
    res = CliRunner().invoke(
        app,
        ["pretrain-tiny", "--init-from", str(ASSET_DIR), "--grow-layers", "9", "--out", str(tmp_path / "o")],
    )
    assert res.exit_code == 2 and "between 1 and the model's layer count (4)" in res.output
