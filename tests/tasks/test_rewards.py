import pytest

from populora.tasks.rewards import (
    RewardConfig,
    learnability_reward,
    solve_rate,
    student_reward,
    teacher_reward,
)


def test_student_reward_defaults():
    assert student_reward(True, True) == 1.0
    assert student_reward(True, False) == -0.5
    assert student_reward(False, False) == -1.0
    assert student_reward(False, True) == -1.0  # a format error is never credited


def test_teacher_reward_population():
    assert teacher_reward(0.25) == 0.75
    assert teacher_reward(1.0) == 0.0
    assert teacher_reward(0.0) == 0.0  # nobody solved it: no reward for impossible problems
    assert teacher_reward(0.5, valid=False) == -1.0
    assert teacher_reward(None) == -1.0
    assert teacher_reward(solve_rate([True, False, False, False, False, False, False, False])) == 0.875


def test_learnability_single_agent():
    assert learnability_reward(0.375) == 0.625
    assert learnability_reward(0.0) == 0.0 and learnability_reward(1.0) == 0.0
    assert learnability_reward(0.5, valid=False) == -1.0


def test_azr_code_variant_and_custom_shaping():
    azr = RewardConfig(no_signal=-0.5)  # AZR's code maps the zero cases to -0.5 (issue #37)
    assert learnability_reward(1.0, config=azr) == -0.5 and teacher_reward(0.0, config=azr) == -0.5
    assert teacher_reward(0.25, config=azr) == 0.75
    binary = RewardConfig(correct=1.0, wrong=0.0, format_error=0.0)
    assert student_reward(True, False, binary) == 0.0


def test_solve_rate_and_bad_rates():
    assert solve_rate([True, True, False, True]) == 0.75 and solve_rate([]) == 0.0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            teacher_reward(bad)
