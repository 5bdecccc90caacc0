"""LoRAAdapter: validation errors, scaling, compatibility checks and the flat state-dict round trip."""

from __future__ import annotations

import pytest
import torch

from populora.lora import AdapterError, LoRAAdapter


def _ad(r=2, alpha=4.0):
    return LoRAAdapter(
        {"a.q": (torch.ones(r, 3), torch.ones(5, r)), "a.k": (torch.ones(r, 3), torch.ones(2, r))},
        alpha=alpha,
    )


def test_delta_is_scaled_product():
    ad = _ad()
    assert ad.rank == 2 and ad.scale == 2.0
    assert torch.equal(ad.delta("a.q"), torch.full((5, 3), 4.0))  # 2 (alpha/r) * (1*1 + 1*1)


def test_validation_errors():
    with pytest.raises(AdapterError, match="no modules"):
        LoRAAdapter({}, alpha=1.0)
    with pytest.raises(AdapterError, match="ranks 2 and 3 differ"):
        LoRAAdapter({"m": (torch.ones(2, 3), torch.ones(4, 3))}, alpha=1.0)
    with pytest.raises(AdapterError, match="share one rank"):
        LoRAAdapter(
            {"m": (torch.ones(2, 3), torch.ones(4, 2)), "n": (torch.ones(1, 3), torch.ones(4, 1))}, alpha=1.0
        )
    with pytest.raises(AdapterError, match="alpha must be positive"):
        _ad(alpha=0)


def test_compatibility_clone_and_state_dict():
    ad = _ad()
    ad.check_compatible(ad.clone())
    with pytest.raises(AdapterError, match="ranks 2 and 3"):
        ad.check_compatible(_ad(r=3))
    with pytest.raises(AdapterError, match="alpha"):
        ad.check_compatible(_ad(alpha=8.0))
    c = ad.clone()
    c.modules["a.q"][0][0, 0] = 7
    assert ad.modules["a.q"][0][0, 0] == 1  # no shared storage
    back = LoRAAdapter.from_state_dict(ad.state_dict(), alpha=ad.alpha)
    assert back.shapes() == ad.shapes() and all(
        torch.equal(back.modules[k][0], ad.modules[k][0]) for k in ad.modules
    )
