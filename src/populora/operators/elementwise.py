"""Element-wise merge maths on dense deltas (TIES trim / sign election / disjoint mean, DELLA keep probabilities,
exact Bernoulli masks from random bits).

These are the only parts of the operators that need a dense d x n matrix; they are kept free of LoRA details so
they can be tested on hand-made numbers (X6 and X7). At the 7B shape they run on
row blocks of ~1M entries (crossovers._dense_merge), so every function here works on any 2-D block.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_SAMPLE = 1 << 16  # sample size for the bracketed k-th largest selection


def kth_largest(v: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest value of the 1-D tensor `v` (1 <= k <= numel), exactly."""
    return kth_largest_and_count(v, k)[0]


def kth_largest_and_count(v: torch.Tensor, k: int) -> tuple[torch.Tensor, int]:
    """(the k-th largest value t of the 1-D tensor `v`, the number of entries > t), exactly.

    For big tensors a strided sample brackets the answer, and only the entries inside the bracket are
    selected exactly: ~5x cheaper than `kthvalue` on 12M entries. Falls back to `kthvalue` if the bracket misses.
    The count comes from the same passes (TIES needs it for ties at the threshold).
    """
    n = v.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k={k} outside [1, {n}]")
    if n <= 4 * _SAMPLE:
        t = v.kthvalue(n - k + 1).values
        return t, int(torch.count_nonzero(v > t))
    # a fixed-seed random sample: a regular stride over a low-rank matrix is biased and misses the bracket
    idx = torch.randint(n, (_SAMPLE,), generator=torch.Generator().manual_seed(0)).to(v.device)
    sample = v[idx].sort().values
    m = sample.numel()
    frac = k / n
    margin = 6 * math.sqrt(frac * (1 - frac) / m) + 4 / m
    lo_i, hi_i = int((1 - frac - margin) * m), int(math.ceil((1 - frac + margin) * m))
    hi = sample[hi_i] if hi_i < m else torch.tensor(math.inf, dtype=v.dtype)
    # two passes over v: everything above the bracket's low end (~k entries), then work on that subset only
    top = v[v > sample[lo_i]] if lo_i >= 0 else v
    above = int(torch.count_nonzero(top > hi))
    if above < k:
        band = top[top <= hi]
        need = k - above
        if need <= band.numel():
            t = band.kthvalue(band.numel() - need + 1).values
            return t, above + int(torch.count_nonzero(band > t))
    t = v.kthvalue(n - k + 1).values
    return t, int(torch.count_nonzero(v > t))


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


class TopK:
    """`trim_topk` of a whole matrix applied block by block: the threshold is found once on the matrix, then
    `trim(block)` keeps the block's entries above it, plus entries equal to it by lowest flat index until exactly
    floor(density * numel) are kept overall. Blocks must be row blocks passed in row order."""

    def __init__(self, d: torch.Tensor, density: float) -> None:
        n = d.numel()
        self.keep = int(density * n)
        self.mode = "all" if self.keep >= n else "none" if self.keep <= 0 else "trim"
        if self.mode == "trim":
            self.thr, greater = kth_largest_and_count(d.abs().reshape(-1), self.keep)
            self.ties_left = self.keep - greater

    def trim(self, block: torch.Tensor) -> torch.Tensor:
        if self.mode == "all":
            return block
        if self.mode == "none":
            return torch.zeros_like(block)
        mag = block.abs()
        # 1 where |x| > thr, else 0, in float arithmetic (exact: x - thr is 0 only if x == thr; bool-mask
        # multiplies are ~5x slower on CPU)
        keep = (mag - self.thr).sign_().clamp_(min=0)
        if self.ties_left > 0:  # float32 repeats are common at 12M entries: lowest index first
            eq = (mag == self.thr).reshape(-1).nonzero().squeeze(1)[: self.ties_left]
            keep.view(-1)[eq] = 1
            self.ties_left -= eq.numel()
        return keep.mul_(block)


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


def row_order(mag: torch.Tensor) -> torch.Tensor:
    """Column indices that sort every row of `mag` (>= 0) ascending, ties by column; int64, on the CPU.

    float32 magnitudes: one value sort of the keys `bits(|x|) << b | column` (non-negative floats order like
    their bit patterns), which numpy sorts with SIMD ~2x faster than an `argsort` of the floats.
    """
    n = mag.shape[1]
    m = mag.detach().cpu()
    if m.dtype == torch.float32 and n > 1:
        b = (n - 1).bit_length()
        key = ((m.contiguous().view(torch.int32).to(torch.int64) << b) | torch.arange(n)).numpy()
        _sort_rows_threaded(key)
        return torch.from_numpy(key & ((1 << b) - 1))
    return torch.from_numpy(np.argsort(m.numpy(), axis=1, kind="stable"))


def _sort_rows_threaded(key: np.ndarray) -> None:
    """Sort every row of `key` in place, the rows split over torch's thread count (numpy's sort drops the GIL)."""
    parts = max(1, min(torch.get_num_threads(), key.shape[0] // 64))
    if parts == 1:
        key.sort(axis=1)
        return
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, key.shape[0], parts + 1).astype(int)
    with ThreadPoolExecutor(parts) as ex:
        list(ex.map(lambda i: key[bounds[i] : bounds[i + 1]].sort(axis=1), range(parts)))


def row_ranks(mag: torch.Tensor) -> torch.Tensor:
    """Normalised ascending rank of every entry within its row, in [0, 1] (0 = smallest |.|)."""
    n = mag.shape[1]
    idx = row_order(mag).to(mag.device)
    ranks = torch.empty_like(idx)  # the inverse permutation turns order into rank
    ranks.scatter_(1, idx, torch.arange(n, device=mag.device).expand_as(idx))
    return ranks.to(mag.dtype) / max(n - 1, 1)


def della_keep_prob(d: torch.Tensor, density: float, window: float) -> torch.Tensor:
    """DELLA MAGPRUNE keep probability p = (density - window) + 2 * window * rank_row(|d|), in [density +- window]."""
    return (density - window) + (2 * window) * row_ranks(d.abs())


def della_sample(d: torch.Tensor, density: float, window: float, gen: torch.Generator) -> torch.Tensor:
    """M * d / p with M ~ Bernoulli(p) (p from `della_keep_prob`): unbiased, magnitude-biased dropping."""
    p = della_keep_prob(d, density, window)
    return bernoulli(p, gen).mul_(d).div_(p)


def uniform16(numel: int, gen: torch.Generator) -> torch.Tensor:
    """`numel` int16 values, each uniform on [-32768, 32767] (16 random bits), from int64 words on the CPU.

    One 64-bit draw gives four entries: ~4x cheaper than `torch.rand`, which spends a 32-bit draw per float.
    `random_(-2**63, 2**63 - 1)` covers all 64 bits (the default `random_()` leaves the top bit 0); it misses
    one of 2^64 words, a bias of 2^-64 per entry.
    """
    words = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1, generator=gen)
    return words.view(torch.int16)[:numel]


def bernoulli(
    prob: float | torch.Tensor,
    gen: torch.Generator,
    shape: tuple[int, ...] | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """0/1 weights (a float tensor), 1 with probability `prob` (a float, or one per entry), exactly.

    With U uniform on {0..65535} (16 random bits) and t = 65536 * prob: 1 iff U < floor(t), or U == floor(t)
    and a float64 uniform V < frac(t) (drawn only for those ~1/65536 ties). So P(1) = floor(t)/65536 +
    frac(t)/65536 = prob: as exact as `torch.rand(...) < prob` (which rounds prob to 2^-24) or better.
    Float arithmetic instead of bool masks: clamp(t - U, 0, 1) is 1 below the threshold, 0 above it and
    frac(t) on a tie, in three in-place passes (bool masking kernels are ~5x slower on CPU). Drawn on the CPU
    from `gen` (children do not depend on the device) and moved next to a tensor `prob`.
    """
    if isinstance(prob, torch.Tensor):
        shape, dev, dtype = tuple(prob.shape), prob.device, prob.dtype
    else:
        dev = torch.device("cpu")
    assert shape is not None, "bernoulli needs `shape` for a scalar probability"
    w = uniform16(math.prod(shape), gen).view(shape).to(device=dev, dtype=dtype)  # exact: |values| <= 2^15
    if isinstance(prob, torch.Tensor):
        w.neg_().add_(prob * 65536.0 - 32768.0)  # t - U: exact (power-of-two scaling, integers < 2^16)
    else:
        w.neg_().add_(float(prob) * 65536.0 - 32768.0)
    w.clamp_(0.0, 1.0)
    if isinstance(prob, torch.Tensor) or (float(prob) * 65536.0) % 1:
        ties = ((w > 0) & (w < 1)).nonzero(as_tuple=True)
        if ties[0].numel():
            v = torch.rand(ties[0].numel(), generator=gen, dtype=torch.float64).to(dev)
            w[ties] = (v < w[ties].double()).to(dtype)
    return w
