"""The vllm engine on CPU against the hf engine it wraps: greedy tokens, refresh after training, seeds, bad
requests, and `close()`. One engine start for the whole module (the tiny model, 3 slots, rank 4, float32)."""

from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from populora.engine import EngineError, GenRequest, TrainBatch, TrainRow, build  # noqa: E402

PROMPTS = ["def f(x):\n    return", "assert f(3) ==", "x = [1, 2, 3]\nprint("]


def _randomise(engine, seed: int = 1, scale: float = 0.15) -> None:
    """Give every slot random, different A and B (through the public API, so vLLM is refreshed)."""
    g = torch.Generator().manual_seed(seed)
    for slot in range(engine.n_slots):
        ad = engine.get_adapter(slot)
        for a, b in ad.modules.values():
            a.copy_(torch.randn(a.shape, generator=g) * scale)
            b.copy_(torch.randn(b.shape, generator=g) * scale)
        engine.set_adapter(slot, ad)


@pytest.fixture(scope="module")
def engine():
    eng = build("tiny", n_slots=3, rank=4, alpha=8, backend="vllm", device="cpu", seed=0, train_threads=1)
    _randomise(eng)
    yield eng
    eng.close()


def _greedy(n: int = 16) -> list[GenRequest]:
    return [
        GenRequest(slot=s, prompt=p, max_new_tokens=n, temperature=0.0) for s in range(3) for p in PROMPTS
    ]


def test_samples_in_the_models_dtype(engine):
    assert engine.vllm_dtype == "float32"  # vLLM's "auto" would have sampled a float32 trainer in bfloat16
    assert str(engine.llm.llm_engine.model_config.dtype) == "torch.float32"


def test_greedy_equals_hf_on_several_slots(engine):
    reqs = _greedy()
    v, h = engine.generate(reqs), engine.hf.generate(reqs)
    assert [g.token_ids for g in v] == [g.token_ids for g in h]
    assert [g.finish_reason for g in v] == [g.finish_reason for g in h]
    # the slots really differ, and the log-probs are the hf engine's (float32 on both sides)
    assert len({tuple(g.token_ids) for g in v[:: len(PROMPTS)]}) == 3
    diffs = [
        abs(a - b) for x, y in zip(v, h, strict=True) for a, b in zip(x.logprobs, y.logprobs, strict=True)
    ]
    assert max(diffs) < 1e-3


def test_refresh_after_train_step(engine):
    before = engine.generate(_greedy())
    g = before[len(PROMPTS)]  # slot 1, first prompt: push its policy hard away from its own greedy answer
    engine.set_lr(1, 0.05)
    for _ in range(3):
        engine.train_step(TrainBatch([TrainRow(1, g.prompt_ids, g.token_ids, advantages=-1.0)]))
    after = engine.generate(_greedy())
    assert [x.token_ids for x in after] == [x.token_ids for x in engine.hf.generate(_greedy())]
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a.token_ids != b.token_ids]
    assert changed and all(len(PROMPTS) <= i < 2 * len(PROMPTS) for i in changed)  # only slot 1 moved


def test_a_smaller_rank_slot_is_served_at_its_own_rank(engine):
    """Mixed ranks (issue 34): slot 2 takes a rank-2 adapter (its top 2 components); vLLM, sized for the largest
    rank, loads it at r=2 and samples what the hf engine samples."""
    ad = engine.get_adapter(2)
    ad.modules = {k: (a[:2].clone(), b[:, :2].clone()) for k, (a, b) in ad.modules.items()}
    engine.set_adapter(2, ad)
    assert engine.hf.slot_ranks() == [4, 4, 2]
    reqs = _greedy()
    assert [g.token_ids for g in engine.generate(reqs)] == [g.token_ids for g in engine.hf.generate(reqs)]


def test_seeded_calls_repeat_unseeded_calls_do_not(engine):
    reqs = [GenRequest(slot=s, prompt="def", max_new_tokens=12, temperature=1.0) for s in (0, 0, 2, 2)]
    a, b = engine.generate(reqs, seed=7), engine.generate(reqs, seed=7)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert a[0].token_ids != a[1].token_ids  # two rows of one call get different seeds
    u1, u2 = engine.generate(reqs), engine.generate(reqs)
    assert [g.token_ids for g in u1] != [g.token_ids for g in u2]


def test_on_finish_gets_each_row_as_vllm_finishes_it_and_changes_nothing(engine):
    """`on_finish(i, g)`: each request once, with the object returned, in the order vLLM finishes them (fewer
    tokens first: one batch, all prefilled together), not request order; the samples are those of the same
    call without it, and of `LLM.generate` on the same requests (the engine steps vLLM as `generate` does)."""
    from vllm.inputs import TokensPrompt

    lengths = [14, 0, 9, 2, 14, 5]
    reqs = [GenRequest(slot=k % 3, prompt=PROMPTS[k % 3], max_new_tokens=n) for k, n in enumerate(lengths)]
    calls: list = []
    got = engine.generate(reqs, seed=3, on_finish=lambda i, g: calls.append((i, g)))
    plain = engine.generate(reqs, seed=3)
    assert sorted(i for i, _ in calls) == list(range(len(reqs)))
    assert all(got[i] is g for i, g in calls)
    done = [len(got[i].token_ids) for i, _ in calls]
    assert done == sorted(done) and [i for i, _ in calls] != list(range(len(reqs)))
    key = [(g.token_ids, g.logprobs, g.finish_reason, g.text) for g in got]
    assert key == [(g.token_ids, g.logprobs, g.finish_reason, g.text) for g in plain]
    todo = [i for i, n in enumerate(lengths) if n]
    direct = engine.llm.generate(
        [TokensPrompt(prompt_token_ids=got[i].prompt_ids) for i in todo],
        engine._params(reqs, todo, 3),
        lora_request=[engine._request(reqs[i].slot) for i in todo],
        use_tqdm=False,
    )
    assert [list(o.outputs[0].token_ids) for o in direct] == [got[i].token_ids for i in todo]

    def broken(i, g):
        if g.token_ids:
            raise ValueError("lane broke")

    with pytest.raises(ValueError, match="lane broke"):  # the caller's error as is; nothing left queued
        engine.generate(reqs, seed=3, on_finish=broken)
    assert not engine.llm.llm_engine.has_unfinished_requests()
    assert [g.token_ids for g in engine.generate(reqs, seed=3)] == [g.token_ids for g in got]


def test_zero_tokens_like_hf_and_bad_values_raise(engine):
    reqs = [GenRequest(0, "def", 0, 1.0), GenRequest(1, "def", 3, 0.0)]
    v, h = engine.generate(reqs), engine.hf.generate(reqs)
    assert v[0].token_ids == [] and v[0].text == "" and v[0].finish_reason == "length"
    assert [g.token_ids for g in v] == [g.token_ids for g in h]
    for bad in (
        GenRequest(0, "def", -1),
        GenRequest(0, "def", 2.5),
        GenRequest(0, "def", 4, temperature=-0.5),
        GenRequest(0, "def", 4, top_p=0.0),
        GenRequest(0, "def", 4, top_p=1.5),
        GenRequest(3, "def", 4),
        GenRequest(0, "def", engine.max_model_len),
    ):
        with pytest.raises(EngineError):
            engine.generate([bad])


def test_close_ends_the_engine_core_process(engine):
    """Last in the module on purpose: it closes the shared engine."""
    import psutil

    def vllm_children():
        kids = psutil.Process().children(recursive=True)
        return [
            p for p in kids if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "VLLM" in p.name()
        ]

    before = vllm_children()
    assert any("EngineCor" in p.name() for p in before)
    # what vLLM's processes hold in /dev/shm (its message queues, a semaphore) and its rendezvous file
    assert engine.shm and {p.pid for p in before} == set(engine.vllm_pids)
    held = [Path("/dev/shm") / n for n in engine.shm]
    assert all(f.exists() for f in held)
    engine.close()
    gone, alive = psutil.wait_procs(before, timeout=15)
    assert not alive and not vllm_children()
    assert not [f for f in held if f.exists()]  # none left behind, however vLLM's shutdown went
    assert not [f for f in engine.tmp_files if Path(f).exists()]
    assert not engine._scratch.exists()
