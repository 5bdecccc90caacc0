"""Progress inside a step (issue 18): the engine's `progress=` callback and the live console line.

The engine calls back with non-decreasing counts that end at the total; the trainer shows them on one rich line
on a terminal, and `--quiet` shows none of it (only the per-step summary lines)."""

import copy
import io

import pytest
import torch
from rich.console import Console

from populora.config import load_config
from populora.engine import GenRequest, TrainBatch, TrainRow, build
from populora.engine.testing import random_model
from populora.train.progress import StepProgress, accepts_progress, phase_text
from populora.train.trainer import Trainer

FAST = [
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=24",
    "tasks.student_max_new_tokens=12",
    "sandbox.workers=1",
    "train.threads=1",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
    "train.steps=1",
    "tasks.template=compact",
]


@pytest.fixture(scope="module")
def model_tok():
    torch.set_num_threads(1)
    return random_model(seed=0)


def _engine(model_tok, **opts):
    model, tok = model_tok
    return build(model=copy.deepcopy(model), tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3, **opts)


def _monotone_to_total(calls: list[tuple[int, int, dict]], total: int) -> None:
    assert calls, "progress was never called"
    dones = [d for d, _, _ in calls]
    assert all(t == total for _, t, _ in calls)
    assert dones == sorted(dones) and dones[0] >= 0 and dones[-1] == total


def test_generate_reports_finished_requests(model_tok):
    eng = _engine(model_tok, gen_batch_size=3)  # 7 requests: three batches, progress across them
    reqs = [GenRequest(slot=i % 4, prompt=f"def f{i}(x):", max_new_tokens=5 + 3 * i) for i in range(7)]
    reqs.append(GenRequest(slot=0, prompt="x", max_new_tokens=0))  # counted as done at once
    calls = []
    out = eng.generate(reqs, seed=1, progress=lambda d, t, info: calls.append((d, t, dict(info))))
    _monotone_to_total(calls, len(reqs))
    tokens = [info["tokens"] for _, _, info in calls]
    assert tokens == sorted(tokens) and tokens[-1] == sum(len(g.token_ids) for g in out)
    # The same samples with or without a callback: progress only observes.
    assert [g.token_ids for g in eng.generate(reqs, seed=1)] == [g.token_ids for g in out]


def test_train_step_reports_micro_batches(model_tok):
    eng = _engine(model_tok, micro_batch_tokens=40)
    rows = [
        TrainRow(slot=i % 4, prompt_ids=list(range(3, 13)), response_ids=list(range(20, 28)), advantages=0.5)
        for i in range(8)
    ]
    calls = []
    eng.train_step(TrainBatch(rows), progress=lambda d, t, info: calls.append((d, t, dict(info))))
    total = len(eng._micro_batches(rows))
    assert total > 1
    _monotone_to_total(calls, total)
    assert calls[0][0] == 0 and calls[-1][2]["rows"] == len(rows)


def test_phase_text():
    assert (
        phase_text("teacher", 14, 24, {"tokens": 6100}, 10.0) == "teacher generation 14/24 prompts, 610 tok/s"
    )
    assert phase_text("student", 40, 96, {"tokens": 0}, 1.0) == "student solve 40/96 rollouts"
    assert phase_text("update", 3, 8, {"rows": 5}, 1.0) == "update 3/8 micro-batches"


def test_accepts_progress():
    assert accepts_progress(lambda requests, seed=None, progress=None: None)
    assert not accepts_progress(lambda requests, seed=None: None)  # an engine without it gets nothing


def _run_step(model_tok, tmp_path, quiet: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=240)
    cfg = load_config("tiny", FAST)
    tr = Trainer(cfg, tmp_path / "run", engine=_engine(model_tok), console=console, quiet=quiet)
    try:
        tr.setup()
        tr.fit(0)
    finally:
        tr.close()
    return buf.getvalue()


def test_live_line_shows_phases(model_tok, tmp_path):
    out = _run_step(model_tok, tmp_path, quiet=False)
    assert "teacher generation 0/6 prompts" in out and "teacher generation 6/6 prompts" in out
    assert "step    1/1" in out  # the summary line stays


def test_quiet_prints_no_live_line(model_tok, tmp_path, capsys):
    out = _run_step(model_tok, tmp_path, quiet=True)
    assert out == ""
    captured = capsys.readouterr()
    assert "teacher generation" not in captured.out + captured.err
    assert "step    1/1" in captured.out


def test_not_a_terminal_no_callback():
    console = Console(file=io.StringIO(), force_terminal=False)
    assert StepProgress(3, 0, console, quiet=False).callback("teacher") is None
