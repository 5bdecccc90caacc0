"""Per-slot AdamW and per-slot gradient clipping over stacked LoRA parameters `[N, ...]`.

Every parameter's first axis is the slot. Each slot has its own step count, learning rate and moments, and
only the slots named in `step(slots)` move, so one optimiser object behaves exactly like N independent
`torch.optim.AdamW`s (decoupled weight decay, bias correction), one per adapter. Resetting a slot zeroes
its moments and step count (a replaced population member starts fresh).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class SlotAdamW:
    """AdamW with independent state per slot (first axis) of every parameter."""

    def __init__(
        self,
        params: Sequence[torch.nn.Parameter],
        n_slots: int,
        lr: float = 5e-5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        self.params = list(params)
        for p in self.params:
            if p.shape[0] != n_slots:
                raise ValueError(
                    f"parameter of shape {tuple(p.shape)} has no leading slot axis of size {n_slots}"
                )
        self.n_slots = n_slots
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.lr = torch.full((n_slots,), float(lr), dtype=torch.float64)
        self.steps = torch.zeros(n_slots, dtype=torch.long)
        self.exp_avg = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]

    def set_lr(self, slot: int, lr: float) -> None:
        self.lr[slot] = float(lr)

    @torch.no_grad()
    def step(self, slots: Sequence[int]) -> None:
        """One AdamW update of `slots` from the current `.grad` (a missing grad counts as zero)."""
        slots = sorted(set(int(s) for s in slots))
        if not slots:
            return
        idx = torch.tensor(slots, dtype=torch.long)
        self.steps[idx] += 1
        b1, b2 = self.betas
        step = self.steps[idx].to(torch.float64)
        lr = self.lr[idx]
        bias1 = 1.0 - b1**step
        bias2_sqrt = (1.0 - b2**step).sqrt()
        step_size = (lr / bias1).to(torch.float32)
        decay = (1.0 - lr * self.weight_decay).to(torch.float32)
        every = slots == list(range(self.n_slots))  # all slots: update in place, no index copies
        dev_cache: dict = {}
        for p, m_all, v_all in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            view = (-1,) + (1,) * (p.dim() - 1)
            if p.device not in dev_cache:  # the per-slot scalars live on the CPU; move them once per device
                dev_cache[p.device] = (
                    idx.to(p.device),
                    step_size.to(p.device),
                    decay.to(p.device),
                    bias2_sqrt.to(torch.float32).to(p.device),
                )
            idx_d, step_d, decay_d, bias2_d = dev_cache[p.device]
            if every:
                g = p.grad.float() if p.grad is not None else torch.zeros_like(m_all)
                m, v = m_all, v_all
            else:
                g = p.grad[idx_d].float() if p.grad is not None else torch.zeros_like(m_all[idx_d])
                m, v = m_all[idx_d], v_all[idx_d]
            m.mul_(b1).add_(g, alpha=1.0 - b1)
            v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
            denom = (v.sqrt() / bias2_d.view(view)).add_(self.eps)
            if every and p.dtype == torch.float32:
                p.data.mul_(decay_d.view(view)).addcdiv_(m * step_d.view(view), denom, value=-1.0)
                continue
            w = (p.data if every else p.data[idx_d]).float().mul_(decay_d.view(view))
            w.addcdiv_(m * step_d.view(view), denom, value=-1.0)
            if every:
                p.data.copy_(w)
            else:
                m_all[idx_d], v_all[idx_d] = m, v
                p.data[idx_d] = w.to(p.dtype)

    def reset(self, slot: int) -> None:
        """Forget slot `slot`'s moments and step count (its learning rate is kept)."""
        self.steps[slot] = 0
        for m, v in zip(self.exp_avg, self.exp_avg_sq, strict=True):
            m[slot].zero_()
            v[slot].zero_()

    def state_dict(self) -> dict:
        """Every slot's state as CPU copies: it leaves the device (a checkpoint file, or Ray from a dist worker
        to a driver that may have no GPU, where unpickling a CUDA tensor fails); `load_state_dict` moves the
        moments back to each parameter's device."""
        return {
            "steps": self.steps.detach().to("cpu", copy=True),
            "lr": self.lr.detach().to("cpu", copy=True),
            "exp_avg": [m.detach().to("cpu", copy=True) for m in self.exp_avg],
            "exp_avg_sq": [v.detach().to("cpu", copy=True) for v in self.exp_avg_sq],
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
        }

    def load_state_dict(self, sd: dict) -> None:  # moments go to each parameter's device
        if len(sd["exp_avg"]) != len(self.params) or any(
            tuple(a.shape) != tuple(p.shape) for a, p in zip(sd["exp_avg"], self.params, strict=True)
        ):
            raise ValueError(
                "optimizer state does not match this engine (other slots, rank, targets or base model)"
            )
        self.steps = sd["steps"].clone().cpu()
        self.lr = sd["lr"].clone().cpu().to(torch.float64)
        self.exp_avg = [
            m.float().to(p.device, copy=True) for m, p in zip(sd["exp_avg"], self.params, strict=True)
        ]
        self.exp_avg_sq = [
            v.float().to(p.device, copy=True) for v, p in zip(sd["exp_avg_sq"], self.params, strict=True)
        ]
        self.betas, self.eps, self.weight_decay = tuple(sd["betas"]), sd["eps"], sd["weight_decay"]


@torch.no_grad()
def slot_grad_norms(params: Sequence[torch.nn.Parameter], n_slots: int) -> torch.Tensor:
    """L2 norm of each slot's gradient over all parameters: `[n_slots]` (float32, on the CPU).

    The squares are summed on the gradients' device, in parameter order (the same sums as one host add per
    parameter), and copied to the CPU once per device: a 7B model's 224 LoRA tensors would otherwise cost 224
    device-to-host copies, each a synchronisation, per train step."""
    on_device: dict[torch.device, torch.Tensor] = {}
    for p in params:
        if p.grad is not None:
            sq = p.grad.float().pow(2).reshape(n_slots, -1).sum(1)
            acc = on_device.get(sq.device)
            on_device[sq.device] = sq if acc is None else acc.add_(sq)
    total = torch.zeros(n_slots, dtype=torch.float32)
    for sq in on_device.values():
        total += sq.cpu()
    return total.sqrt()


@torch.no_grad()
def clip_slot_grads(
    params: Sequence[torch.nn.Parameter], n_slots: int, max_norm: float | None
) -> torch.Tensor:
    """Scale each slot's gradient so that its norm is at most `max_norm` (as `clip_grad_norm_` does per slot).

    Returns the pre-clipping norms.
    """
    norms = slot_grad_norms(params, n_slots)
    if max_norm is not None and max_norm > 0:
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        moved: dict[
            tuple, torch.Tensor
        ] = {}  # one host-to-device copy per (device, dtype), not per parameter
        for p in params:
            if p.grad is not None:
                key = (p.grad.device, p.grad.dtype)
                if key not in moved:
                    moved[key] = coef.to(device=p.grad.device, dtype=p.grad.dtype)
                p.grad.mul_(moved[key].view((-1,) + (1,) * (p.dim() - 1)))
    return norms
