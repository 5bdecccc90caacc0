"""Token-level policy-gradient loss on hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from populora.rl.loss import (
    entropy_from_logits,
    masked_mean,
    policy_loss,
    row_weights,
    token_logprobs,
)


def test_token_logprobs_and_entropy_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # p = [1/4, 3/4]
    lp = token_logprobs(logits, torch.tensor([1]))
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-6)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # 0.5623 nats
    assert entropy_from_logits(logits).item() == pytest.approx(h, abs=1e-6)
    assert entropy_from_logits(torch.zeros(1, 4)).item() == pytest.approx(math.log(4), abs=1e-6)


def test_reinforce_loss_and_gradient():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    adv = torch.tensor([2.0, -1.0, 0.0])
    loss, clipped = policy_loss(logp, adv)
    assert loss.tolist() == [2.0, -2.0, 0.0]  # -A * logp
    assert clipped.tolist() == [0.0, 0.0, 0.0]
    loss.sum().backward()
    assert logp.grad.tolist() == [-2.0, 1.0, -0.0]  # d/dlogp = -A


def test_ppo_clip_by_hand():
    # ratios exp(logp - old) = [1.5, 0.5, 1.1, 0.7]; eps = 0.2
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7])).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, clipped = policy_loss(logp, adv, old, clip_eps=0.2)
    # A>0, r=1.5: max(-1.5, -1.2) = -1.2 (clipped); A>0, r=0.5: max(-0.5, -0.8) = -0.5 (not clipped)
    # A<0, r=1.1: max(1.1, 1.1) = 1.1;               A<0, r=0.7: max(0.7, 0.8) = 0.8 (clipped)
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 1.1, 0.8], abs=1e-6)
    assert clipped.tolist() == [1.0, 0.0, 0.0, 1.0]
    loss.sum().backward()
    # clipped tokens get no gradient; others get -A * r
    assert logp.grad.tolist() == pytest.approx([0.0, -0.5, 1.1, 0.0], abs=1e-6)


def test_ppo_asymmetric_clip_and_on_policy_equals_reinforce():
    old = torch.zeros(1)
    logp = torch.log(torch.tensor([1.25]))
    loss, _ = policy_loss(logp, torch.tensor([1.0]), old, clip_eps=0.2, clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-1.25, abs=1e-6)  # within 1 + 0.28: not clipped
    a = torch.tensor([-0.7, 0.3, 1.2], requires_grad=True)
    b = a.detach().clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    policy_loss(a, adv, None, clip_eps=0.2)[0].sum().backward()  # no old logprobs: ratio 1
    policy_loss(b, adv)[0].sum().backward()
    assert torch.allclose(a.grad, b.grad)


def test_row_weights_by_hand():
    lengths, groups = [2, 4, 3, 0], [0, 0, 1, 1]
    # token-mean: group 0 has 6 tokens, group 1 has 3
    assert row_weights(lengths, groups, "token-mean") == pytest.approx([1 / 6, 1 / 6, 1 / 3, 0.0])
    # seq-mean-token-mean: 1 / (rows in group * row length); empty rows do not count
    assert row_weights(lengths, groups, "seq-mean-token-mean") == pytest.approx([1 / 4, 1 / 8, 1 / 3, 0.0])
    assert row_weights(lengths, groups, "seq-mean-token-sum") == pytest.approx([1 / 2, 1 / 2, 1.0, 0.0])
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        row_weights(lengths, groups, "sum")


def test_group_normalisation_makes_groups_independent():
    # group 0's weights do not depend on what else is in the batch
    alone = row_weights([2, 4], [0, 0])
    mixed = row_weights([5, 2, 1, 4], [1, 0, 1, 0])
    assert [mixed[1], mixed[3]] == alone


def test_masked_mean():
    v = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert masked_mean(v, torch.tensor([1, 0, 1, 0])).item() == 2.0
    assert masked_mean(v, torch.zeros(4)).item() == 0.0


def test_truncated_is_weights_hand_numbers():
    from populora.rl.loss import truncated_is_weights

    logp = torch.tensor([-1.0, -2.0, -0.5, -1.0], requires_grad=True)
    sampler = torch.tensor([-1.0, -1.0, -3.0, float("nan")])
    w = truncated_is_weights(logp, sampler, cap=2.0)
    # equal: 1; trainer less likely: e^-1; trainer far more likely: e^2.5 capped at 2; no sampler value: 1
    torch.testing.assert_close(w, torch.tensor([1.0, 0.36787944, 2.0, 1.0]))
    assert not w.requires_grad
