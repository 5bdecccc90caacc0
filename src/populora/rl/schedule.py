"""Learning-rate schedules of a run: the AdamW rate of every adapter at a train step (`rl.lr_schedule`).

The rate is a pure function of the run's step, so it needs no state: a resumed run recomputes it, and a
child born at evolution trains at the run's current rate (it continues the run's schedule, it does not
restart a warm-up of its own; its fresh AdamW moments already restart Adam's bias correction).

Steps are numbered 1..T (T = `train.steps`), as the trainer numbers them. With W = `rl.warmup_steps`:

    warm-up   t <= W:  lr * t / W                  (step 1 already moves; step W reaches lr)
    then      p = (t - W - 1) / (T - W)  in [0, 1)  (step W + 1 runs at lr)
              constant  lr
              linear    lr * (1 - p)
              cosine    lr * (1 + cos(pi * p)) / 2

This is Hugging Face's `get_{linear,cosine}_schedule_with_warmup` evaluated at the step about to be taken,
except that warm-up starts at lr / W instead of 0 (a step at rate 0 would be wasted rollouts).
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def lr_at(step: int, total_steps: int, lr: float, schedule: str = "constant", warmup_steps: int = 0) -> float:
    """The learning rate of train step `step` (1-based) of a `total_steps`-step run; see the module docstring."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if warmup_steps < 0 or total_steps < 1 or step < 1:
        raise ValueError(
            f"need step >= 1, total_steps >= 1 and warmup_steps >= 0; got {step}, {total_steps}, {warmup_steps}"
        )
    if step <= warmup_steps:
        return lr * step / warmup_steps
    if schedule == "constant":
        return lr
    # Past T (the trainer never goes there) the rate stays at step T's rather than going negative.
    p = min(step - warmup_steps - 1, max(total_steps - warmup_steps - 1, 0)) / max(
        total_steps - warmup_steps, 1
    )
    if schedule == "linear":
        return lr * (1.0 - p)
    return lr * 0.5 * (1.0 + math.cos(math.pi * p))


__all__ = ["SCHEDULES", "lr_at"]
