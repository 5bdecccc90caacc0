"""The update's shared prompt forward (engine/shared_prompts.py, `rl.share_prompt_forward`): rows of one slot
and one prompt run the prompt once. The grouping and packing by hand; the engine's log-probs, gradients and
step equal the plain forward's up to float rounding on mixed slots, padded prompts, one-token responses and
small micro-batch budgets; it is really used when on and never under LoRA dropout or activation
checkpointing; the config key reaches the trainer's engine."""

from __future__ import annotations

import pytest
import torch

from populora.engine import TrainBatch, TrainRow
from populora.engine import hf_train as hf_module  # the training half calls shared_prompt_hidden
from populora.engine.shared_prompts import pack_groups, prompt_groups, shared_cost, split_shared
from populora.rl.loss import row_weights

P1, P2, P3 = [5, 6, 7], [5, 6, 7, 8, 9], [9]


def _row(slot, prompt, n, adv=1.0):
    return TrainRow(slot=slot, prompt_ids=list(prompt), response_ids=list(range(20, 20 + n)), advantages=adv)


def test_prompt_groups_are_per_slot_and_prompt_in_row_order():
    rows = [_row(0, P1, 2), _row(1, P1, 2), _row(0, P1, 3), _row(0, P2, 1), _row(1, P1, 1)]
    first, group_of = prompt_groups(rows)
    assert first == [
        0,
        1,
        3,
    ]  # (0, P1), (1, P1), (0, P2): the same prompt under another slot is another group
    assert group_of == [0, 1, 0, 2, 1]
    assert split_shared(rows) == ([0, 1, 2, 4], [3])


def test_shared_cost_by_hand():
    # 2 distinct prompts (longest 5) + 3 rows whose longest response is 4 tokens (its first predicted by the prompt)
    assert shared_cost([3, 5], [2, 4, 1]) == 2 * 5 + 3 * 3
    assert shared_cost([3], [1, 1]) == 3  # one-token responses: the prompt forward alone
    assert shared_cost([], []) == 0


def test_pack_groups_keeps_a_prompts_rows_together_within_the_budget():
    rows = [
        _row(0, P1, 4),
        _row(1, P2, 2),
        _row(0, P1, 4),
        _row(1, P2, 2),
        _row(0, P1, 4),
        _row(2, P3, 6),
        _row(2, P3, 6),
    ]
    # costs alone: P1's 3 rows 3 + 3*3 = 12, P2's 2 rows 5 + 2*1 = 7, P3's 2 rows 1 + 2*5 = 11
    assert pack_groups(rows, 0) == [[0, 2, 4, 1, 3, 5, 6]]  # one batch, sorted by (slot, row)
    batches = pack_groups(rows, 20)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for b in batches:
        assert all({i for i in b if rows[i].prompt_ids == rows[j].prompt_ids} <= set(b) for j in b)
        plens = [len(rows[i].prompt_ids) for i in prompt_groups([rows[i] for i in b])[0]]
        assert shared_cost(plens, [len(rows[i].response_ids) for i in b]) <= 20
        assert b == sorted(b, key=lambda i: (rows[i].slot, i))
    # sorted by longest response: P2 (2), P1 (4), P3 (6); P2 + P1 cost 2*5 + 5*3 = 25 > 20, so three batches
    assert batches == [[1, 3], [0, 2, 4], [5, 6]]


def test_a_prompt_over_the_budget_is_split_into_chunks_of_rows():
    rows = [_row(0, P2, 5) for _ in range(4)]  # alone: 5 + 4*4 = 21
    batches = pack_groups(rows, 14)  # chunks of 2 rows: 5 + 2*4 = 13
    assert batches == [[0, 1], [2, 3]]
    assert pack_groups([_row(0, P2, 30)], 4) == [[0]]  # a row over the budget runs alone


def _mixed_rows(seed=0):
    """Rows of 3 slots with shared and lone prompts of different lengths, one-token responses, shuffled."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k in range(7):
        slot = k % 3
        prompt = torch.randint(0, 256, (2 + (k * 5) % 9,), generator=g).tolist()
        for j in range(1 + k % 4):
            n = 1 if (k + j) % 5 == 0 else 2 + (k * 3 + j * 7) % 9
            r = torch.randint(0, 256, (n,), generator=g).tolist()
            rows.append(
                TrainRow(
                    slot=slot,
                    prompt_ids=prompt,
                    response_ids=r,
                    advantages=float(torch.randn((), generator=g)),
                )
            )
    order = torch.randperm(len(rows), generator=g).tolist()
    return [rows[i] for i in order]


def _grads(eng, rows):
    weights = row_weights([len(r.response_ids) for r in rows], [r.loss_key for r in rows], eng.loss_agg)
    eng.accumulate_gradients(rows, weights)
    grads = [p.grad.clone() for p in eng.params]
    for p in eng.params:
        p.grad = None
    return grads


def _count_shared_calls(monkeypatch):
    calls = []
    real = hf_module.shared_prompt_hidden

    def spy(rows, *args, **kwargs):
        calls.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(hf_module, "shared_prompt_hidden", spy)
    return calls


@pytest.mark.parametrize("budget", [0, 60])
def test_logprobs_and_gradients_equal_the_plain_forward(make_engine, monkeypatch, budget):
    rows = _mixed_rows()
    assert split_shared(rows)[0] and split_shared(rows)[1]  # both kinds of rows present
    plain = make_engine(share_prompts=False, micro_batch_tokens=budget)
    shared = make_engine(share_prompts=True, micro_batch_tokens=budget)
    calls = _count_shared_calls(monkeypatch)
    lp_plain, lp_shared = plain.logprobs(TrainBatch(rows)), shared.logprobs(TrainBatch(rows))
    assert calls, "the shared forward was not used"
    assert [len(x) for x in lp_plain] == [len(x) for x in lp_shared] == [len(r.response_ids) for r in rows]
    diff = max(
        abs(a - b) for x, y in zip(lp_plain, lp_shared, strict=True) for a, b in zip(x, y, strict=True)
    )
    assert diff < 1e-4
    assert max(abs(a) for x in lp_plain for a in x) > 1.0  # not a comparison of zeros
    g_plain, g_shared = _grads(plain, rows), _grads(shared, rows)
    scale = max(g.abs().max().item() for g in g_plain)
    assert scale > 1e-3
    assert max((a - b).abs().max().item() for a, b in zip(g_plain, g_shared, strict=True)) < 1e-4 * scale


def test_a_train_step_moves_the_adapters_as_the_plain_one(make_engine):
    rows = _mixed_rows(seed=3)
    engines = [make_engine(share_prompts=s, lr=1e-2, eps=1.0) for s in (False, True)]
    metrics = [e.train_step(TrainBatch(rows)) for e in engines]
    assert metrics[0]["tokens"] == metrics[1]["tokens"] and metrics[0]["rows"] == metrics[1]["rows"]
    assert abs(metrics[0]["loss"] - metrics[1]["loss"]) < 1e-5 * max(1.0, abs(metrics[0]["loss"]))
    moved = max((p.detach()).abs().max().item() for p in engines[0].params)
    assert moved > 0
    diff = max((a - b).abs().max().item() for a, b in zip(engines[0].params, engines[1].params, strict=True))
    assert diff < 2e-6


def test_not_used_under_lora_dropout_or_activation_checkpointing(make_engine, monkeypatch):
    rows = _mixed_rows()
    calls = _count_shared_calls(monkeypatch)
    for opts in ({"lora_dropout": 0.1}, {"activation_checkpointing": True}):
        eng = make_engine(**opts)
        _grads(eng, rows)
        assert calls == [], opts
        assert eng._batches(rows) == eng._micro_batches(rows)
    drop = make_engine(lora_dropout=0.1)
    drop.logprobs(TrainBatch(rows))  # no dropout without gradients: the prompt forward is shared again
    assert calls


def test_the_config_key_reaches_the_trainers_engine():
    from populora.config import load_config
    from populora.train.setup import build_engine

    for value, expected in (("true", True), ("false", False)):
        eng = build_engine(load_config("tiny", [f"rl.share_prompt_forward={value}"]))
        try:
            assert eng.share_prompts is expected
        finally:
            eng.close()
    assert load_config("tiny").rl.share_prompt_forward is True
