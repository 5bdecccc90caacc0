"""The training keys on 2 Ray workers: each worker micro-batches (and checkpoints) its own share of the rows,
and the all-reduced step still equals the 1-process one-batch step; with lora.dropout each worker draws its
own masks (its rank salts the seed) and the workers stay bitwise identical."""

from __future__ import annotations

import copy

import torch

from populora.engine import TrainBatch, TrainRow, build
from populora.engine.testing import random_model

SLOTS = 3


def _rows(seed: int) -> list[TrainRow]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, s in enumerate((0, 1, 2, 1, 0, 1, 2, 2, 0)):
        p = torch.randint(0, 256, (3 + k % 4,), generator=g).tolist()
        r = torch.randint(0, 256, (2 + (k * 3) % 5,), generator=g).tolist()
        rows.append(
            TrainRow(slot=s, prompt_ids=p, response_ids=r, advantages=float(torch.randn((), generator=g)))
        )
    return rows


def _randomise(*engines) -> None:
    g = torch.Generator().manual_seed(1)
    ads = []
    for s in range(SLOTS):
        ad = engines[0].get_adapter(s)
        for name, (a, b) in ad.modules.items():
            ad.modules[name] = (
                torch.randn(a.shape, generator=g) * 0.3,
                torch.randn(b.shape, generator=g) * 0.3,
            )
        ads.append(ad)
    for eng in engines:
        for s, ad in enumerate(ads):
            eng.set_adapter(s, ad)


def _diff(a, b) -> float:
    return max(
        float((x - y).abs().max()) for k in a.modules for x, y in zip(a.modules[k], b.modules[k], strict=True)
    )


def test_micro_batches_and_checkpointing_on_workers_equal_the_one_batch_step(ray_address):
    torch.set_num_threads(1)
    base, tok = random_model("qwen2", seed=11, initializer_range=0.3)
    opts = dict(n_slots=SLOTS, rank=4, alpha=8, lr=1e-2, eps=1.0, train_threads=1)
    one = build(copy.deepcopy(base), tokenizer=tok, micro_batch_tokens=0, **opts)
    two = build(
        copy.deepcopy(base),
        tokenizer=tok,
        workers=2,
        micro_batch_tokens=16,
        activation_checkpointing=True,
        **opts,
    )
    try:
        _randomise(one, two)
        for seed in (0, 1):
            m1, m2 = one.train_step(TrainBatch(_rows(seed))), two.train_step(TrainBatch(_rows(seed)))
            assert abs(m1["loss"] - m2["loss"]) <= 1e-5
        for s in range(SLOTS):
            assert _diff(one.get_adapter(s), two.get_adapter(s)) <= 1e-5
    finally:
        two.close()


def test_lora_dropout_keeps_the_workers_identical(ray_address):
    torch.set_num_threads(1)
    base, tok = random_model("qwen2", seed=11, initializer_range=0.3)
    opts = dict(n_slots=SLOTS, rank=4, alpha=8, lr=1e-2, train_threads=1, lora_dropout=0.3)
    two = build(copy.deepcopy(base), tokenizer=tok, workers=2, **opts)
    plain = build(copy.deepcopy(base), tokenizer=tok, **{**opts, "lora_dropout": 0.0})
    try:
        _randomise(two, plain)
        for seed in (0, 1):
            two.train_step(TrainBatch(_rows(seed)))
            plain.train_step(TrainBatch(_rows(seed)))
        for s in range(SLOTS):
            w0, w1 = two.per_worker("get_adapter", s)
            assert _diff(w0, w1) == 0.0
            assert w0.metadata["lora_dropout"] == 0.3
            assert _diff(w0, plain.get_adapter(s)) > 1e-4  # the masks did act
    finally:
        two.close()
