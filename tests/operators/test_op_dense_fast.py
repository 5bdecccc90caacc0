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
from populora.operators.elementwise import TopK, bernoulli, row_ranks, trim_topk


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
    blocks = torch.cat([tk.trim(d[i : i + 7]) for i in range(0, 64, 7)])
    assert torch.equal(blocks, whole) and int((blocks != 0).sum()) == int(0.3 * d.numel())


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
    for k in new[0]:
        mn, mo = sum(x[k] for x in new) / len(new), sum(x[k] for x in old) / len(old)
        assert float((mn - mo).norm() / mo.norm()) < 0.15, k
        # and the same spread: norms of single children agree on average
        nn = sum(float(x[k].norm()) for x in new) / len(new)
        no = sum(float(x[k].norm()) for x in old) / len(old)
        assert abs(nn / no - 1) < 0.05, k
