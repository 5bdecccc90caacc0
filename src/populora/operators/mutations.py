"""Mutations M1-M6: one parent in, one same-rank child out (M6 with `rank_range` changes the rank; docs/operators.md).

All work per module slot on `D = B @ A` (the scale alpha/r is shared and cancels); SVD-based ones use the
factored SVD, so no d x n matrix is formed. Computation is in fp32 (fp64 stays fp64), results are cast back to
the parent's dtype and device.
"""

from __future__ import annotations

import math

import torch

from populora.operators.linalg import compute_dtype, fsvd, refactor
from populora.operators.registry import OperatorError, Rng, check_fraction, check_nonneg, operator


def _cast(a: torch.Tensor, b: torch.Tensor, like_a: torch.Tensor, like_b: torch.Tensor):
    return (
        a.to(dtype=like_a.dtype, device=like_a.device).contiguous(),
        b.to(dtype=like_b.dtype, device=like_b.device).contiguous(),
    )


def _randn(shape, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Gaussian noise drawn on the CPU from `gen` (device-independent streams), moved next to `like`."""
    return torch.randn(shape, generator=gen, dtype=like.dtype).to(like.device)


def _cayley_step(u: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """Rotate orthonormal columns U by I + K with K = G U^T - U G^T skew (never formed), then re-orthonormalise.

    G ~ N(0, eps^2 / d) so every column turns by ~eps radians whatever d is; QR with diag(R) > 0 keeps the
    first-order step orthonormal (the Cayley map agrees with I + K to first order).
    """
    if eps == 0:
        return u
    d = u.shape[0]
    g = _randn(u.shape, gen, u) * (eps / math.sqrt(d))
    q, r = torch.linalg.qr(u + g - u @ (g.T @ u))
    sign = torch.sign(torch.diagonal(r))
    sign[sign == 0] = 1
    return q * sign


@operator("M1", 1, "mutation")
def m1_svd(parents, rng: Rng, *, sigma: float = 0.1, rotation: float = 0.05):
    """D = U S V^T -> U' diag(S * exp(sigma * xi)) V'^T, xi ~ N(0, 1), U' and V' first-order Cayley rotations of angle ~rotation."""
    sigma, rotation = check_nonneg("M1", "sigma", sigma), check_nonneg("M1", "rotation", rotation)
    (p,) = parents
    out = {}
    for name, (a0, b0) in p.modules.items():
        g = rng.gen(name)
        cd = compute_dtype(a0)
        u, s, v = fsvd(b0.to(cd), a0.to(cd))
        s2 = s * torch.exp(sigma * _randn(s.shape, g, s)) if sigma else s
        a, b = refactor(_cayley_step(u, rotation, g), s2, _cayley_step(v, rotation, g), p.rank, g)
        out[name] = _cast(a, b, a0, b0)
    return out, {}


def _gaussian(p, rng: Rng, names: set[str], eps: float, canonicalize: bool):
    """Add eps * std(T) * N(0, 1) to A and B of the slots in `names`; others are bit-exact copies."""
    out, skipped = {}, []
    for name, (a0, b0) in p.modules.items():
        if name not in names:
            out[name] = (a0.clone(), b0.clone())
            continue
        g = rng.gen(name)
        cd = compute_dtype(a0)
        a, b = a0.to(cd), b0.to(cd)
        if (
            canonicalize
        ):  # noise relative to std(T) depends on the gauge; the balanced form makes A, B comparable
            u, s, v = fsvd(b, a)
            a, b = refactor(u, s, v, p.rank, g)
        noisy = []
        for which, t in (("A", a), ("B", b)):
            std = float(t.std(correction=0)) if t.numel() > 1 else 0.0
            if std < 1e-12:  # B = 0 at PEFT init: noise there would create a delta from nothing
                skipped.append(f"{name}.{which}")
                noisy.append(t)
            else:
                noisy.append(t + (eps * std) * _randn(t.shape, g, t))
        out[name] = _cast(noisy[0], noisy[1], a0, b0)
    return out, {"mutated_slots": sorted(names), "skipped_zero_std": skipped}


@operator("M2", 1, "mutation")
def m2_layer_gaussian(
    parents, rng: Rng, *, fraction: float = 0.33, eps: float = 0.1, canonicalize: bool = True
):
    """T += eps * std(T) * N(0, 1) for T in {A, B} of max(1, round(fraction * M)) slots chosen without replacement; the rest copied."""
    check_fraction("M2", "fraction", fraction)
    eps = check_nonneg("M2", "eps", eps)
    (p,) = parents
    names = p.names()
    k = max(1, int(fraction * len(names) + 0.5))
    chosen = torch.randperm(len(names), generator=rng.gen("slots"))[:k].tolist()
    return _gaussian(p, rng, {names[i] for i in chosen}, eps, canonicalize)


@operator("M4", 1, "mutation")
def m4_full_gaussian(parents, rng: Rng, *, eps: float = 0.15, canonicalize: bool = True):
    """T += eps * std(T) * N(0, 1) for every A and B of every slot (noise relative to each tensor's std)."""
    eps = check_nonneg("M4", "eps", eps)
    (p,) = parents
    return _gaussian(p, rng, set(p.names()), eps, canonicalize)


@operator("M3", 1, "mutation")
def m3_component_mask(parents, rng: Rng, *, rho: float = 0.3, rescale: bool = False):
    """D = U S V^T -> zero S_i for a uniformly random set K of round(rho * r) < r components (not bottom-k), revive them."""
    check_fraction("M3", "rho", rho)
    (p,) = parents
    r = p.rank
    m = min(int(rho * r + 0.5), r - 1)
    out, masked = {}, {}
    for name, (a0, b0) in p.modules.items():
        g = rng.gen(name)
        cd = compute_dtype(a0)
        u, s, v = fsvd(b0.to(cd), a0.to(cd))
        drop = [i for i in torch.randperm(r, generator=g)[:m].tolist() if i < s.numel()]
        s2 = s.clone()
        s2[drop] = 0
        if rescale and float(s2.norm()) > 0:
            s2 = s2 * (s.norm() / s2.norm())
        a, b = refactor(u, s2, v, r, g)
        out[name] = _cast(a, b, a0, b0)
        masked[name] = sorted(drop)
    return out, {"masked_components": masked}


@operator("M5", 1, "mutation")
def m5_neftune(parents, rng: Rng, *, alpha_rel: float = 0.1):
    """A += (alpha / sqrt(r * n)) * U(-1, 1) with alpha = alpha_rel * sqrt(3) * ||A||_F (so E||dA|| ~ alpha_rel ||A||); B copied."""
    alpha_rel = check_nonneg("M5", "alpha_rel", alpha_rel)
    (p,) = parents
    out = {}
    for name, (a0, b0) in p.modules.items():
        g = rng.gen(name)
        cd = compute_dtype(a0)
        a = a0.to(cd)
        r, n = a.shape
        scale = alpha_rel * math.sqrt(3.0) * float(a.norm()) / math.sqrt(r * n)
        noise = (torch.rand(a.shape, generator=g, dtype=cd).to(a.device) * 2 - 1) * scale
        out[name] = (_cast(a + noise, b0, a0, b0)[0], b0.clone())
    return out, {}


@operator("M6", 1, "mutation")
def m6_rank_perturb(
    parents, rng: Rng, *, jitter: float = 0.05, compensate: bool = False, rank_range: list | None = None
):
    """D = U S V^T -> keep b ~ U{ceil(r/2)..r-1} top components with S_i * max(0, 1 + jitter * xi_i), zero (revive) the tail; with rank_range = (lo, hi) the child's rank moves to r' ~ U({max(lo, ceil(r/2))..min(hi, 2r)} minus {r})."""
    jitter = check_nonneg("M6", "jitter", jitter)
    (p,) = parents
    r = p.rank
    moves = _rank_moves("M6", r, rank_range)
    if moves:
        return _m6_move(p, rng, jitter, moves)
    lo, hi = (r + 1) // 2, r - 1
    out, kept = {}, {}
    for name, (a0, b0) in p.modules.items():
        g = rng.gen(name)
        cd = compute_dtype(a0)
        u, s, v = fsvd(b0.to(cd), a0.to(cd))
        b_keep = r if hi < lo else lo + int(torch.randint(hi - lo + 1, (1,), generator=g))
        s2 = (s * (1 + jitter * _randn(s.shape, g, s))).clamp_min(0) if jitter else s.clone()
        s2[b_keep:] = 0
        if compensate:
            s2 = s2 * (r / b_keep)
        a, b = refactor(u, s2, v, r, g)
        out[name] = _cast(a, b, a0, b0)
        kept[name] = b_keep
    return out, {"kept_rank": kept}


def _rank_moves(op: str, r: int, rank_range) -> list[int]:
    """The ranks M6 may move a rank-r adapter to: {max(lo, ceil(r/2)) .. min(hi, 2r)} minus {r} (a local move,
    at most halving or doubling; empty when rank_range is unset or pins r)."""
    if rank_range is None or (isinstance(rank_range, list | tuple) and not rank_range):
        return []
    if (
        not isinstance(rank_range, list | tuple)
        or len(rank_range) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in rank_range)
        or not 1 <= rank_range[0] <= rank_range[1]
    ):
        raise OperatorError(f"operator {op}: rank_range={rank_range!r} must be [lo, hi] with 1 <= lo <= hi.")
    lo, hi = rank_range
    return [x for x in range(max(lo, (r + 1) // 2), min(hi, 2 * r) + 1) if x != r]


def _m6_move(p, rng: Rng, jitter: float, moves: list[int]):
    """M6 across ranks: one new rank r' for the whole adapter; per module the jittered SVD of the parent is kept
    to its top r' components (r' < r) or padded with revived ones (r' > r), with B'A' scaled by r'/r so the
    weight update (alpha / r') B'A' equals the parent's up to the jitter and the dropped tail."""
    r = p.rank
    r_new = moves[int(torch.randint(len(moves), (1,), generator=rng.gen("rank")))]
    out = {}
    for name, (a0, b0) in p.modules.items():
        g = rng.gen(name)
        cd = compute_dtype(a0)
        u, s, v = fsvd(b0.to(cd), a0.to(cd))
        s2 = (s * (1 + jitter * _randn(s.shape, g, s))).clamp_min(0) if jitter else s.clone()
        a, b = refactor(u, s2 * (r_new / r), v, r_new, g)
        out[name] = _cast(a, b, a0, b0)
    return out, {"rank_from": r, "rank_to": r_new}
