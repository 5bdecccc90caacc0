"""Per-slot AdamW equals one torch.optim.AdamW per slot; per-slot clipping equals clip_grad_norm_ per slot."""

from __future__ import annotations

import torch

from populora.engine.optim import SlotAdamW, clip_slot_grads


def _grads(shape, k, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(k)]


def test_slot_adamw_matches_torch_adamw_per_slot():
    n = 3
    a = torch.nn.Parameter(torch.randn(n, 4, 5))
    b = torch.nn.Parameter(torch.randn(n, 6, 4))
    opt = SlotAdamW([a, b], n, lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
    opt.set_lr(2, 3e-2)
    refs = [[torch.nn.Parameter(a.data[s].clone()), torch.nn.Parameter(b.data[s].clone())] for s in range(n)]
    ref_opts = [
        torch.optim.AdamW(refs[s], lr=1e-2 if s != 2 else 3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
        for s in range(n)
    ]
    # step pattern: all slots, then slots {0, 2}, then {1} only, then all: slots step independently
    for k, active in enumerate([[0, 1, 2], [0, 2], [1], [0, 1, 2]]):
        ga, gb = _grads(a.shape, 1, k)[0], _grads(b.shape, 1, 100 + k)[0]
        a.grad, b.grad = ga.clone(), gb.clone()
        opt.step(active)
        for s in active:
            refs[s][0].grad, refs[s][1].grad = ga[s].clone(), gb[s].clone()
            ref_opts[s].step()
    for s in range(n):
        assert torch.allclose(a.data[s], refs[s][0].data, atol=1e-6)
        assert torch.allclose(b.data[s], refs[s][1].data, atol=1e-6)
    assert opt.steps.tolist() == [3, 3, 3]
    opt.reset(1)
    assert opt.steps.tolist() == [3, 0, 3] and opt.exp_avg[0][1].abs().sum() == 0
    assert opt.exp_avg[0][0].abs().sum() > 0


def test_clip_slot_grads_by_hand():
    p = torch.nn.Parameter(torch.zeros(2, 2))
    q = torch.nn.Parameter(torch.zeros(2, 1))
    p.grad = torch.tensor([[3.0, 0.0], [0.3, 0.0]])
    q.grad = torch.tensor([[4.0], [0.4]])
    norms = clip_slot_grads([p, q], 2, max_norm=1.0)
    assert torch.allclose(norms, torch.tensor([5.0, 0.5]))
    # slot 0 scaled to norm 1 (3/5, 4/5); slot 1 (norm 0.5) untouched
    assert torch.allclose(p.grad, torch.tensor([[0.6, 0.0], [0.3, 0.0]]), atol=1e-6)
    assert torch.allclose(q.grad, torch.tensor([[0.8], [0.4]]), atol=1e-6)
