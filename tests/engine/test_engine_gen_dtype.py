"""`gen_dtype` (engine/gen_dtype.py): the frozen base generates in bfloat16 while training and log-probs stay in
float32, on a tiny random Qwen2 built on the fly."""

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


def test_the_base_is_restored_when_generation_fails(make_engine):
    eng = make_engine(gen_dtype="bfloat16")

    def boom(i, g):
        raise RuntimeError("a callback failed")

    with pytest.raises(RuntimeError, match="a callback failed"):
        eng.generate(_greedy(3), on_finish=boom)
    assert _base_dtypes(eng) == {torch.float32}


def test_gen_dtype_model_or_the_base_dtype_changes_nothing_and_a_bad_one_is_named(make_engine):
    assert make_engine(gen_dtype="model").gen_weights is None
    assert make_engine(gen_dtype="float32").gen_weights is None  # already the base's dtype
    with pytest.raises(EngineError, match=r"gen_dtype 'int8'.*bfloat16.*model.gen_dtype"):
        make_engine(gen_dtype="int8")


def test_the_config_key_reaches_the_trainers_engine():
    from populora.config import load_config
    from populora.train.setup import build_engine

    eng = build_engine(load_config("tiny", ["model.gen_dtype=bfloat16"]))
    try:
        assert eng.gen_weights is not None and eng.gen_weights.dtype == torch.bfloat16
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
