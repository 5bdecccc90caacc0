"""Per-row next-token sampling: temperature (0 = greedy) and nucleus (top-p) filtering. Pure torch."""

from __future__ import annotations

import torch


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep, per row, the smallest set of most likely tokens whose mass reaches `top_p`; renormalise.

    `probs [b, V]`, `top_p [b]`. The most likely token is always kept; ties keep the earlier index.
    """
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    keep_sorted = before < top_p.to(probs.dtype)[:, None]
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    out = probs * keep
    return out / out.sum(-1, keepdim=True)


def sample_next(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row from `logits [b, V]`: argmax where `temperature <= 0`, else softmax(logits / T)
    restricted to the top-p nucleus. Returns `[b]` (long)."""
    logits = logits.float()
    greedy = temperature <= 0
    out = logits.argmax(-1)
    if bool(greedy.all()):
        return out
    t = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.dtype)
    probs = torch.softmax(logits / t[:, None], dim=-1)
    if bool((top_p < 1).any()):
        probs = top_p_filter(probs, top_p.clamp(min=1e-6, max=1.0))
    sampled = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return torch.where(greedy, out, sampled)
