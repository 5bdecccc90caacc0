"""REINFORCE++-baseline advantages on hand-computed numbers."""

import math

import pytest
import torch

from populora.rl.advantages import group_baseline, reinforce_pp_baseline, scope_key, whiten

# Two problems solved by one student slot (2 rollouts each) and two single teacher proposals.
REWARDS = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, -1.0])
LENGTHS = torch.tensor([2, 2, 1, 1, 3, 1])
GROUPS = [("p1", 2), ("p1", 2), ("p2", 2), ("p2", 2), ("q1", 0), ("q2", 0)]


def test_group_baseline_subtracts_group_mean_and_keeps_singletons():
    out = group_baseline(REWARDS, GROUPS)
    assert out.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0, 0.5, -1.0])


def test_same_prompt_on_different_slots_are_different_groups():
    out = group_baseline(torch.tensor([1.0, 0.0]), [("p", 1), ("p", 2)])
    assert out.tolist() == [1.0, 0.0]


def test_token_weighted_batch_whitening_by_hand():
    adv = reinforce_pp_baseline(REWARDS, LENGTHS, GROUPS, ["batch"] * 6)
    # centred values x = [.5,-.5,0,0,.5,-1], token weights [2,2,1,1,3,1], N = 10 tokens
    mean = (0.5 * 2 - 0.5 * 2 + 0.5 * 3 - 1.0) / 10  # 0.05
    centred = [0.45, -0.55, -0.05, -0.05, 0.45, -1.05]
    assert mean == pytest.approx(0.05)
    var = (0.45**2 * 2 + 0.55**2 * 2 + 0.05**2 + 0.05**2 + 0.45**2 * 3 + 1.05**2) / 9  # Bessel: N - 1 = 9
    assert var * 9 == pytest.approx(2.725)
    expected = [c / math.sqrt(var + 1e-8) for c in centred]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)
    # token-weighted mean of the result is 0
    assert float((adv.double() * LENGTHS).sum()) == pytest.approx(0.0, abs=1e-6)


def test_sequence_weighted_whitening_by_hand():
    adv = reinforce_pp_baseline(REWARDS, LENGTHS, GROUPS, ["batch"] * 6, token_weighted=False)
    x = [0.5, -0.5, 0.0, 0.0, 0.5, -1.0]
    mean = sum(x) / 6
    var = sum((v - mean) ** 2 for v in x) / 5
    assert adv.tolist() == pytest.approx([(v - mean) / math.sqrt(var + 1e-8) for v in x], rel=1e-6)


def test_role_scope_whitens_teachers_and_students_separately():
    roles = ["student"] * 4 + ["teacher"] * 2
    adv = reinforce_pp_baseline(REWARDS, LENGTHS, GROUPS, roles)
    # students: x = [.5,-.5,0,0], w = [2,2,1,1]: mean 0, var = (0.5 + 0.5) / 5 = 0.2
    s = 1 / math.sqrt(0.2 + 1e-8)
    assert adv[:4].tolist() == pytest.approx([0.5 * s, -0.5 * s, 0.0, 0.0], rel=1e-6)
    # teachers: x = [.5, -1], w = [3, 1]: mean 0.125, var = (0.375^2*3 + 1.125^2) / 3
    var = (0.375**2 * 3 + 1.125**2) / 3
    assert adv[4:].tolist() == pytest.approx(
        [0.375 / math.sqrt(var + 1e-8), -1.125 / math.sqrt(var + 1e-8)], rel=1e-6
    )


def test_constant_or_single_token_scope_is_only_centred():
    assert whiten(torch.tensor([2.0, 2.0]), torch.tensor([3, 4]), ["a", "a"]).tolist() == [0.0, 0.0]
    assert whiten(torch.tensor([5.0]), torch.tensor([1]), ["a"]).tolist() == [0.0]
    # all rollouts of a problem solved: zero advantage, never NaN
    adv = reinforce_pp_baseline(torch.tensor([1.0, 1.0]), torch.tensor([4, 4]), ["g", "g"], ["b", "b"])
    assert adv.tolist() == [0.0, 0.0]


def test_scope_keys():
    assert scope_key("batch", member="T0", role="teacher", task="code_i") == "batch"
    assert scope_key("role", member="T0", role="teacher", task="code_i") == "teacher"
    assert scope_key("member", member="T0", role="teacher", task="code_i") == "T0"
    assert scope_key("task_role", member="A0", role="teacher", task="code_f") == ("code_f", "teacher")
    with pytest.raises(ValueError):
        scope_key("global", member="T0", role="teacher", task="code_i")


def test_trr_plus_plus_task_role_scope():
    # single agent: two proposer rows for code_i and two for code_o, one token each, no groups
    rewards = torch.tensor([1.0, 0.0, 0.25, 0.75])
    keys = [("code_i", "teacher")] * 2 + [("code_o", "teacher")] * 2
    adv = reinforce_pp_baseline(rewards, torch.ones(4), ["a", "b", "c", "d"], keys)
    # each scope: values +-d around its mean, Bessel var with N=2: 2 d^2 -> A = +-d / sqrt(2 d^2) = +-1/sqrt(2)
    r = 1 / math.sqrt(2)
    assert adv.tolist() == pytest.approx([r, -r, -r, r], rel=1e-6)
