"""The fast dense-delta path (issue 12 item 5) keeps the maths: exact Bernoulli masks, the same row ranks and
TIES trims as the old whole-matrix code, and children that agree with the old implementation."""

from __future__ import annotations

import math

import pytest
import torch
from op_fixtures import deltas

from populora.lora import LoRAAdapter
from populora.operators import apply
from populora.operators.bench_legacy import _row_ranks_argsort, apply_legacy
from populora.operators.elementwise import BlockTopK, TopK, bernoulli, row_ranks, trim_topk


@pytest.mark.parametrize("p", [0.5, 0.3, 0.7 + 0.5 / 65536, 1.0, 0.0])
def test_bernoulli_scalar_is_exact_and_0_1(p):
    g = torch.Generator().manual_seed(0)
    w = bernoulli(p, g, (1000, 1000))
    assert w.dtype == torch.float32 and bool(((w == 0) | (w == 1)).all())
    n = w.numel()
    assert abs(float(w.mean()) - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_bernoulli_ties_use_the_fraction():
    """prob = 0.25 / 65536: only U == 0 (prob 2^-16) can keep, then with prob 1/4: ~61 of 16M entries."""
    prob = torch.full((4000, 4000), 0.25 / 65536, dtype=torch.float64)
    kept = float(bernoulli(prob, torch.Generator().manual_seed(1)).sum())
    assert 30 < kept < 100  # Poisson(61): without the tie draw it would be 0, with a 16-bit floor too
    dropped = float((1 - bernoulli(1 - 0.25 / 65536, torch.Generator().manual_seed(2), (4000, 4000))).sum())
    assert 30 < dropped < 100


def test_row_ranks_match_the_old_argsort_ranks():
    g = torch.Generator().manual_seed(2)
    m = torch.rand(300, 517, generator=g, dtype=torch.float64)
    m[:, :10] = 0.0  # a run of equal values: ranks in column order (the old argsort left their order open)
    for x in (m.float(), m):
        new, old = row_ranks(x), _row_ranks_argsort(x)
        distinct = x != 0
        assert torch.equal(new[distinct], old[distinct])
        assert torch.equal(new[:, :10], torch.arange(10.0, dtype=x.dtype).expand(300, 10) / 516)


def test_blockwise_topk_equals_whole_matrix_trim_with_ties():
    g = torch.Generator().manual_seed(3)
    d = torch.randn(64, 50, generator=g).round(decimals=1)  # many ties at the threshold
    whole = trim_topk(d, 0.3)
    tk = TopK(d, 0.3)
    # stateless: blocks trimmed in any order (here backwards) give the whole-matrix trim
    starts = list(range(0, 64, 7))[::-1]
    parts = {i: tk.trim(d[i : i + 7].clone(), i) for i in starts}
    blocks = torch.cat([parts[i] for i in sorted(parts)])
    assert torch.equal(blocks, whole) and int((blocks != 0).sum()) == int(0.3 * d.numel())


@pytest.mark.parametrize("density", [0.2, 0.5])
def test_topk_found_while_blocks_are_formed_equals_the_whole_matrix_one(density):
    """BlockTopK (sample bracket + per-block survey, no pass over the whole matrix) picks the same threshold
    and the same lowest-position ties as TopK, on a matrix big enough for the bracketed path, with ties."""
    g = torch.Generator().manual_seed(4)
    d = (torch.randn(700, 600, generator=g) * 20).round()  # 420k entries, integer values: ties everywhere
    ref = TopK(d, density)
    idx = torch.randint(d.numel(), (1 << 16,), generator=g)
    finder = BlockTopK(d.reshape(-1)[idx].abs(), tuple(d.shape), density)
    assert finder.bracket is not None
    surveys = [finder.survey(d[i : i + 64], i) for i in range(0, 700, 64)]
    got = finder.finish(surveys, d)
    assert got.thr == ref.thr and torch.equal(got.ties, ref.ties) and got.ties.numel() > 0
    trimmed = torch.cat([got.trim(d[i : i + 64].clone(), i) for i in range(0, 700, 64)])
    assert torch.equal(trimmed, trim_topk(d, density))
    assert int((trimmed != 0).sum()) == int(density * d.numel())
    # a sample that misses the threshold (all of it far below) falls back to the exact whole-matrix TopK
    wrong = BlockTopK(torch.zeros(1 << 16), tuple(d.shape), density)
    got = wrong.finish([wrong.survey(d[i : i + 64], i) for i in range(0, 700, 64)], d)
    assert got.thr == ref.thr and torch.equal(got.ties, ref.ties)


def _big_pair(seed: int, d: int = 520, n: int = 400, r: int = 4):
    """Parents big enough for the randomized SVD path (min(d, n) > 256)."""
    g = torch.Generator().manual_seed(seed)
    mods = {}
    for k in ("q_proj", "k_proj"):
        a = torch.randn(r, n, generator=g) / n**0.5
        b = torch.randn(d, r, generator=g) * 0.1
        mods[f"model.layers.0.self_attn.{k}"] = (a, b)
    return LoRAAdapter(mods, alpha=8.0)


@pytest.mark.parametrize("op", ["X6", "X9"])
def test_deterministic_dense_ops_agree_with_the_old_implementation(op):
    p1, p2 = _big_pair(1), _big_pair(2)
    new, old = deltas(apply(op, [p1, p2], seed=0)), deltas(apply_legacy(op, [p1, p2], seed=0))
    for k in new:
        assert float((new[k] - old[k]).norm() / old[k].norm()) < 0.05, k


@pytest.mark.parametrize("op", ["X1", "X7"])
def test_random_dense_ops_match_the_old_implementation_in_distribution(op):
    """Mean child delta over seeds: new and old implementations estimate the same expectation."""
    p1, p2 = _big_pair(1, d=300, n=280), _big_pair(2, d=300, n=280)
    seeds = range(12)
    new = [deltas(apply(op, [p1, p2], seed=s)) for s in seeds]
    old = [deltas(apply_legacy(op, [p1, p2], seed=s)) for s in seeds]
    n = len(seeds)
    for k in new[0]:
        mn, mo = sum(x[k] for x in new) / n, sum(x[k] for x in old) / n
        # the two means differ by sampling noise only: |mn - mo|^2 ~ (s_new^2 + s_old^2) / n, with s^2 the
        # seed-to-seed spread; over ~10^5 entries that norm concentrates within a few percent of its mean
        spread = sum(float((x[k] - mn).norm()) ** 2 for x in new) + sum(
            float((x[k] - mo).norm()) ** 2 for x in old
        )
        expected = math.sqrt(spread / (n - 1) / n)
        assert float((mn - mo).norm()) < 1.3 * expected, k
        # and the same spread: norms of single children agree on average
        nn = sum(float(x[k].norm()) for x in new) / len(new)
        no = sum(float(x[k].norm()) for x in old) / len(old)
        assert abs(nn / no - 1) < 0.05, k


def test_della_binned_ranks_are_close_to_exact_and_sampling_is_unbiased():
    """X7's default ranks: a 1024-bin histogram per row instead of a sort. Ranks within a bin's half-count of
    the exact ones, monotone in |.|; keep probabilities within [d - e - 2^-16, d + e]; M * D / q unbiased."""
    from populora.operators.elementwise import binned_row_ranks, della_sample_binned

    g = torch.Generator().manual_seed(5)
    d = torch.randn(40, 32, generator=g) @ torch.randn(32, 3584, generator=g)  # a 7B-wide low-rank block
    key, mid = binned_row_ranks(d.abs())
    approx = mid.index_select(0, key).view(d.shape)
    exact = row_ranks(d.abs())
    err = (approx - exact).abs()
    assert float(err.mean()) < 2e-3 and float(err.max()) < 2e-2
    for row in range(5):  # monotone non-decreasing in |d| within a row
        order = d[row].abs().argsort()
        assert (approx[row, order].diff() >= 0).all()
    samples = torch.stack(
        [della_sample_binned(d.clone(), 0.7, 0.14, torch.Generator().manual_seed(s)) for s in range(400)]
    )
    kept = (samples != 0).float()
    one = samples[0]
    q = (d / one)[one != 0]  # a kept entry is d / q: its q, exactly
    assert float(q.min()) >= 0.56 - 2**-16 - 1e-6 and float(q.max()) <= 0.84 + 1e-6
    # larger |d| kept more often: keep rate of the top decile of each row above the bottom decile's
    lo, hi = exact < 0.1, exact > 0.9
    assert float(kept.mean(0)[hi].mean()) > float(kept.mean(0)[lo].mean()) + 0.2
    mean = samples.mean(0)
    assert float((mean - d).norm() / d.norm()) < 0.05  # 400 draws: ~sqrt(0.3/0.7/400) = 3% noise


def test_x7_binned_and_exact_ranks_differ_only_by_sampling_noise():
    p1, p2 = _big_pair(1, d=300, n=280), _big_pair(2, d=300, n=280)
    binned = deltas(apply("X7", [p1, p2], seed=0))
    exact0, exact1 = (deltas(apply("X7", [p1, p2], seed=s, ranks="exact")) for s in (0, 1))
    for k in binned:  # binned vs exact is no further apart than two exact children with different seeds
        noise = float((exact0[k] - exact1[k]).norm())
        assert float((binned[k] - exact0[k]).norm()) < 1.3 * noise, k
    with pytest.raises(Exception, match="ranks"):
        apply("X7", [p1, p2], ranks="sorted")
