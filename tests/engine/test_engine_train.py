"""hf engine training: mixed batch == each slot alone == PEFT + torch AdamW; micro-batching, PPO, state."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from populora.engine import EngineError, TrainBatch, TrainRow
from populora.engine.testing import peft_model_with

TOL = 2e-6  # adapter weights after training steps, float32
# Equivalence tests use AdamW eps=1: Adam's first steps are ~lr*sign(g), which turns float-rounding noise in
# near-zero gradients into lr-sized differences; with eps=1 the update is ~lr*g, so weights compare like grads.
LIN = dict(lr=1e-2, eps=1.0)


def _rows(slots=(0, 1, 2, 1, 0, 1), seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, s in enumerate(slots):
        p = torch.randint(0, 256, (3 + k % 4,), generator=g).tolist()
        r = torch.randint(0, 256, (2 + (k * 3) % 5,), generator=g).tolist()
        adv = float(torch.randn((), generator=g)) if k % 2 else torch.randn(len(r), generator=g).tolist()
        rows.append(TrainRow(slot=s, prompt_ids=p, response_ids=r, advantages=adv))
    return rows


def _weights(eng, slot):
    ad = eng.get_adapter(slot)
    return {k: (a.clone(), b.clone()) for k, (a, b) in ad.modules.items()}


def _maxdiff(w1, w2):
    return max(
        max((w1[k][0] - w2[k][0]).abs().max().item(), (w1[k][1] - w2[k][1]).abs().max().item()) for k in w1
    )


def test_mixed_step_equals_each_slot_alone(make_engine):
    rows = _rows()
    mixed = make_engine(**LIN)
    for _ in range(2):
        m = mixed.train_step(TrainBatch(rows))
    assert set(m) >= {"loss", "tokens", "loss/0", "grad_norm/1", "entropy/2", "tokens/2"}
    for s in range(3):
        alone = make_engine(**LIN)
        before_other = _weights(alone, (s + 1) % 3)
        for _ in range(2):
            a = alone.train_step(TrainBatch([r for r in rows if r.slot == s]))
        assert _maxdiff(_weights(alone, s), _weights(mixed, s)) <= TOL
        assert a[f"loss/{s}"] == pytest.approx(m[f"loss/{s}"], abs=1e-5)
        assert _maxdiff(_weights(alone, (s + 1) % 3), before_other) == 0.0  # untouched slots do not move


def test_step_equals_peft_with_torch_adamw(make_engine, base_and_tok):
    """REINFORCE token-mean loss + clip_grad_norm_ + torch.optim.AdamW on PEFT holding the slot alone."""
    base, _ = base_and_tok
    lr, wd, clip = 1e-2, 0.1, 0.5
    eng = make_engine(lr=lr, weight_decay=wd, max_grad_norm=clip, micro_batch_tokens=20)
    rows = [r for r in _rows() if r.slot == 1]
    pm = peft_model_with(base, eng.get_adapter(1))
    params = [p for n, p in pm.named_parameters() if "lora_" in n]
    for n, p in pm.named_parameters():
        p.requires_grad_("lora_" in n)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    n_tok = sum(len(r.response_ids) for r in rows)
    for _ in range(3):
        norm = eng.train_step(TrainBatch(rows))["grad_norm/1"]
        opt.zero_grad()
        loss = 0.0
        for r in rows:
            ids = torch.tensor([list(r.prompt_ids) + list(r.response_ids)])
            logp = torch.log_softmax(pm(input_ids=ids).logits[0].float(), -1)
            p = len(r.prompt_ids)
            tok_lp = logp[p - 1 : p - 1 + len(r.response_ids)].gather(
                -1, torch.tensor(r.response_ids)[:, None]
            )[:, 0]
            adv = torch.tensor(r.advantage_list())
            loss = loss + (-adv * tok_lp).sum() / n_tok
        loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(params, clip).item()
        opt.step()
        assert norm == pytest.approx(ref_norm, rel=1e-4)
    ours = eng.get_adapter(1)
    for name, (a, b) in ours.modules.items():  # real AdamW (eps 1e-8): within 0.2% of one lr-sized step
        mod = pm.base_model.model.get_submodule(name)
        assert (a - mod.lora_A["default"].weight).abs().max() <= 2e-5
        assert (b - mod.lora_B["default"].weight).abs().max() <= 2e-5


def test_micro_batching_and_determinism(make_engine):
    rows = _rows()
    big = make_engine(**LIN, micro_batch_tokens=100_000)
    small = make_engine(**LIN, micro_batch_tokens=16)  # about one row per forward
    mid = make_engine(**LIN, micro_batch_tokens=40)  # slot-balanced groups of a few rows
    same = make_engine(**LIN, micro_batch_tokens=40)
    groups = mid._micro_batches(rows)
    assert len(groups) > 1 and sorted(i for g in groups for i in g) == list(range(len(rows)))
    for _ in range(2):
        for eng in (big, small, mid, same):
            eng.train_step(TrainBatch(rows))
    for s in range(3):
        assert _maxdiff(_weights(big, s), _weights(small, s)) <= TOL
        assert _maxdiff(_weights(big, s), _weights(mid, s)) <= TOL
        assert _maxdiff(_weights(mid, s), _weights(same, s)) == 0.0  # bitwise deterministic on CPU


def test_chunked_lm_head_equals_full_logits(make_engine):
    """The lm_head in chunks of 3 response tokens (`rl.logprobs`, recomputed in backward) against the full
    [N, V] logits (chunk 0): same log-probs, metrics and weights, with an entropy bonus in the loss."""
    rows = _rows()
    full = make_engine(**LIN, entropy_coef=0.1, micro_batch_tokens=0)
    chunked = make_engine(**LIN, entropy_coef=0.1, micro_batch_tokens=0)
    full.logit_chunk_tokens, chunked.logit_chunk_tokens = 0, 3
    lp_full, lp_chunked = full.logprobs(TrainBatch(rows)), chunked.logprobs(TrainBatch(rows))
    assert (
        max(abs(a - b) for x, y in zip(lp_full, lp_chunked, strict=True) for a, b in zip(x, y, strict=True))
        < 1e-5
    )
    for _ in range(2):
        m_full, m_chunked = full.train_step(TrainBatch(rows)), chunked.train_step(TrainBatch(rows))
    for s in range(3):
        assert _maxdiff(_weights(full, s), _weights(chunked, s)) <= TOL
        assert m_chunked[f"entropy/{s}"] == pytest.approx(m_full[f"entropy/{s}"], abs=1e-5)


def test_truncated_importance_sampling_weights_the_policy_gradient(make_engine):
    """rl.tis_cap: sampler log-probs 0.5 above the trainer's weight every token by e^-0.5 (pg loss scaled by
    it, reported as is_weight); equal log-probs give REINFORCE's step; 0.5 below is capped at 1.2."""
    rows = _rows()
    lp = make_engine().logprobs(TrainBatch(rows))

    def shifted(d):
        return [
            TrainRow(r.slot, r.prompt_ids, r.response_ids, r.advantages, [x + d for x in old])
            for r, old in zip(rows, lp, strict=True)
        ]

    rf = make_engine(**LIN).train_step(TrainBatch(rows))
    above = make_engine(**LIN, tis_cap=1.2).train_step(TrainBatch(shifted(0.5)))
    below = make_engine(**LIN, tis_cap=1.2).train_step(TrainBatch(shifted(-0.5)))
    equal_eng, rf_eng = make_engine(**LIN, tis_cap=1.2), make_engine(**LIN)
    equal_eng.train_step(TrainBatch(shifted(0.0)))
    rf_eng.train_step(TrainBatch(rows))
    for s in range(3):
        assert above[f"is_weight/{s}"] == pytest.approx(math.exp(-0.5), rel=1e-4)
        assert above[f"pg_loss/{s}"] == pytest.approx(math.exp(-0.5) * rf[f"pg_loss/{s}"], rel=1e-4, abs=1e-7)
        assert below[f"is_weight/{s}"] == pytest.approx(1.2)
        assert _maxdiff(_weights(equal_eng, s), _weights(rf_eng, s)) <= TOL
    assert "is_weight/0" not in rf


def test_ppo_on_policy_equals_reinforce_and_entropy_bonus(make_engine):
    rows = _rows()
    lp = make_engine().logprobs(TrainBatch(rows))
    with_old = [
        TrainRow(r.slot, r.prompt_ids, r.response_ids, r.advantages, old)
        for r, old in zip(rows, lp, strict=True)
    ]
    ppo = make_engine(**LIN, clip_eps=0.2)
    rf = make_engine(**LIN)
    m = ppo.train_step(TrainBatch(with_old))
    rf.train_step(TrainBatch(rows))
    assert m["clip_frac/0"] == 0.0 and abs(m["approx_kl/1"]) < 1e-5
    for s in range(3):
        assert _maxdiff(_weights(ppo, s), _weights(rf, s)) <= 1e-5
    # Off-policy tokens far outside the clip range get no gradient: nothing moves except weight decay (0).
    far = [
        TrainRow(r.slot, r.prompt_ids, r.response_ids, 1.0, [x - 5.0 for x in old])
        for r, old in zip(rows, lp, strict=True)
    ]
    eng = make_engine(**LIN, clip_eps=0.2)
    before = _weights(eng, 0)
    m = eng.train_step(TrainBatch(far))
    assert m["clip_frac/0"] == 1.0 and m["grad_norm/0"] == 0.0
    assert _maxdiff(_weights(eng, 0), before) == 0.0
    # Entropy bonus alone (zero advantages) raises the entropy of the trained slot.
    ent = make_engine(lr=1e-3, entropy_coef=1.0)
    zero = [TrainRow(r.slot, r.prompt_ids, r.response_ids, 0.0) for r in rows]
    e0 = ent.train_step(TrainBatch(zero))["entropy/1"]
    e1 = ent.train_step(TrainBatch(zero))["entropy/1"]
    assert e1 > e0


def test_set_adapter_resets_optimizer_and_state_roundtrip(make_engine):
    rows = _rows()
    eng = make_engine(**LIN)
    eng.train_step(TrainBatch(rows))
    assert eng.optimizer.steps.tolist() == [1, 1, 1]
    state = copy.deepcopy(eng.optimizer_state())
    adapters = [eng.get_adapter(s) for s in range(3)]
    eng.train_step(TrainBatch(rows))
    # a fresh engine restored from adapters + optimizer state makes the same second step
    other = make_engine(**LIN, randomise=False)
    for s in range(3):
        other.set_adapter(s, adapters[s])
    other.load_optimizer_state(state)
    other.train_step(TrainBatch(rows))
    for s in range(3):
        assert _maxdiff(_weights(other, s), _weights(eng, s)) == 0.0
    other.set_adapter(1, adapters[0])
    assert other.optimizer.steps.tolist() == [2, 0, 2]
    assert all(m[1].abs().sum() == 0 for m in other.optimizer.exp_avg)
    other.set_adapter(2, adapters[0], reset_optimizer=False)
    assert other.optimizer.steps.tolist() == [2, 0, 2]
    other.set_lr(0, 3e-4)
    assert other.get_lr(0) == pytest.approx(3e-4)
    with pytest.raises(EngineError, match="optimizer state"):
        make_engine(n_slots=2).load_optimizer_state(state)


def test_train_errors(make_engine):
    eng = make_engine()
    with pytest.raises(EngineError, match="out of range"):
        eng.train_step(TrainBatch([TrainRow(5, [1], [2], 1.0)]))
    with pytest.raises(EngineError, match="empty prompt"):
        eng.train_step(TrainBatch([TrainRow(0, [], [2], 1.0)]))
    with pytest.raises(EngineError, match="advantages"):
        eng.train_step(TrainBatch([TrainRow(0, [1], [2, 3], [1.0])]))
    with pytest.raises(EngineError, match="no rows"):
        eng.train_step(TrainBatch([TrainRow(0, [1], [], 1.0)]))


def test_bfloat16_base_with_float32_lora(base_and_tok):
    from populora.engine import GenRequest, build

    base, tok = base_and_tok
    bf16 = copy.deepcopy(base).to(torch.bfloat16)  # as build("<name>", dtype=torch.bfloat16) loads it
    eng = build(bf16, tokenizer=tok, n_slots=2, rank=4, alpha=8, lr=1e-2)
    assert all(p.dtype == torch.float32 for p in eng.params)
    before = _weights(eng, 1)
    m = eng.train_step(TrainBatch([TrainRow(1, [5, 6, 7], [8, 9], 1.0), TrainRow(0, [1, 2], [3], -1.0)]))
    assert torch.isfinite(torch.tensor(m["loss"])) and _maxdiff(_weights(eng, 1), before) > 0
    g = eng.generate([GenRequest(1, "ab", 4, 0.0)])[0]
    assert len(g.token_ids) == 4 and all(x <= 0 for x in g.logprobs)
