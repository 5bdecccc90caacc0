"""Element-wise merge maths on dense deltas (TIES trim / sign election / disjoint mean, DELLA keep probabilities).

These are the only parts of the operators that need a dense d x n matrix; they are kept free of LoRA details so
they can be tested on hand-made numbers (X6 and X7).
"""

from __future__ import annotations

import math

import numpy as np
import torch

_SAMPLE = 1 << 16  # sample size for the bracketed k-th largest selection


def kth_largest(v: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest value of the 1-D tensor `v` (1 <= k <= numel), exactly.

    For big tensors a strided sample brackets the answer, and only the entries inside the bracket are
    selected exactly: ~5x cheaper than `kthvalue` on 12M entries. Falls back to `kthvalue` if the bracket misses.
    """
    n = v.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k={k} outside [1, {n}]")
    if n <= 4 * _SAMPLE:
        return v.kthvalue(n - k + 1).values
    # a fixed-seed random sample: a regular stride over a low-rank matrix is biased and misses the bracket
    idx = torch.randint(n, (_SAMPLE,), generator=torch.Generator().manual_seed(0)).to(v.device)
    sample = v[idx].sort().values
    m = sample.numel()
    frac = k / n
    margin = 6 * math.sqrt(frac * (1 - frac) / m) + 4 / m
    lo_i, hi_i = int((1 - frac - margin) * m), int(math.ceil((1 - frac + margin) * m))
    hi = sample[hi_i] if hi_i < m else torch.tensor(math.inf, dtype=v.dtype)
    above = int((v > hi).sum())
    if above < k:
        band = v[(v > sample[lo_i]) & (v <= hi)] if lo_i >= 0 else v[v <= hi]
        need = k - above
        if need <= band.numel():
            return band.kthvalue(band.numel() - need + 1).values
    return v.kthvalue(n - k + 1).values


def trim_topk(d: torch.Tensor, density: float) -> torch.Tensor:
    """Keep exactly floor(density * numel) entries of largest |.| (ties broken by lowest index), zero the rest."""
    n = d.numel()
    keep = int(density * n)
    if keep >= n:
        return d.clone()
    if keep <= 0:
        return torch.zeros_like(d)
    flat = d.reshape(-1)
    mag = flat.abs()
    thr = kth_largest(mag, keep)
    mask = mag > thr
    need = keep - int(mask.sum())
    if (
        need > 0
    ):  # entries equal to the threshold (float32 repeats are common at 12M entries): lowest index first
        mask[(mag == thr).nonzero().squeeze(1)[:need]] = True
    return (flat * mask).reshape(d.shape)


def elect_sign(ts: list[torch.Tensor]) -> torch.Tensor:
    """TIES election: gamma = sgn(sum_k T_k) with sgn(0) := +1 (PEFT and mergekit behaviour)."""
    total = ts[0].clone()
    for t in ts[1:]:
        total += t
    return torch.where(total >= 0, 1.0, -1.0).to(total.dtype)


def disjoint_mean(ts: list[torch.Tensor]) -> torch.Tensor:
    """sum_k T_k [sgn T_k = gamma] / max(1, #agreeing nonzero T_k): agreeing entries averaged, zeros never count."""
    if len(ts) == 2:
        return _disjoint_mean2(*ts)
    gamma = elect_sign(ts)
    num = torch.zeros_like(ts[0])
    cnt = torch.zeros_like(ts[0])
    for t in ts:
        agree = (t * gamma) > 0  # nonzero with the elected sign
        num += torch.where(agree, t, 0)
        cnt += agree
    return num / cnt.clamp_min(1)


def _disjoint_mean2(t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """Two-parent closed form of `disjoint_mean` in half the passes over memory (7M-entry deltas at 7B shape).

    Same sign: the mean. Otherwise the entry whose sign matches sgn(t1 + t2) (the larger |.|, or the non-zero
    one), with sgn(0) := +1 picking the positive entry of an exact tie.
    """
    s = t1 + t2
    other = torch.where(s >= 0, torch.maximum(t1, t2), torch.minimum(t1, t2))
    return torch.where((t1 * t2) > 0, s.mul_(0.5), other)


def ties_merge(deltas: list[torch.Tensor], density: float = 0.2, lam: float = 1.0) -> torch.Tensor:
    """TIES on dense deltas: trim each to its top `density` by |.|, elect signs, disjoint mean, times lam."""
    return disjoint_mean([trim_topk(d, density) for d in deltas]) * lam


def row_ranks(mag: torch.Tensor) -> torch.Tensor:
    """Normalised ascending rank of every entry within its row, in [0, 1] (0 = smallest |.|)."""
    n = mag.shape[1]
    # numpy's row sort is ~3x faster than torch's on CPU here; the inverse permutation turns order into rank.
    idx = torch.from_numpy(np.argsort(mag.detach().cpu().numpy(), axis=1)).to(mag.device)
    ranks = torch.empty_like(idx)
    ranks.scatter_(1, idx, torch.arange(n, device=mag.device).expand_as(idx))
    return ranks.to(mag.dtype) / max(n - 1, 1)


def della_keep_prob(d: torch.Tensor, density: float, window: float) -> torch.Tensor:
    """DELLA MAGPRUNE keep probability p = (density - window) + 2 * window * rank_row(|d|), in [density +- window]."""
    return (density - window) + (2 * window) * row_ranks(d.abs())


def della_sample(d: torch.Tensor, density: float, window: float, gen: torch.Generator) -> torch.Tensor:
    """M * d / p with M ~ Bernoulli(p) (p from `della_keep_prob`): unbiased, magnitude-biased dropping."""
    p = della_keep_prob(d, density, window)
    u = torch.rand(d.shape, generator=gen, dtype=d.dtype).to(d.device)
    return torch.where(u < p, d / p, 0)
