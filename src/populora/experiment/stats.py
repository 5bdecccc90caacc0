"""Intervals an experiment reports: a bootstrap over seeds and probe items together, arm differences, and the
best member against the best of as many single-agent seeds. Pure functions on arrays; no run folders here.

Data: one arm is an array `x[seed, member, item]` of probe changes (end minus start correctness of one member
on one probe item; with only per-task accuracies logged the item axis has length 1 and holds the member's mean
change, and the bootstrap is over seeds only). Two sources of noise enter every number: which seeds were run,
and which problems the probe happens to hold (two 64-item samples of one model read code_o 40% and 28%).

The bootstrap is *crossed*, as the design is: every seed is scored on the same probe items, so one replicate
draws the seeds with replacement and, once, the items with replacement, and evaluates the statistic on that
sub-array. Drawing items anew within each seed would average the item noise away across seeds, though every
seed shares the one probe. Arms compared share the item draw (the same probe) and, when paired (the same seeds
0..S-1), the seed draw as well. Intervals are percentile intervals of `B` replicates from a fixed seed.

Best member: the largest of k members is an order statistic, larger than the mean member even with no effect.
Its null is the best of k single-agent seeds, `expected_max(single, k)`: the mean of the largest of k draws
(with replacement) from the single arm's seed values, computed exactly from the sorted values, never the
single mean. With few single seeds this plug-in null cannot exceed the best seed observed, so it errs low (in
the population's favour): read a best-member gain as real only when its interval clears zero by a margin.
"""

from __future__ import annotations

import numpy as np

B_DEFAULT = 2000
SEED = 12_345  # the bootstrap's own stream: the same interval every time the same data is summarised


def _as3(x) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 1:  # one value per seed
        a = a[:, None, None]
    elif a.ndim == 2:  # [seed, item]: one member
        a = a[:, None, :]
    if a.ndim != 3 or a.shape[0] == 0 or a.shape[1] == 0 or a.shape[2] == 0:
        raise ValueError(f"expected values as [seed, member, item] (non-empty), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("the values hold NaN or inf; drop the seeds or members without a probe first")
    return a


def mean_stat(x: np.ndarray) -> float:
    """The mean over seeds, members and items (every seed weighs the same)."""
    return float(x.mean())


def best_stat(x: np.ndarray) -> float:
    """The mean over seeds of the best member's mean over items."""
    return float(x.mean(axis=2).max(axis=1).mean())


def expected_max(values, k: int) -> float:
    """E[max of k draws with replacement from `values`]: sum_j v_(j) ((j/n)^k - ((j-1)/n)^k), v sorted."""
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    if n == 0 or k < 1:
        raise ValueError(f"expected_max needs values and k >= 1 (got {n} values, k={k})")
    j = np.arange(1, n + 1)
    return float((v * ((j / n) ** k - ((j - 1) / n) ** k)).sum())


def _interval(point: float, reps: np.ndarray, level: float) -> dict:
    lo, hi = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return {"mean": point, "lo": float(lo), "hi": float(hi)}


def _draws(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    return rng.integers(0, n, size=(b, n))


def bootstrap(x, stat=mean_stat, b: int = B_DEFAULT, level: float = 0.95, seed: int = SEED) -> dict:
    """`{"mean", "lo", "hi", "n_seeds", "n_items", "resampled"}`: `stat` of `x[seed, member, item]` and its
    crossed seeds x items percentile interval (lo = hi = None with one seed and one item: nothing to resample)."""
    a = _as3(x)
    s, _, i = a.shape
    out = {"n_seeds": s, "n_items": i, "resampled": _resampled(s, i)}
    if s < 2 and i < 2:
        return {"mean": stat(a), "lo": None, "hi": None, **out}
    rng = np.random.default_rng(seed)
    ss, ii = _draws(rng, s, b), _draws(rng, i, b)
    reps = np.array([stat(a[ss[r]][:, :, ii[r]]) for r in range(b)])
    return {**_interval(stat(a), reps, level), **out}


def difference(
    x, y, stat=mean_stat, paired: bool = False, b: int = B_DEFAULT, level: float = 0.95, seed: int = SEED
) -> dict:
    """`stat(x) - stat(y)` of two arms scored on the same probe items, with its bootstrap interval.

    `paired`: the arms ran the same seeds (seed s of x with seed s of y), so one seed draw serves both;
    else each arm's seeds are drawn on their own. The item draw is always shared (one probe)."""
    a, c = _as3(x), _as3(y)
    if a.shape[2] != c.shape[2]:
        raise ValueError(f"the arms were probed on different item counts ({a.shape[2]} vs {c.shape[2]})")
    if paired and a.shape[0] != c.shape[0]:
        raise ValueError(f"paired arms need the same seeds ({a.shape[0]} vs {c.shape[0]})")
    point = stat(a) - stat(c)
    out = {"n_seeds": [a.shape[0], c.shape[0]], "n_items": a.shape[2], "paired": paired}
    out["resampled"] = _resampled(min(a.shape[0], c.shape[0]), a.shape[2])
    if max(a.shape[0], c.shape[0]) < 2 and a.shape[2] < 2:
        return {"mean": point, "lo": None, "hi": None, **out}
    rng = np.random.default_rng(seed)
    sa, ii = _draws(rng, a.shape[0], b), _draws(rng, a.shape[2], b)
    sc = sa if paired else _draws(rng, c.shape[0], b)
    reps = np.array([stat(a[sa[r]][:, :, ii[r]]) - stat(c[sc[r]][:, :, ii[r]]) for r in range(b)])
    return {**_interval(point, reps, level), **out}


def best_vs_single(population, single, b: int = B_DEFAULT, level: float = 0.95, seed: int = SEED) -> dict:
    """The population's best member (mean over its seeds) minus the best of k single-agent seeds, k = the
    population's member count: `best_stat(population) - expected_max(single seed means, k)`, with a crossed
    bootstrap (the population's seeds and the single arm's seeds drawn on their own, the items shared)."""
    a, c = _as3(population), _as3(single)
    if a.shape[2] != c.shape[2]:
        raise ValueError(f"the arms were probed on different item counts ({a.shape[2]} vs {c.shape[2]})")
    k = a.shape[1]

    def stat(pa: np.ndarray, sc: np.ndarray) -> float:
        return best_stat(pa) - expected_max(sc.mean(axis=(1, 2)), k)

    point = stat(a, c)
    out = {
        "best_member": best_stat(a),
        "best_of_k_single": expected_max(c.mean(axis=(1, 2)), k),
        "k": k,
        "n_seeds": [a.shape[0], c.shape[0]],
        "n_items": a.shape[2],
        "resampled": _resampled(min(a.shape[0], c.shape[0]), a.shape[2]),
    }
    if max(a.shape[0], c.shape[0]) < 2 and a.shape[2] < 2:
        return {"mean": point, "lo": None, "hi": None, **out}
    rng = np.random.default_rng(seed)
    sa, ii, sc = _draws(rng, a.shape[0], b), _draws(rng, a.shape[2], b), _draws(rng, c.shape[0], b)
    reps = np.array([stat(a[sa[r]][:, :, ii[r]], c[sc[r]][:, :, ii[r]]) for r in range(b)])
    return {**_interval(point, reps, level), **out}


def _resampled(seeds: int, items: int) -> str:
    if items > 1:
        return "seeds and items" if seeds > 1 else "items"
    return "seeds" if seeds > 1 else "nothing"


def excludes_zero(ci: dict) -> bool:
    return ci.get("lo") is not None and (ci["lo"] > 0 or ci["hi"] < 0)


def seeds_needed(
    per_seed, effect: float, level: float = 0.95, power: float = 0.8, cap: int = 10_000
) -> int | None:
    """Seeds per arm a paired comparison needs to detect a true mean difference of `effect` with probability
    `power` by a two-sided `level` t-interval, given the per-seed differences seen so far: the smallest n with
    n >= ((t_{(1+level)/2, n-1} + t_{power, n-1}) sd / effect)^2, sd their sample standard deviation. None with
    fewer than 2 finite values or sd = 0 (nothing to extrapolate from). A lower bound for a probe claim: the
    probe's item noise, shared by every seed, does not shrink with more seeds. Hand check: sd 2, effect 2 ->
    10 (the normal approximation, (1.960 + 0.842)^2 = 7.85, errs low at small n)."""
    from scipy import stats

    x = np.asarray([v for v in per_seed if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2 or effect <= 0:
        return None
    sd = float(x.std(ddof=1))
    if sd == 0:
        return None
    for n in range(2, cap + 1):
        t = stats.t.ppf((1 + level) / 2, n - 1) + stats.t.ppf(power, n - 1)
        if n >= (t * sd / effect) ** 2:
            return n
    return cap


__all__ = [
    "B_DEFAULT",
    "best_stat",
    "best_vs_single",
    "bootstrap",
    "difference",
    "excludes_zero",
    "expected_max",
    "mean_stat",
    "seeds_needed",
]
