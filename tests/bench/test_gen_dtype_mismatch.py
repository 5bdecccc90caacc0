"""`bench/gen_dtype_mismatch.py`: the sampler-vs-trainer log-prob summary on hand numbers."""

import pytest


def test_mismatch_summary_on_hand_numbers(bench_script):
    # |diffs| 0.1 and 1.0; the trainer gives the second token e^1.0 = 2.7x the sampler's probability (> 2)
    m = bench_script("gen_dtype_mismatch").mismatch([-1.0, -2.0], [-1.1, -1.0])
    assert m["tokens"] == 2
    assert m["mean_abs_nats"] == pytest.approx(0.55)
    assert m["p99_abs_nats"] == pytest.approx(1.0) and m["max_abs_nats"] == pytest.approx(1.0)
    assert m["share_ratio_over_2"] == 0.5
