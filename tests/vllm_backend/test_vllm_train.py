"""A short population run with `model.backend=vllm` through the CLI (so the `__main__` guard that vLLM's
spawned engine core needs is exercised): 2 steps with an evolution step after step 1 (never after the final
step), then `--resume` to a third step, which first runs the evolution that step 2 skipped."""

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


def _train(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "populora.cli", "train", "--quiet", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_population_run_with_evolution_and_resume(tmp_path):
    run = tmp_path / "run"
    sets = [x for kv in [*FAST, "train.steps=2"] for x in ("--set", kv)]
    res = _train("--run-dir", str(run), *sets)
    assert res.returncode == 0, res.stderr[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["backend"] == "vllm"
    assert [m["step"] for m in _lines(run / "metrics.jsonl")] == [1, 2]
    assert [e["step"] for e in _lines(run / "events.jsonl") if e["type"] == "evolution"] == [1, 1]

    res = _train("--resume", str(run), "--set", "train.steps=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [m["step"] for m in _lines(run / "metrics.jsonl")] == [1, 2, 3]
    events = _lines(run / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "resume"] == [2]
    assert [e["step"] for e in events if e["type"] == "evolution"] == [1, 1, 2, 2]  # the deferred one
    assert (run / "checkpoints" / "step_000003" / "state.json").is_file()


TIMING = ("time", "phase_s", "step_s", "tokens_per_s", "overlap_s")  # as tests/train/test_overlap.py


def test_overlap_on_and_off_give_the_same_run(tmp_path):
    """train.overlap with vLLM rollouts (the engine hands each request over as vLLM finishes it): the same
    metrics, problems and events as the sequential run, timings aside."""
    logs = {}
    for overlap in ("true", "false"):
        run = tmp_path / overlap
        sets = [*FAST, "train.steps=2", "train.checkpoint_every=100", f"train.overlap={overlap}"]
        res = _train("--run-dir", str(run), *[x for kv in sets for x in ("--set", kv)])
        assert res.returncode == 0, res.stderr[-3000:]
        logs[overlap] = {
            "metrics": [
                {k: v for k, v in m.items() if k not in TIMING} for m in _lines(run / "metrics.jsonl")
            ],
            "problems": _lines(run / "problems.jsonl"),
            "events": [{k: v for k, v in e.items() if k != "seconds"} for e in _lines(run / "events.jsonl")],
        }
    assert len(logs["true"]["metrics"]) == 2 and logs["true"] == logs["false"]
    assert all(m["overlap_s"]["validate"] > 0 for m in _lines(tmp_path / "true" / "metrics.jsonl"))
