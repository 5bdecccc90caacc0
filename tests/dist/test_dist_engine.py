"""DistributedEngine with 2 Ray actors against the 1-process hf engine on the same rows (a tiny random Qwen2)."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from populora.engine import EngineError, GenRequest, PolicyEngine, TrainBatch, TrainRow, build
from populora.engine.dist import deal
from populora.engine.testing import random_model

SLOTS = 3


def _random_adapters(engine, seed: int = 1, scale: float = 0.3) -> list:
    """Random A and B for every slot (B = 0 at init would leave A without gradient)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in range(SLOTS):
        ad = engine.get_adapter(s)
        for name, (a, b) in ad.modules.items():
            ad.modules[name] = (
                torch.randn(a.shape, generator=g) * scale,
                torch.randn(b.shape, generator=g) * scale,
            )
        out.append(ad)
    return out


@pytest.fixture(scope="module")
def engines(ray_address):
    """(2-worker engine, 1-process engine) on copies of one base, same options, same adapters."""
    torch.set_num_threads(1)
    base, tok = random_model("qwen2", seed=11, initializer_range=0.3)
    opts = dict(n_slots=SLOTS, rank=4, alpha=8, lr=1e-2, train_threads=1, micro_batch_tokens=64)
    one = build(copy.deepcopy(base), tokenizer=tok, **opts)
    two = build(copy.deepcopy(base), tokenizer=tok, workers=2, **opts)
    try:
        yield two, one
    finally:
        two.close()


@pytest.fixture
def same_start(engines):
    two, one = engines
    for s, ad in enumerate(_random_adapters(one)):
        one.set_adapter(s, ad)
        two.set_adapter(s, ad)
    return two, one


def _rows(seed: int, n: int = 11) -> list[TrainRow]:
    """Rows of very different lengths and uneven counts per slot, per-token advantages."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        slot = [0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2][i % 11]
        p, r = rng.randint(1, 12), rng.choice([1, 2, 3, 17, 29])
        rows.append(
            TrainRow(
                slot=slot,
                prompt_ids=[rng.randrange(256) for _ in range(p)],
                response_ids=[rng.randrange(256) for _ in range(r)],
                advantages=[rng.uniform(-1, 1) for _ in range(r)],
            )
        )
    return rows


def _max_diff(a, b) -> float:
    return max(
        float((x - y).abs().max()) for k in a.modules for x, y in zip(a.modules[k], b.modules[k], strict=True)
    )


def test_train_step_split_over_two_workers_equals_the_one_process_step(same_start):
    two, one = same_start
    rows = _rows(0)
    m2, m1 = two.train_step(TrainBatch(rows)), one.train_step(TrainBatch(rows))
    # token-mean per slot needs the slot's GLOBAL token count: a per-worker mean would change these
    for s in range(SLOTS):
        assert m2[f"grad_norm/{s}"] == pytest.approx(m1[f"grad_norm/{s}"], rel=1e-5)
        assert m2[f"loss/{s}"] == pytest.approx(m1[f"loss/{s}"], rel=1e-5, abs=1e-7)
        assert m2[f"tokens/{s}"] == m1[f"tokens/{s}"]
        assert _max_diff(two.get_adapter(s), one.get_adapter(s)) < 1e-5
    assert m2["rows"] == m1["rows"] == len(rows)
    stats = two.last_dist_stats()
    assert stats["workers"] == 2
    assert sum(stats["train"]["rows"]) == len(rows) and min(stats["train"]["rows"]) >= 5
    assert sum(stats["train"]["tokens"]) == m1["tokens"]


def test_after_several_steps_every_worker_holds_the_same_adapters_bitwise(same_start):
    two, one = same_start
    reqs = [GenRequest(slot=i % SLOTS, prompt=[5 + i, 7, 9], max_new_tokens=6) for i in range(9)]
    for step in range(3):
        gens = two.generate(reqs, seed=step)
        rows = [
            TrainRow(
                g.slot, g.prompt_ids, g.token_ids, advantages=float(i % 3) - 1.0, old_logprobs=g.logprobs
            )
            for i, g in enumerate(gens)
        ]
        two.train_step(TrainBatch(rows))
        one.train_step(TrainBatch(rows))
    for s in range(SLOTS):
        first, second = two.per_worker("get_adapter", s)
        for name in first.modules:
            for x, y in zip(first.modules[name], second.modules[name], strict=True):
                assert torch.equal(x, y), (s, name)
        assert _max_diff(first, one.get_adapter(s)) < 1e-4  # and they follow the 1-process run
    st0, st1 = two.per_worker("optimizer_state")
    assert torch.equal(st0["steps"], st1["steps"])
    assert all(torch.equal(a, b) for a, b in zip(st0["exp_avg_sq"], st1["exp_avg_sq"], strict=True))


def test_generate_returns_results_in_request_order_with_every_slot_spread(same_start):
    two, one = same_start
    assert isinstance(two, PolicyEngine)
    two.last_dist_stats()
    reqs = [
        GenRequest(slot=s, prompt=[3 + i, 11, 4 + s], max_new_tokens=5, temperature=0.0)
        for i in range(4)
        for s in range(SLOTS)
    ]
    got, ref = two.generate(reqs), one.generate(reqs)
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]  # greedy: same as one process
    assert [(g.slot, g.prompt_ids) for g in got] == [(r.slot, list(r.prompt)) for r in reqs]
    sampled = two.generate([GenRequest(slot=0, prompt=[1, 2, 3], max_new_tokens=12)] * 2, seed=0)
    assert sampled[0].token_ids != sampled[1].token_ids  # each worker draws its own samples
    stats = two.last_dist_stats()["generate"]
    assert stats["rows"] == [7, 7] and all(s > 0 for s in stats["s"])


def test_on_finish_gets_every_row_once_per_worker_share_and_changes_nothing(same_start):
    """`on_finish(i, g)`: each request once, with the very object returned, a worker's rows together (its
    share from `deal`, as it arrives); the samples are those of the same call without it."""
    two, _ = same_start
    reqs = [
        GenRequest(slot=s, prompt=[3 + i, 11, 4 + s][: 1 + i % 3], max_new_tokens=[0, 3, 9][(i + s) % 3])
        for i in range(4)
        for s in range(SLOTS)
    ]
    calls: list[tuple[int, object]] = []
    got = two.generate(reqs, seed=5, on_finish=lambda i, g: calls.append((i, g)))
    plain = two.generate(reqs, seed=5)
    assert sorted(i for i, _ in calls) == list(range(len(reqs)))
    assert all(got[i] is g for i, g in calls)
    shares = deal([len(r.prompt) + r.max_new_tokens for r in reqs], [r.slot for r in reqs], 2)
    order = [i for i, _ in calls]
    assert order in (shares[0] + shares[1], shares[1] + shares[0])  # one worker's share, then the other's
    key = [(g.token_ids, g.logprobs, g.finish_reason, g.text, g.slot, g.prompt_ids) for g in got]
    assert key == [(g.token_ids, g.logprobs, g.finish_reason, g.text, g.slot, g.prompt_ids) for g in plain]
    assert any(g.token_ids for g in got) and any(not g.token_ids for g in got)

    def broken(i, g):
        raise ValueError("lane broke")

    with pytest.raises(ValueError, match="lane broke"):  # the caller's error as is, the engine still usable
        two.generate(reqs, seed=5, on_finish=broken)
    assert [g.token_ids for g in two.generate(reqs, seed=5)] == [g.token_ids for g in got]


def test_user_errors_are_raised_before_dispatch_and_keep_the_engine_usable(same_start):
    two, _ = same_start
    with pytest.raises(EngineError, match="out of range"):
        two.generate([GenRequest(slot=SLOTS, prompt="x")])
    bad = TrainRow(slot=0, prompt_ids=[1], response_ids=[2, 3], advantages=[1.0])
    with pytest.raises(EngineError, match="advantages"):
        two.train_step(TrainBatch([bad]))
    with pytest.raises(EngineError, match="max_new_tokens"):  # raised inside a worker, passed on as is
        two.generate([GenRequest(slot=0, prompt="x", max_new_tokens=-1)])
    assert two.train_step(TrainBatch(_rows(1)))["rows"] == 11


def test_adapter_files_are_written_and_read_by_the_driver(same_start, tmp_path):
    two, _ = same_start
    two.save_adapter(0, tmp_path / "a0")
    assert (tmp_path / "a0" / "adapter_config.json").is_file()
    two.load_adapter(2, tmp_path / "a0")
    ref = two.get_adapter(0)
    for ad in two.per_worker("get_adapter", 2):
        assert _max_diff(ad, ref) == 0.0


def test_a_batch_smaller_than_the_workers_leaves_one_idle_and_keeps_them_equal(same_start):
    two, one = same_start
    two.last_dist_stats()  # reset
    rows = _rows(2, n=1)  # one row: worker 1 has nothing and all-reduces zeros
    m2, m1 = two.train_step(TrainBatch(rows)), one.train_step(TrainBatch(rows))
    assert m2["grad_norm/0"] == pytest.approx(m1["grad_norm/0"], rel=1e-5)
    assert two.last_dist_stats()["train"]["rows"] == [1, 0]
    first, second = two.per_worker("get_adapter", 0)
    assert all(
        torch.equal(x, y)
        for k in first.modules
        for x, y in zip(first.modules[k], second.modules[k], strict=True)
    )
