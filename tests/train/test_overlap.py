"""`train.overlap` (issue 32 §3): the sandbox validates and scores finished rows on a background thread while the
phase still decodes. The lane on its own (batches, order, errors, abort), then real steps of the tiny preset
(the bundled model, whose proposals are often valid, the real sandbox) with and without it: identical logs."""

import json
import threading
import time

import pytest

from populora.config import load_config
from populora.train.overlap import SandboxLane, accepts_on_finish
from populora.train.trainer import Trainer

TIMING = ("time", "phase_s", "step_s", "tokens_per_s", "overlap_s")  # the only keys allowed to differ


# ------------------------------------------------------------------------------------------------ the lane
def test_the_lane_runs_every_item_once_in_order_in_batches():
    seen: list[list[int]] = []
    gate = threading.Event()

    def work(batch):
        gate.wait(10)  # the first batch holds the thread while the rest are queued
        seen.append(list(batch))

    lane = SandboxLane(work)
    lane.put(0)
    time.sleep(0.05)  # not a timing assert: only makes the one-item first batch likely
    for i in range(1, 6):
        lane.put(i)
    gate.set()
    lane.join()
    assert [i for b in seen for i in b] == list(range(6))  # each item once, in the order handed over
    assert len(seen) <= 2  # items queued while a batch ran are taken together
    assert lane.batches == len(seen) and lane.busy_s > 0 and lane.joined_at is not None
    lane.join()  # joining twice is harmless


def test_an_error_on_the_lane_is_raised_by_join_and_stops_the_work():
    calls = []

    def work(batch):
        calls.append(batch)
        raise ValueError("sandbox broke")

    lane = SandboxLane(work)
    lane.put(1)
    with pytest.raises(ValueError, match="sandbox broke"):
        lane.join()
    assert len(calls) == 1


def test_abort_drops_what_is_still_queued():
    entered, gate, seen = threading.Event(), threading.Event(), []

    def work(batch):
        entered.set()
        gate.wait(10)
        seen.extend(batch)

    lane = SandboxLane(work)
    lane.put(1)
    assert entered.wait(10)  # the thread runs [1]
    lane.put(2)
    threading.Timer(0.1, gate.set).start()
    lane.abort()  # returns once [1] is done; 2 never runs
    assert seen == [1] and not lane._thread.is_alive()


def test_accepts_on_finish():
    assert accepts_on_finish(lambda requests, seed=None, on_finish=None: None)
    assert not accepts_on_finish(lambda requests, seed=None: None)


# ------------------------------------------------------------------------------------------------ the trainer
def _run(
    tmp_path, name: str, overlap: bool, steps: int = 3, plain_engine: bool = False, hook=None
) -> Trainer:
    cfg = load_config(
        "tiny",
        [
            f"train.steps={steps}",
            f"train.overlap={str(overlap).lower()}",
            "train.threads=1",
            "train.checkpoint_every=100",
            "evolution.every=2",  # an evolution inside the compared steps
        ],
    )
    tr = Trainer(cfg, tmp_path / name, quiet=True)
    tr.setup()
    try:
        if plain_engine:  # an engine whose generate has no on_finish= (a third-party engine)
            real = tr.engine.generate
            tr.engine.generate = lambda requests, seed=None, progress=None: real(requests, seed=seed)
        if hook is not None:
            hook(tr)
        tr.fit()
    finally:
        tr.close()
    return tr


def _logs(run) -> dict:
    def rows(name):
        return [json.loads(line) for line in (run / name).read_text().splitlines()]

    metrics = [{k: v for k, v in r.items() if k not in TIMING} for r in rows("metrics.jsonl")]
    events = [{k: v for k, v in r.items() if k != "seconds"} for r in rows("events.jsonl")]
    return {"metrics": metrics, "problems": rows("problems.jsonl"), "events": events}


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    path = tmp_path_factory.mktemp("overlap")
    _run(path, "off", overlap=False)
    return path / "off"


def test_overlap_gives_the_sequential_steps_exactly(sequential, tmp_path):
    """Three steps (an evolution after step 2) with the sandbox overlapped: every metric, reward, verdict,
    rating, loss and event is the sequential run's; the lane really validated and scored during generation."""
    in_generate = threading.Event()
    validated_while_decoding = threading.Event()

    def hook(tr):
        # the first finished teacher row waits (at most 60 s) until the lane has validated it: with the lane
        # running only after generation, it never would
        generate, check = tr.engine.generate, tr.check_proposals

        def gen(requests, seed=None, progress=None, on_finish=None):
            def handed(i, g):
                on_finish(i, g)
                if not validated_while_decoding.is_set() and in_generate.is_set():
                    validated_while_decoding.wait(60)

            in_generate.set()
            try:
                return generate(
                    requests, seed=seed, progress=progress, on_finish=handed if on_finish else None
                )
            finally:
                in_generate.clear()

        def checked(traces, step):
            check(traces, step)
            if in_generate.is_set():
                validated_while_decoding.set()

        tr.engine.generate, tr.check_proposals = gen, checked

    _run(tmp_path, "on", overlap=True, hook=hook)
    assert validated_while_decoding.is_set()
    on, off = _logs(tmp_path / "on"), _logs(sequential)
    assert sum(p["valid"] for p in off["problems"]) >= 3  # the steps played real problems
    assert any(e["type"] == "evolution" for e in off["events"])
    assert on == off
    lane = [
        json.loads(line)["overlap_s"] for line in (tmp_path / "on" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all(x["validate"] > 0 and x["score"] > 0 for x in lane)
    seq = [json.loads(line)["overlap_s"] for line in (sequential / "metrics.jsonl").read_text().splitlines()]
    assert seq == [None] * 3


def test_an_engine_without_on_finish_gets_the_same_steps(sequential, tmp_path):
    """An engine without on_finish= returns every row at the end: the trainer hands them to the lane then."""
    _run(tmp_path, "plain", overlap=True, plain_engine=True)
    assert _logs(tmp_path / "plain") == _logs(sequential)
