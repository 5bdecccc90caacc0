"""The KL estimators to the reference policy (rl/kl.py) on hand-computed numbers, and their masked mean."""

from __future__ import annotations

import math

import pytest
import torch

from populora.rl.kl import KL_ESTIMATORS, VERL_NAMES, kl_per_token
from populora.rl.loss import masked_mean

# policy log-probs of two sampled tokens and the reference's: d = logp - ref = (0.5, -1.0)
LOGP = torch.tensor([-1.0, -2.0])
REF = torch.tensor([-1.5, -1.0])


def test_k1_is_the_log_ratio():
    assert kl_per_token(LOGP, REF, "k1").tolist() == pytest.approx([0.5, -1.0])


def test_k2_is_half_the_squared_log_ratio():
    assert kl_per_token(LOGP, REF, "k2").tolist() == pytest.approx([0.125, 0.5])


def test_k3_is_exp_minus_one_minus_log_ratio():
    # r = ref - logp = (-0.5, 1.0): exp(r) - r - 1
    expected = [math.exp(-0.5) + 0.5 - 1, math.e - 2]
    assert kl_per_token(LOGP, REF, "k3").tolist() == pytest.approx(expected)
    assert expected == pytest.approx([0.1065307, 0.7182818], abs=1e-6)


def test_every_estimator_is_zero_on_the_reference_and_k3_is_never_negative():
    for est in KL_ESTIMATORS:
        assert kl_per_token(REF, REF, est).tolist() == [0.0, 0.0]
    d = torch.linspace(-8, 8, 33)
    assert (kl_per_token(d, torch.zeros_like(d), "k3") >= 0).all()
    assert VERL_NAMES["k3"] == "low_var_kl"


def test_k3_is_clamped_as_verl_does():
    # a token the policy makes 30 nats less likely than the base: exp(20) - 21 would be ~5e8, clamped to 10
    assert kl_per_token(torch.tensor([-31.0]), torch.tensor([-1.0]), "k3").item() == 10.0


def test_masked_mean_of_the_per_token_kl():
    k3 = kl_per_token(LOGP, REF, "k3")
    assert masked_mean(k3, torch.tensor([True, True])).item() == pytest.approx((0.1065307 + 0.7182818) / 2)
    assert masked_mean(k3, torch.tensor([False, True])).item() == pytest.approx(0.7182818)
    assert masked_mean(k3, torch.tensor([False, False])).item() == 0.0


def test_the_gradient_flows_through_the_policy_only():
    logp = LOGP.clone().requires_grad_(True)
    ref = REF.clone().requires_grad_(True)
    kl_per_token(logp, ref, "k3").sum().backward()
    # d/dlogp (exp(ref - logp) - (ref - logp) - 1) = 1 - exp(ref - logp)
    assert logp.grad.tolist() == pytest.approx([1 - math.exp(-0.5), 1 - math.e])
    assert ref.grad is None


def test_unknown_estimator_names_the_choices():
    with pytest.raises(ValueError, match="choose one of"):
        kl_per_token(LOGP, REF, "k4")
