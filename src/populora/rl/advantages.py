"""REINFORCE++-baseline advantages for a mixed population batch (and TRR++ grouping for the single agent).

One scalar outcome reward per sequence; the advantage is constant over a sequence's response tokens:

1. Baseline. Rows sharing a group key (same prompt *and* same adapter slot; the n rollouts of one student on one
   problem) have the group mean subtracted. A group of size 1 (a teacher's single proposal) keeps its reward
   (veRL's convention: mean 0 for a size-1 group, no division by a group std).
2. Whitening. Within each scope set the centred values are whitened,
   `A = (x - mean) / sqrt(var + 1e-8)`, with statistics weighted by response tokens (veRL `masked_whiten`,
   Bessel-corrected over N tokens) or per sequence (`token_weighted=False`, N sequences).
   Scopes (`rl.whiten_scope`):
     batch      one set: the paper's "global whitening across the batch" (REINFORCE++-baseline as in veRL)
     role       teachers and students whitened separately (their reward scales differ: -1..1 vs 0..1)
     member     each adapter separately (each member's update is invariant to the others' reward scale)
     task_role  (task type x role): the 6 sets of AZR's TRR++ (TRR++ itself, one rollout per prompt, has no
                per-problem mean to subtract first; docs/paper-choices.md)
   A scope whose statistics rest on one token / sequence, or whose values are all equal, only gets centred
   (whitening zero variance would divide by ~1e-4 and blow up rounding noise).

Token weighting follows veRL / AZR: long responses weigh more in the statistics, matching the token-mean loss.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch

EPS = 1e-8
SCOPES = ("batch", "role", "member", "task_role")


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    out: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        out[k].append(i)
    return out


def group_baseline(rewards: torch.Tensor, group_keys: Sequence[Hashable]) -> torch.Tensor:
    """Subtract each group's mean reward (groups of size 1 are left as they are)."""
    r = rewards.to(torch.float64)
    out = r.clone()
    for idx in _groups(group_keys).values():
        if len(idx) > 1:
            ix = torch.tensor(idx)
            out[ix] = r[ix] - r[ix].mean()
    return out


def whiten(
    values: torch.Tensor, lengths: torch.Tensor, scope_keys: Sequence[Hashable], token_weighted: bool = True
) -> torch.Tensor:
    """Whiten `values` (one per sequence) within each scope set; weights are token counts or 1 per sequence."""
    x = values.to(torch.float64)
    w = lengths.to(torch.float64) if token_weighted else torch.ones_like(x)
    out = torch.zeros_like(x)
    for idx in _groups(scope_keys).values():
        ix = torch.tensor(idx)
        xs, ws = x[ix], w[ix]
        n = ws.sum()
        if n <= 0:
            continue
        mean = (xs * ws).sum() / n
        centred = xs - mean
        var = (centred**2 * ws).sum() / n
        if n <= 1 or var <= 1e-12:
            out[ix] = centred
            continue
        var = var * n / (n - 1)  # Bessel over the N tokens (or sequences), as veRL
        out[ix] = centred * torch.rsqrt(var + EPS)
    return out


def reinforce_pp_baseline(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    group_keys: Sequence[Hashable],
    scope_keys: Sequence[Hashable],
    token_weighted: bool = True,
) -> torch.Tensor:
    """Per-sequence advantages: group-mean baseline, then whitening within scopes (float32, shape [B])."""
    if not (len(rewards) == len(lengths) == len(group_keys) == len(scope_keys)):
        raise ValueError("rewards, lengths, group_keys and scope_keys must have one entry per sequence")
    if len(rewards) == 0:
        return torch.zeros(0)
    return whiten(group_baseline(rewards, group_keys), lengths, scope_keys, token_weighted).to(torch.float32)


def scope_key(scope: str, *, member: str, role: str, task: str) -> Hashable:
    """The whitening-set key of one row for `scope` in batch | role | member | task_role."""
    if scope == "batch":
        return "batch"
    if scope == "role":
        return role
    if scope == "member":
        return member
    if scope == "task_role":
        return (task, role)
    raise ValueError(f"unknown whitening scope {scope!r}; use one of {', '.join(SCOPES)}")
