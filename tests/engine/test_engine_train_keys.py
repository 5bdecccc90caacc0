"""The training keys in the hf engine (issue 33 item 6, issue 32's memory part): `micro_batch_tokens`
(0 = one batch; any budget gives the one-batch step: gradient accumulation), `activation_checkpointing` (the
same gradients, fewer saved activations), `lora_dropout` (train steps only, replayed on resume, exported)."""

from __future__ import annotations

import json

import torch
from train_rows import random_rows

from populora.engine import GenRequest, TrainBatch
from populora.lora.peft_io import load_peft
from populora.rl.loss import row_weights

TOL = 2e-6  # adapter weights after a step, float32 (as test_engine_train)
LIN = dict(lr=1e-2, eps=1.0)  # AdamW eps=1: the update ~ lr * g, so weights compare like gradients


def _rows(slots=(0, 1, 2, 1, 0, 1, 2, 2), seed=0):
    return random_rows(slots, seed)


def _grads(eng, rows):
    """The LoRA gradients of one train step's loss (no optimizer step), and the saved-activation bytes."""
    weights = row_weights([len(r.response_ids) for r in rows], [r.loss_key for r in rows], eng.loss_agg)
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        eng.accumulate_gradients(rows, weights)
    grads = [p.grad.clone() for p in eng.params]
    for p in eng.params:
        p.grad = None
    return grads, saved[0]


def _maxdiff(xs, ys):
    return max((x - y).abs().max().item() for x, y in zip(xs, ys, strict=True))


def _weights(eng):
    return [p.detach().clone() for p in eng.params]


# ------------------------------------------------------------------------------------ micro_batch_tokens
def test_micro_batch_zero_is_one_batch_and_small_budgets_accumulate_to_the_same_step(make_engine):
    rows = _rows()
    one = make_engine(**LIN, micro_batch_tokens=0)
    assert one._micro_batches(rows) == [sorted(range(len(rows)), key=lambda i: (rows[i].slot, i))]
    small = make_engine(**LIN, micro_batch_tokens=16)  # about one row per forward
    assert len(small._micro_batches(rows)) >= 4
    g_one, _ = _grads(one, rows)
    g_small, _ = _grads(small, rows)
    scale = max(g.abs().max().item() for g in g_one)
    assert scale > 0.1 and _maxdiff(g_one, g_small) <= 5e-5 * scale  # padding and summation order only
    m_one, m_small = one.train_step(TrainBatch(rows)), small.train_step(TrainBatch(rows))
    for s in range(3):  # one optimizer step per slot per train step, whatever the number of micro-batches
        assert abs(m_one[f"loss/{s}"] - m_small[f"loss/{s}"]) <= 1e-5
        assert abs(m_one[f"grad_norm/{s}"] - m_small[f"grad_norm/{s}"]) <= 1e-4 * m_one[f"grad_norm/{s}"]
    assert one.optimizer.steps.tolist() == small.optimizer.steps.tolist() == [1, 1, 1]
    assert _maxdiff(_weights(one), _weights(small)) <= TOL


# ------------------------------------------------------------------------------ activation checkpointing
def test_activation_checkpointing_gives_the_same_gradients_and_keeps_fewer_activations(make_engine):
    rows = _rows()  # three slots in every micro-batch: the replay must see each row's slot
    plain = make_engine(micro_batch_tokens=0)
    ckpt = make_engine(micro_batch_tokens=0, activation_checkpointing=True)
    g_plain, saved_plain = _grads(plain, rows)
    g_ckpt, saved_ckpt = _grads(ckpt, rows)
    scale = max(g.abs().max().item() for g in g_plain)
    assert scale > 0.1 and _maxdiff(g_plain, g_ckpt) <= 1e-6 * scale
    assert saved_ckpt < 0.7 * saved_plain, (saved_ckpt, saved_plain)
    # without gradients (generation, log-probs) the layers run as they are
    req = [GenRequest(slot=s, prompt=[5, 6, 7], max_new_tokens=6) for s in range(3)]
    assert [g.token_ids for g in plain.generate(req, seed=3)] == [
        g.token_ids for g in ckpt.generate(req, seed=3)
    ]
    assert plain.logprobs(TrainBatch(rows)) == ckpt.logprobs(TrainBatch(rows))
    # and the step itself: the same adapters after it
    plain.train_step(TrainBatch(rows))
    ckpt.train_step(TrainBatch(rows))
    assert _maxdiff(_weights(plain), _weights(ckpt)) <= TOL


# ---------------------------------------------------------------------------------------------- lora_dropout
def test_lora_dropout_acts_in_train_steps_only(make_engine):
    rows = _rows()
    off, on = make_engine(), make_engine(lora_dropout=0.3)
    assert off.logprobs(TrainBatch(rows)) == on.logprobs(TrainBatch(rows))  # no dropout outside training
    req = [GenRequest(slot=s, prompt=[1, 2, 3], max_new_tokens=5) for s in range(3)]
    assert [g.token_ids for g in off.generate(req, seed=1)] == [g.token_ids for g in on.generate(req, seed=1)]
    rng = torch.get_rng_state()
    g_off, _ = _grads(off, rows)
    g_on, _ = _grads(on, rows)
    assert torch.equal(rng, torch.get_rng_state())  # the global random stream did not move
    assert _maxdiff(g_off, g_on) > 0.1  # the masks change the gradient
    g_again, _ = _grads(make_engine(lora_dropout=0.3), rows)
    assert _maxdiff(g_on, g_again) == 0.0  # same seed, same optimizer step counts: same masks
    g_ckpt, _ = _grads(make_engine(lora_dropout=0.3, activation_checkpointing=True), rows)
    assert _maxdiff(g_on, g_ckpt) <= 1e-6 * max(g.abs().max().item() for g in g_on)  # replay: same masks


def test_lora_dropout_masks_replay_on_resume(make_engine, tmp_path):
    rows, rows2 = _rows(), _rows(seed=5)
    straight = make_engine(**LIN, lora_dropout=0.2)
    straight.train_step(TrainBatch(rows))
    straight.train_step(TrainBatch(rows2))
    first = make_engine(**LIN, lora_dropout=0.2)
    first.train_step(TrainBatch(rows))
    for s in range(3):
        first.save_adapter(s, tmp_path / f"s{s}")
    state = first.optimizer_state()
    resumed = make_engine(**LIN, lora_dropout=0.2, randomise=False, seed=0)
    for s in range(3):
        resumed.load_adapter(s, tmp_path / f"s{s}", reset_optimizer=False)
    resumed.load_optimizer_state(state)
    resumed.train_step(TrainBatch(rows2))
    assert _maxdiff(_weights(straight), _weights(resumed)) == 0.0
    # and the masks do change from step to step (the seed includes the optimizer step counts)
    other = make_engine(**LIN, lora_dropout=0.2)
    other.train_step(TrainBatch(rows2))
    other.train_step(TrainBatch(rows2))
    again = make_engine(**LIN, lora_dropout=0.2)
    g1, _ = _grads(again, rows2)
    again.train_step(TrainBatch(rows2))
    again.optimizer.steps.zero_()  # same weights, step counts of a fresh engine: the step-1 masks again
    g_reset, _ = _grads(again, rows2)
    again.optimizer.steps.fill_(1)
    g_step2, _ = _grads(again, rows2)
    assert _maxdiff(g_reset, g_step2) > 1e-3


def test_lora_dropout_is_written_to_adapter_config(make_engine, tmp_path):
    eng = make_engine(lora_dropout=0.25)
    eng.save_adapter(1, tmp_path / "a")
    cfg = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert cfg["lora_dropout"] == 0.25 and cfg["r"] == 4
    assert load_peft(tmp_path / "a").metadata["peft_config"]["lora_dropout"] == 0.25
    make_engine().save_adapter(0, tmp_path / "b")
    assert json.loads((tmp_path / "b" / "adapter_config.json").read_text())["lora_dropout"] == 0.0
