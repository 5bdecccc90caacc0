"""Crossovers X1-X9 and identity controls I1, I2 (docs/operators.md).

Merges happen on effective deltas `D_k = B_k A_k`, never on factors separately (factor averages create cross
terms). Linear merges (X4, X5, X8) use the exact factored SVD of the stacked factors; element-wise ones (X1,
X6, X7, X9) form the dense delta and take a truncated SVD (randomized and seeded for big modules). Results are
refactored to rank r with a balanced split and deterministic signs.

Parent order: for X4 and I2, `parents[0]` is the better parent (higher rating).
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import torch

from populora.lora.adapter import LoRAAdapter
from populora.operators import scratch
from populora.operators.elementwise import (
    BlockTopK,
    bernoulli,
    della_sample,
    della_sample_binned,
    disjoint_mean2_,
)
from populora.operators.linalg import (
    compute_dtype,
    exact_svd_wanted,
    fsvd,
    gram3,
    lincomb,
    refactor,
    sq_norm,
    threads,
    tsvd,
)
from populora.operators.registry import OperatorError, Rng, check_fraction, check_nonneg, operator


def _cast(a: torch.Tensor, b: torch.Tensor, like_a: torch.Tensor, like_b: torch.Tensor):
    return (
        a.to(dtype=like_a.dtype, device=like_a.device).contiguous(),
        b.to(dtype=like_b.dtype, device=like_b.device).contiguous(),
    )


def _pair(p1: LoRAAdapter, p2: LoRAAdapter, name: str):
    """Both parents' factors of slot `name` in the compute dtype: (a1, b1, a2, b2, like_a, like_b)."""
    a1, b1 = p1.modules[name]
    a2, b2 = p2.modules[name]
    cd = compute_dtype(a1)
    dev = a1.device
    return a1.to(cd), b1.to(cd), a2.to(device=dev, dtype=cd), b2.to(device=dev, dtype=cd), a1, b1


class _Loss:
    """Accumulates the global truncation loss tau = sqrt(1 - sum kept / sum total) over slots."""

    def __init__(self) -> None:
        self.kept = self.total = 0.0

    def add(self, kept: float, total: float) -> None:
        self.kept += kept
        self.total += total

    def info(self) -> dict:
        tau = math.sqrt(max(0.0, 1 - self.kept / self.total)) if self.total > 0 else 0.0
        return {"truncation_loss": tau}


def _linear(parents, rng: Rng, coeffs_of, extra: dict | None = None):
    """child = rank-r truncation of c0 D0 + c1 D1 per slot, coefficients from `coeffs_of(name, a0, b0, a1, b1)`."""
    p1, p2 = parents
    r = p1.rank
    out, loss = {}, _Loss()
    for name in p1.modules:
        a1, b1, a2, b2, la, lb = _pair(p1, p2, name)
        c1, c2 = coeffs_of(name, a1, b1, a2, b2)
        u, s, v, kept, total = lincomb([(c1, b1, a1), (c2, b2, a2)], r)
        out[name] = _cast(*refactor(u, s, v, r, rng.gen(name)), la, lb)
        loss.add(kept, total)
    return out, {**loss.info(), **(extra or {})}


# Entries per row block of the element-wise merges (2 MB in float32): each worker's temporaries (masks, ranks,
# products; ~8 scratch buffers) stay near the core; 1M-entry blocks measured no faster, 256k slower.
BLOCK_ENTRIES = 1 << 19


def _dense_merge(parents, rng: Rng, merge, prepare=None, stats=None, oversample: int = 8):
    """child = rank-r truncated SVD of the element-wise merge of D1 and D2, per slot.

    Per slot: both deltas are formed once, into two buffers reused across slots (a fresh 51 MB tensor per
    step costs more in page faults than the arithmetic). Whole-slot statistics that the factors give exactly
    (X9's eps) come from `stats(b1, a1, b2, a2)` as `ctx`; those that need the entries (TIES thresholds) from
    `prepare(b1, a1, b2, a2)`, an object whose `survey(blk1, blk2, row0)` runs on
    every row block as it is formed and whose `finish(d1, d2, surveys)` turns the surveys into `ctx`; then
    `merge(blk1, blk2, gen, ctx, row0)` runs on the row blocks in place into D1 (merges without statistics
    form each block where they merge it, so it stays in cache). Each block has its own generator
    `(slot, first row)`, so the result does not depend on the order the blocks run in: they run on a pool of
    one-thread workers, one per torch thread, because the merges are chains of short element-wise kernels and
    half of them (random bits, histograms, gathers, compactions) are single-threaded in torch. The truncated
    SVD of big slots starts from the top right singular vectors of D1 + D2 (2 passes over the merge, see tsvd).
    """
    p1, p2 = parents
    r = p1.rank
    out, loss = {}, _Loss()
    first = next(iter(p1.modules.values()))
    cd = compute_dtype(first[0])
    numel = max(b.shape[0] * a.shape[1] for a, b in p1.modules.values())
    buf1 = torch.empty(numel, dtype=cd, device=first[0].device)
    buf2 = torch.empty_like(buf1)
    workers = torch.get_num_threads() if first[0].device.type == "cpu" else 1
    names = list(p1.modules)

    def setup(name: str) -> _Slot:
        return _Slot.make(p1, p2, name, rng, r, oversample, prepare, stats)

    with ThreadPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
        slot = setup(names[0])
        for i, name in enumerate(names):
            d, n = slot.shape
            bufs = (buf1[: d * n].view(d, n), buf2[: d * n].view(d, n))
            # the next slot's set-up (factored SVD of the start, TIES samples) runs on this thread while the
            # pool merges this slot's blocks
            later = {}
            overlap = (
                (lambda nxt=names[i + 1], later=later: later.setdefault("slot", setup(nxt)))
                if i + 1 < len(names)
                else None
            )
            a, b, kept, total = _merge_slot(pool, rng, slot, bufs, merge, r, oversample, overlap)
            loss.add(kept, total)
            out[name] = _cast(a, b, slot.la, slot.lb)
            slot = later.get("slot") or (setup(names[i + 1]) if i + 1 < len(names) else None)
    scratch.release()  # the pool's threads took theirs with them
    return out, loss.info()


class _Slot:
    """What `_merge_slot` needs of one module slot, computed from the factors alone (no d x n matrix)."""

    @classmethod
    def make(cls, p1, p2, name, rng: Rng, r: int, oversample: int, prepare, stats) -> _Slot:
        self = cls()
        a1, b1, a2, b2, self.la, self.lb = _pair(p1, p2, name)
        self.name, self.factors = name, (b1, a1, b2, a2)
        self.shape = (b1.shape[0], a1.shape[1])
        self.gen = rng.gen(name)
        exact = exact_svd_wanted(*self.shape, r, oversample)
        with threads(1):
            self.start = None if exact else _signal_start(b1, a1, b2, a2, r + oversample, self.gen)
            self.prep = prepare(b1, a1, b2, a2) if prepare is not None else None
            self.ctx = stats(b1, a1, b2, a2) if stats is not None else None
        return self


def _merge_slot(pool, rng: Rng, slot: _Slot, bufs, merge, r: int, oversample: int, overlap=None):
    """One slot of `_dense_merge`: the child's (A, B) and the merge's kept and total squared norms.
    `overlap()` runs on the calling thread while the pool merges the blocks."""
    b1, a1, b2, a2 = slot.factors
    d1, d2 = bufs
    d, n = d1.shape
    g, start, prep, ctx, name = slot.gen, slot.start, slot.prep, slot.ctx, slot.name
    y = None if start is None else d1.new_empty(d, start.shape[1])
    rows = max(1, BLOCK_ENTRIES // n)

    def form(i: int):
        torch.matmul(b1[i : i + rows], a1, out=d1[i : i + rows])
        torch.matmul(b2[i : i + rows], a2, out=d2[i : i + rows])
        return prep.survey(d1[i : i + rows], d2[i : i + rows], i)

    if prep is not None:
        ctx = prep.finish(d1, d2, _run_blocks(pool, form, d, rows, overlap))
        overlap = None

    def block(i: int) -> float:
        blk1, blk2 = d1[i : i + rows], d2[i : i + rows]
        if prep is None:  # form the block where it is merged: it stays in cache for the merge
            torch.matmul(b1[i : i + rows], a1, out=blk1)
            torch.matmul(b2[i : i + rows], a2, out=blk2)
        merge(blk1, blk2, rng.gen(name, i), ctx, i)
        if y is not None:  # the range finder's first pass, on the block while it is in cache
            torch.matmul(blk1, start, out=y[i : i + rows])
        return float(torch.linalg.vector_norm(blk1)) ** 2

    total = sum(_run_blocks(pool, block, d, rows, overlap))
    u, s, v = tsvd(d1, r, g, oversample=oversample, start=start, sketch=y)
    with threads(1):
        a, b = refactor(u, s, v, r, g)
    return a, b, float((s.double() ** 2).sum()), total


def _run_blocks(pool: ThreadPoolExecutor | None, block, d: int, rows: int, overlap=None) -> list:
    """[block(i) for every row block start i], on the pool's workers with one torch thread each (or inline);
    `overlap()`, if given, runs on the calling thread (also with one torch thread) while they work."""
    starts = range(0, d, rows)
    if pool is None:
        out = [block(i) for i in starts]
        if overlap is not None:
            overlap()
        return out
    with threads(1):
        futures = [pool.submit(block, i) for i in starts]
        if overlap is not None:
            overlap()
        return [f.result() for f in futures]


def _signal_start(b1, a1, b2, a2, k: int, g: torch.Generator) -> torch.Tensor:
    """[n, k] orthonormal start for the range finder: top right singular vectors of D1 + D2 (factored, exact),
    padded with Gaussian columns when D1 + D2 has fewer than k of them (rank < k)."""
    with threads(1):
        _, _, v, _, _ = lincomb([(1.0, b1, a1), (1.0, b2, a2)], k)
    if v.shape[1] < k:
        extra = torch.randn(v.shape[0], k - v.shape[1], generator=g, dtype=torch.float64)
        v = torch.cat([v, extra.to(dtype=v.dtype, device=v.device)], dim=1)
    return v


@operator("X1", 2, "crossover", dense=True)
def x1_dare(parents, rng: Rng, *, p: float = 0.5, combine: str = "sum", space: str = "delta"):
    """D = w (M1 * D1 + M2 * D2) / (1 - p), M_k ~ Bernoulli(1 - p) per entry, w = 1 (combine='sum', the paper's main text) or 1/2 ('mean'), then truncated SVD to rank r."""
    p = check_fraction("X1", "p", p, hi_open=True)
    if space not in ("delta", "factor"):
        raise OperatorError(
            f"operator X1: space={space!r} must be 'delta' (default, gauge-invariant) or 'factor'."
        )
    if combine not in ("sum", "mean"):
        raise OperatorError(
            f"operator X1: combine={combine!r} must be 'sum' (paper main text: drop, rescale, then sum) "
            "or 'mean' (paper appendix: then averaged)."
        )
    w = 1.0 if combine == "sum" else 0.5
    if space == "factor":
        return _dare_factor(parents, rng, p, w)
    if p == 0:  # no drop: exactly task arithmetic (X5 for 'mean'), same code path
        return _linear(parents, rng, lambda *_: (w, w))

    def merge(d1, d2, g, ctx, row0):  # in place on our own buffers; masks from 16 random bits per entry
        mask = scratch.buffer("dare_mask", tuple(d1.shape), d1.dtype, d1.device)
        d1.mul_(bernoulli(1 - p, g, tuple(d1.shape), d1.dtype, out=mask).to(d1.device))
        d2.mul_(bernoulli(1 - p, g, tuple(d2.shape), d2.dtype, out=mask).to(d2.device))
        d1.add_(d2).mul_(w / (1 - p))

    return _dense_merge(parents, rng, merge)


def _dare_factor(parents, rng: Rng, p: float, w: float = 0.5):
    """DARE on the factors (A_c = w * sum of masked A_k / (1 - p), B_c likewise): valid only for same-gauge parents."""
    p1, p2 = parents
    out = {}
    for name in p1.modules:
        a1, b1, a2, b2, la, lb = _pair(p1, p2, name)
        g = rng.gen(name)

        a1, a2, b1, b2 = (_drop(t, p, g) for t in (a1, a2, b1, b2))
        out[name] = _cast(w * (a1 + a2), w * (b1 + b2), la, lb)
    return out, {}


def _drop(t: torch.Tensor, p: float, g: torch.Generator) -> torch.Tensor:
    return torch.where(torch.rand(t.shape, generator=g, dtype=t.dtype).to(t.device) < p, 0, t) / (1 - p)


_LAYER = re.compile(r"\.(\d+)\.")


@operator("X2", 2, "crossover")
def x2_layerwise(parents, rng: Rng, *, prob: float = 0.5, per: str = "slot"):
    """Per slot (or per layer with per='layer'): (A, B) copied together from parent 1 with probability prob, else from parent 2."""
    prob = check_fraction("X2", "prob", prob)
    if per not in ("slot", "layer"):
        raise OperatorError(f"operator X2: per={per!r} must be 'slot' or 'layer'.")
    p1, p2 = parents
    g = rng.gen("coins")
    coins: dict[str, bool] = {}
    out, from_first = {}, []
    for name in p1.modules:
        m = _LAYER.search(name) if per == "layer" else None
        key = m.group(1) if m else name
        if key not in coins:
            coins[key] = bool(torch.rand(1, generator=g) < prob)
        a0, b0 = p1.modules[name]
        src = p1 if coins[key] else p2
        a, b = src.modules[name]
        out[name] = _cast(a.clone(), b.clone(), a0, b0)
        if coins[key]:
            from_first.append(name)
    return out, {"from_parent_1": from_first}


@operator("X3", 2, "crossover")
def x3_subspace(parents, rng: Rng, *, k: int | str = "half"):
    """Top-k SVD components of D1 plus the top r-k of D2 projected off them, (I - U_k U_k^T) D2 (I - V_k V_k^T); no truncation loss."""
    p1, p2 = parents
    r = p1.rank
    if isinstance(k, str) and k not in ("half", "random"):
        raise OperatorError(f"operator X3: k={k!r} must be an int in [0, {r}], 'half' or 'random'.")
    if not isinstance(k, str) and not 0 <= int(k) <= r:
        raise OperatorError(f"operator X3: k={k} must lie in [0, r={r}].")
    out, ks = {}, {}
    for name in p1.modules:
        a1, b1, a2, b2, la, lb = _pair(p1, p2, name)
        g = rng.gen(name)
        if k == "half":
            kk = max(1, r // 2) if r > 1 else 1
        elif k == "random":
            kk = 1 + int(torch.randint(max(r - 1, 1), (1,), generator=g)) if r > 1 else 1
        else:
            kk = int(k)
        u1, s1, v1 = fsvd(b1, a1)
        kk = min(kk, s1.numel())
        uk, vk = u1[:, :kk], v1[:, :kk]
        b2p = b2 - uk @ (uk.T @ b2)
        a2p = a2 - (a2 @ vk) @ vk.T
        u2, s2, v2 = fsvd(b2p, a2p)
        m = r - kk
        u = torch.cat([uk, u2[:, :m]], dim=1)
        s = torch.cat([s1[:kk], s2[:m]])
        v = torch.cat([vk, v2[:, :m]], dim=1)
        out[name] = _cast(*refactor(u, s, v, r, g), la, lb)
        ks[name] = kk
    return out, {"k": ks}


@operator("X4", 2, "crossover")
def x4_extrapolate(
    parents, rng: Rng, *, t: float = 1.5, norm_cap: float | None = 1.5, cos_gate: float | None = 0.5
):
    """D = t D1 + (1 - t) D2 with t > 1, extrapolating past parent 1 (the better one) away from parent 2; declines (applies X5, reported) if cos(D1, D2) < cos_gate."""
    t = float(t)
    if norm_cap is not None:
        check_nonneg("X4", "norm_cap", norm_cap)
    p1, p2 = parents
    cos = _adapter_cos(p1, p2)
    if cos_gate is not None and cos < float(cos_gate):
        # Extrapolating between unrelated parents is destructive (measured cos -0.27 with parent 1). X4 then
        # declines and applies X5 with its own seed stream, so the lineage names what was done and
        # apply("X5", parents, seed, weight=0.5) rebuilds this very child.
        out, info = x5_linear.__wrapped__(parents, Rng("X5", rng.seed), weight=0.5)
        reason = f"cos(D1, D2) = {cos:.3f} < cos_gate = {float(cos_gate):g}: averaged (X5) instead"
        return out, {
            **info,
            "cos": cos,
            "extrapolated": False,
            "applied": {"operator": "X5", "params": {"weight": 0.5}, "reason": reason},
        }
    r = p1.rank
    out, loss = {}, _Loss()
    capped = 0
    for name in p1.modules:
        a1, b1, a2, b2, la, lb = _pair(p1, p2, name)
        u, s, v, kept, total = lincomb([(t, b1, a1), (1 - t, b2, a2)], r)
        if norm_cap is not None and total > 0:
            limit = norm_cap * math.sqrt(max(sq_norm(b1, a1), sq_norm(b2, a2)))
            if math.sqrt(total) > limit:
                s = s * (limit / math.sqrt(total))
                capped += 1
        out[name] = _cast(*refactor(u, s, v, r, rng.gen(name)), la, lb)
        loss.add(kept, total)
    return out, {**loss.info(), "cos": cos, "extrapolated": True, "norm_capped_slots": capped}


def _adapter_cos(p1: LoRAAdapter, p2: LoRAAdapter) -> float:
    """cos(D1, D2) over the whole adapter (all slots' deltas concatenated), in fp64 via r x r Gram matrices."""
    n1 = n2 = ip = 0.0
    for name in p1.modules:
        a1, b1, a2, b2, _, _ = _pair(p1, p2, name)
        s1, s2, x = gram3(b1, a1, b2, a2)
        n1, n2, ip = n1 + s1, n2 + s2, ip + x
    return ip / math.sqrt(n1 * n2) if n1 > 0 and n2 > 0 else 0.0


@operator("X5", 2, "crossover")
def x5_linear(parents, rng: Rng, *, weight: float = 0.5):
    """D = weight D1 + (1 - weight) D2 (task arithmetic), exact SVD of the stacked factors truncated to rank r."""
    w = float(weight)
    return _linear(parents, rng, lambda *_: (w, 1 - w))


@operator("X6", 2, "crossover", dense=True)
def x6_ties(parents, rng: Rng, *, density: float = 0.2, lam: float = 1.0):
    """D = lam * disjoint_mean(trim_density(D1), trim_density(D2)) with signs elected by sgn(sum), then truncated SVD."""
    density = check_fraction("X6", "density", density, lo_open=True)

    def merge(d1, d2, g, ctx, row0):
        merged = disjoint_mean2_(ctx[0].trim(d1, row0), ctx[1].trim(d2, row0))  # into d1
        if lam != 1:
            merged.mul_(lam)

    return _dense_merge(parents, rng, merge, lambda *factors: _TiesThresholds(factors, density))


class _TiesThresholds:
    """X6's whole-slot statistics: the top-k threshold of |D1| and |D2|, found while the blocks are formed."""

    def __init__(self, factors, density: float) -> None:
        b1, a1, b2, a2 = factors
        self.finders = [
            BlockTopK(_sample_abs(b, a), (b.shape[0], a.shape[1]), density) for b, a in ((b1, a1), (b2, a2))
        ]

    def survey(self, blk1, blk2, row0):
        return self.finders[0].survey(blk1, row0), self.finders[1].survey(blk2, row0)

    def finish(self, d1, d2, surveys):
        return [self.finders[k].finish([s[k] for s in surveys], d) for k, d in enumerate((d1, d2))]


def _sample_abs(b: torch.Tensor, a: torch.Tensor, size: int = 1 << 15) -> torch.Tensor:
    """|B A| at `size` uniformly random positions (independent uniform row and column, fixed seed), from the
    factors: the matrix is not needed. 32k samples bracket a TIES threshold within +-1.3% of the entries at six
    standard deviations."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(b.shape[0], (size,), generator=gen).to(b.device)
    cols = torch.randint(a.shape[1], (size,), generator=gen).to(b.device)
    # rows of A^T: a strided gather of A's columns costs ~10x more
    return b.index_select(0, rows).mul_(a.T.contiguous().index_select(0, cols)).sum(dim=1).abs_()


@operator("X7", 2, "crossover", dense=True)
def x7_della(
    parents,
    rng: Rng,
    *,
    density: float = 0.7,
    window: float = 0.14,
    lam: float = 1.0,
    ranks: str = "binned",
):
    """D = lam * disjoint_mean(M_k * D_k / p_k), M_k ~ Bernoulli(p_k), p = density - window + 2 window rank_row(|D_k|); ranks='binned' (default, a 512-bin histogram per row, ~8x cheaper) or 'exact' (a full sort)."""
    density, window = float(density), float(window)
    if not (0 < density - window and density + window <= 1 and window >= 0):
        raise OperatorError(
            f"operator X7: need 0 < density - window and density + window <= 1 "
            f"(got density={density}, window={window})."
        )
    if ranks not in ("binned", "exact"):
        raise OperatorError(
            f"operator X7: ranks={ranks!r} must be 'binned' (default: a histogram per row, exact up to "
            "entries sharing one of 512 bins) or 'exact' (a full sort of every row; slower)."
        )
    sample = della_sample_binned if ranks == "binned" else della_sample

    def merge(d1, d2, g, ctx, row0):
        merged = disjoint_mean2_(sample(d1, density, window, g), sample(d2, density, window, g))
        if lam != 1:
            merged.mul_(lam)
        if merged is not d1:  # the binned sampler works in place; the exact one returns a new tensor
            d1.copy_(merged)

    return _dense_merge(parents, rng, merge)


@operator("X8", 2, "crossover")
def x8_slerp(parents, rng: Rng, *, t: float = 0.5, dot_threshold: float = 0.9995):
    """D = sin((1-t) theta)/sin(theta) D1 + sin(t theta)/sin(theta) D2, cos(theta) = <D1, D2>/(|D1||D2|); lerp if near-parallel or ~0 norm."""
    t = float(t)
    lerped: list[str] = []

    def coeffs(name, a1, b1, a2, b2):
        sq1, sq2, ip = gram3(b1, a1, b2, a2)
        n1, n2 = math.sqrt(sq1), math.sqrt(sq2)
        if min(n1, n2) < 1e-8 * max(n1, n2, 1e-30):
            lerped.append(name)
            return 1 - t, t
        c = ip / (n1 * n2)
        if abs(c) > dot_threshold:
            lerped.append(name)
            return 1 - t, t
        theta = math.acos(max(-1.0, min(1.0, c)))
        return math.sin((1 - t) * theta) / math.sin(theta), math.sin(t * theta) / math.sin(theta)

    out, info = _linear(parents, rng, coeffs)
    return out, {**info, "lerp_slots": lerped}


@operator("X9", 2, "crossover", dense=True)
def x9_fisher(parents, rng: Rng, *, eps_rel: float = 1e-6, normalize: bool = False):
    """D = (F1 D1 + F2 D2) / (F1 + F2 + eps), F_k = D_k^2 (squared-weight Fisher proxy), eps = eps_rel * mean(F1 + F2)."""
    eps_rel = check_nonneg("X9", "eps_rel", eps_rel)

    def stats(b1, a1, b2, a2):  # whole-slot means of F_k = D_k^2, from the factors (exact, no pass over D)
        m1 = sq_norm(b1, a1) / (b1.shape[0] * a1.shape[1])
        m2 = sq_norm(b2, a2) / (b2.shape[0] * a2.shape[1])
        c1, c2 = (1 / max(m1, 1e-30), 1 / max(m2, 1e-30)) if normalize else (1.0, 1.0)
        eps = eps_rel * (c1 * m1 + c2 * m2)
        return c1, c2, eps if eps > 0 else 1e-30

    def merge(d1, d2, g, ctx, row0):
        c1, c2, eps = ctx
        f1 = torch.mul(d1, d1, out=scratch.buffer("fisher_1", tuple(d1.shape), d1.dtype, d1.device))
        f2 = torch.mul(d2, d2, out=scratch.buffer("fisher_2", tuple(d2.shape), d2.dtype, d2.device))
        if normalize:  # invariance to the parents' overall scales
            f1.mul_(c1)
            f2.mul_(c2)
        d1.mul_(f1)
        d2.mul_(f2)
        d1.add_(d2).div_(f1.add_(f2).add_(eps))

    return _dense_merge(parents, rng, merge, stats=stats)


@operator("I1", 1, "identity")
def i1_copy(parents, rng: Rng):
    """child = parent (bit-exact copy; the mutation noise floor)."""
    (p,) = parents
    return {k: (a.clone(), b.clone()) for k, (a, b) in p.modules.items()}, {}


@operator("I2", 2, "identity")
def i2_copy_first(parents, rng: Rng):
    """child = parent 1 (bit-exact copy of the better parent; the crossover noise floor)."""
    p = parents[0]
    return {k: (a.clone(), b.clone()) for k, (a, b) in p.modules.items()}, {}
