"""`bench/gpu_check.sh` is meant for a GPU machine; with `--shrink` it runs the same path here on a tiny config of
the same family. In this environment vLLM is not installed: the vLLM checks must say so and every other check
(the preflight, the maximum-length train step on the hf backend, the sandbox, the 2-step `paper-7b`-shaped run,
8 slots vs 1) must still run and pass. The vLLM lane runs it with vLLM (tests/vllm_backend/test_vllm_gpu_check.py)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.engine.memory import PROMPT_TOKENS

REPO = Path(__file__).resolve().parents[2]
SHRUNK = [
    "--shrink",
    "--device",
    "cpu",
    "--rows",
    "8",
    "--prompt-len",
    "12",
    "--new-tokens",
    "6",
    "--repeats",
    "1",
]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is here: the vLLM lane's test")
def test_gpu_check_runs_shrunk_on_cpu_without_vllm(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_TIMEOUT": "600"}
    res = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), *SHRUNK, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=660,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["shrunk"] is True and r["complete"] is True and r["passed"] is True and r["vllm"] is None
    status = {k: v["status"] for k, v in r["checks"].items()}
    assert status == {
        "preflight": "pass",
        "vllm_colocated": "skipped: vLLM not installed",
        "train_max_row": "pass",
        "adapter_refresh": "skipped: vLLM not installed",
        "sandbox": "pass",
        "run_2_steps": "pass",
        "hf_slots": "pass",
    }
    c = r["checks"]
    # the row: the preflight's prompt bound + the response (--new-tokens 6, raised to the config's floor of 8)
    assert c["train_max_row"]["row_tokens"] == PROMPT_TOKENS + 8
    assert c["train_max_row"]["estimate"]["checkpointing"] is True  # paper-7b's settings, not the defaults
    assert c["run_2_steps"]["backend"] == "hf" and c["run_2_steps"]["workers"] == 1
    assert [s["step_s"] > 0 for s in c["run_2_steps"]["steps"]] == [True, True]
    assert c["sandbox"]["wrong"] == 0 and c["sandbox"]["preset_workers"] == 16
    assert c["hf_slots"]["one_slot"]["train_tokens"] == c["hf_slots"]["eight_slots"]["train_tokens"] == 8 * 6
    for name in status:  # one line per check on stdout
        assert any(line.split()[1:2] == [name] for line in res.stdout.splitlines()), name


def test_gpu_check_refuses_the_7b_shape_without_a_gpu():
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "--shrink" in res.stderr


def run_check(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`bench/gpu_check.py` shrunk with `args`; its process and its JSON result."""
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, str(REPO / "bench" / "gpu_check.py"), *SHRUNK, *args, "--out", str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return res, json.loads(out.read_text())


def test_gpu_check_fails_a_failed_check_with_exit_1(tmp_path):
    """A check that fails (here: the run, given a dist.workers the config rejects) is a FAIL line, `passed`
    false and exit status 1, and the other parts are unaffected."""
    res, r = run_check(tmp_path, "--only", "run", "--workers", "-1")
    assert res.returncode == 1 and r["passed"] is False, res.stdout[-2000:] + res.stderr[-2000:]
    assert r["checks"]["run_2_steps"]["status"] == "fail"
    assert "FAIL    run_2_steps" in res.stdout


def test_a_refused_preflight_is_a_fail_line_and_the_step_is_still_measured(tmp_path):
    """`--set` reaches the run config: a memory budget the preflight refuses makes `preflight` FAIL with the
    preflight's own one-line message (the keys to change), and the train step still runs, to show what was
    refused."""
    res, r = run_check(tmp_path, "--only", "engine", "--set", "model.memory_gb=0.001")
    assert res.returncode == 1 and r["passed"] is False, res.stdout[-2000:] + res.stderr[-2000:]
    pre = r["checks"]["preflight"]
    assert pre["status"] == "fail" and "model.memory_gb" in pre["line"], pre["line"]
    assert r["checks"]["train_max_row"]["status"] == "pass"
