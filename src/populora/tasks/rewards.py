"""Reward functions (pure; hand-checked in tests/tasks/test_rewards.py).

Defaults follow the PopuLoRA paper and AZR:
- student: +1 correct, -0.5 well formatted but wrong, -1 format error;
- teacher (population mode): `1 - rho` if the matched student's solve rate `rho > 0`, else 0 (an unsolved
  problem earns nothing, so impossible or degenerate problems are not rewarded); an invalid or badly
  formatted proposal earns -1;
- single-agent learnability (AZR Eq. 4): `1 - s` if `0 < s < 1` else 0, invalid -1.
AZR's *code* maps the zero cases to -0.5 (issue #37); set `RewardConfig(no_signal=-0.5)` to reproduce that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RewardConfig:
    correct: float = 1.0  # student, right answer
    wrong: float = -0.5  # student, parsed but wrong
    format_error: float = -1.0  # student, unparsable answer
    invalid_proposal: float = -1.0  # teacher, unparsable or invalid proposal
    no_signal: float = 0.0  # teacher when rho == 0; learnability when s is 0 or 1 (paper 0; AZR code -0.5)


DEFAULT_REWARDS = RewardConfig()


def _check_rate(x: float, name: str) -> float:
    if not (isinstance(x, (int, float)) and math.isfinite(x) and 0.0 <= x <= 1.0):
        raise ValueError(f"{name} must be a fraction in [0, 1], got {x!r}")
    return float(x)


def solve_rate(correct: Sequence[bool]) -> float:
    """Fraction of True in `correct` (the rollouts of one student on one problem); 0.0 for no rollouts."""
    return sum(bool(c) for c in correct) / len(correct) if len(correct) else 0.0


def student_reward(formatted: bool, correct: bool, config: RewardConfig = DEFAULT_REWARDS) -> float:
    """+1 correct, -0.5 formatted but wrong, -1 format error (defaults). `correct` implies `formatted`."""
    if not formatted:
        return config.format_error
    return config.correct if correct else config.wrong


def teacher_reward(rho: float | None, valid: bool = True, config: RewardConfig = DEFAULT_REWARDS) -> float:
    """Population teacher: `1 - rho` if `rho > 0`, else `no_signal` (0); invalid (or `rho is None`) -> -1."""
    if not valid or rho is None:
        return config.invalid_proposal
    rho = _check_rate(rho, "rho")
    return 1.0 - rho if rho > 0.0 else config.no_signal


def learnability_reward(s: float | None, valid: bool = True, config: RewardConfig = DEFAULT_REWARDS) -> float:
    """Single-agent AZR proposer: `1 - s` if `0 < s < 1`, else `no_signal` (0); invalid -> -1."""
    if not valid or s is None:
        return config.invalid_proposal
    s = _check_rate(s, "s")
    return 1.0 - s if 0.0 < s < 1.0 else config.no_signal
