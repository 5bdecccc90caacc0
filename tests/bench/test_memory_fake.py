"""bench/memory_fake_7b.py (issue 51): the engine's real train step under fake tensors at a small Qwen2 shape,
measured against `MemoryPlan`'s terms. Tolerance: the static bytes (base, LoRA weights, AdamW moments) match
the plan within 1%, and the plan covers the measured step (activations, gradients, temporaries): measured /
plan <= 1, and >= 0.25 (the plan is not wildly loose; at 7B the recorded ratios are 0.6-1.0)."""

from __future__ import annotations

import json
from pathlib import Path

SMALL = dict(
    hidden_size=128,
    intermediate_size=352,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    vocab_size=2048,
    rms_norm_eps=1e-6,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
SIZES = dict(prompt_tokens=128, new_tokens=256, micro_batch_tokens=256, rollouts=4)


def test_measured_step_within_the_plan_at_a_small_shape(bench_script):
    bench = bench_script("memory_fake_7b")
    rows = []
    for case, ckpt in (("longest row", False), ("longest row", True), ("full micro-batch", False)):
        m = bench.measure(SMALL, case=case, checkpointing=ckpt, **SIZES)
        rows.append(bench.compare(SMALL, m))
    longest, checkpointed, batch = rows
    assert longest["tokens"] == 128 + 256 and batch["rows"] == 4 and batch["tokens"] == 256
    assert batch["shared_prompt_forward"] and not checkpointed["shared_prompt_forward"]
    for r in rows:
        b = r["bytes"]
        assert abs(b["measured_static"] - b["plan_static"]) <= 0.01 * b["plan_static"]
        assert 0.25 <= r["step_ratio"] <= 1.0, r
    assert (
        checkpointed["bytes"]["measured_step"] < longest["bytes"]["measured_step"]
    )  # checkpointing keeps less
    assert "longest row" in bench.table(rows)


def test_the_recorded_7b_table_is_covered_by_the_plan():
    """The recorded run (bench/results/memory_fake_7b.json): four cases at the 7B shape, the command that made
    them, and the plan covering every measured step."""
    data = json.loads((Path(__file__).resolve().parents[2] / "bench/results/memory_fake_7b.json").read_text())
    assert "memory_fake_7b.py" in data["command"] and data["shape"]["hidden_size"] == 3584
    cases = {(r["case"], r["activation_checkpointing"]) for r in data["rows"]}
    assert cases == {(c, k) for c in ("longest row", "full micro-batch") for k in (False, True)}
    for r in data["rows"]:
        assert r["step_ratio"] <= 1.0, r
