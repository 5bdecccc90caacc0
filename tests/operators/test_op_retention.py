"""Retention metrics on hand-checkable cases (reference/operators.md §3, item 15)."""

from __future__ import annotations

import math

import torch
from op_fixtures import R, deltas, make_adapter, regauge

from populora.lora import LoRAAdapter
from populora.operators import apply, retention


def _dense_metrics(c, p):
    dc, dp = deltas(c), deltas(p)
    num = sum(float((dc[k] - dp[k]).pow(2).sum()) for k in dc)
    cc = sum(float(dc[k].pow(2).sum()) for k in dc)
    pp = sum(float(dp[k].pow(2).sum()) for k in dc)
    cp = sum(float((dc[k] * dp[k]).sum()) for k in dc)
    return math.sqrt(num / pp), cp / math.sqrt(cc * pp)


def test_self_negation_and_dense_agreement(p1, p2):
    m = retention.compare(p1, regauge(p1, 3))
    assert m["rel_fro"] < 1e-6 and abs(m["cos"] - 1) < 1e-12 and abs(m["norm_ratio"] - 1) < 1e-12
    assert abs(m["overlap_left"] - 1) < 1e-9 and abs(m["overlap_right"] - 1) < 1e-9
    neg = LoRAAdapter({k: (a, -b) for k, (a, b) in p1.modules.items()}, alpha=p1.alpha)
    assert abs(retention.distances(neg, p1)["cos"] + 1) < 1e-12
    assert abs(retention.distances(neg, p1)["rel_fro"] - 2) < 1e-9
    child = apply("M4", [p1], seed=0)
    rel, cos = _dense_metrics(child, p1)
    got = retention.distances(child, p1)
    assert abs(got["rel_fro"] - rel) < 1e-9 and abs(got["cos"] - cos) < 1e-12


def test_effective_rank_hand_cases():
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(20, R, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(12, R, generator=g, dtype=torch.float64))
    equal = LoRAAdapter({"m": (v.T.contiguous(), q)}, alpha=4.0)  # all singular values equal -> erank = r
    assert abs(retention.effective_rank(equal) - R) < 1e-9
    stats = retention.spectrum_stats(equal)
    assert abs(stats["stable_rank"] - R) < 1e-9 and abs(stats["participation_ratio"] - R) < 1e-9
    b = q.clone()
    b[:, 1:] = 0
    assert abs(retention.effective_rank(LoRAAdapter({"m": (v.T.contiguous(), b)}, alpha=4.0)) - 1) < 1e-9


def test_retention_report_for_crossover_has_midpoint_and_tau(p1, p2):
    child = apply("X5", [p1, p2])
    rep = retention.retention(child, [p1, p2])
    assert set(rep) == {"parent1", "parent2", "midpoint", "truncation_loss"}
    # the child is the best rank-r approximation of the midpoint; its distance to it is the truncation loss
    assert abs(rep["midpoint"]["rel_fro"] - rep["truncation_loss"]["tau"]) < 1e-9
    mid = retention.midpoint(p1, p2)
    assert mid.rank == 2 * R
    low = make_adapter(5, rank_used=2)
    assert retention.retention(apply("X5", [low, low]), [low, low])["midpoint"]["rel_fro"] < 1e-7
