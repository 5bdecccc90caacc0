"""Shared linear algebra for the operators (P1-P6), all on one module slot.

Notation: a slot holds `A [r, n]` and `B [d, r]`; the operators work on the unscaled product `D = B @ A`
(every member shares alpha and r, so the scale alpha/r cancels). SVDs come as `(U [d, k], S [k], V [n, k])`
with `D = U diag(S) V^T` and S descending.

- `fsvd(B, A)`: exact SVD of `B @ A` from two thin QRs and an r x r core, never forming d x n (P1).
- `lincomb(terms, r)`: exact SVD of `sum c_k B_k A_k` by stacking factors, truncated to r (P2).
- `refactor(U, S, V, r, gen)`: balanced split `B = U sqrt(S)`, `A = sqrt(S) V^T`, deterministic signs,
  dead components revived with fresh orthogonal A rows (P3, P4).
- `tsvd(D, r, gen)`: truncated SVD of a dense matrix, randomized (seeded) for big ones (P5).
- `inner(B1, A1, B2, A2)`: `<B1 A1, B2 A2>_F` through r x r Gram matrices (P6).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# Components with sigma <= REVIVE_TOL * sigma_max are "dead": their B column is zeroed and the A row revived.
REVIVE_TOL = 1e-6
# Exact dense SVD up to this min(d, n) (or when r + oversample is a quarter of it); above, a seeded randomized
# range finder: ~8x fewer flops for a 512 x 3584 k_proj, 30-100x for 3584^2 (P5).
EXACT_SVD_MAX = 256


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with `n` torch threads (restored after).

    The factored maths is a stream of small LAPACK calls (QR of d x r, SVD of r x r) whose parallel regions
    cost more than they save; on a shared 2-core box a 3584 x 32 QR takes ~1 ms on one thread and 24 ms
    (median) on two. Big GEMMs of the dense path keep the caller's threads.
    """
    old = torch.get_num_threads()
    if old == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """fp64 stays fp64; everything else (bf16, fp16, fp32) is computed in fp32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def fsvd(b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact thin SVD of `b @ a` (b: [d, k], a: [k, n]) in O((d + n) k^2 + k^3); returns (U, S, V)."""
    qb, rb = torch.linalg.qr(b)
    qa, ra = torch.linalg.qr(a.T)
    uc, s, vch = torch.linalg.svd(rb @ ra.T)
    return qb @ uc, s, qa @ vch.T


def lincomb(
    terms: list[tuple[float, torch.Tensor, torch.Tensor]], r: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, float]:
    """Top-r SVD of `sum_k c_k B_k A_k` (exact before truncation).

    Returns (U, S, V, kept, total): `kept`/`total` are the squared Frobenius norms of the truncated and the
    full combination, so the truncation loss is sqrt(1 - kept / total).
    """
    b_cat = torch.cat([c * b for c, b, _ in terms], dim=1)
    a_cat = torch.cat([a for _, _, a in terms], dim=0)
    u, s, v = fsvd(b_cat, a_cat)
    total = float((s.double() ** 2).sum())
    u, s, v = u[:, :r], s[:r], v[:, :r]
    return u, s, v, float((s.double() ** 2).sum()), total


def sign_fix(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sklearn's svd_flip: make the largest-|.| entry of every column of U positive (V follows)."""
    if u.numel() == 0:
        return u, v
    idx = u.abs().argmax(dim=0)
    signs = torch.sign(u[idx, torch.arange(u.shape[1])])
    signs[signs == 0] = 1
    return u * signs, v * signs


def refactor(
    u: torch.Tensor, s: torch.Tensor, v: torch.Tensor, r: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [r, n], B [d, r]) with `B A = U_r diag(S_r) V_r^T`, balanced (B^T B = A A^T = diag S), dead comps revived.

    Components are re-sorted by S (descending); fewer than r columns are padded with dead components.
    """
    d, n = u.shape[0], v.shape[0]
    order = torch.argsort(s, descending=True)
    u, s, v = u[:, order[:r]], s[order[:r]].clamp_min(0), v[:, order[:r]]
    if s.numel() < r:  # tiny modules (d or n < r): pad with dead components
        pad = r - s.numel()
        u = torch.cat([u, u.new_zeros(d, pad)], dim=1)
        v = torch.cat([v, v.new_zeros(n, pad)], dim=1)
        s = torch.cat([s, s.new_zeros(pad)])
    u, v = sign_fix(u, v)
    smax = float(s.max()) if s.numel() else 0.0
    dead = s <= REVIVE_TOL * smax if smax > 0 else torch.ones_like(s, dtype=torch.bool)
    root = s.sqrt()
    b = u * root
    a = (v * root).T.contiguous()
    if dead.any():
        b[:, dead] = 0
        a[dead] = revive_rows(v[:, ~dead], int(dead.sum()), n, gen, a.dtype)
    return a, b


def revive_rows(
    v_alive: torch.Tensor, k: int, n: int, gen: torch.Generator, dtype: torch.dtype
) -> torch.Tensor:
    """k fresh A rows: random unit directions orthogonal to the live right vectors, at PEFT's init row norm.

    PEFT's kaiming-uniform init of A ([r, n], bound 1/sqrt(n)) gives rows of norm ~ 1/sqrt(3).
    """
    g = torch.randn(n, k, generator=gen, dtype=torch.float64).to(dtype=dtype, device=v_alive.device)
    if v_alive.numel():
        g = g - v_alive @ (v_alive.T @ g)
    if n - v_alive.shape[1] >= k:
        q, rr = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(rr)).masked_fill(torch.diagonal(rr) == 0, 1)
    else:  # not enough free directions (n < r): random, normalised
        q = g / g.norm(dim=0, keepdim=True).clamp_min(1e-30)
    return (q.T / math.sqrt(3.0)).contiguous()


def exact_svd_wanted(d: int, n: int, r: int, oversample: int = 8) -> bool:
    """True when `tsvd` takes the exact dense SVD (small modules), False for the randomized range finder."""
    return min(d, n) <= EXACT_SVD_MAX or 4 * (r + oversample) >= min(d, n)


def tsvd(
    dense: torch.Tensor,
    r: int,
    gen: torch.Generator,
    oversample: int = 8,
    power_iters: int = 2,
    start: torch.Tensor | None = None,
    sketch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-r SVD (U, S, V) of a dense matrix: exact when small, else Halko-Martinsson-Tropp with `gen`.

    `start` ([n, k], k >= r + oversample) replaces the Gaussian test matrix: the element-wise merges pass the
    top right singular vectors of D1 + D2, which already span the merged delta's signal, so no power iteration
    is needed (2 passes over the matrix instead of 6; measured captured energy vs the exact SVD within 3e-4 of
    the Gaussian start with 2 power iterations, better in most cases; docs/operators.md "How they work").
    `sketch` = `dense @ start` when the caller already computed it (block by block, while in cache).
    """
    d, n = dense.shape
    if exact_svd_wanted(d, n, r, oversample):
        with threads(1):
            u, s, vh = torch.linalg.svd(dense, full_matrices=False)
        return u[:, :r], s[:r], vh[:r].T
    k = r + oversample
    if start is not None:
        omega, power_iters = start.to(dtype=dense.dtype, device=dense.device), 0
    else:
        omega = torch.randn(n, k, generator=gen, dtype=torch.float64).to(
            dtype=dense.dtype, device=dense.device
        )
    q = _qr_q(sketch if sketch is not None and start is not None else dense @ omega)
    for _ in range(power_iters):
        z = _qr_q(dense.T @ q)
        q = _qr_q(dense @ z)
    small = q.T @ dense
    with threads(1):
        ub, s, v = _wide_svd(small)
    return (q @ ub)[:, :r], s[:r], v[:, :r]


def _wide_svd(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD (U, S, V) of a wide k x n matrix through the eigendecomposition of its k x k Gram matrix in
    float64 (LAPACK's SVD of a 40 x 3584 matrix took 4.3 ms here, the 40 x 40 eigendecomposition 0.6 ms; squaring the condition number costs nothing
    in float64 for the singular values rank r keeps). Components with S ~ 0 get V columns of zeros."""
    xd = x.double()
    lam, u = torch.linalg.eigh(xd @ xd.T)
    lam, u = lam.flip(0).clamp_min(0), u.flip(1)
    s = lam.sqrt()
    alive = s > s[0] * 1e-12 if s.numel() else s > 0
    v = (xd.T @ u) / torch.where(alive, s, 1.0)
    v[:, ~alive] = 0
    return u.to(x.dtype), s.to(x.dtype), v.to(x.dtype)


def _qr_q(x: torch.Tensor) -> torch.Tensor:
    with threads(1):
        return torch.linalg.qr(x)[0]


def inner(b1: torch.Tensor, a1: torch.Tensor, b2: torch.Tensor, a2: torch.Tensor) -> float:
    """Frobenius inner product <B1 A1, B2 A2> = sum((B1^T B2) * (A1 A2^T)), in fp64, without d x n matrices."""
    b1, a1, b2, a2 = (t.double() for t in (b1, a1, b2, a2))
    return float(((b1.T @ b2) * (a1 @ a2.T)).sum())


def gram3(
    b1: torch.Tensor, a1: torch.Tensor, b2: torch.Tensor, a2: torch.Tensor
) -> tuple[float, float, float]:
    """(||B1 A1||^2, ||B2 A2||^2, <B1 A1, B2 A2>) in fp64 with one conversion per factor."""
    b1, a1, b2, a2 = (t.double() for t in (b1, a1, b2, a2))
    bt = torch.cat([b1, b2], dim=1)
    at = torch.cat([a1, a2], dim=0)
    g = (bt.T @ bt) * (at @ at.T)  # blocks: [[D1.D1, D1.D2], [D2.D1, D2.D2]] summed
    k = b1.shape[1]
    return max(float(g[:k, :k].sum()), 0.0), max(float(g[k:, k:].sum()), 0.0), float(g[:k, k:].sum())


def sq_norm(b: torch.Tensor, a: torch.Tensor) -> float:
    return max(inner(b, a, b, a), 0.0)
