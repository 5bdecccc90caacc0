"""The lean path reads the prompts (the prefill) with `prefill_threads` torch threads (default: the training
count) and decodes with `gen_threads`; the thread count does not change what it generates."""

from __future__ import annotations

import pytest
import torch

from populora.engine import GenRequest

PROMPTS = ["def f(x):", "ab", "return x + 1", "print(", "import os\n"]


def _requests() -> list[GenRequest]:
    return [
        GenRequest(slot=i % 3, prompt=p, max_new_tokens=6, temperature=0.0) for i, p in enumerate(PROMPTS)
    ]


def _record_threads(eng) -> dict[str, list[int]]:
    """Wrap the prefill (the lean path's only `model(...)` call) and the decode step to record the torch thread
    count each runs with."""
    seen: dict[str, list[int]] = {"prefill": [], "decode": []}
    forward, step = eng.model.forward, eng._lean.step

    def prefill(*a, **k):
        seen["prefill"].append(torch.get_num_threads())
        return forward(*a, **k)

    def decode(*a, **k):
        seen["decode"].append(torch.get_num_threads())
        return step(*a, **k)

    eng.model.forward, eng._lean.step = prefill, decode
    return seen


@pytest.mark.parametrize(
    ("train_threads", "prefill_threads", "expected"), [(2, None, 2), (2, 1, 1), (1, 2, 2)]
)
def test_prefill_runs_on_its_own_thread_count(make_engine, train_threads, prefill_threads, expected):
    eng = make_engine(train_threads=train_threads, prefill_threads=prefill_threads)
    assert eng.gen_path == "lean" and eng.gen_threads == 1
    seen = _record_threads(eng)
    before = torch.get_num_threads()
    eng.generate(_requests(), seed=0)
    assert seen["prefill"] and set(seen["prefill"]) == {expected}
    assert seen["decode"] and set(seen["decode"]) == {1}  # decoding stays on gen_threads
    assert torch.get_num_threads() == before  # both counts are restored after the call


def test_prefill_threads_do_not_change_the_generations(make_engine):
    one = make_engine(train_threads=2, prefill_threads=1).generate(_requests(), seed=0)
    two = make_engine(train_threads=2).generate(_requests(), seed=0)
    for a, b in zip(one, two, strict=True):
        assert a.token_ids == b.token_ids  # greedy, on a model with peaked logits
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_forward_path_prefills_on_the_generation_threads(make_engine):
    """The original loop (`gen_path="forward"`, the old code path `bench population` compares with) is left as
    it was: its prefill is its first step, on `gen_threads`."""
    eng = make_engine(train_threads=2)
    eng.gen_path = "forward"
    seen = []
    forward = eng.model.forward

    def record(*a, **k):
        seen.append(torch.get_num_threads())
        return forward(*a, **k)

    eng.model.forward = record
    eng.generate(_requests(), seed=0)
    assert seen and set(seen) == {1}
