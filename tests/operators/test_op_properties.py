"""Properties every operator must have (reference/operators.md §3): shapes, determinism, purity, dtype."""

from __future__ import annotations

import copy

import pytest
import torch
from op_fixtures import make_adapter

from populora.lora import AdapterError, LoRAAdapter
from populora.operators import LIVE_OPERATORS, REGISTRY, OperatorError, apply

ALL = list(REGISTRY)
STOCHASTIC = ["M1", "M2", "M3", "M4", "M5", "M6", "X1", "X2", "X7"]


def _parents(op, p1, p2):
    return [p1] if REGISTRY[op].arity == 1 else [p1, p2]


def test_registry_contents():
    assert ALL == [f"M{i}" for i in range(1, 7)] + [f"X{i}" for i in range(1, 10)] + ["I1", "I2"]
    assert LIVE_OPERATORS == ("M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4")
    for name, op in REGISTRY.items():
        assert op.name == name and op.arity == (1 if name[0] == "M" or name == "I1" else 2)
        assert op.summary and "\n" not in op.summary
    assert REGISTRY["M2"].defaults == {"fraction": 0.33, "eps": 0.1, "canonicalize": True}
    assert REGISTRY["M4"].defaults["eps"] == 0.15 and REGISTRY["M3"].defaults["rho"] == 0.3
    assert REGISTRY["X5"].defaults == {"weight": 0.5} and REGISTRY["X4"].defaults["t"] > 1


@pytest.mark.parametrize("op", ALL)
def test_shape_rank_alpha_purity_determinism(op, p1, p2):
    parents = _parents(op, p1, p2)
    before = copy.deepcopy(parents)
    rng_state = torch.random.get_rng_state()
    child = apply(op, parents, seed=3)
    assert torch.equal(torch.random.get_rng_state(), rng_state), "operator used the global RNG"
    assert isinstance(child, LoRAAdapter)
    assert child.names() == p1.names() and child.rank == p1.rank and child.alpha == p1.alpha
    assert child.shapes() == p1.shapes()
    for k, (a, b) in child.modules.items():
        assert a.dtype == torch.float64 and b.dtype == torch.float64
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
        assert a.data_ptr() not in {t.data_ptr() for p in parents for t in p.modules[k]}
    for p, q in zip(parents, before, strict=True):  # inputs untouched
        assert all(torch.equal(p.modules[k][i], q.modules[k][i]) for k in p.modules for i in (0, 1))
    again = apply(op, parents, seed=3)
    assert all(torch.equal(child.modules[k][i], again.modules[k][i]) for k in child.modules for i in (0, 1))
    lineage = child.metadata["lineage"]
    assert lineage["requested"] == op and lineage["seed"] == 3
    # the operator actually applied: the requested one, unless it declined (X4 on these unrelated parents)
    assert lineage["operator"] == ("X5" if op == "X4" else op) and ("declined" in lineage) == (op == "X4")


@pytest.mark.parametrize("op", STOCHASTIC)
def test_different_seeds_differ(op, p1, p2):
    parents = _parents(op, p1, p2)
    children = [apply(op, parents, seed=s) for s in range(3)]
    for c in children[1:]:
        assert any(
            not torch.equal(children[0].modules[k][i], c.modules[k][i]) for k in c.modules for i in (0, 1)
        )


@pytest.mark.parametrize("op", ALL)
def test_bf16_in_bf16_out(op):
    p1, p2 = make_adapter(1, dtype=torch.bfloat16), make_adapter(2, dtype=torch.bfloat16)
    child = apply(op, _parents(op, p1, p2), seed=0)
    assert all(a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16 for a, b in child.modules.values())


def test_identity_controls_bit_exact(p1, p2):
    for op, parents in (("I1", [p1]), ("I2", [p1, p2])):
        c = apply(op, parents, seed=0)
        for k, (a, b) in p1.modules.items():
            ca, cb = c.modules[k]
            assert torch.equal(ca, a) and torch.equal(cb, b)
            assert ca.data_ptr() != a.data_ptr() and cb.data_ptr() != b.data_ptr()


def test_fresh_adapter_with_zero_b(p1):
    """A fresh PEFT adapter (B = 0) goes through every operator without NaN and keeps a zero delta."""
    zero = LoRAAdapter({k: (a, torch.zeros_like(b)) for k, (a, b) in p1.modules.items()}, alpha=p1.alpha)
    for op in ALL:
        c = apply(op, _parents(op, zero, zero), seed=0)
        for _, (a, b) in c.modules.items():
            assert torch.isfinite(a).all() and torch.isfinite(b).all()
            assert float((b @ a).abs().max()) < 1e-12, op
            assert float(a.norm()) > 0, f"{op}: A rows must be (re)seeded, not all zero"


def test_bad_inputs_raise_clear_errors(p1, p2):
    with pytest.raises(OperatorError, match="unknown operator 'M9'"):
        apply("M9", [p1])
    with pytest.raises(OperatorError, match="takes 2 parents, got 1"):
        apply("X5", [p1])
    with pytest.raises(OperatorError, match="takes one parent, got 2"):
        apply("M1", [p1, p2])
    with pytest.raises(OperatorError, match="no parameter 'sigmaa'"):
        apply("M1", [p1], sigmaa=0.1)
    with pytest.raises(OperatorError, match=r"p=1.0 must lie in \[0, 1\)"):
        apply("X1", [p1, p2], p=1.0)
    with pytest.raises(OperatorError, match="density - window"):
        apply("X7", [p1, p2], density=0.9, window=0.2)
    # Parents of ranks 4 and 8 are no error since issue 34: the child takes the first parent's rank.
    wide = LoRAAdapter(
        {k: (torch.cat([a, a]), torch.cat([b, b], 1)) for k, (a, b) in p2.modules.items()}, alpha=8.0
    )
    assert apply("X5", [p1, wide]).rank == p1.rank
    other = LoRAAdapter({k.replace("q_proj", "v_proj"): v for k, v in p2.modules.items()}, alpha=8.0)
    with pytest.raises(AdapterError, match="different modules"):
        apply("X3", [p1, other])
    with pytest.raises(AdapterError, match="alpha"):
        apply("X8", [p1, LoRAAdapter(dict(p2.modules), alpha=16.0)])
    nan = p2.clone()
    nan.modules["model.layers.0.self_attn.q_proj"][0][0, 0] = float("nan")
    with pytest.raises(AdapterError, match="NaN"):
        apply("X1", [p1, nan])
    with pytest.raises(AdapterError, match="NaN"):
        apply("M1", [nan])
    assert apply("m1", [p1], seed=0).rank == 4  # names are case-insensitive
