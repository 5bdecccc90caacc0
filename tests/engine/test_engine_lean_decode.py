"""The lean generation path (engine/decode.py) against the original `forward` loop: the same tokens, log-probs
and finish reasons bit for bit, one prefill row per distinct (slot, prompt), and the FLOP count of a token."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.engine import EngineError, GenRequest, build
from populora.engine.bench import flops_per_token
from populora.engine.decode import LeanDecoder

PROMPTS = ["def f(x):", "ab", "return x + 1", "print(", "import os\n"]


def _mixed_requests() -> list[GenRequest]:
    """Every shape the trainer sends: three slots, prompts of different lengths (left padding), a prompt asked
    three times by one slot (a student's rollouts) and once by another, greedy and sampled rows, top-p."""
    reqs = []
    for i, p in enumerate(PROMPTS):
        reqs.append(GenRequest(slot=i % 3, prompt=p, max_new_tokens=5 + i, temperature=1.0, top_p=0.9))
    reqs += [GenRequest(slot=1, prompt=PROMPTS[0], max_new_tokens=9, temperature=0.8) for _ in range(3)]
    reqs.append(GenRequest(slot=2, prompt=PROMPTS[0], max_new_tokens=4, temperature=0.0))
    return reqs


def _stopping_engine(make_engine, base_and_tok):
    """An engine whose EOS set holds the greedy row's second token, so that row (at least) stops early and the
    batch is pruned while other rows go on."""
    eng = make_engine()
    greedy = eng.generate(_mixed_requests(), seed=3)[-1]  # the temperature-0 row: the same under any seed
    eng.eos_ids = {greedy.token_ids[1]}
    return eng


def test_lean_matches_forward_bitwise(make_engine, base_and_tok):
    eng = _stopping_engine(make_engine, base_and_tok)
    assert eng.gen_path == "lean"
    reqs = _mixed_requests()
    lean = eng.generate(reqs, seed=5)
    eng.gen_path = "forward"
    old = eng.generate(reqs, seed=5)
    assert any(g.finish_reason == "stop" for g in old) and any(g.finish_reason == "length" for g in old)
    for a, b in zip(lean, old, strict=True):
        assert (a.token_ids, a.finish_reason, a.prompt_ids, a.slot) == (
            b.token_ids,
            b.finish_reason,
            b.prompt_ids,
            b.slot,
        )
        assert a.logprobs == b.logprobs  # the same computation, not merely close


def test_llama_lean_matches_forward():
    from populora.engine.testing import random_model

    base, tok = random_model("llama", seed=5, initializer_range=0.3)
    eng = build(copy.deepcopy(base), tokenizer=tok, n_slots=2, rank=4, alpha=8)
    assert eng.gen_path == "lean"
    reqs = [GenRequest(i % 2, p, 6, 1.0) for i, p in enumerate(PROMPTS)] * 2
    lean = eng.generate(reqs, seed=1)
    eng.gen_path = "forward"
    old = eng.generate(reqs, seed=1)
    assert [(g.token_ids, g.logprobs) for g in lean] == [(g.token_ids, g.logprobs) for g in old]


def test_one_prefill_row_per_distinct_prompt_and_slot(make_engine):
    eng = make_engine()
    batches = []
    forward = eng.model.forward

    def spy(*args, **kwargs):
        batches.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    eng.model.forward = spy
    reqs = _mixed_requests()  # 9 requests, 7 distinct (slot, prompt)
    eng.generate(reqs, seed=0)
    assert batches == [7]  # the prefill only; every decode step runs on the lean path
    batches.clear()
    eng.gen_path = "forward"
    eng.generate(reqs, seed=0)
    assert batches[0] == 9 and len(batches) > 1  # the old loop: every row prefilled, every step a forward


def test_gen_path_errors_and_fallback(make_engine):
    eng = make_engine()
    eng.gen_path = "fast"
    with pytest.raises(EngineError, match="gen_path='fast'"):
        eng.generate([GenRequest(0, "ab", 2, 0.0)])
    eng.gen_path, eng._lean = "lean", None  # a model LeanDecoder does not know
    with pytest.raises(EngineError, match="LeanDecoder"):
        eng.generate([GenRequest(0, "ab", 2, 0.0)])
    model = copy.deepcopy(make_engine().model)
    model.config._attn_implementation = "eager"
    assert LeanDecoder.for_model(model) is None  # the engine then keeps the forward loop


def test_flops_per_token_by_hand(base_and_tok):
    base, _ = base_and_tok
    cfg = base.config
    d, f, v, n = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (d // cfg.num_attention_heads)
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * f  # q, k, v, o, gate/up/down
    linear = n * per_layer + v * d  # + the vocabulary projection
    assert flops_per_token(base) == 2 * linear
    assert flops_per_token(base, context=10) == 2 * linear + 4 * n * d * 10
    torch.testing.assert_close(flops_per_token(base, 1.0) - flops_per_token(base), 4.0 * n * d)


def test_lean_cache_grows_past_its_first_allocation(make_engine):
    eng = make_engine()
    eng.eos_ids = set()  # every row runs to its budget: 150 tokens outgrow the first 64 positions twice
    reqs = [GenRequest(i % 3, p, 150 - 20 * i, 1.0) for i, p in enumerate(PROMPTS[:3])]
    lean = eng.generate(reqs, seed=2)
    eng.gen_path = "forward"
    old = eng.generate(reqs, seed=2)
    assert [len(g.token_ids) for g in lean] == [150, 130, 110]
    assert [(g.token_ids, g.logprobs) for g in lean] == [(g.token_ids, g.logprobs) for g in old]


@pytest.mark.parametrize("path", ["lean", "forward"])
def test_on_finish_hands_over_each_row_as_it_stops(make_engine, base_and_tok, path, monkeypatch):
    """`generate(on_finish=)`: each request once, the same object the call returns, nothing sampled differs,
    and a row is handed over at the decode step it stops, while longer rows of its batch still decode. Three
    batches (gen_batch_size=4) and a zero-token request cover the chunking and the early return."""
    import populora.engine.hf_generate as hf  # where the decoding loops call sample_next

    eng = _stopping_engine(make_engine, base_and_tok)
    eng.gen_path, eng.gen_batch_size = path, 4
    reqs = [*_mixed_requests(), GenRequest(slot=0, prompt=PROMPTS[1], max_new_tokens=0)]
    plain = eng.generate(reqs, seed=5)
    steps = [0]  # decode steps so far: one `sample_next` per step of a batch

    def counted(*args, **kwargs):
        steps[0] += 1
        return sample(*args, **kwargs)

    sample = hf.sample_next
    monkeypatch.setattr(hf, "sample_next", counted)
    seen: list[tuple[int, object, int]] = []
    out = eng.generate(reqs, seed=5, on_finish=lambda i, g: seen.append((i, g, steps[0])))
    assert sorted(i for i, _, _ in seen) == list(range(len(reqs)))  # each request exactly once
    assert all(out[i] is g for i, g, _ in seen)  # the very object the caller gets back
    for a, b in zip(out, plain, strict=True):
        assert (a.token_ids, a.logprobs, a.finish_reason, a.text) == (
            b.token_ids,
            b.logprobs,
            b.finish_reason,
            b.text,
        )
    assert seen[0][0] == len(reqs) - 1 and seen[0][2] == 0  # the zero-token request, before any decoding
    # a row of n tokens is handed over right after its batch's n-th decode step: (steps so far - n) is the
    # steps before its batch began, one value per batch; handing rows over at the end of their batch would
    # give as many values as there are lengths in a batch
    starts = {at - len(g.token_ids) for _, g, at in seen[1:]}
    assert len(starts) == 3 and len({len(g.token_ids) for _, g, _ in seen}) > 3
