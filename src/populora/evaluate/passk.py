"""Sampled pass@k: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
Code", eq. 1), ``pass@k = 1 - C(n - c, k) / C(n, k)`` for n samples of which c pass, averaged over problems.

`pass_at_k` is the per-problem estimate (exact, with integer binomials: no float product to drift);
`default_ks` picks the k values `populora eval --samples N` reports.
"""

from __future__ import annotations

from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k samples drawn without replacement from n (c correct) passes.

    ValueError when not ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a correct sample
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def default_ks(n: int) -> list[int]:
    """k = 1, the usual 5 / 10 / 20 / 50 / 100 below n, and n itself."""
    return sorted({1, n, *(k for k in (5, 10, 20, 50, 100) if k < n)})
