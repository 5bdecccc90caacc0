"""Nothing left behind: a 2-worker run of the tiny preset, started as `populora train` starts it (its own Ray,
in its own session like a terminal's foreground job), stopped by Ctrl-C, by SIGTERM or by a worker that dies.

Each case checks (tests/leftovers.py) that every process of the run (driver, Ray, workers, sandbox) is gone,
that no /dev/shm entry (shared-memory segment, POSIX semaphore `sem.*`, scratch folder) made during the run
remains, that the run's temp dir (TMPDIR) is empty again (but for torch's compile cache), that the exit is one
line with the fix, and that the run folder is valid (`check_run`) and resumes to the end. The same with vLLM
workers, which hold what could be left behind: tests/vllm_backend/test_vllm_dist_cleanup.py."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from leftovers import Run, one_line

from populora.diagnostics.schema import check_run
from populora.diagnostics.sinks import read_jsonl
from populora.train.interrupt import TrainingInterrupted
from populora.train.launch import train

STEPS = 3


def _resumes_to_the_end(run: Path, ray_address: str) -> None:
    done = [m["step"] for m in read_jsonl(run / "metrics.jsonl")]
    assert done and done[-1] < STEPS
    assert check_run(run) == []
    train(resume=run, quiet=True)  # joins the test session's Ray (`ray_address`)
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert check_run(run) == []


@pytest.fixture
def run(tmp_path, fast, ray_address):  # noqa: ARG001 - the test session's Ray starts before the snapshot
    r = Run(tmp_path, [*fast, "dist.workers=2", f"train.steps={STEPS}", "train.checkpoint_every=1"])
    yield r
    if r.proc.poll() is None:
        os.killpg(r.proc.pid, signal.SIGKILL)
        r.proc.wait()


def test_stop_messages_name_the_signal_the_checkpoint_and_the_exit_code(tmp_path):
    term = TrainingInterrupted(tmp_path / "r", None, signal_name="SIGTERM", newest=4)
    assert str(term) == (
        "terminated (SIGTERM): stopped at once; the newest checkpoint checkpoints/step_000004 is kept and the "
        f"steps after it are re-run; continue with `populora train --resume {tmp_path / 'r'}`"
    )
    assert term.exit_code == 143 and isinstance(term, KeyboardInterrupt)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("")  # a run that started: a resume can read its config
    early = TrainingInterrupted(tmp_path / "r", None)
    assert str(early).startswith("interrupted: stopped at once, before the first checkpoint")
    assert early.exit_code == 130


def test_ctrl_c_finishes_the_step_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.killpg(run.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    rc, err = run.finish()
    assert rc == 130, err[-3000:]
    line = one_line(err, "interrupted:")
    assert "saved after step" in line and f"--resume {run.dir}" in line
    assert run.leftovers() == [], err[-3000:]
    _resumes_to_the_end(run.dir, ray_address)


def test_sigterm_stops_at_once_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.kill(run.proc.pid, signal.SIGTERM)  # `kill PID`, a scheduler's stop: the driver only
    rc, err = run.finish()
    assert rc == 143, err[-3000:]
    line = one_line(err, "terminated (SIGTERM):")
    assert "newest checkpoint checkpoints/step_" in line and f"--resume {run.dir}" in line
    assert run.leftovers() == [], err[-3000:]
    _resumes_to_the_end(run.dir, ray_address)


def test_a_dead_worker_stops_the_others_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.kill(run.workers[-1], signal.SIGKILL)  # out of memory, a crash: the process is simply gone
    rc, err = run.finish()
    assert rc == 2, err[-3000:]
    line = one_line(err, "error:")
    assert re.search(r"dist worker [01] of 2 died during ", line) and f"--resume {run.dir}" in line
    assert run.leftovers() == [], err[-3000:]
    _resumes_to_the_end(run.dir, ray_address)
