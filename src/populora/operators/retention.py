"""Retention metrics: how far a child's effective deltas moved from its parents (docs/operators.md, "Retention").

All metrics are on the scaled deltas `alpha/r * B A` (gauge-invariant), globally over all slots (sums of
numerators and denominators, i.e. the concatenated flattened deltas), in fp64 through r x r Gram matrices and
factored SVDs, so no d x n matrix is formed.

- `rel_fro`: ||D_c - D_p||_F / ||D_p||_F;  `cos`: `<D_c, D_p> / (||D_c|| ||D_p||)`;  `norm_ratio`: ||D_c|| / ||D_p||.
- `erank`: effective rank exp(-sum p_i log p_i), p_i = s_i / sum s (Roy & Vetterli), mean over non-zero slots.
- `overlap`: subspace overlap ||U_c,k^T U_p,k||_F^2 / k of the top-k left (and right) singular vectors (LoRA
  paper §7), mean over slots; 1 = same top-k subspace, ~k/d for unrelated ones.
"""

from __future__ import annotations

import functools
import math

import torch

from populora.lora.adapter import LoRAAdapter
from populora.operators.linalg import fsvd, threads


def _single_threaded(fn):
    """Many small fp64 QR/SVD/GEMM calls: one torch thread is faster (see `linalg.threads`)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with threads(1):
            return fn(*args, **kwargs)

    return wrapper


def _factors(x: LoRAAdapter, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, A) in fp64 with the scale folded into B, so B @ A is the scaled delta."""
    a, b = x.modules[name]
    return b.double() * x.scale, a.double()


def slot_inner(x: LoRAAdapter, y: LoRAAdapter, name: str) -> float:
    bx, ax = _factors(x, name)
    by, ay = _factors(y, name)
    return float(((bx.T @ by.to(bx.device)) * (ax @ ay.to(ax.device).T)).sum())


@_single_threaded
def inner(x: LoRAAdapter, y: LoRAAdapter) -> float:
    """Global `<D_x, D_y>_F` over all slots."""
    return sum(slot_inner(x, y, n) for n in x.modules)


@_single_threaded
def norm(x: LoRAAdapter) -> float:
    return math.sqrt(max(inner(x, x), 0.0))


@_single_threaded
def distances(child: LoRAAdapter, parent: LoRAAdapter) -> dict[str, float]:
    """rel_fro, cos and norm_ratio of child vs parent (global over slots)."""
    cc, pp, cp = inner(child, child), inner(parent, parent), inner(child, parent)
    diff = math.sqrt(max(cc + pp - 2 * cp, 0.0))
    return {
        "rel_fro": diff / math.sqrt(pp) if pp > 0 else math.inf,
        "cos": cp / math.sqrt(cc * pp) if cc > 0 and pp > 0 else 0.0,
        "norm_ratio": math.sqrt(cc / pp) if pp > 0 else math.inf,
    }


def _svd(x: LoRAAdapter, name: str):
    b, a = _factors(x, name)
    return fsvd(b, a)


def _mean(v: list[float]) -> float:
    return sum(v) / len(v) if v else 0.0


def _erank(s: torch.Tensor) -> float:
    tot = float(s.sum())
    if tot <= 0:
        return 0.0
    p = s[s > 0] / tot
    return math.exp(float(-(p * p.log()).sum()))


@_single_threaded
def spectrum_stats(x: LoRAAdapter) -> dict[str, float]:
    """Mean over non-zero slots of effective rank, stable rank (sum s^2 / s_1^2) and participation ratio."""
    er, sr, pr = [], [], []
    for name in x.modules:
        s = _svd(x, name)[1]
        if float(s.max()) <= 0:
            continue
        er.append(_erank(s))
        sr.append(float((s**2).sum() / s[0] ** 2))
        pr.append(float((s**2).sum() ** 2 / (s**4).sum()))
    return {"erank": _mean(er), "stable_rank": _mean(sr), "participation_ratio": _mean(pr)}


@_single_threaded
def effective_rank(x: LoRAAdapter) -> float:
    return spectrum_stats(x)["erank"]


@_single_threaded
def subspace_overlap(child: LoRAAdapter, parent: LoRAAdapter, k: int | None = None) -> dict[str, float]:
    """Mean over slots of ||U_c,k^T U_p,k||_F^2 / k for the left (U) and right (V) top-k singular vectors."""
    k = k or max(1, child.rank // 2)
    left, right = [], []
    for name in child.modules:
        uc, sc, vc = _svd(child, name)
        up, sp, vp = _svd(parent, name)
        kk = min(k, int((sc > 0).sum()), int((sp > 0).sum()))
        if kk == 0:
            continue
        left.append(float((uc[:, :kk].T @ up[:, :kk]).pow(2).sum()) / kk)
        right.append(float((vc[:, :kk].T @ vp[:, :kk]).pow(2).sum()) / kk)
    return {"overlap_left": _mean(left), "overlap_right": _mean(right)}


def midpoint(p1: LoRAAdapter, p2: LoRAAdapter) -> LoRAAdapter:
    """The exact untruncated average 1/2 (D1 + D2) as a rank-2r adapter (stacked factors)."""
    mods = {}
    for name in p1.modules:
        b1, a1 = _factors(p1, name)
        b2, a2 = _factors(p2, name)
        mods[name] = (torch.cat([a1, a2.to(a1.device)]), torch.cat([0.5 * b1, 0.5 * b2.to(b1.device)], dim=1))
    return LoRAAdapter(modules=mods, alpha=float(2 * p1.rank))  # scale 1: the factors already carry it


@_single_threaded
def compare(child: LoRAAdapter, parent: LoRAAdapter, k: int | None = None) -> dict[str, float]:
    """All retention metrics of `child` vs one `parent` (or a midpoint)."""
    out = distances(child, parent)
    ec, ep = effective_rank(child), effective_rank(parent)
    out.update(erank_child=ec, erank_parent=ep, erank_ratio=ec / ep if ep > 0 else math.inf)
    out.update(subspace_overlap(child, parent, k))
    return out


@_single_threaded
def retention(child: LoRAAdapter, parents: list[LoRAAdapter], k: int | None = None) -> dict[str, dict]:
    """{"parent1": compare(...), ["parent2": ..., "midpoint": ...]} plus the child's truncation loss if known."""
    out: dict[str, dict] = {f"parent{i + 1}": compare(child, p, k) for i, p in enumerate(parents)}
    if len(parents) == 2:
        out["midpoint"] = distances(child, midpoint(*parents))
    tau = child.metadata.get("info", {}).get("truncation_loss")
    if tau is not None:
        out["truncation_loss"] = {"tau": tau}
    return out
