"""`gen_dtype` (engine/gen_dtype.py): the frozen base generates in bfloat16, or with its `Linear`s in int8,
while training and log-probs stay in float32, on a tiny random Qwen2 built on the fly."""

from __future__ import annotations

import pytest
import torch

from populora.engine import EngineError, GenRequest, TrainBatch, TrainRow

PROMPTS = ["def f(x):", "ab", "return x + 1", "print(", "import os\n"]


def _greedy(n: int = 12) -> list[GenRequest]:
    return [
        GenRequest(slot=i % 3, prompt=p, max_new_tokens=n, temperature=0.0) for i, p in enumerate(PROMPTS)
    ]


def _base_dtypes(eng) -> set[torch.dtype]:
    lora = {id(p) for p in eng.params}
    return {p.dtype for p in eng.model.parameters() if id(p) not in lora}


def test_bfloat16_generation_is_the_same_model_and_training_stays_float32(make_engine):
    full, low = make_engine(), make_engine(gen_dtype="bfloat16")
    seen: list[set[torch.dtype]] = []
    a = full.generate(_greedy())
    b = low.generate(_greedy(), on_finish=lambda i, g: seen.append(_base_dtypes(low)))
    # while it decodes the base is bfloat16, the LoRA factors float32; after, the base is float32 again
    assert seen and all(s == {torch.bfloat16} for s in seen)
    assert {p.dtype for p in low.params} == {torch.float32} and _base_dtypes(low) == {torch.float32}
    # the same model to bfloat16 rounding: the greedy first tokens agree and the log-probs are close, not equal
    assert [g.token_ids[0] for g in a] == [g.token_ids[0] for g in b]
    diffs = [abs(ga.logprobs[0] - gb.logprobs[0]) for ga, gb in zip(a, b, strict=True)]
    assert max(diffs) < 0.5 and any(d > 0 for d in diffs)  # this random model's logits are large
    # training's log-probs are float32 in both engines: the same numbers bit for bit
    rows = [
        TrainRow(slot=g.slot, prompt_ids=g.prompt_ids, response_ids=g.token_ids, advantages=1.0) for g in a
    ]
    assert full.logprobs(TrainBatch(rows)) == low.logprobs(TrainBatch(rows))


@pytest.mark.parametrize("gen_dtype", ["bfloat16", "int8"])
def test_the_base_is_restored_when_generation_fails(make_engine, gen_dtype):
    eng = make_engine(gen_dtype=gen_dtype)

    def boom(i, g):
        raise RuntimeError("a callback failed")

    with pytest.raises(RuntimeError, match="a callback failed"):
        eng.generate(_greedy(3), on_finish=boom)
    assert _base_dtypes(eng) == {torch.float32}
    assert _linears(eng)["int8"] == 0


def test_gen_dtype_model_or_the_base_dtype_changes_nothing_and_a_bad_one_is_named(make_engine):
    assert make_engine(gen_dtype="model").gen_weights is None
    assert make_engine(gen_dtype="float32").gen_weights is None  # already the base's dtype
    with pytest.raises(EngineError, match=r"gen_dtype 'int4'.*bfloat16.*int8.*model.gen_dtype"):
        make_engine(gen_dtype="int4")


@pytest.mark.parametrize(("name", "dtype"), [("bfloat16", torch.bfloat16), ("int8", "int8")])
def test_the_config_key_reaches_the_trainers_engine(name, dtype):
    from populora.config import load_config
    from populora.train.setup import build_engine

    eng = build_engine(load_config("tiny", [f"model.gen_dtype={name}"]))
    try:
        assert eng.gen_weights is not None and eng.gen_weights.dtype == dtype
        (g,) = eng.generate([GenRequest(slot=0, prompt="def f(x):", max_new_tokens=4, temperature=0.0)])
        assert len(g.token_ids) >= 1 and _base_dtypes(eng) == {torch.float32}
    finally:
        eng.close()


def test_gen_dtype_with_the_vllm_backend_is_refused_with_the_key_to_use():
    """vLLM samples in model.vllm_dtype; a gen_dtype it would silently ignore is named instead."""
    from populora.config import ConfigError, load_config

    with pytest.raises(
        ConfigError, match=r"model.gen_dtype=bfloat16 applies to backend=hf.*model.vllm_dtype"
    ):
        load_config("tiny", ["model.backend=vllm", "model.gen_dtype=bfloat16"])
    assert load_config("tiny", ["model.backend=vllm"]).model.gen_dtype == "model"


def _linears(eng) -> dict[str, int]:
    """How many of the base's linear layers (the lean decoder's head included) are float and int8 right now."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    mods = [m for m in eng.model.modules() if isinstance(m, torch.nn.Linear | Int8Linear)] + [eng._lean.head]
    return {
        "float": sum(type(m) is torch.nn.Linear for m in mods),
        "int8": sum(isinstance(m, Int8Linear) for m in mods),
    }


@pytest.mark.parametrize("gen_path", ["lean", "forward"])
def test_int8_generation_quantizes_the_base_linears_only_while_it_decodes(make_engine, gen_path):
    full, low = make_engine(), make_engine(gen_dtype="int8")
    full.gen_path = low.gen_path = gen_path
    # q, k, v, o, gate, up, down in each layer, and the output head (counted twice below: the model's and the
    # lean decoder's reference to it, one int8 copy)
    n = 7 * low.model.config.num_hidden_layers + 1
    assert len(low.gen_weights) == n
    assert _linears(low) == {"float": n + 1, "int8": 0}
    seen: list[dict[str, int]] = []
    a = full.generate(_greedy())
    b = low.generate(_greedy(), on_finish=lambda i, g: seen.append(_linears(low)))
    assert seen and all(s == {"float": 0, "int8": n + 1} for s in seen)
    # after: the float32 modules are back, the LoRA factors stay float32
    assert _linears(low) == {"float": n + 1, "int8": 0}
    assert {p.dtype for p in low.params} == {torch.float32}
    # training's log-probs do not use the int8 copies: the same numbers bit for bit
    rows = [
        TrainRow(slot=g.slot, prompt_ids=g.prompt_ids, response_ids=g.token_ids, advantages=1.0) for g in b
    ]
    trained = full.logprobs(TrainBatch(rows))
    assert trained == low.logprobs(TrainBatch(rows))
    # the same model to int8 rounding: the sampler's log-probs are near the float model's on the same tokens
    # (0.17 nats apart on average on this random model, whose logits are large; bfloat16: 0.07), not equal
    diffs = [
        abs(x - y) for g, lp in zip(b, trained, strict=True) for x, y in zip(g.logprobs, lp, strict=True)
    ]
    assert 0 < sum(diffs) / len(diffs) < 0.3
    assert len(a) == len(b)


def test_int8_is_refused_off_the_cpu_and_without_an_int8_engine_with_the_alternative(make_engine):
    from populora.engine.gen_dtype import Int8Linears, check_int8_engines

    with pytest.raises(ValueError, match=r"'int8' is CPU-only.*use bfloat16"):
        Int8Linears(torch.nn.Sequential(torch.nn.Linear(4, 4, device="meta")))
    with pytest.raises(ValueError, match=r"no int8 matmul engine \(it has \['none'\]\).*bfloat16 or model"):
        check_int8_engines(["none"])
    check_int8_engines(["none", "qnnpack"])  # ARM builds
    check_int8_engines(torch.backends.quantized.supported_engines)  # this machine's


def test_int8_generation_over_a_bfloat16_base_casts_around_the_int8_matmuls():
    """`model.dtype=bfloat16` trains in bfloat16; its int8 copies read float32 and hand back bfloat16."""
    from populora.engine.gen_dtype import Int8Linears

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    model = torch.nn.Sequential(lin)
    x = torch.randn(5, 64).to(torch.bfloat16)
    with Int8Linears(model).use():
        assert model[0] is not lin and (model[0].in_features, model[0].out_features) == (64, 32)
        y = model(x)
    assert model[0] is lin and y.dtype == torch.bfloat16
    ref = lin(x).float()
    assert 0 < (y.float() - ref).abs().max() < 0.05 * ref.abs().max()


def test_int8_without_torch_ao_quantization_names_the_key_and_the_alternative(make_engine, monkeypatch):
    """A torch that no longer ships torch.ao.quantization (it is moving to torchao): a specific error."""
    import sys

    monkeypatch.setitem(sys.modules, "torch.ao.quantization", None)  # `import` of it now raises ImportError
    with pytest.raises(
        EngineError, match=r"needs torch.ao.quantization.*bfloat16 or model \(model.gen_dtype\)"
    ):
        make_engine(gen_dtype="int8")
