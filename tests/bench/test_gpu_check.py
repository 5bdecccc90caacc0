"""`bench/gpu_check.sh` is meant for a GPU machine; with `--shrink` its Python part runs here on a tiny config of
the same family, so the script is known to run end to end (build, 1 vs 8 slots, dist probe, JSON, table)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_shrunk_on_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    args = ["--shrink", "--device", "cpu", "--rows", "8", "--prompt-len", "12", "--new-tokens", "6"]
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_TIMEOUT": "300"}
    res = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), *args, "--repeats", "1", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert (
        r["shrunk"] is True
        and r["complete"] is True
        and r["one_slot"]["slots"] == 1
        and r["eight_slots"]["slots"] == 8
    )
    assert r["one_slot"]["train_tokens"] == r["eight_slots"]["train_tokens"] == 8 * 6
    assert r["gen_throughput_ratio_8_vs_1"] > 0 and r["train_throughput_ratio_8_vs_1"] > 0
    assert "skipped" in r["dist"]  # no GPUs here
    assert "generate tokens/s" in res.stdout and "ratio 8/1" in res.stdout


def test_gpu_check_refuses_the_7b_shape_without_a_gpu():
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "--shrink" in res.stderr
