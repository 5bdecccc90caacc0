"""`bench/gpu_first_run.sh`, the first GPU sitting as one script: its plan (--dry-run), its one-line refusal without
a model, its JSON assembled from hand-written phase records, and the whole script shrunk on a CPU (the tiny model,
the hf backend; gpu_check limited to its sandbox part here, the full shrunk check is tests/bench/test_gpu_check.py):
doctor, gpu_check, two real steps with a checkpoint each, a resume to step 3, one JSON."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_first_run.sh"


def _env(tmp_path: Path) -> dict:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return {
        **os.environ,
        "TMPDIR": str(scratch),
        "PYTHONPATH": str(REPO / "src"),
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def test_dry_run_prints_the_plan_in_order_within_15_minutes(tmp_path):
    res = subprocess.run(
        ["bash", str(SCRIPT), "--model", "/data/Qwen2.5-Coder-7B", "--python", sys.executable, "--dry-run"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stdout.splitlines() if re.match(r"^\d\. ", x)]
    assert [x.split()[1] for x in lines] == ["doctor", "gpu_check", "steps", "resume", "report:"]
    shares = [int(m) for m in re.findall(r"\(share (\d+) s\)", res.stdout)]
    assert len(shares) == 4 and sum(shares) <= 900 and "budget 900 s" in res.stdout
    assert "doctor --preset paper-7b --set model.name=/data/Qwen2.5-Coder-7B" in lines[0]
    assert (
        "--set model.name=/data/Qwen2.5-Coder-7B --set train.steps=2 --set train.checkpoint_every=1"
        in lines[2]
    )
    assert "bash bench/gpu_check.sh" in lines[1] and lines[1].endswith("--only engine,sandbox")
    assert "--resume" in lines[3] and "train.steps=3" in lines[3]
    assert sys.executable in lines[0]
    assert not list((tmp_path / "tmp").glob("populora-first-run-*"))  # nothing left behind by a dry run


def test_without_a_model_it_says_to_carry_one(tmp_path):
    res = subprocess.run(
        ["bash", str(SCRIPT), "--python", sys.executable], env=_env(tmp_path), capture_output=True, text=True
    )
    assert res.returncode == 2 and "--model PATH" in res.stderr and "no internet" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_json_is_assembled_from_the_phase_records(bench_script, tmp_path):
    """The record of a sitting where the doctor passed, gpu_check failed one check, the steps passed and the
    resume timed out: `passed` false, each phase's numbers kept, the failed phase's log tail included."""
    fr = bench_script("gpu_first_run")
    work, run = tmp_path / "work", tmp_path / "run"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    work.mkdir()
    phases = [
        {"name": "doctor", "status": "pass", "rc": 0, "seconds": 4, "limit_s": 885, "share_s": 45},
        {"name": "gpu_check", "status": "fail", "rc": 1, "seconds": 400, "limit_s": 840, "share_s": 450},
        {"name": "steps", "status": "pass", "rc": 0, "seconds": 200, "limit_s": 440, "share_s": 270},
        {"name": "resume", "status": "timeout", "rc": 124, "seconds": 240, "limit_s": 240, "share_s": 120},
    ]
    (work / "phases.jsonl").write_text("".join(json.dumps(p) + "\n" for p in phases))
    (work / "doctor.json").write_text(
        json.dumps({"ok": True, "checks": [{"name": "driver", "status": "ok"}]})
    )
    check = {
        "passed": False,
        "complete": True,
        "python": "/venv/bin/python",
        "checks": {
            "train_max_row": {
                "status": "fail",
                "line": "peak 23 GiB vs 22 GiB",
                "device_peak_bytes": 23 * 2**30,
                "expected_s": 30,
                "measured_s": 41.0,
            },
            "kv_pressure": {
                "status": "pass",
                "line": "1.25x",
                "demand_tokens": 500,
                "kv_capacity_tokens": 400,
            },
        },
    }
    (work / "gpu_check.json").write_text(json.dumps(check))
    (work / "resume.log").write_text("vLLM engine core died\n")
    (work / "steps.log").write_text("fine\n")
    member = {"role": "teacher", "n_valid": 3, "n_proposed": 24}
    student = {"role": "student", "solve_rate": {"all": 0.25}, "loss": 0.1}
    metrics = [
        {
            "step": s,
            "step_s": 60.0,
            "tokens": 9000,
            "tokens_per_s": 300.0,
            "members": {"T0": member, "S0": student},
        }
        for s in (1, 2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    r = fr.assemble(work, run, "/data/q", 900, 880)
    assert r["passed"] is False and [p["status"] for p in r["phases"]] == ["pass", "fail", "pass", "timeout"]
    assert r["doctor"]["ok"] is True
    g = r["gpu_check"]
    assert g["checks"]["train_max_row"] == {
        "status": "fail",
        "line": "peak 23 GiB vs 22 GiB",
        "expected_s": 30,
        "measured_s": 41.0,
    }
    assert g["numbers"] == {
        "train_max_row.device_peak_bytes": 23 * 2**30,
        "kv_pressure.demand_tokens": 500,
        "kv_pressure.kv_capacity_tokens": 400,
    }
    assert [s["step"] for s in r["steps"]] == [1, 2] and r["steps"][0]["valid"] == 3
    assert r["steps"][0]["student_solve_rate"] == [0.25] and r["steps"][0]["gen_tokens_per_s"] == 300.0
    assert r["resume"] == {"passed": False, "continued_to_step": None, "checkpoints": ["step_000002"]}
    assert set(r["logs_tail"]) == {"resume"}  # the logs of phases that did not pass (gpu_check left none)
    assert "engine core died" in r["logs_tail"]["resume"]


def test_the_sitting_runs_shrunk_on_a_cpu(tmp_path):
    out = tmp_path / "first_run.json"
    res = subprocess.run(
        ["bash", str(SCRIPT), "--shrink", "--python", sys.executable, "--out", str(out)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    status = {p["name"]: p["status"] for p in r["phases"]}
    assert status == {"doctor": "pass", "gpu_check": "pass", "steps": "pass", "resume": "pass"}, r["phases"]
    assert r["passed"] is True and r["doctor"]["checks"]
    assert r["gpu_check"]["checks"]["sandbox"]["status"] == "pass"
    assert [s["step"] for s in r["steps"]] == [1, 2, 3]  # two steps, then one more on resuming
    assert all(s["step_s"] > 0 and s["proposals"] > 0 for s in r["steps"])
    assert r["resume"]["passed"] and r["resume"]["continued_to_step"] == 3
    assert {"step_000002", "step_000003"} <= set(r["resume"]["checkpoints"])
    for p in r["phases"]:
        assert p["seconds"] <= p["limit_s"]
    assert not list((tmp_path / "tmp").glob("populora-first-run-*"))  # the run folder and logs are removed
