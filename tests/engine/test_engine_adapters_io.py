"""Engine slots <-> PEFT folders: `peft.PeftModel.from_pretrained` reproduces a slot; folders load into slots;
model resolution and loading from a saved folder."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.engine import EngineError, GenRequest, build, resolve_model
from populora.engine.models import TINY_DIR
from populora.lora import AdapterError


def test_save_adapter_loads_in_peft_with_same_logits_and_generation(make_engine, base_and_tok, tmp_path):
    from peft import PeftModel

    base, tok = base_and_tok
    eng = make_engine()
    eng.save_adapter(2, tmp_path / "s2")
    assert (tmp_path / "s2" / "adapter_config.json").is_file()
    pm = PeftModel.from_pretrained(copy.deepcopy(base), tmp_path / "s2").eval()
    ids = torch.tensor([[5, 9, 77, 120, 3], [8, 8, 1, 2, 200]])
    with torch.no_grad():
        ref = pm(input_ids=ids).logits
        with eng.ctx.use([2, 2]):
            ours = eng.model(input_ids=ids).logits
    assert (ours - ref).abs().max() <= 1e-5
    gens = eng.generate([GenRequest(2, "def f(x):", 8, 0.0)])
    enc = tok(["def f(x):"], return_tensors="pt")
    with torch.no_grad():
        out = pm.generate(
            **enc, max_new_tokens=8, do_sample=False, min_new_tokens=8, pad_token_id=tok.pad_token_id
        )
    assert gens[0].token_ids == out[0, enc["input_ids"].shape[1] :].tolist()


def test_load_adapter_into_slot_and_errors(make_engine, tmp_path):
    eng = make_engine()
    eng.save_adapter(0, tmp_path / "a")
    other = make_engine(randomise=False)
    other.load_adapter(1, tmp_path / "a")
    for name, (a, b) in eng.get_adapter(0).modules.items():
        a2, b2 = other.get_adapter(1).modules[name]
        assert torch.equal(a, a2) and torch.equal(b, b2)
    with pytest.raises(
        AdapterError, match="largest rank 2"
    ):  # a smaller rank fits (mixed ranks), a larger not
        make_engine(rank=2).load_adapter(0, tmp_path / "a")
    with pytest.raises(AdapterError):
        make_engine(targets=["q_proj", "v_proj"]).load_adapter(0, tmp_path / "a")
    with pytest.raises((AdapterError, FileNotFoundError)):
        eng.load_adapter(0, tmp_path / "missing")


def test_build_from_saved_folder(base_and_tok, tmp_path):
    base, tok = base_and_tok
    base.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert resolve_model(tmp_path / "m") == tmp_path / "m"
    eng = build(str(tmp_path / "m"), n_slots=2, rank=2, alpha=4, targets="all-linear")
    assert eng.n_slots == 2 and eng.tokenizer.padding_side == "left"
    assert len(eng.layers) == 2 * 7
    ref = build(copy.deepcopy(base), tokenizer=tok, n_slots=2, rank=2, alpha=4)
    req = [GenRequest(1, "hello", 5, 0.0)]
    assert eng.generate(req)[0].token_ids == ref.generate(req)[0].token_ids


def test_resolve_model_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EngineError, match="not found"):
        resolve_model(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EngineError, match="no config.json"):
        resolve_model(tmp_path / "empty")
    with pytest.raises(EngineError, match="not in the local Hugging Face cache"):
        resolve_model("no-such-org/no-such-model-populora")
    with pytest.raises(EngineError, match="unknown engine backend"):
        build("tiny", backend="jax")
    if (TINY_DIR / "config.json").is_file():
        assert resolve_model("tiny") == TINY_DIR
    else:
        with pytest.raises(EngineError, match="populora pretrain-tiny"):
            resolve_model("tiny")


def test_vllm_backend_without_vllm_is_a_clear_error():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed; this test covers the CPU install without it")
    with pytest.raises(EngineError, match=r"needs the vllm package .*backend='hf'"):
        build("tiny", backend="vllm")
