"""Operators on parents of different ranks (issue 34), on hand-computed 2 x 2 numbers.

Parents (alpha = 2 for both, so the scale is alpha / r):
- P_r2: A = I, B = diag(3, 1), rank 2, scale 1   -> dW = diag(3, 1)
- P_r1: A = [[1, 0]], B = [[2], [0]], rank 1, scale 2 -> dW = [[4, 0], [0, 0]]
The child has the first parent's rank; the other parent is re-expressed at it (exact when growing, the best
rank-r approximation when shrinking), so the operator's maths runs on the weight updates dW.
"""

from __future__ import annotations

import math

import pytest
import torch

from populora.lora import LoRAAdapter
from populora.operators import REGISTRY, apply
from populora.operators.ranks import resize

T = torch.float64


def _r2():
    return LoRAAdapter(
        {"m": (torch.eye(2, dtype=T), torch.diag(torch.tensor([3.0, 1.0], dtype=T)))}, alpha=2.0
    )


def _r1():
    return LoRAAdapter(
        {"m": (torch.tensor([[1.0, 0.0]], dtype=T), torch.tensor([[2.0], [0.0]], dtype=T))}, alpha=2.0
    )


def test_resize_up_is_exact_and_balanced_with_a_revived_component():
    q, loss = resize(_r1(), 2, torch.Generator().manual_seed(0))
    a, b = q.modules["m"]
    assert q.rank == 2 and loss == 0.0
    # scale 1 now, so B'A' = dW = [[4, 0], [0, 0]]: sigma 4 split balanced, B' col 0 = [2, 0], A' row 0 = [2, 0]
    assert torch.allclose(b[:, 0], torch.tensor([2.0, 0.0], dtype=T)) and torch.allclose(
        a[0], torch.tensor([2.0, 0.0], dtype=T)
    )
    # the new component: B column 0 (dW unchanged), A row a unit direction orthogonal to [1, 0] at norm 1/sqrt(3)
    assert torch.equal(b[:, 1], torch.zeros(2, dtype=T))
    assert abs(float(a[1, 0])) < 1e-12 and math.isclose(abs(float(a[1, 1])), 1 / math.sqrt(3), rel_tol=1e-12)
    assert torch.allclose(q.delta("m").double(), _r1().delta("m").double())


def test_resize_down_is_the_truncated_svd_of_the_update():
    q, loss = resize(_r2(), 1, torch.Generator().manual_seed(0))
    a, b = q.modules["m"]
    # scale 2 now: B'A' = dW / 2 truncated = [[1.5, 0], [0, 0]] -> B' = [sqrt(1.5), 0]^T, A' = [sqrt(1.5), 0]
    assert torch.allclose(b, torch.tensor([[math.sqrt(1.5)], [0.0]], dtype=T))
    assert torch.allclose(a, torch.tensor([[math.sqrt(1.5), 0.0]], dtype=T))
    assert torch.allclose(q.delta("m").double(), torch.tensor([[3.0, 0.0], [0.0, 0.0]], dtype=T))
    assert math.isclose(loss, math.sqrt(1 / 10), rel_tol=1e-12)  # sigma 1 of (3, 1) dropped


def test_child_takes_the_first_parents_rank():
    up = apply("X5", [_r2(), _r1()], seed=0)  # 0.5 diag(3, 1) + 0.5 [[4, 0], [0, 0]]
    assert up.rank == 2
    assert torch.allclose(up.delta("m").double(), torch.tensor([[3.5, 0.0], [0.0, 0.5]], dtype=T))
    down = apply("X5", [_r1(), _r2()], seed=0)  # 0.5 [[4, 0], [0, 0]] + 0.5 diag(3, 0)
    assert down.rank == 1
    assert torch.allclose(down.delta("m").double(), torch.tensor([[3.5, 0.0], [0.0, 0.0]], dtype=T))
    rule = down.metadata["info"]["rank_rule"]
    assert rule["child_rank"] == 1 and rule["parent_ranks"] == [1, 2]
    assert math.isclose(rule["resize_loss"][1], math.sqrt(0.1))
    x2 = apply("X2", [_r2(), _r1()], seed=3, prob=0.0)  # the one slot copied from the rank-1 parent, exactly
    assert x2.rank == 2 and torch.allclose(x2.delta("m").double(), _r1().delta("m").double())


@pytest.mark.parametrize("name", sorted(op for op, o in REGISTRY.items() if o.arity == 2))
def test_every_crossover_accepts_mixed_ranks(name):
    g = torch.Generator().manual_seed(0)
    p1 = LoRAAdapter({"m": (torch.randn(4, 12, generator=g), torch.randn(10, 4, generator=g))}, alpha=8.0)
    p2 = LoRAAdapter({"m": (torch.randn(2, 12, generator=g), torch.randn(10, 2, generator=g))}, alpha=8.0)
    for parents, r in (([p1, p2], 4), ([p2, p1], 2)):
        child = apply(name, parents, seed=1)
        assert child.rank == r and torch.isfinite(child.delta("m").double()).all()


def test_m6_moves_rank_within_range_and_keeps_the_update():
    p = _r2()
    child = apply("M6", [p], seed=0, rank_range=[1, 4], jitter=0.0)
    moved = child.metadata["info"]
    assert moved["rank_from"] == 2 and moved["rank_to"] in (1, 3, 4) and child.rank == moved["rank_to"]
    want = torch.diag(torch.tensor([3.0, 0.0 if child.rank == 1 else 1.0], dtype=T))
    assert torch.allclose(
        child.delta("m").double(), want
    )  # scale alpha / r' applied: the top components' update is kept
    seen = {apply("M6", [p], seed=s, rank_range=[1, 4]).rank for s in range(40)}
    assert seen == {1, 3, 4}  # {max(1, ceil(2/2)) .. min(4, 2*2)} minus {2}
    assert apply("M6", [p], seed=0, rank_range=[2, 2]).rank == 2  # pinned: the in-rank M6 (tail dropped)
    with pytest.raises(ValueError, match="rank_range"):
        apply("M6", [p], seed=0, rank_range=[3, 1])
