"""The optimiser state leaves the device as CPU tensors (issue 51): a dist worker returns it through Ray to a
driver that may have no GPU, where unpickling a CUDA tensor fails (at the first checkpoint and on every resume).

No GPU is needed: under PyTorch's fake-tensor mode a tensor can live on "cuda" on a CPU-only machine (shapes
and devices only, no data), which is what this checks."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from populora.engine.optim import SlotAdamW


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _tensors(v)
    elif isinstance(tree, list | tuple):
        for v in tree:
            yield from _tensors(v)


def test_state_of_cuda_parameters_comes_out_on_the_cpu_and_goes_back_to_their_device():
    with FakeTensorMode():
        params = [torch.nn.Parameter(torch.zeros(3, 4, 2, device="cuda")) for _ in range(2)]
        opt = SlotAdamW(params, n_slots=3)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step([0, 1, 2])  # the moments now hold a step's state, on the parameters' device
        assert all(m.device.type == "cuda" for m in opt.exp_avg + opt.exp_avg_sq)
        state = opt.state_dict()
        devices = {t.device.type for t in _tensors(state)}
        assert devices == {"cpu"}, devices
        assert len(list(_tensors(state))) == 2 + 2 * len(params)  # steps, lr, exp_avg[*], exp_avg_sq[*]
        opt.load_state_dict(state)  # a resume: the moments go back to the parameters' device
        assert all(m.device.type == "cuda" for m in opt.exp_avg + opt.exp_avg_sq)
        assert opt.steps.device.type == "cpu" and opt.lr.device.type == "cpu"


def test_state_is_a_copy():
    p = torch.nn.Parameter(torch.zeros(2, 3))
    opt = SlotAdamW([p], n_slots=2)
    p.grad = torch.ones_like(p)
    opt.step([0])
    state = opt.state_dict()
    state["exp_avg"][0].zero_()
    state["steps"].zero_()
    assert float(opt.exp_avg[0][0].abs().sum()) > 0 and int(opt.steps[0]) == 1
