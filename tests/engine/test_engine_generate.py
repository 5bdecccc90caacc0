"""hf engine generation: mixed-slot KV-cached batches vs PEFT holding one adapter alone, EOS, sampling."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from populora.engine import EngineError, GenRequest, build
from populora.engine.sampling import sample_next, top_p_filter
from populora.engine.testing import peft_model_with

PROMPTS = ["def f(x):", "ab", "return x + 1", "print(", "import os\n", "x = [1, 2]"]
LP_TOL = 1e-4  # per-token log-prob vs PEFT teacher-forced (float32, cached vs full forward)


def _requests(max_new=8, temperature=0.0):
    return [
        GenRequest(slot=i % 3, prompt=p, max_new_tokens=max_new + (i % 3), temperature=temperature)
        for i, p in enumerate(PROMPTS)
    ]


def test_greedy_mixed_batch_matches_peft_alone(make_engine, base_and_tok):
    base, tok = base_and_tok
    eng = make_engine()
    reqs = _requests()
    gens = eng.generate(reqs)
    assert [g.slot for g in gens] == [r.slot for r in reqs]
    for s in range(3):
        pm = peft_model_with(base, eng.get_adapter(s))
        rows = [i for i, r in enumerate(reqs) if r.slot == s]
        # (1) PEFT's own cached generate, same left-padded rows of this slot alone: same tokens
        enc = tok([PROMPTS[i] for i in rows], return_tensors="pt", padding=True)
        n_new = max(reqs[i].max_new_tokens for i in rows)
        with torch.no_grad():
            out = pm.generate(
                **enc,
                max_new_tokens=n_new,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                min_new_tokens=n_new,
            )
        for k, i in enumerate(rows):
            peft_tokens = out[k, enc["input_ids"].shape[1] :].tolist()[: reqs[i].max_new_tokens]
            assert gens[i].token_ids == peft_tokens
        # (2) teacher-forced PEFT log-probs of our tokens
        for i in rows:
            g = gens[i]
            ids = torch.tensor([g.prompt_ids + g.token_ids])
            with torch.no_grad():
                logp = torch.log_softmax(pm(input_ids=ids).logits[0].float(), -1)
            p = len(g.prompt_ids)
            ref = [logp[p - 1 + t, tok_id].item() for t, tok_id in enumerate(g.token_ids)]
            assert max(abs(a - b) for a, b in zip(g.logprobs, ref, strict=True)) <= LP_TOL
            assert g.finish_reason == "length" and len(g.token_ids) == reqs[i].max_new_tokens
            assert g.text == tok.decode(g.token_ids, skip_special_tokens=True)


def test_batch_invariance_each_request_alone(make_engine):
    eng = make_engine()
    reqs = _requests()
    together = eng.generate(reqs)
    for r, g in zip(reqs, together, strict=True):
        alone = eng.generate([r])[0]
        assert alone.token_ids == g.token_ids
        assert max(abs(a - b) for a, b in zip(alone.logprobs, g.logprobs, strict=True)) <= LP_TOL
    # small generation batches (several decode loops) give the same result
    eng.gen_batch_size = 2
    assert [g.token_ids for g in eng.generate(reqs)] == [g.token_ids for g in together]


def test_stops_at_eos(base_and_tok):
    base, tok = base_and_tok
    probe = build(copy.deepcopy(base), tokenizer=tok, n_slots=1, rank=2, alpha=4)
    first = probe.generate([GenRequest(0, "def f(x):", max_new_tokens=6, temperature=0)])[0]
    stop_tok = first.token_ids[2]
    model = copy.deepcopy(base)
    model.generation_config.eos_token_id = [tok.eos_token_id, stop_tok]
    eng = build(model, tokenizer=tok, n_slots=1, rank=2, alpha=4)
    g = eng.generate(
        [
            GenRequest(0, "def f(x):", max_new_tokens=6, temperature=0),
            GenRequest(0, "def f(x):", max_new_tokens=2, temperature=0),
        ]
    )
    k = first.token_ids.index(stop_tok)
    assert g[0].finish_reason == "stop" and g[0].token_ids == first.token_ids[: k + 1]  # EOS kept in ids
    assert g[1].finish_reason == ("stop" if k < 2 else "length") and len(g[1].token_ids) == min(2, k + 1)


def test_sampling_is_seeded_and_top_p_tiny_is_greedy(make_engine):
    eng = make_engine()
    reqs = _requests(temperature=1.0)
    a = eng.generate(reqs, seed=123)
    b = eng.generate(reqs, seed=123)
    c = eng.generate(reqs, seed=124)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    greedy = eng.generate(_requests(temperature=0.0))
    nucleus = eng.generate(
        [GenRequest(r.slot, r.prompt, r.max_new_tokens, 1.0, top_p=1e-6) for r in _requests()]
    )
    assert [g.token_ids for g in nucleus] == [g.token_ids for g in greedy]
    # logprobs are those of the unmodified policy, whatever the sampling temperature
    for a_, b_ in zip(nucleus, greedy, strict=True):
        assert a_.logprobs == pytest.approx(b_.logprobs, abs=1e-6)


def test_generate_errors_and_edge_cases(make_engine):
    eng = make_engine()
    with pytest.raises(EngineError, match="slot 3 out of range"):
        eng.generate([GenRequest(3, "x")])
    assert eng.generate([]) == []
    g = eng.generate([GenRequest(0, "", max_new_tokens=3, temperature=0), GenRequest(1, [5, 6], 0)])
    assert len(g[0].token_ids) == 3 and g[0].prompt_ids == [eng.tokenizer.bos_token_id]
    assert g[1].token_ids == [] and g[1].finish_reason == "length"


def test_top_p_filter_by_hand():
    probs = torch.tensor([[0.5, 0.2, 0.3], [0.1, 0.6, 0.3]])
    out = top_p_filter(probs, torch.tensor([0.8, 0.5]))
    # row 0: sorted 0.5, 0.3 (mass 0.8 reached) -> keep {0, 2}; row 1: 0.6 alone reaches 0.5
    assert out[0].tolist() == pytest.approx([0.5 / 0.8, 0.0, 0.3 / 0.8])
    assert out[1].tolist() == pytest.approx([0.0, 1.0, 0.0])


def test_sample_next_temperature_by_hand():
    g = torch.Generator().manual_seed(0)
    n = 4000
    logits = torch.tensor([[0.0, math.log(3.0)]]).repeat(n, 1)
    t1 = sample_next(logits, torch.ones(n), torch.ones(n), g).float().mean().item()
    t_half = sample_next(logits, torch.full((n,), 0.5), torch.ones(n), g).float().mean().item()
    assert abs(t1 - 0.75) < 0.03  # p(1) = 3/4
    assert abs(t_half - 0.9) < 0.03  # p ∝ [1, 9] at T = 0.5
    mixed = sample_next(logits[:2], torch.tensor([0.0, 1.0]), torch.ones(2), g)
    assert mixed[0].item() == 1


def test_llama_mixed_generation_matches_peft_alone():
    from populora.engine.testing import random_model

    base, tok = random_model("llama", seed=5, initializer_range=0.3)
    eng = build(copy.deepcopy(base), tokenizer=tok, n_slots=2, rank=4, alpha=8)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for layer in eng.layers.values():
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=g) * 0.3)
    reqs = [GenRequest(i % 2, p, 6, 0.0) for i, p in enumerate(PROMPTS[:4])]
    gens = eng.generate(reqs)
    for s in range(2):
        pm = peft_model_with(base, eng.get_adapter(s))
        for gen in (x for x in gens if x.slot == s):
            ids = torch.tensor([gen.prompt_ids + gen.token_ids])
            with torch.no_grad():
                logp = torch.log_softmax(pm(input_ids=ids).logits[0].float(), -1)
            p = len(gen.prompt_ids)
            steps = logp[p - 1 : p - 1 + len(gen.token_ids)]
            assert steps.argmax(-1).tolist() == gen.token_ids  # greedy under PEFT too
            ref = steps.gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
            assert (ref - torch.tensor(gen.logprobs)).abs().max() <= LP_TOL
