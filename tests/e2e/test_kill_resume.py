"""SIGKILL a training subprocess at a random moment after its first checkpoint, resume it, check the folder;
SIGINT (Ctrl-C) one mid-run: it checkpoints the step in flight, and the resume matches an uninterrupted run;
branch a finished run from an older checkpoint into a new folder: the branch replays it, the original is unchanged.

The kill's moment is drawn from a seeded generator: `POPULORA_TEST_SEED` (default 0) picks it, and the test
prints the seed and the delay so a failing kill can be replayed with the same seed."""

import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.diagnostics.sinks import read_jsonl
from populora.train.checkpoint import list_checkpoints, read_state

STEPS = 4
SEED = int(os.environ.get("POPULORA_TEST_SEED", "0"))
ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", *args]


def _in_process(*args: str) -> SimpleNamespace:
    """`populora ARGS` in this process (typer's CliRunner): for the runs that are not interrupted, which need no
    process of their own (and so no fresh torch import). An escaping exception is put on stderr as its
    traceback."""
    res = CliRunner().invoke(app, list(args))
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "".join(traceback.format_exception(res.exception))
    return SimpleNamespace(returncode=res.exit_code, stderr=err)


def test_sigkill_then_resume_leaves_a_consistent_run(tmp_path, fast):
    run = tmp_path / "run"
    sets = [
        x
        for kv in [
            *fast,
            f"train.steps={STEPS}",
            "train.checkpoint_every=1",
            "evolution.every=2",
            "train.keep_checkpoints=2",
        ]
        for x in ("--set", kv)
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _cli("train", "--run-dir", str(run), "--quiet", *sets),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 240
    events = run / "events.jsonl"
    while time.time() < deadline and proc.poll() is None:
        if events.exists() and '"checkpoint"' in events.read_text():
            break
        time.sleep(0.2)
    assert proc.poll() is None or proc.returncode == 0, proc.stderr.read().decode()[-2000:]
    delay = random.Random(SEED).uniform(0.0, 4.0)  # a random moment: mid-generation, mid-write or mid-save
    print(f"kill after the first checkpoint + {delay:.3f}s (POPULORA_TEST_SEED={SEED})")  # shown on failure
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stderr.close()

    res = _in_process("train", "--resume", str(run), "--quiet")
    assert res.returncode == 0, res.stderr[-2000:]

    # every line of every log is whole JSON, and each step appears exactly once
    for name in ("metrics.jsonl", "problems.jsonl", "events.jsonl"):
        text = (run / name).read_text()
        assert text.endswith("\n")
        for line in text.splitlines():
            json.loads(line)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert Counter(p["step"] for p in read_jsonl(run / "problems.jsonl")) == {
        s: 6 for s in range(1, STEPS + 1)
    }
    evs = read_jsonl(run / "events.jsonl")
    assert Counter(e["step"] for e in evs if e["type"] == "matchup") == {s: 2 for s in range(1, STEPS + 1)}
    # evolution every 2 steps, but not after the final step 4
    assert Counter(e["step"] for e in evs if e["type"] == "evolution") == {2: 2}
    # a resume starts from a complete checkpoint; a kill that lands after the last checkpoint was written
    # resumes from step STEPS and has nothing left to do
    resumes = [e for e in evs if e["type"] == "resume"]
    assert all(1 <= e["step"] <= STEPS for e in resumes)
    assert all(e["from"] == f"checkpoints/step_{e['step']:06d}" for e in resumes)
    # checkpoints: complete, newest is the last step, old ones pruned, no temp folders left
    assert [s for s, _ in list_checkpoints(run)] == [STEPS - 1, STEPS]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    # the last checkpoint holds one PEFT folder per live member: the members that played the final step
    # (no evolution after it), not those of step 1 (step 2's evolution replaced some)
    last = list_checkpoints(run)[-1][1]
    live = sorted(m["id"] for m in read_state(last)["members"])
    assert sorted(p.name for p in (last / "adapters").iterdir()) == live
    assert live == sorted(metrics[-1]["members"]) and live != sorted(metrics[0]["members"])


TIMING = {"time", "phase_s", "step_s", "tokens_per_s", "overlap_s"}


def _stable(run) -> list[dict]:
    """metrics.jsonl without its wall-clock fields: what a deterministic replay must reproduce."""
    return [{k: v for k, v in m.items() if k not in TIMING} for m in read_jsonl(run / "metrics.jsonl")]


def _games(run) -> list[dict]:
    keep = ("matchup", "evolution")
    return [
        {k: v for k, v in e.items() if k != "seconds"}
        for e in read_jsonl(run / "events.jsonl")
        if e["type"] in keep
    ]


def _sets(fast, *extra: str) -> list[str]:
    keys = [*fast, f"train.steps={STEPS}", "evolution.every=2", *extra]
    return [x for kv in keys for x in ("--set", kv)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, fast):
    """The reference: STEPS steps without interruption, a checkpoint after every step (all kept)."""
    run = tmp_path_factory.mktemp("straight") / "a"
    res = _in_process(
        "train",
        "--run-dir",
        str(run),
        "--quiet",
        *_sets(fast, "train.checkpoint_every=1", "train.keep_checkpoints=0"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return run


def test_sigint_checkpoints_the_current_step_and_the_resume_matches(straight, tmp_path, fast):
    run = tmp_path / "b"
    # checkpoints only at the end: the one found after Ctrl-C is the interrupt's own
    proc = subprocess.Popen(
        _cli("train", "--run-dir", str(run), "--quiet", *_sets(fast, "train.checkpoint_every=100")),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").exists() and read_jsonl(run / "metrics.jsonl"):
            break  # step 1 is logged: the step loop (and its Ctrl-C handler) is running
        time.sleep(0.1)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    done = len(read_jsonl(run / "metrics.jsonl"))
    assert 1 <= done < STEPS, err[-2000:]
    assert [s for s, _ in list_checkpoints(run)] == [done]  # the step in flight finished and was saved
    assert "interrupt: finishing the current step, then saving a checkpoint" in err
    assert err.strip().splitlines()[-1] == (
        f"interrupted: checkpoint checkpoints/step_{done:06d} saved after step {done} of {STEPS}; "
        f"continue with `populora train --resume {run}`"
    )

    res = _in_process("train", "--resume", str(run), "--quiet")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"resuming {run} from checkpoint step_{done:06d} (step {done} of {STEPS})" in res.stderr
    # nothing was redone or lost: the interrupted-and-resumed run is the uninterrupted one, step for step
    assert _stable(run) == _stable(straight)
    assert _games(run) == _games(straight)


def test_branch_from_an_older_checkpoint_replays_the_run_in_a_new_folder(straight, tmp_path):
    before = {p: p.read_bytes() for p in straight.rglob("*") if p.is_file() and p.name != ".lock"}
    new = tmp_path / "branch"
    res = _in_process(
        "train",
        "--resume",
        str(straight),
        "--from-checkpoint",
        "step_000002",
        "--run-dir",
        str(new),
        "--quiet",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert (
        f"branched {straight} at step_000002 into {new}; resuming {new} from checkpoint step_000002 "
        f"(step 2 of {STEPS})"
    ) in res.stderr
    after = {p: p.read_bytes() for p in straight.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # the original run is not touched
    # the branch holds the steps up to 2 (copied) and 3..STEPS (trained again from the same state)
    assert _stable(new) == _stable(straight)
    assert _games(new) == _games(straight)
    resumes = [e for e in read_jsonl(new / "events.jsonl") if e["type"] == "resume"]
    assert resumes == [
        {"step": 2, "type": "resume", "from": "checkpoints/step_000002", "branched_from": str(straight)}
    ]
