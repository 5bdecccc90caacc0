"""vLLM's sleep around a train step, in one process and in each dist worker (issue 51): sleep, the step (in a
worker: backward, all-reduce, AdamW), PyTorch's cached memory handed back (`torch.cuda.empty_cache`), then wake,
and the wake also when the step raises, so a failed step never leaves vLLM asleep with the trainer's memory
still cached under it.

A call-order simulation on CPU: a real `VLLMEngine` object (not started) around a real tiny `HFEngine`, whose
vLLM is a recorder of `sleep` / `wake_up` / `reset_prefix_cache`, a real `DistWorker` in a one-process gloo
group, and `torch.cuda.empty_cache` recorded (it is a no-op without CUDA)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from populora.engine.dist import DistWorker
from populora.engine.types import TrainBatch, TrainRow
from populora.engine.vllm import VLLMEngine
from populora.rl.loss import row_weights


class RecordingLLM:
    """Stands in for `vllm.LLM`: the calls a train step makes on it, in order."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def sleep(self, level: int) -> None:
        self.log.append(f"sleep({level})")

    def wake_up(self) -> None:
        self.log.append("wake_up")

    def reset_prefix_cache(self) -> None:
        self.log.append("reset_prefix_cache")


@pytest.fixture
def world_of_one(tmp_path):
    """A one-process gloo group (the dist worker's all-reduce runs for real)."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def setup(make_engine, monkeypatch):
    log: list[str] = []
    hf = make_engine(n_slots=2, rank=4, alpha=8)
    eng = VLLMEngine.__new__(VLLMEngine)  # its vLLM is the recorder: nothing started
    eng.hf, eng.n_slots, eng.tokenizer = hf, hf.n_slots, hf.tokenizer
    eng.llm, eng.sleep_mode, eng._asleep, eng._stale = RecordingLLM(log), True, False, set()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: log.append("empty_cache"))
    for name in ("accumulate_gradients", "apply_gradients", "train_step"):
        real = getattr(hf, name)

        def recorded(*args, _name=name, _real=real, **kwargs):
            log.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(hf, name, recorded)
    real_all_reduce = dist.all_reduce

    def all_reduce(*args, **kwargs):
        if log[-1] != "all_reduce":
            log.append("all_reduce")
        return real_all_reduce(*args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    rows = [TrainRow(slot=0, prompt_ids=[3, 4, 5], response_ids=[6, 7], advantages=1.0)]
    weights = row_weights([2], [r.loss_key for r in rows], hf.loss_agg)
    return eng, hf, log, rows, weights


def _worker(eng, hf) -> DistWorker:
    worker = DistWorker(0, 1)
    worker.engine, worker.hf = eng, hf
    return worker


WAKE = ["empty_cache", "wake_up", "reset_prefix_cache"]


def test_dist_worker_step_sleeps_and_wakes_as_the_one_process_step(setup, world_of_one):
    eng, hf, log, rows, weights = setup
    eng.train_step(TrainBatch(rows))
    assert log == ["sleep(1)", "train_step", "accumulate_gradients", "apply_gradients", *WAKE]
    log.clear()
    before = hf.get_adapter(0).modules
    sums, norms, _ = _worker(eng, hf).train(rows, weights, [0])
    assert log == ["sleep(1)", "accumulate_gradients", "all_reduce", "apply_gradients", *WAKE]
    assert sums["rows"] == {0: 1} and norms.shape == (2,) and not eng._asleep
    after = hf.get_adapter(0).modules
    assert any(not torch.equal(before[k][1], after[k][1]) for k in before)  # the step ran
    assert 0 in eng._stale  # and the vLLM side refreshes slot 0 before it samples again
    log.clear()
    eng.sleep_mode = False  # model.vllm_sleep=false (or vLLM on CPU): no memory calls at all
    _worker(eng, hf).train(rows, weights, [0])
    assert log == ["accumulate_gradients", "all_reduce", "apply_gradients"]


def test_a_failed_step_still_wakes_vllm(setup, world_of_one, monkeypatch):
    eng, hf, log, rows, weights = setup

    def out_of_memory(*args, **kwargs):
        log.append("accumulate_gradients")
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(hf, "accumulate_gradients", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError):
        _worker(eng, hf).train(rows, weights, [0])  # a dist worker
    assert log == ["sleep(1)", "accumulate_gradients", *WAKE] and not eng._asleep
    log.clear()
    with pytest.raises(torch.OutOfMemoryError):
        eng.train_step(TrainBatch(rows))  # one process
    assert log == ["sleep(1)", "train_step", "accumulate_gradients", *WAKE] and not eng._asleep
