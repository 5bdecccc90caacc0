"""The dense-delta operators (X1, X6, X7, X9) as they were before issue 12 item 5, kept only for the bench.

`populora bench operators` times these next to the library's versions in the same run, so the speed-up is
measured, not remembered. Same maths, older implementation: the whole d x n delta per slot with fresh
allocations, masks from `torch.rand`, DELLA ranks from a full `argsort`, and a Halko-Martinsson-Tropp SVD
from a Gaussian start with two power iterations (6 passes over the delta). Not registered, not used by the
library; do not import it elsewhere.
"""

from __future__ import annotations

import numpy as np
import torch

from populora.lora.adapter import LoRAAdapter
from populora.operators.elementwise import trim_topk
from populora.operators.linalg import EXACT_SVD_MAX, compute_dtype, refactor, threads
from populora.operators.registry import Rng


def tsvd_hmt(dense: torch.Tensor, r: int, gen: torch.Generator, oversample: int = 8, power_iters: int = 2):
    """The old truncated SVD: exact when small, else HMT from a Gaussian start with `power_iters` iterations."""
    d, n = dense.shape
    if min(d, n) <= EXACT_SVD_MAX or 4 * (r + oversample) >= min(d, n):
        with threads(1):
            u, s, vh = torch.linalg.svd(dense, full_matrices=False)
        return u[:, :r], s[:r], vh[:r].T
    k = r + oversample
    omega = torch.randn(n, k, generator=gen, dtype=torch.float64).to(dtype=dense.dtype, device=dense.device)
    q = _qr_q(dense @ omega)
    for _ in range(power_iters):
        z = _qr_q(dense.T @ q)
        q = _qr_q(dense @ z)
    small = q.T @ dense
    with threads(1):
        ub, s, vh = torch.linalg.svd(small, full_matrices=False)
    return (q @ ub)[:, :r], s[:r], vh[:r].T


def _qr_q(x: torch.Tensor) -> torch.Tensor:
    with threads(1):
        return torch.linalg.qr(x)[0]


def disjoint_mean(ts: list[torch.Tensor]) -> torch.Tensor:
    """The old TIES disjoint mean: sign election and agreement masks through bool `where` kernels."""
    total = ts[0] + ts[1]
    gamma = torch.where(total >= 0, 1.0, -1.0).to(total.dtype)
    num, cnt = torch.zeros_like(ts[0]), torch.zeros_like(ts[0])
    for t in ts:
        agree = (t * gamma) > 0
        num += torch.where(agree, t, 0)
        cnt += agree
    return num / cnt.clamp_min(1)


def _row_ranks_argsort(mag: torch.Tensor) -> torch.Tensor:
    n = mag.shape[1]
    idx = torch.from_numpy(np.argsort(mag.detach().cpu().numpy(), axis=1)).to(mag.device)
    ranks = torch.empty_like(idx)
    ranks.scatter_(1, idx, torch.arange(n, device=mag.device).expand_as(idx))
    return ranks.to(mag.dtype) / max(n - 1, 1)


def _della_sample(d: torch.Tensor, density: float, window: float, gen: torch.Generator) -> torch.Tensor:
    p = (density - window) + (2 * window) * _row_ranks_argsort(d.abs())
    u = torch.rand(d.shape, generator=gen, dtype=d.dtype).to(d.device)
    return torch.where(u < p, d / p, 0)


def _merge_x1(d1, d2, g, p=0.5, w=1.0):
    for d in (d1, d2):
        d.masked_fill_(torch.rand(d.shape, generator=g, dtype=d.dtype).to(d.device) < p, 0)
    d1 += d2
    return d1.mul_(w / (1 - p))


def _merge_x6(d1, d2, g, density=0.2, lam=1.0):
    return disjoint_mean([trim_topk(d1, density), trim_topk(d2, density)]).mul_(lam)


def _merge_x7(d1, d2, g, density=0.7, window=0.14, lam=1.0):
    return disjoint_mean([_della_sample(d1, density, window, g), _della_sample(d2, density, window, g)]).mul_(
        lam
    )


def _merge_x9(d1, d2, g, eps_rel=1e-6):
    f1, f2 = d1 * d1, d2 * d2
    den = f1 + f2
    eps = eps_rel * float(den.mean())
    num = f1.mul_(d1).add_(f2.mul_(d2))
    return num.div_(den.add_(eps if eps > 0 else 1e-30))


MERGES = {"X1": _merge_x1, "X6": _merge_x6, "X7": _merge_x7, "X9": _merge_x9}


def apply_legacy(name: str, parents: list[LoRAAdapter], seed: int = 0) -> LoRAAdapter:
    """The old implementation of dense operator `name` with its default parameters (for timing only)."""
    merge = MERGES[name]
    p1, p2 = parents
    r = p1.rank
    out = {}
    rng = Rng(name, seed)
    for mod in p1.modules:
        a1, b1 = p1.modules[mod]
        a2, b2 = p2.modules[mod]
        cd = compute_dtype(a1)
        a1, b1, a2, b2 = (t.to(cd) for t in (a1, b1, a2, b2))
        g = rng.gen(mod)
        dc = merge(b1 @ a1, b2 @ a2, g)
        u, s, v = tsvd_hmt(dc, r, g)
        del dc
        with threads(1):
            out[mod] = refactor(u, s, v, r, g)
    return LoRAAdapter(modules=out, alpha=p1.alpha)
