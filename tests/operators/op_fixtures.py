"""Helpers for the operator tests: tiny fp64 adapters (3 layers, q and k projections), re-gauging, delta checks."""

from __future__ import annotations

import torch

from populora.lora import LoRAAdapter

R = 4
SHAPES = {"q_proj": (48, 32), "k_proj": (16, 32)}  # (d_out, d_in)


def make_adapter(
    seed: int,
    rank_used: int = R,
    layers: int = 3,
    dtype=torch.float64,
    alpha: float = 8.0,
    scale: float = 1.0,
) -> LoRAAdapter:
    """Random factors; only the first `rank_used` components are non-zero (so sums of two stay within rank R)."""
    g = torch.Generator().manual_seed(seed)
    mods = {}
    for i in range(layers):
        for proj, (d, n) in SHAPES.items():
            a = torch.randn(R, n, generator=g, dtype=torch.float64) / n**0.5
            b = torch.randn(d, R, generator=g, dtype=torch.float64) * 0.1 * scale
            b[:, rank_used:] = 0
            mods[f"model.layers.{i}.self_attn.{proj}"] = (a.to(dtype), b.to(dtype))
    return LoRAAdapter(modules=mods, alpha=alpha)


def regauge(p: LoRAAdapter, seed: int) -> LoRAAdapter:
    """The same deltas written with different factors: (B G, G^-1 A) for a random well-conditioned G."""
    g = torch.Generator().manual_seed(seed)
    mods = {}
    for k, (a, b) in p.modules.items():
        q, _ = torch.linalg.qr(torch.randn(R, R, generator=g, dtype=torch.float64))
        gm = q @ torch.diag(torch.rand(R, generator=g, dtype=torch.float64) + 0.5)
        mods[k] = (torch.linalg.solve(gm, a), b @ gm)
    return LoRAAdapter(modules=mods, alpha=p.alpha)


def deltas(p: LoRAAdapter) -> dict[str, torch.Tensor]:
    return {k: p.scale * (b.double() @ a.double()) for k, (a, b) in p.modules.items()}


def assert_same_delta(x: LoRAAdapter, y: LoRAAdapter | dict, tol: float = 1e-9) -> None:
    dy = y if isinstance(y, dict) else deltas(y)
    for k, dx in deltas(x).items():
        err = float((dx - dy[k]).norm() / dy[k].norm().clamp_min(1e-30))
        assert err < tol, f"{k}: relative delta error {err:.2e}"
