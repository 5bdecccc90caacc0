"""Fixtures for engine tests: a tiny random Qwen2 (peaked logits, so greedy argmax is not decided by
float noise) and helpers to build engines on deep copies of it."""

from __future__ import annotations

import copy

import pytest
import torch

from populora.engine import build
from populora.engine.testing import random_model


@pytest.fixture(scope="session")
def base_and_tok():
    torch.set_num_threads(1)
    return random_model("qwen2", seed=11, initializer_range=0.3)


def randomise_slots(engine, seed: int = 1, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in engine.layers.values():
            layer.lora_A.copy_(torch.randn(layer.lora_A.shape, generator=g) * scale)
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=g) * scale)


@pytest.fixture
def make_engine(base_and_tok):
    base, tok = base_and_tok

    def make(n_slots=3, rank=4, alpha=8, randomise=True, **opts):
        opts.setdefault("train_threads", 1)
        eng = build(copy.deepcopy(base), tokenizer=tok, n_slots=n_slots, rank=rank, alpha=alpha, **opts)
        if randomise:
            randomise_slots(eng)
        return eng

    return make
