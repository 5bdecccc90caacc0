"""Element-wise merge maths on dense deltas (TIES trim / sign election / disjoint mean, DELLA keep probabilities,
exact Bernoulli masks from random bits).

These are the only parts of the operators that need a dense d x n matrix; they are kept free of LoRA details so
they can be tested on hand-made numbers (X6 and X7). At the 7B shape they run on
row blocks of ~0.5M entries (crossovers._dense_merge), so every function here works on any 2-D block.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from populora.operators import scratch

_SAMPLE = 1 << 16  # sample size for the bracketed k-th largest selection


def kth_largest(v: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest value of the 1-D tensor `v` (1 <= k <= numel), exactly."""
    return kth_largest_and_count(v, k)[0]


def kth_largest_and_count(v: torch.Tensor, k: int) -> tuple[torch.Tensor, int]:
    """(the k-th largest value t of the 1-D tensor `v`, the number of entries > t), exactly."""
    t, ties = kth_largest_and_ties(v, k)
    return t, k - ties.numel()


def kth_largest_and_ties(v: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the k-th largest value t of the 1-D tensor `v`, flat positions of the entries equal to t that complete
    the top k), exactly: the entries > t plus those positions (the lowest-index ties) are exactly k entries.

    For big tensors a fixed-seed sample brackets the answer, and only the entries inside the bracket are
    selected exactly: ~5x cheaper than `kthvalue` on 12M entries. Falls back to `kthvalue` if the bracket misses.
    """
    n = v.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k={k} outside [1, {n}]")
    if n > 4 * _SAMPLE:
        # a fixed-seed random sample: a regular stride over a low-rank matrix is biased and misses the bracket
        idx = torch.randint(n, (_SAMPLE,), generator=torch.Generator().manual_seed(0)).to(v.device)
        lo, hi = sample_bracket(v[idx], k, n)
        # one pass over v: the positions above the bracket's low end (~k entries); then work on those only
        pos = (v > lo).nonzero().squeeze(1)
        top = v.index_select(0, pos)
        found = _select_in_band(k, int(torch.count_nonzero(top > hi)), top[top <= hi], pos[top <= hi])
        if found is not None:
            return found
    t = v.kthvalue(n - k + 1).values
    greater = int(torch.count_nonzero(v > t))
    return t, (v == t).nonzero().squeeze(1)[: k - greater]


def sample_bracket(sample: torch.Tensor, k: int, n: int) -> tuple[float, float]:
    """(lo, hi) such that the k-th largest of n values lies in (lo, hi] with overwhelming probability, from a
    uniform random sample of those values (six standard deviations of the sample quantile, plus slack)."""
    sample = sample.sort().values
    m = sample.numel()
    frac = k / n
    margin = 6 * math.sqrt(frac * (1 - frac) / m) + 4 / m
    lo_i, hi_i = int((1 - frac - margin) * m), int(math.ceil((1 - frac + margin) * m))
    lo = float(sample[lo_i]) if lo_i >= 0 else -math.inf
    hi = float(sample[hi_i]) if hi_i < m else math.inf
    return lo, hi


def _select_in_band(
    k: int, above: int, band: torch.Tensor, band_pos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The k-th largest and its completing ties, given `above` entries > the band and the band's values with
    their flat positions (ascending); None when the k-th largest is not in the band (the bracket missed)."""
    need = k - above
    if not 0 < need <= band.numel():
        return None
    t = band.kthvalue(band.numel() - need + 1).values
    greater = above + int(torch.count_nonzero(band > t))
    return t, band_pos[(band == t).nonzero().squeeze(1)][: k - greater]


def trim_topk(d: torch.Tensor, density: float) -> torch.Tensor:
    """Keep exactly floor(density * numel) entries of largest |.| (ties broken by lowest index), zero the rest."""
    return TopK(d, density).trim(d.clone())


class TopK:
    """`trim_topk` of a whole matrix applied block by block: the threshold and the positions of the ties that
    complete the top k are found once on the matrix, then `trim(block, row0)` keeps the block's entries above
    the threshold plus those ties. Stateless, so row blocks can be trimmed in any order, in parallel."""

    def __init__(self, d: torch.Tensor, density: float) -> None:
        self._setup(d.numel(), d.shape[-1], density)
        if self.mode == "trim":
            self.thr, self.ties = kth_largest_and_ties(d.abs().reshape(-1), self.keep)

    def _setup(self, numel: int, cols: int, density: float) -> None:
        self.cols = cols
        self.keep = int(density * numel)
        self.mode = "all" if self.keep >= numel else "none" if self.keep <= 0 else "trim"

    @classmethod
    def at(cls, thr: torch.Tensor, ties: torch.Tensor, numel: int, cols: int, density: float) -> TopK:
        """A TopK whose threshold and ties are already known (see `BlockTopK`)."""
        tk = cls.__new__(cls)
        tk._setup(numel, cols, density)
        tk.thr, tk.ties = thr, ties
        return tk

    def trim(self, block: torch.Tensor, row0: int = 0) -> torch.Tensor:
        """The block of rows starting at `row0`, trimmed (in place)."""
        if self.mode == "all":
            return block
        if self.mode == "none":
            return block.zero_()
        # 1 where |x| > thr, else 0, in float arithmetic (exact: x - thr is 0 only if x == thr; bool-mask
        # multiplies are ~5x slower on CPU)
        keep = torch.abs(
            block, out=scratch.buffer("topk_keep", tuple(block.shape), block.dtype, block.device)
        )
        keep.sub_(self.thr).sign_().clamp_(min=0)
        if self.ties.numel():  # float32 repeats are common at 12M entries: lowest positions first
            lo = row0 * self.cols
            mine = self.ties[(self.ties >= lo) & (self.ties < lo + block.numel())] - lo
            keep.view(-1)[mine] = 1
        return block.mul_(keep)


class BlockTopK:
    """The `TopK` of a matrix found while its row blocks are formed, without a scan of the whole matrix.

    A sample of the matrix's |.| (taken before it exists, e.g. from LoRA factors) brackets the threshold;
    `survey(block, row0)` counts the block's entries above the bracket and keeps the few inside it (~3%);
    `finish(surveys, whole)` selects the exact threshold and ties among those, or, if the bracket missed
    (probability ~1e-9), falls back to `TopK(whole)`. The result is the same as `TopK(whole, density)`.
    """

    def __init__(self, sample_mag: torch.Tensor, shape: tuple[int, int], density: float) -> None:
        self.shape, self.density = shape, density
        self.numel = shape[0] * shape[1]
        keep = int(density * self.numel)
        self.bracket = (
            sample_bracket(sample_mag, keep, self.numel)
            if 0 < keep < self.numel and self.numel > 4 * _SAMPLE
            else None
        )
        self.keep = keep

    def survey(self, block: torch.Tensor, row0: int):
        if self.bracket is None:
            return None
        lo, hi = self.bracket
        shape = tuple(block.shape)
        mag = torch.abs(block, out=scratch.buffer("topk_mag", shape, block.dtype, block.device))
        # float indicators instead of bool masks (~3x cheaper here): over = [|x| > hi], band = [lo < |x| <= hi]
        over = torch.sub(mag, hi, out=scratch.buffer("topk_over", shape, block.dtype, block.device))
        over.sign_().clamp_(min=0)
        band = torch.sub(mag, lo, out=scratch.buffer("topk_band", shape, block.dtype, block.device))
        band.sign_().clamp_(min=0).sub_(over)
        pos = band.view(-1).bool().nonzero().squeeze(1)
        return int(over.sum()), mag.view(-1).index_select(0, pos), pos.add_(row0 * self.shape[1])

    def finish(self, surveys: list, whole: torch.Tensor) -> TopK:
        if self.bracket is not None:
            above = sum(s[0] for s in surveys)
            band = torch.cat([s[1] for s in surveys])
            pos = torch.cat([s[2] for s in surveys])  # blocks in row order: positions ascending
            found = _select_in_band(self.keep, above, band, pos)
            if found is not None:
                return TopK.at(*found, self.numel, self.shape[1], self.density)
        return TopK(whole, self.density)


def elect_sign(ts: list[torch.Tensor]) -> torch.Tensor:
    """TIES election: gamma = sgn(sum_k T_k) with sgn(0) := +1 (PEFT and mergekit behaviour)."""
    total = ts[0].clone()
    for t in ts[1:]:
        total += t
    return torch.where(total >= 0, 1.0, -1.0).to(total.dtype)


def disjoint_mean(ts: list[torch.Tensor]) -> torch.Tensor:
    """sum_k T_k [sgn T_k = gamma] / max(1, #agreeing nonzero T_k): agreeing entries averaged, zeros never count."""
    if len(ts) == 2:
        return disjoint_mean2_(ts[0].clone(), ts[1])
    gamma = elect_sign(ts)
    num = torch.zeros_like(ts[0])
    cnt = torch.zeros_like(ts[0])
    for t in ts:
        agree = (t * gamma) > 0  # nonzero with the elected sign
        num += torch.where(agree, t, 0)
        cnt += agree
    return num / cnt.clamp_min(1)


def disjoint_mean2_(t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """Two-parent closed form of `disjoint_mean`, in float arithmetic only (no bool masks: those kernels are
    ~30x slower than a multiply on CPU, and this runs on 822M entries per child at the 7B shape). In place:
    overwrites `t1` with the result and returns it (temporaries in per-thread scratch buffers).

    Same sign: the mean (t1 + t2) / 2. Otherwise the entry whose sign matches sgn(t1 + t2) (the larger |.|, or
    the non-zero one), with sgn(0) := +1 picking the positive entry of an exact tie. With s = t1 + t2,
    max(t1, t2) = (s + |t1 - t2|) / 2 and min = (s - |t1 - t2|) / 2, so all cases are
    (s + disagree * sigma * |t1 - t2|) / 2 with disagree = 1 - [sgn t1 * sgn t2 = 1] and sigma = +1 if s >= 0
    else -1. Exact for agreeing entries and lone survivors; within one rounding of max/min otherwise.
    """
    shape = tuple(t1.shape)
    s = torch.add(t1, t2, out=scratch.buffer("dm_sum", shape, t1.dtype, t1.device))
    w = torch.sign(t1, out=scratch.buffer("dm_work", shape, t1.dtype, t1.device))
    w.mul_(torch.sign(t2, out=scratch.buffer("dm_sign", shape, t1.dtype, t1.device)))
    w.neg_().add_(1).clamp_(max=1)  # disagree: 1 - sgn t1 sgn t2 is 2 or 1 unless both signs agree (0)
    spread = torch.sub(t1, t2, out=t1).abs_().mul_(w)
    # sigma * spread with sigma = +1 for s >= 0: copysign reads the sign bit, and s is -0.0 only when both
    # entries are -0.0 (then spread is 0); x + (-x) is +0.0, so an exact tie goes to the positive entry
    return torch.copysign(spread, s, out=spread).add_(s).mul_(0.5)


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


RANK_BINS = 512  # bins per row of the binned DELLA ranks (a 3584-wide row has ~7 entries per bin)


def binned_row_ranks(mag: torch.Tensor, bins: int = RANK_BINS) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat bin index of every entry [rows * n], normalised mid-rank of every bin [rows * bins], float32).

    Every row of `mag` (>= 0) is cut into `bins` equal-width bins on [0, row max]; an entry's rank is the
    mid-rank of its bin (entries in lower bins + (entries in its bin - 1) / 2) over n - 1. Exact for an entry
    alone in its bin; otherwise off by at most half its bin's count (measured on 7B-shaped synthetic deltas
    with 512 bins: mean |error| 1.1e-3, max 6.4e-3 of the rank range; 1024 bins halve that and cost ~3% more
    time), and monotone non-decreasing in |.| within a row. Two passes and a histogram instead of a sort:
    ~8x cheaper than `row_ranks` on 3584-wide rows (measured per 3584 x 3584 module).
    """
    rows, n = mag.shape
    top = mag.amax(dim=1, keepdim=True)
    # bin = floor(|x| * (bins - 1/2) / row max), in [0, bins - 1] without a clamp, plus the row's offset
    # (exact in float: integers < 2^24), in one fused multiply-add; truncation is the floor (|x| >= 0)
    scale = torch.where(top > 0, (bins - 0.5) / top, 0.0).to(mag.dtype)
    offsets = torch.arange(0, rows * bins, bins, dtype=mag.dtype, device=mag.device).unsqueeze(1)
    scaled = torch.addcmul(
        offsets, mag, scale, out=scratch.buffer("rank_scaled", (rows, n), mag.dtype, mag.device)
    )
    key = scratch.buffer("rank_key", (rows, n), torch.int32, mag.device).copy_(scaled).view(-1)
    # mid-rank = (entries in lower bins) + (count - 1) / 2 = cumsum - (count + 1) / 2; float32 is exact for
    # counts < 2^24. Bins without entries get a value that no entry reads.
    counts = torch.bincount(key, minlength=rows * bins).view(rows, bins).to(torch.float32)
    mid = counts.cumsum(dim=1).sub_(counts, alpha=0.5).sub_(0.5).div_(max(n - 1, 1))
    return key, mid.view(-1)


def della_sample_binned(
    d: torch.Tensor, density: float, window: float, gen: torch.Generator, bins: int = RANK_BINS
) -> torch.Tensor:
    """`della_sample` with binned ranks (`binned_row_ranks`) and 16-bit keep probabilities, in place on `d`.

    The keep probability of every bin, p = (density - window) + 2 window rank, is rounded down to a multiple of
    2^-16 (q) before it is used, and the kept entries are divided by that same q: M ~ Bernoulli(q) exactly (16
    random bits per entry, no ties), so M * d / q is unbiased exactly. q lies in [density - window - 2^-16,
    density + window] and is monotone in |.| within a row, as DELLA requires.
    """
    shape = tuple(d.shape)
    mag = torch.abs(d, out=scratch.buffer("della_a", shape, d.dtype, d.device))
    key, rank = binned_row_ranks(mag, bins)
    # per bin: t = floor(65536 p) (integer); keep iff U < t for U uniform on {0..65535}
    t = rank.mul_(2 * window * 65536.0).add_((density - window) * 65536.0).floor_().sub_(32768.0).to(d.dtype)
    shifted = torch.index_select(t, 0, key, out=mag.view(-1)).view(shape)  # t - 32768, per entry
    keep = scratch.buffer("della_b", shape, d.dtype, d.device)
    keep.view(-1).copy_(uniform16(d.numel(), gen))  # U - 32768, exact in float
    torch.sub(shifted, keep, out=keep).clamp_(0.0, 1.0)  # integers: 1 iff U < t, else 0
    # d * keep / q with q = t / 65536 = (shifted + 32768) / 65536
    return d.mul_(keep).mul_(65536.0).div_(shifted.add_(32768.0))


def uniform16(numel: int, gen: torch.Generator) -> torch.Tensor:
    """`numel` int16 values, each uniform on [-32768, 32767] (16 random bits), on the CPU.

    The bits come from numpy's SFC64 generator seeded by one 63-bit draw from `gen` (so `gen` still decides
    everything): 64-bit words, four entries each, at ~2x the rate of torch's mt19937 `random_`, and numpy
    releases the GIL while it fills them, so the merge's block workers draw side by side.
    """
    seed = int(torch.randint(2**63 - 1, (1,), generator=gen))
    words = np.random.SFC64(seed).random_raw((numel + 3) // 4)
    return torch.from_numpy(words.view(np.int16)[:numel])


def bernoulli(
    prob: float | torch.Tensor,
    gen: torch.Generator,
    shape: tuple[int, ...] | None = None,
    dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
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
    bits = uniform16(math.prod(shape), gen).view(shape)
    if out is not None and tuple(out.shape) == shape and out.dtype == dtype and out.device == dev:
        w = out.copy_(bits)  # exact: |values| <= 2^15
    else:
        w = bits.to(device=dev, dtype=dtype)
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
