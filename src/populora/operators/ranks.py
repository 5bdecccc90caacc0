"""Mixed-rank parents (issue 34): the child's rank rule and the exact change of an adapter's rank.

Rule: **the child has the first parent's rank** (for X4 and I2 and in evolution the first parent is the better
one by LCB). Before an operator runs, every other parent is re-expressed at that rank with `resize`, so each
operator's equal-rank maths applies unchanged and all parents share r and alpha (the scale alpha/r cancels again).

`resize(adapter, r)` keeps the weight update `dW = (alpha / r_old) B A` per module:
- the target product is `B' A' = (r / r_old) B A` (so `(alpha / r) B' A' = dW`);
- r >= r_old: exact. The factored SVD of the product is split balanced (B' = U sqrt(S), A' = sqrt(S) V^T) and the
  r - r_old new components are dead ones revived as trainable directions (B column 0, A row a fresh unit
  direction orthogonal to the live ones at PEFT's init norm): dW is unchanged and the components can learn;
- r < r_old: the top-r truncated SVD of the scaled product (Eckart-Young: the best rank-r approximation of dW in
  the Frobenius and spectral norms); the relative Frobenius loss sqrt(1 - kept / total) is reported.
"""

from __future__ import annotations

import math

import torch

from populora.lora.adapter import LoRAAdapter
from populora.operators.linalg import compute_dtype, fsvd, refactor


def resize(adapter: LoRAAdapter, r: int, gen: torch.Generator) -> tuple[LoRAAdapter, float]:
    """`adapter` at rank `r` with the same alpha and weight update (exact for r >= its rank, else the best
    rank-r approximation); returns (adapter, worst relative Frobenius loss over modules, 0 when exact)."""
    r_old = adapter.rank
    if r == r_old:
        return adapter, 0.0
    c = r / r_old
    out, worst = {}, 0.0
    for name, (a0, b0) in adapter.modules.items():
        cd = compute_dtype(a0)
        u, s, v = fsvd(b0.to(cd), a0.to(cd))
        s = s * c
        total = float((s.double() ** 2).sum())
        kept = float((s[:r].double() ** 2).sum())
        if total > 0:
            worst = max(worst, math.sqrt(max(0.0, 1.0 - kept / total)))
        a, b = refactor(u, s, v, r, gen)
        out[name] = (a.to(dtype=a0.dtype, device=a0.device), b.to(dtype=b0.dtype, device=b0.device))
    return LoRAAdapter(modules=out, alpha=adapter.alpha, metadata=dict(adapter.metadata)), worst


def to_first_rank(parents: list[LoRAAdapter], gen_of) -> tuple[list[LoRAAdapter], dict]:
    """The parents with every one after the first resized to the first's rank, and the `info` entry that records
    it (`{}` when all ranks already agree). `gen_of(i)` gives parent i's generator for revived components."""
    r = parents[0].rank
    if all(p.rank == r for p in parents):
        return parents, {}
    out, record = (
        [parents[0]],
        {"child_rank": r, "parent_ranks": [p.rank for p in parents], "resize_loss": {}},
    )
    for i, p in enumerate(parents[1:], 1):
        q, loss = resize(p, r, gen_of(i))
        out.append(q)
        record["resize_loss"][i] = loss
    return out, {"rank_rule": record}
