"""`populora eval` on a long queue (issue 53 §6, §10): it says how many generations it will run and, after the
first batch, how long they take (and warns past 10 minutes); answers reach samples.partial.jsonl batch by
batch, Ctrl-C keeps them and says how to go on, and the same command resumes without generating them again,
to the results an uninterrupted run gives; the table is never cut to "Teach…" in an 80-column terminal;
``--samples N`` adds the unbiased pass@k beside greedy pass@1. Real tiny-model adapters, real graders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.evaluate import runner
from populora.evaluate.passk import pass_at_k

MEMBERS = {"T0": "teacher", "S0": "student"}
SMALL = ["--benchmarks", "humaneval+,gsm8k", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_folder):
    return run_folder(tmp_path_factory.mktemp("long"), MEMBERS)


@pytest.fixture(scope="module")
def sampled(run_dir, shared_data, tmp_path_factory):
    """One narrow-terminal eval with --samples 2: its output, its results.json and its samples."""
    out = tmp_path_factory.mktemp("sampled")
    env = {"COLUMNS": "80", "POPULORA_NO_PROGRESS": "1"}
    args = ["eval", str(run_dir), "--limit", "2", *SMALL, "--samples", "2", "--temperature", "1.0"]
    r = CliRunner(env=env).invoke(app, [*args, "--data-dir", str(shared_data), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    lines = (out / "samples.jsonl").read_text().splitlines()
    return r.output, json.loads((out / "results.json").read_text()), [json.loads(x) for x in lines]


def test_the_count_and_an_estimate_come_before_the_work(sampled):
    output, _, _ = sampled
    count = "3 members x 4 problems x 3 (greedy + 2 sampled at T=1) = 36 generations"
    assert count in output
    assert "generations/s on the first" in output and "left for" in output
    assert output.index(count) < output.index("generations/s") < output.index("HumanEval+")


def test_a_queue_over_ten_minutes_says_so_with_its_estimate(monkeypatch):
    clock = iter([0.0, 60.0])  # the first batch of 5 took a minute: 995 more take about 3 h
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    said: list[str] = []
    eta = runner.Eta(1000, said.append)
    eta.tick(5)
    assert len(said) == 1 and "about 3 h 19 min left for 995 generations" in said[0]
    assert "over 10 minutes" in said[0] and "--limit" in said[0] and "resumes" in said[0]


def test_table_headers_whole_in_an_80_column_terminal(sampled):
    output, _, _ = sampled
    assert "…" not in output
    for head in ("benchmark", "Teacher mean", "Student best member (S0)", "HumanEval+", "GSM8K"):
        assert head in output


def test_sampled_pass_at_k_beside_greedy(sampled):
    output, res, samples = sampled
    assert res["meta"]["sampled"]["samples"] == 2 and res["meta"]["sampled"]["ks"] == [1, 2]
    assert "Sampled pass@k" in output and "greedy pass@1" in output
    for row in res["results"]:
        got = [s for s in samples if (s["member"], s["benchmark"]) == (row["member"], row["benchmark"])]
        greedy = [s["correct"] for s in got if s["sample"] == 0]
        assert row["pass@1"] == sum(greedy) / len(greedy)
        per_item: dict[str, int] = {}
        for s in got:
            if s["sample"] > 0:
                per_item[s["id"]] = per_item.get(s["id"], 0) + int(s["correct"])
        assert len(per_item) == row["n"] and sum(1 for s in got if s["sample"] > 0) == 2 * row["n"]
        for k in (1, 2):
            expect = sum(pass_at_k(2, c, k) for c in per_item.values()) / row["n"]
            assert row["sampled"]["pass@k"][str(k)] == pytest.approx(expect)
        assert row["sampled"]["temperature"] == 1.0


def _eval_cmd(run_dir, shared_data, out):
    return [
        sys.executable, "-m", "populora.cli", "eval", str(run_dir), "--limit", "4", *SMALL,
        "--batch-size", "1", "--data-dir", str(shared_data), "--out-dir", str(out),
    ]  # fmt: skip


def test_ctrl_c_keeps_the_answers_and_the_same_command_resumes(run_dir, shared_data, tmp_path):
    env = {**os.environ, "POPULORA_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    out = tmp_path / "eval"
    partial = out / "samples.partial.jsonl"
    p = subprocess.Popen(
        _eval_cmd(run_dir, shared_data, out),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        if partial.is_file() and partial.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the evaluation ended before the first answers were saved"
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 130, stderr[-3000:]
    kept = [json.loads(x) for x in partial.read_text().splitlines()]
    assert 2 <= len(kept) < 3 * 8  # saved as they came, the queue not finished
    assert f"interrupted: {len(kept)} answers are kept in {partial}" in stderr
    assert "run the same command again" in stderr and "Traceback" not in stderr

    again = subprocess.run(
        _eval_cmd(run_dir, shared_data, out), env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(kept)} answers are already in {partial}" in again.stderr
    assert f", {3 * 8 - len(kept)} to generate" in again.stderr
    assert "FutureWarning" not in again.stderr  # PEFT's is_gradient_checkpointing deprecation is filtered
    assert not partial.exists()

    fresh = tmp_path / "fresh"
    whole = subprocess.run(
        _eval_cmd(run_dir, shared_data, fresh), env=env, capture_output=True, text=True, timeout=600
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    resumed = json.loads((out / "results.json").read_text())
    uninterrupted = json.loads((fresh / "results.json").read_text())
    assert resumed["results"] == uninterrupted["results"]

    def answers(folder):
        rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
        return sorted((s["member"], s["benchmark"], s["id"], s["response"], s["correct"]) for s in rows)

    assert answers(out) == answers(fresh)
    for old in kept:  # the kept answers were reused, not generated again
        assert (old["member"], old["benchmark"], old["id"]) in {a[:3] for a in answers(out)}


def test_resume_without_saved_answers_is_one_error(run_dir, shared_data, tmp_path):
    r = CliRunner(env={"POPULORA_NO_PROGRESS": "1"}).invoke(
        app,
        ["eval", str(run_dir), "--limit", "1", *SMALL, "--data-dir", str(shared_data), "--out-dir",
         str(tmp_path / "none"), "--resume"],
    )  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "--resume" in r.output and "holds no answers of this evaluation" in r.output
