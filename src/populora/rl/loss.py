"""Token-level policy-gradient loss: REINFORCE, optional PPO clip, entropy, truncated importance sampling,
and per-group aggregation.

Pure torch functions (no model, no engine). The engine computes, for every response token,
`loss_t = policy_loss(logp_t, A_t, old_logp_t)` and then `sum_rows w_row * sum_t loss_t`, where the row
weights from `row_weights` normalise *within each group*. A group is one adapter slot and one role (the
row's `loss_key`, (slot, role) as the trainer sets it by default): a teacher's or a student's slot holds one
group, the single agent's slot two (proposer and solver), so a proposer's rows weigh in the single agent's
loss exactly as a teacher's rows weigh in a teacher's. Because each group is normalised by its own counts, a
group's gradient in a mixed batch equals the gradient it would get from the same rows alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) under softmax(logits): `logits [..., V]`, `targets [...]` -> `[...]` (float32)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis, in nats: `[..., V]` -> `[...]` (float32)."""
    return entropy_from_logprobs(torch.log_softmax(logits.float(), dim=-1))


def entropy_from_logprobs(logp: torch.Tensor) -> torch.Tensor:
    """Entropy `-sum p log p` from normalised log-probabilities `[..., V]` -> `[...]`."""
    return -(logp.exp() * logp).sum(-1)


def policy_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    old_logp: torch.Tensor | None = None,
    clip_eps: float | None = None,
    clip_eps_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token policy-gradient loss and a per-token "clipped" indicator (float 0/1).

    - `clip_eps is None` (REINFORCE): `loss = -A * logp`. `old_logp` is ignored.
    - PPO clip: `r = exp(logp - old_logp)` (log-ratio clamped to +-20, as verl does), `loss = max(-A r,
      -A clip(r, 1 - clip_eps, 1 + clip_eps_high))` with `clip_eps_high` defaulting to `clip_eps`. Without
      `old_logp` the rollout is taken as on-policy (`old_logp = logp.detach()`, so r = 1 and the gradient is
      REINFORCE's).
    """
    advantages = advantages.to(logp.dtype)
    if clip_eps is None:
        return -advantages * logp, torch.zeros_like(logp)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    old = logp.detach() if old_logp is None else old_logp.to(logp.dtype)
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).to(logp.dtype)


def truncated_is_weights(logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance-sampling weights for the sampler/trainer mismatch (veRL's TIS, OpenRLHF's):
    `min(exp(logp - sampler_logp), cap)` per token, detached (a weight on the policy-gradient term, not a
    path for gradients). The rollouts come from the sampler (vLLM, bf16), the gradient from the trainer's
    forward; the weight corrects the expectation toward the trainer's policy, the cap bounds the variance.
    A sampler log-prob that is not finite (vLLM gave none) counts as on-policy (weight 1)."""
    logp = logp.detach()
    sampler = torch.where(torch.isfinite(sampler_logp), sampler_logp.to(logp.dtype), logp)
    return torch.exp((logp - sampler).clamp(max=20.0)).clamp(max=cap)


LOSS_GROUPINGS = ("role", "member", "role_task")


def loss_group(grouping: str, role: str, task: str) -> str:
    """A row's loss group within its member (`TrainRow.loss_group`) under `rl.loss_norm`: "" for `member` (one
    group), the role for `role`, role and task type for `role_task` (each normalised on its own)."""
    if grouping == "member":
        return ""
    if grouping == "role":
        return role
    if grouping == "role_task":
        return f"{role}/{task}"
    raise ValueError(f"unknown loss grouping {grouping!r}; choose one of {LOSS_GROUPINGS}")


def row_weights(lengths: Sequence[int], groups: Sequence[Hashable], mode: str = "token-mean") -> list[float]:
    """Weight `w_row` such that `sum_rows w_row * sum_t x_t` aggregates per group as `mode` says.

    - "token-mean": mean over all tokens of the group (`1 / tokens in group`).
    - "seq-mean-token-mean": mean over the group's rows of each row's token mean (`1 / (rows * len)`).
    - "seq-mean-token-sum": mean over the group's rows of each row's token sum (`1 / rows`).
    Rows of length 0 get weight 0.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {LOSS_AGG_MODES}")
    if len(lengths) != len(groups):
        raise ValueError(f"{len(lengths)} lengths but {len(groups)} groups")
    tokens: Counter = Counter()
    rows: Counter = Counter()
    for n, g in zip(lengths, groups, strict=True):
        if n > 0:
            tokens[g] += n
            rows[g] += 1
    out = []
    for n, g in zip(lengths, groups, strict=True):
        if n <= 0:
            out.append(0.0)
        elif mode == "token-mean":
            out.append(1.0 / tokens[g])
        elif mode == "seq-mean-token-mean":
            out.append(1.0 / (rows[g] * n))
        else:
            out.append(1.0 / rows[g])
    return out


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` is true (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
