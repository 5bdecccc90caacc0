"""`bench/tis_effect.py` reads the trainer's log-probs through a hook on the hf engine's private
`_response_logprobs` (wrapped while `accumulate_gradients` runs). On a real engine: sampler log-probs shifted by
a known amount must come back as that mismatch, with the truncated share and the cap-2 weight that follow from
it, the tis_cap=2 engine's own `is_weight` must agree, and log-prob calls outside a train step are not counted.
The bench itself needs vLLM and is run by hand (docs/engine.md)."""

import math

import pytest
import torch

from populora.engine import TrainBatch, TrainRow, build
from populora.engine.testing import random_model


@pytest.mark.parametrize(("shift", "truncated"), [(-0.1, 0.0), (1.0, 1.0)])
def test_mismatch_hook_reads_the_shift(shift, truncated, bench_script):
    torch.set_num_threads(1)
    base, tok = random_model("qwen2", seed=11, initializer_range=0.3)
    eng = build(base, tokenizer=tok, n_slots=2, rank=4, alpha=8, tis_cap=2.0, train_threads=1)
    g = torch.Generator().manual_seed(0)
    rows = [
        TrainRow(
            slot=k % 2,
            prompt_ids=torch.randint(0, 256, (4,), generator=g).tolist(),
            response_ids=torch.randint(0, 256, (3 + k,), generator=g).tolist(),
            advantages=1.0,
        )
        for k in range(4)
    ]
    lp = eng.logprobs(TrainBatch(rows))
    # sampler = trainer - shift, so logp_trainer - logp_sampler = shift; one token has no sampler log-prob
    for r, old in zip(rows, lp, strict=True):
        r.old_logprobs = [x - shift for x in old]
    rows[0].old_logprobs[0] = float("nan")
    hook = bench_script("tis_effect").Mismatch(eng)
    eng.logprobs(TrainBatch(rows))  # outside a train step: not counted
    m_engine = eng.train_step(TrainBatch(rows))
    m = hook.take()
    n = sum(len(r.response_ids) for r in rows)
    assert (m["tokens"], m["missing"]) == (n - 1, 1)
    assert m["mismatch"] == pytest.approx(abs(shift), abs=1e-5)
    assert m["signed"] == pytest.approx(shift, abs=1e-5)
    assert m["trunc_share"] == truncated
    w = min(math.exp(shift), 2.0)
    assert m["is_w"] == pytest.approx(w, rel=1e-5)
    # the engine's weight counts the token without a sampler log-prob as 1 (on-policy)
    slot0 = [len(r.response_ids) for r in rows if r.slot == 0]
    assert m_engine["is_weight/0"] == pytest.approx((w * (sum(slot0) - 1) + 1) / sum(slot0), rel=1e-5)
    assert m_engine["is_weight/1"] == pytest.approx(w, rel=1e-5)
    assert hook.take() == {"tokens": 0, "missing": 0}
