"""Host-device synchronisation points of a train step (issue 51): the per-slot gradient norms and the clip cost
one device-to-host and one host-to-device copy per device (not one per LoRA tensor: 224 at 7B), and a
micro-batch's per-row metrics are read once for the whole step (not one `float()` per metric and row).

Counted on CPU: under PyTorch's fake-tensor mode the gradients live on "cuda" (devices and shapes only), and a
dispatch mode records every copy between devices and every scalar read (`aten._local_scalar_dense`, what
`float()` and `.item()` run)."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from populora.engine.optim import clip_slot_grads, slot_grad_norms
from populora.engine.types import TrainRow
from populora.rl.loss import row_weights

aten = torch.ops.aten


class Syncs(TorchDispatchMode):
    """Records copies between devices ("cuda->cpu") and scalar reads ("scalar")."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten._local_scalar_dense.default:
            self.seen.append("scalar")
        elif func in (aten._to_copy.default, aten.copy_.default):
            src = args[1] if func is aten.copy_.default else args[0]
            if isinstance(src, torch.Tensor) and src.device.type != out.device.type:
                self.seen.append(f"{src.device.type}->{out.device.type}")
        return out


def test_norms_and_clip_copy_once_per_device_not_once_per_tensor():
    with FakeTensorMode():
        params = [torch.nn.Parameter(torch.zeros(3, 4, 2, device="cuda")) for _ in range(6)]
        for p in params:
            p.grad = torch.ones(3, 4, 2, device="cuda")
        with Syncs() as syncs:
            norms = slot_grad_norms(params, 3)
        assert syncs.seen == ["cuda->cpu"] and norms.device.type == "cpu"
        with Syncs() as syncs:
            clip_slot_grads(params, 3, max_norm=1.0)
        assert syncs.seen == ["cuda->cpu", "cpu->cuda"]
    # the same sums as one host add per tensor, in order, bit for bit
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(4, *shape)) for shape in ((8, 3), (5,), (2, 2, 7))]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 10
    params[1].grad = None  # a tensor no row touched
    want = torch.zeros(4)
    for p in params:
        if p.grad is not None:
            want += p.grad.pow(2).reshape(4, -1).sum(1)
    assert torch.equal(slot_grad_norms(params, 4), want.sqrt())


def test_row_metrics_are_read_once_per_step(make_engine):
    eng = make_engine(n_slots=2, rank=4, alpha=8, clip_eps=0.2, tis_cap=2.0)

    def reads(n_rows: int) -> tuple[int, dict]:
        rows = [
            TrainRow(i % 2, [3, 4, 5 + i], [6, 7, 8], advantages=1.0 - i / 4, old_logprobs=[-1.0, -2.0, -0.5])
            for i in range(n_rows)
        ]
        weights = row_weights([3] * n_rows, [r.loss_key for r in rows], eng.loss_agg)
        with Syncs() as syncs:
            sums = eng.accumulate_gradients(rows, weights)
        return syncs.seen.count("scalar"), sums

    few, _ = reads(2)
    many, sums = reads(8)
    assert many == few <= 2  # no read per row
    assert sums["rows"] == {0: 4, 1: 4} and sums["tokens"] == {0: 12, 1: 12}
    assert set(sums) >= {"pg_loss", "entropy_sum", "ent_w", "clip_sum", "adv_sum", "kl_sum", "is_sum"}
    assert sums["adv_sum"] == {0: 3 * (1.0 + 0.5 + 0.0 - 0.5), 1: 3 * (0.75 + 0.25 - 0.25 - 0.75)}
