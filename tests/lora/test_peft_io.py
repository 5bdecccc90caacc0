"""PEFT folder I/O: a real PEFT round-trip on a tiny random Qwen2, and clear errors for bad folders."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from populora.lora import AdapterError, LoRAAdapter
from populora.lora.peft_io import load_peft, save_peft

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


@pytest.fixture(scope="module")
def peft_folder(tmp_path_factory):
    """A PEFT-saved adapter (randomised B) on a tiny random Qwen2, plus the base model and input ids."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    base = Qwen2ForCausalLM(cfg).eval()
    pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    ids = torch.randint(0, 128, (2, 7))
    with torch.no_grad():
        logits = pm(input_ids=ids).logits
    out = tmp_path_factory.mktemp("peft") / "orig"
    pm.save_pretrained(out)
    base = pm.unload()  # the clean base model, reused for reloads
    return out, base, ids, logits


def test_peft_roundtrip_identical_logits(peft_folder, tmp_path):
    from peft import PeftModel

    src, base, ids, logits = peft_folder
    ad = load_peft(src)
    assert ad.rank == 4 and ad.alpha == 8
    assert "model.layers.0.self_attn.q_proj" in ad.modules and len(ad.modules) == 8
    a, b = ad.modules["model.layers.1.self_attn.k_proj"]
    assert a.shape == (4, 64) and b.shape == (32, 4)  # k_proj out = 2 kv heads * 16

    dst = save_peft(ad, tmp_path / "ours", base_model_name_or_path="tiny-qwen2")
    cfg = json.loads((dst / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8
    assert cfg["use_rslora"] is False and cfg["task_type"] == "CAUSAL_LM"
    assert sorted(cfg["target_modules"]) == sorted(TARGETS)
    from safetensors.torch import load_file

    orig_sd, ours_sd = (
        load_file(str(src / "adapter_model.safetensors")),
        load_file(str(dst / "adapter_model.safetensors")),
    )
    assert set(orig_sd) == set(ours_sd)
    assert all(torch.equal(orig_sd[k], ours_sd[k]) for k in orig_sd)

    pm = PeftModel.from_pretrained(base, dst)
    with torch.no_grad():
        again = pm(input_ids=ids).logits
    pm.unload()
    assert torch.equal(again, logits)


def test_fresh_adapter_without_peft_config_loads_in_peft(peft_folder, tmp_path):
    """An adapter built in memory (no loaded config) is written with a config PEFT accepts."""
    from peft import PeftModel

    src, base, ids, _ = peft_folder
    ad = load_peft(src)
    fresh = LoRAAdapter(modules={k: (a * 2, b) for k, (a, b) in ad.modules.items()}, alpha=8)
    dst = save_peft(fresh, tmp_path / "fresh")
    assert load_peft(dst).modules.keys() == ad.modules.keys()
    pm = PeftModel.from_pretrained(base, dst)
    lora_a = pm.base_model.model.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    assert torch.equal(lora_a.detach(), fresh.modules["model.layers.0.self_attn.q_proj"][0])
    pm.unload()


def test_save_overwrites_atomically_and_bin_loads(peft_folder, tmp_path):
    src, *_ = peft_folder
    ad = load_peft(src)
    dst = tmp_path / "x"
    save_peft(ad, dst)
    save_peft(ad.map(lambda n, a, b: (a, b * 0.5)), dst)  # overwrite in place
    assert torch.equal(
        load_peft(dst).modules["model.layers.0.self_attn.v_proj"][1],
        ad.modules["model.layers.0.self_attn.v_proj"][1] * 0.5,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]  # no temp folders left behind
    # the older pickle format
    binf = tmp_path / "bin"
    binf.mkdir()
    shutil.copy(src / "adapter_config.json", binf)
    from safetensors.torch import load_file

    torch.save(load_file(str(src / "adapter_model.safetensors")), binf / "adapter_model.bin")
    assert torch.equal(
        load_peft(binf).modules["model.layers.1.self_attn.o_proj"][0],
        ad.modules["model.layers.1.self_attn.o_proj"][0],
    )


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_config(folder, **kv):
    p = folder / "adapter_config.json"
    cfg = json.loads(p.read_text())
    cfg.update(kv)
    p.write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "edit, match",
    [
        ({"peft_type": "IA3"}, "not LORA"),
        ({"use_rslora": True}, "rsLoRA"),
        ({"use_dora": True}, "DoRA"),
        ({"rank_pattern": {"q_proj": 8}}, "rank_pattern"),
        ({"alpha_pattern": {"q_proj": 8}}, "rank_pattern/alpha_pattern"),
        ({"r": 8}, "inconsistent with r=8"),
    ],
)
def test_bad_configs_raise(peft_folder, tmp_path, edit, match):
    f = _copy(peft_folder[0], tmp_path / "f")
    _edit_config(f, **edit)
    with pytest.raises(AdapterError, match=match):
        load_peft(f)


def test_missing_and_corrupt_files(peft_folder, tmp_path):
    src = peft_folder[0]
    with pytest.raises(AdapterError, match="does not exist"):
        load_peft(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AdapterError, match="not a PEFT adapter folder"):
        load_peft(empty)
    f = _copy(src, tmp_path / "noweights")
    (f / "adapter_model.safetensors").unlink()
    with pytest.raises(AdapterError, match="weights are missing"):
        load_peft(f)
    f = _copy(src, tmp_path / "trunc")
    data = (f / "adapter_model.safetensors").read_bytes()
    (f / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(AdapterError, match="corrupt"):
        load_peft(f)
    f = _copy(src, tmp_path / "badjson")
    (f / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterError, match="not valid JSON"):
        load_peft(f)


def test_shape_nan_and_dora_tensors_raise(peft_folder, tmp_path):
    from safetensors.torch import load_file, save_file

    src = peft_folder[0]
    sd = load_file(str(src / "adapter_model.safetensors"))
    key_b = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
    key_a = key_b.replace("lora_B", "lora_A")
    cases = {
        "shape": ({key_b: torch.zeros(64, 3)}, "inconsistent with r=4"),
        "nan": ({key_a: torch.full((4, 64), float("nan"))}, "NaN"),
        "dora": ({key_b.replace("lora_B.weight", "lora_magnitude_vector"): torch.ones(64)}, "DoRA"),
        "onlyA": ({key_b: None}, "only one of lora_A/lora_B"),
    }
    for name, (change, match) in cases.items():
        f = _copy(src, tmp_path / name)
        new = dict(sd)
        for k, v in change.items():
            if v is None:
                new.pop(k)
            else:
                new[k] = v
        save_file(new, str(f / "adapter_model.safetensors"))
        with pytest.raises(AdapterError, match=match):
            load_peft(f)
    with pytest.raises(AdapterError, match="NaN"):
        bad = load_peft(src)
        bad.modules["model.layers.0.self_attn.q_proj"][0][0, 0] = float("inf")
        save_peft(bad, tmp_path / "inf")
