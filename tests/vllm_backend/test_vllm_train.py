"""A short population run with `model.backend=vllm` through the CLI (so the `__main__` guard that vLLM's
spawned engine core needs is exercised): 2 steps with an evolution step after step 1 (never after the final
step), then `--resume` to a third step, which first runs the evolution that step 2 skipped; and the same 2 steps
with `train.overlap` off, which must give the same run.

Each CLI run starts vLLM's engine core (tens of seconds on CPU), so the 2-step run is trained once per
`train.overlap` value (module fixture `runs`): the overlap-on run (the default) is the one the resume test
continues, and its logs are read for the comparison before that resume."""

import json
import os
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("vllm")

FAST = [
    "model.backend=vllm",
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=32",
    "tasks.student_max_new_tokens=16",
    "sandbox.workers=1",
    "train.threads=1",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
    "train.checkpoint_every=1",
    "evolution.every=1",
    "evolution.min_games=0",
    # a seed per request: the overlap test compares two runs sample for sample, and unseeded requests draw from
    # vLLM's engine generator in whatever batches its engine-core process happened to schedule
    "model.vllm_seeded=true",
]
TIMING = ("time", "phase_s", "step_s", "tokens_per_s", "overlap_s")  # as tests/train/test_overlap.py


def _train(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "populora.cli", "train", "--quiet", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The 2-step run with `train.overlap` on (the default) and off: {"true"/"false": (folder, logs)}, the logs
    as they were after the 2 steps (the resume test later adds a step to the "true" folder)."""
    root = tmp_path_factory.mktemp("vllm-runs")
    out = {}
    for overlap in ("true", "false"):
        run = root / overlap
        sets = [*FAST, "train.steps=2", f"train.overlap={overlap}"]
        res = _train("--run-dir", str(run), *[x for kv in sets for x in ("--set", kv)])
        assert res.returncode == 0, f"train.overlap={overlap}: " + res.stderr[-3000:]
        logs = {name: _lines(run / f"{name}.jsonl") for name in ("metrics", "problems", "events")}
        out[overlap] = (run, logs)
    return out


def test_population_run_with_evolution_and_resume(runs):
    run, logs = runs["true"]
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["backend"] == "vllm"
    assert [m["step"] for m in logs["metrics"]] == [1, 2]
    assert [e["step"] for e in logs["events"] if e["type"] == "evolution"] == [1, 1]

    res = _train("--resume", str(run), "--set", "train.steps=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [m["step"] for m in _lines(run / "metrics.jsonl")] == [1, 2, 3]
    events = _lines(run / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "resume"] == [2]
    assert [e["step"] for e in events if e["type"] == "evolution"] == [1, 1, 2, 2]  # the deferred one
    assert (run / "checkpoints" / "step_000003" / "state.json").is_file()


def _stable(logs: dict) -> dict:
    return {
        "metrics": [{k: v for k, v in m.items() if k not in TIMING} for m in logs["metrics"]],
        "problems": logs["problems"],
        "events": [{k: v for k, v in e.items() if k != "seconds"} for e in logs["events"]],
    }


def test_overlap_on_and_off_give_the_same_run(runs):
    """train.overlap with vLLM rollouts (the engine hands each request over as vLLM finishes it): the same
    metrics, problems and events as the sequential run, timings aside."""
    on, off = runs["true"][1], runs["false"][1]
    assert len(on["metrics"]) == 2 and _stable(on) == _stable(off)
    assert all(m["overlap_s"]["validate"] > 0 for m in on["metrics"]), "the overlap lane did not run"
    assert [m["overlap_s"] for m in off["metrics"]] == [None, None], "train.overlap=false still overlapped"
