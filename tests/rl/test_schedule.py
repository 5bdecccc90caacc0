"""`rl.lr_schedule` + `rl.warmup_steps` (populora.rl.schedule): hand-computed rates of a 10-step run."""

import math

import pytest

from populora.rl.schedule import SCHEDULES, lr_at


def _rates(schedule, warmup, total=10, lr=1.0):
    return [lr_at(t, total, lr, schedule, warmup) for t in range(1, total + 1)]


def test_constant_without_warmup_is_the_old_fixed_rate():
    assert _rates("constant", 0, lr=5e-5) == [5e-5] * 10


def test_warmup_reaches_the_peak_at_step_w_and_starts_above_zero():
    # W = 4: 1/4, 2/4, 3/4, 1, then the schedule from its start
    assert _rates("constant", 4) == pytest.approx([0.25, 0.5, 0.75, 1, 1, 1, 1, 1, 1, 1])


def test_linear_decay_after_warmup():
    # W = 2, T = 10: p = (t - 3) / 8 for t >= 3, rate 1 - p; the last step keeps 1/8
    want = [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    assert _rates("linear", 2) == pytest.approx(want)


def test_cosine_decay_after_warmup():
    # W = 2, T = 10: t = 7 is half-way (p = 4/8): 0.5; t = 5 (p = 1/4): (1 + cos(pi/4)) / 2
    got = _rates("cosine", 2)
    assert got[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert got[6] == pytest.approx(0.5)
    assert got[4] == pytest.approx((1 + math.sqrt(0.5)) / 2)
    assert got[9] == pytest.approx((1 + math.cos(math.pi * 7 / 8)) / 2)
    assert all(a > b for a, b in zip(got[2:], got[3:], strict=False))  # strictly decreasing after warm-up


def test_without_warmup_step_one_runs_at_the_peak():
    for s in SCHEDULES:
        assert lr_at(1, 10, 2e-5, s, 0) == pytest.approx(2e-5)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown lr schedule"):
        lr_at(1, 10, 1.0, "step")
    with pytest.raises(ValueError, match="step >= 1"):
        lr_at(0, 10, 1.0)
