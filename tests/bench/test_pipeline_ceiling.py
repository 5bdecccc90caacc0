"""`bench/pipeline_ceiling.py`: the per-step arithmetic on hand numbers, and one short run of the real thing (two
worker processes, each a `tiny-learn` trainer on the bundled model) whose replays must make every row at the
length the trainer generated."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pipeline_ceiling.py"


def test_summary_takes_the_best_rep_per_measurement(bench_script):
    one = {"gen_old": 10, "gen_new": 8, "gen_1t": 9, "gen_new_int8": 6, "gen_1t_int8": 7}
    one |= {"update_2t": 4, "update_1t": 6, "pipelined": 9.5, "pipelined_int8": 7.5}
    two = {k: v + 1 for k, v in one.items()}
    s = bench_script("pipeline_ceiling").summarise([two, one], steps=2, sandbox_s=0.25)
    assert s["per_step_s"] == {k: v / 2 for k, v in one.items()}
    # old 5 + 2, new 4 + 2, new_int8 3 + 2, pipelined 4.75, pipelined_int8 3.75, update free 4.5 and 3.5;
    # each + 0.25 of sandbox
    assert s["step_s"] == {
        "old": 7.25,
        "new": 6.25,
        "new_int8": 5.25,
        "pipelined": 5.0,
        "pipelined_int8": 4.0,
        "update_free": 4.75,
        "update_free_int8": 3.75,
    }
    assert s["speedup_vs_old"]["new"] == pytest.approx(1.16)
    assert s["speedup_vs_old"]["pipelined"] == pytest.approx(1.45)
    assert s["speedup_vs_old"]["pipelined_int8"] == pytest.approx(7.25 / 4.0)
    assert "old" not in s["speedup_vs_old"]
    assert s["pipelined_vs_new"] == pytest.approx(1.25)
    # together against the slower lane alone: 4.75 / max(4.5, 3) and 3.75 / max(3.5, 3)
    assert s["contention"] == pytest.approx({"pipelined": 4.75 / 4.5, "pipelined_int8": 3.75 / 3.5})


def test_a_short_run_replays_the_trainers_work(tmp_path):
    out = tmp_path / "ceiling.json"
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, str(BENCH), "--steps", "1", "--reps", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pipelined" in proc.stdout and f"wrote {out}" in proc.stdout
    res = json.loads(out.read_text())
    gens = ["gen_old", "gen_new", "gen_1t", "gen_new_int8", "gen_1t_int8"]
    assert res["same_lengths"] == dict.fromkeys(gens, True)
    assert set(res["reps"][0]) >= {*gens, "update_2t", "update_1t", "pipelined", "pipelined_int8"}
    assert all(v > 0 for v in res["per_step_s"].values())
    step = res["step_s"]
    assert step["old"] == pytest.approx(
        res["per_step_s"]["gen_old"] + res["per_step_s"]["update_2t"] + res["sandbox_s_per_step"]
    )
    assert res["speedup_vs_old"]["pipelined"] == pytest.approx(step["old"] / step["pipelined"])


def test_bad_counts_exit_with_a_usage_error():
    proc = subprocess.run([sys.executable, str(BENCH), "--steps", "0"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--steps and --reps must be at least 1" in proc.stderr
