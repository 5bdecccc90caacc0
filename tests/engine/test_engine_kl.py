"""rl.kl_coef / rl.entropy_coef / rl.clip_eps on the tiny model: the KL penalty's reference is the frozen base,
a large coefficient keeps the trained adapter near it, 0 leaves the update byte for byte as before, and the
keys reach the engine a run builds."""

from __future__ import annotations

import pytest
import torch

from populora.config import ConfigError, load_config
from populora.engine import EngineError, TrainBatch, TrainRow
from populora.rl.kl import kl_per_token
from populora.train.setup import build_engine


def _rows(slot=0, n=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [
        TrainRow(
            slot=slot,
            prompt_ids=torch.randint(0, 256, (4,), generator=g).tolist(),
            response_ids=torch.randint(0, 256, (5,), generator=g).tolist(),
            advantages=1.0 if k % 2 == 0 else -1.0,
        )
        for k in range(n)
    ]


def _kl_to_base(eng, rows):
    """Mean k3 KL of slot 0's log-probs to slot 1's, an untouched slot (B = 0: exactly the base)."""
    policy = torch.tensor([x for lp in eng.logprobs(TrainBatch(rows)) for x in lp])
    base_rows = [TrainRow(1, r.prompt_ids, r.response_ids, r.advantages) for r in rows]
    base = torch.tensor([x for lp in eng.logprobs(TrainBatch(base_rows)) for x in lp])
    return kl_per_token(policy, base, "k3").mean().item()


def _train(make_engine, steps=6, **opts):
    eng = make_engine(n_slots=2, randomise=False, lr=3e-2, **opts)
    rows = _rows()
    metrics = [eng.train_step(TrainBatch(rows)) for _ in range(steps)]
    return eng, rows, metrics


def test_the_reference_is_the_base_with_the_adapters_off(make_engine):
    eng = make_engine(n_slots=2, kl_coef=0.1)  # randomised slots: each differs from the base
    rows = _rows()
    ref = eng._reference_logprobs(rows)
    empty = make_engine(n_slots=2, randomise=False)  # B = 0 everywhere: the adapters add nothing
    base = torch.tensor([x for lp in empty.logprobs(TrainBatch(rows)) for x in lp])
    policy = torch.tensor([x for lp in eng.logprobs(TrainBatch(rows)) for x in lp])
    assert torch.allclose(ref, base, atol=1e-5)
    assert not torch.allclose(policy, base, atol=1e-3)


def test_a_large_kl_coef_keeps_the_policy_near_the_base(make_engine):
    free, rows, m_free = _train(make_engine)
    held, _, m_held = _train(make_engine, kl_coef=5.0)
    kl_free, kl_held = _kl_to_base(free, rows), _kl_to_base(held, rows)
    assert kl_free > 0.01
    assert kl_held < 0.5 * kl_free
    # the metric: the mean KL estimate of the step's tokens, logged only when the penalty is on
    assert "kl_ref/0" in m_held[-1] and "kl_ref/0" not in m_free[-1]
    assert m_held[0]["kl_ref/0"] == pytest.approx(0.0, abs=1e-6)  # step 1 starts at the base
    assert m_held[-1]["kl_ref/0"] > 0
    assert m_held[-1]["loss/0"] == pytest.approx(
        m_held[-1]["pg_loss/0"] + 5.0 * m_held[-1]["kl_ref/0"], rel=1e-4
    )


@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_the_other_estimators_change_the_update(make_engine, estimator):
    free, rows, _ = _train(make_engine, steps=3)
    other, _, _ = _train(make_engine, steps=3, kl_coef=1.0, kl_estimator=estimator)
    a, b = free.get_adapter(0), other.get_adapter(0)
    assert any(not torch.equal(a.modules[k][1], b.modules[k][1]) for k in a.modules)


def test_kl_coef_zero_is_byte_identical_to_no_penalty(make_engine):
    today, _, m_today = _train(make_engine, steps=3)
    zero, _, m_zero = _train(make_engine, steps=3, kl_coef=0.0, entropy_coef=0.0)
    a, b = today.get_adapter(0), zero.get_adapter(0)
    for k in a.modules:
        assert torch.equal(a.modules[k][0], b.modules[k][0]) and torch.equal(a.modules[k][1], b.modules[k][1])
    drop = ("time_s",)
    assert {k: v for k, v in m_today[-1].items() if k not in drop} == {
        k: v for k, v in m_zero[-1].items() if k not in drop
    }


def test_bad_engine_values_name_the_choices(make_engine):
    with pytest.raises(EngineError, match="kl_estimator='low_var'; choose one of"):
        make_engine(kl_coef=0.1, kl_estimator="low_var")
    with pytest.raises(EngineError, match="kl_coef must be >= 0"):
        make_engine(kl_coef=-1.0)


def test_the_config_keys_reach_the_engine():
    cfg = load_config(
        "tiny",
        [
            "rl.kl_coef=0.05",
            "rl.kl_estimator=k2",
            "rl.entropy_coef=0.01",
            "rl.clip_eps=0.2",
            "model.device=cpu",
        ],
    )
    eng = build_engine(cfg)
    assert (eng.kl_coef, eng.kl_estimator, eng.entropy_coef, eng.clip_eps) == (0.05, "k2", 0.01, 0.2)
    plain = build_engine(load_config("tiny", ["model.device=cpu"]))
    assert (plain.kl_coef, plain.entropy_coef, plain.clip_eps) == (0.0, 0.0, None)


@pytest.mark.parametrize(
    "override, words",
    [
        ("rl.kl_coef=-0.1", "rl.kl_coef: must be >= 0"),
        ("rl.entropy_coef=-1", "rl.entropy_coef: must be >= 0"),
        ("rl.clip_eps=1.5", "rl.clip_eps: must be in [0, 1)"),
        ("rl.kl_estimator=k4", "rl.kl_estimator"),
    ],
)
def test_bad_values_are_one_line_errors(override, words):
    with pytest.raises(ConfigError) as err:
        load_config("tiny", [override])
    assert words in str(err.value) and "\n" not in str(err.value)
