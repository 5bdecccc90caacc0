"""Chunked log-probs and entropy (`populora.rl.logprobs`) equal the full-logits computation, values and
gradients, and keep no [N, V] tensor for the backward pass."""

from __future__ import annotations

import pytest
import torch

from populora.rl.logprobs import response_logprobs


def _setup(n=11, h=6, v=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(h, v, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(v, h, generator=g))
    head.weight.requires_grad_(False)  # frozen, as the base model's lm_head
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64).float().requires_grad_(True)
    targets = torch.randint(0, v, (n,), generator=g)
    return head, hidden, targets


def _reference(head, hidden, targets):
    logp_all = torch.log_softmax(head(hidden).float(), -1)
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize("chunk", [1, 4, 5, 11, 0])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_chunked_equals_full_logits_values_and_grads(chunk, entropy_grad):
    head, hidden, targets = _setup()
    w = torch.linspace(-1, 1, hidden.shape[0])
    ref_lp, ref_ent = _reference(head, hidden, targets)
    ref_loss = (w * ref_lp).sum() - 0.3 * ((w * ref_ent).sum() if entropy_grad else 0)
    (ref_grad,) = torch.autograd.grad(ref_loss, hidden)

    lp, ent = response_logprobs(hidden, head, targets, chunk_tokens=chunk, entropy_grad=entropy_grad)
    assert ent.requires_grad == entropy_grad
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-6)
    loss = (w * lp).sum() - 0.3 * ((w * ent).sum() if entropy_grad else 0)
    (grad,) = torch.autograd.grad(loss, hidden)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-6)


def test_hand_numbers():
    # head = identity on 2 logits; hidden rows are the logits: [0, 0] -> p = (.5, .5); [ln 3, 0] -> (.75, .25)
    head = torch.nn.Identity()
    hidden = torch.tensor([[0.0, 0.0], [torch.log(torch.tensor(3.0)), 0.0]])
    lp, ent = response_logprobs(hidden, head, torch.tensor([1, 0]), chunk_tokens=1)
    torch.testing.assert_close(lp, torch.log(torch.tensor([0.5, 0.75])))
    torch.testing.assert_close(ent, torch.tensor([0.693147, -(0.75 * -0.287682 + 0.25 * -1.386294)]))


def test_backward_keeps_no_full_logits():
    """The old path saved [N, V] float32 tensors for backward; chunked, no saved tensor exceeds one chunk."""
    head, hidden, targets = _setup(n=64, h=4, v=500)
    for chunk, limit_ok in ((0, False), (8, True)):
        biggest: list[int] = []

        def pack(t, seen=biggest):
            seen.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = response_logprobs(hidden, head, targets, chunk_tokens=chunk)
        assert (max(biggest) < 64 * 500) == limit_ok, (chunk, max(biggest))
        lp.sum().backward()
