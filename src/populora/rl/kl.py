"""KL to the reference policy (the frozen base, every adapter off): the per-token estimators and their names.

Pure torch functions. The engine (`HFEngine.accumulate_gradients`) adds `kl_coef * kl_t` to each response
token's loss, with the same row weights as the policy-gradient term, when `rl.kl_coef > 0`; the reference
log-probs come from one extra no-grad forward of the same rows with the LoRA delta switched off.

Estimators of KL(policy || reference) from one sample per token (Schulman's "Approximating KL divergence"),
with `d = logp - ref_logp` (log-ratio of the policy to the reference at the sampled token):

- "k1": `d`, unbiased, high variance, can be negative per token (TRL's and veRL's "kl").
- "k2": `d^2 / 2`, biased, low variance (veRL's "mse").
- "k3": `exp(-d) - 1 + d`, unbiased, always >= 0, low variance (veRL's "low_var_kl", TRL's GRPO beta term).

As in veRL, k3's log-ratio is clamped to +-20 and the value to [-10, 10], so one very unlikely token cannot
blow up the step.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")
# The names veRL's `kl_loss_type` uses for the same estimators.
VERL_NAMES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the policy's and the reference's log-probs of the
    sampled tokens (same shape). Differentiable in `logp`; `ref_logp` is treated as a constant."""
    ref = ref_logp.detach().to(logp.dtype)
    if estimator == "k1":
        return logp - ref
    if estimator == "k2":
        return 0.5 * (logp - ref).square()
    if estimator == "k3":
        r = (ref - logp).clamp(-20.0, 20.0)
        return (torch.exp(r) - r - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")
