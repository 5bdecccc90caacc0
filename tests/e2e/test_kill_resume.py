"""SIGKILL a training subprocess at a random moment after its first checkpoint, resume it, check the folder.

The moment is drawn from a seeded generator: `POPULORA_TEST_SEED` (default 0) picks it, and the test prints the
seed and the delay so a failing kill can be replayed with the same seed."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

from populora.diagnostics.sinks import read_jsonl
from populora.train.checkpoint import list_checkpoints, read_state

STEPS = 4
SEED = int(os.environ.get("POPULORA_TEST_SEED", "0"))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", *args]


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

    res = subprocess.run(
        _cli("train", "--resume", str(run), "--quiet"), env=env, capture_output=True, text=True, timeout=300
    )
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
