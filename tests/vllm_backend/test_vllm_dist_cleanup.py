"""Nothing left behind by a 2-worker run with vLLM workers (`model.backend=vllm`, `dist.workers=2`) stopped by
a double Ctrl-C, by SIGTERM or by a worker that dies: each worker's vLLM engine core (with its shared-memory queues and semaphores)
and its `/dev/shm/populora-vllm-*` adapter folder are released before the actor is killed. Checked as in
tests/dist/test_dist_cleanup.py (tests/leftovers.py): no process, /dev/shm entry or temp folder of the run
remains, the exit is one line, and the run folder is valid."""

from __future__ import annotations

import os
import re
import signal

import pytest
from leftovers import Run, one_line

from populora.diagnostics.schema import check_run

pytest.importorskip("vllm")
pytest.importorskip("ray")

SETS = [
    "model.backend=vllm",
    "dist.workers=2",
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=32",
    "tasks.student_max_new_tokens=16",
    "sandbox.workers=1",
    "train.threads=2",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
    "train.steps=4",
    "train.checkpoint_every=1",
]


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path, SETS)
    yield r
    if r.proc.poll() is None:
        os.killpg(r.proc.pid, signal.SIGKILL)
        r.proc.wait()


def test_a_double_ctrl_c_mid_step_releases_the_vllm_workers(run):
    """A terminal's Ctrl-C reaches every process of the group (Ray, workers, vLLM's engine cores); the second
    one, a second later, stops the driver at once, most likely while the workers are busy in the next step."""
    import time

    run.wait_for_checkpoint(timeout=600)
    os.killpg(run.proc.pid, signal.SIGINT)
    time.sleep(1.0)
    if run.proc.poll() is None:
        os.killpg(run.proc.pid, signal.SIGINT)
    rc, err = run.finish()
    assert rc == 130, err[-3000:]
    assert f"--resume {run.dir}" in one_line(err, "interrupted:")
    assert run.leftovers() == [], err[-3000:]
    assert check_run(run.dir) == []


def test_sigterm_releases_the_vllm_workers(run):
    run.wait_for_checkpoint(timeout=600)
    os.kill(run.proc.pid, signal.SIGTERM)
    rc, err = run.finish()
    assert rc == 143, err[-3000:]
    assert f"--resume {run.dir}" in one_line(err, "terminated (SIGTERM):")
    assert run.leftovers() == [], err[-3000:]
    assert check_run(run.dir) == []


def test_a_dead_vllm_worker_stops_the_other_and_leaves_nothing_behind(run):
    run.wait_for_checkpoint(timeout=600)
    os.kill(run.workers[-1], signal.SIGKILL)
    rc, err = run.finish()
    assert rc == 2, err[-3000:]
    line = one_line(err, "error:")
    assert re.search(r"dist worker [01] of 2 died during ", line) and f"--resume {run.dir}" in line
    assert run.leftovers() == [], err[-3000:]
    assert check_run(run.dir) == []
