"""Bad config values through the CLI: one clear line naming the field and the fix, exit code 2, no traceback."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from populora.cli import app


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--set", "lora.rank=0"], "lora.rank: must be >= 1"),
        (["--set", "evolution.gamma=1"], "evolution.gamma: must be in (0, 1)"),
        (["--set", "evolution.operators=M1,Z9"], "unknown operator 'Z9'"),
        (["--preset", "tinyy"], "unknown preset 'tinyy'; did you mean 'tiny'"),
        (["--set", "model.name=/no/such/model"], "model.name: path '/no/such/model' does not exist"),
        (["--set", "model.name=./missing-model"], "model.name: path './missing-model' does not exist"),
        (["--set", "rl.lrr=1"], "did you mean 'rl.lr'"),
        (["--set", "population.teachers=100000", "--set", "model.memory_gb=0.001"], "adapter slots need"),
        (["--resume", "/no/such/run"], "--resume /no/such/run: no config.yaml"),
    ],
)
def test_bad_values_one_line(args, needle, tmp_path, model_name):
    res = CliRunner().invoke(
        app, ["train", "--run-dir", str(tmp_path / "r"), "--set", f"model.name={model_name}", *args]
    )
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert needle in out and "Traceback" not in out
    assert len(out.splitlines()) == 1, out


def test_real_entry_point_prints_no_traceback(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "populora.cli",
            "train",
            "--run-dir",
            str(tmp_path / "r"),
            "--set",
            "lora.rank=0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "error: lora.rank: must be >= 1, got 0; use e.g. --set lora.rank=8 (the paper uses 32)."
    )
    assert "Traceback" not in res.stdout + res.stderr


def test_help_config_lists_every_key():
    res = CliRunner().invoke(app, ["train", "--help-config"])
    assert res.exit_code == 0
    for key in ("train.steps", "population.mode", "evolution.operators", "rl.rollouts", "lora.alpha"):
        assert key in res.output


def test_resume_refuses_to_change_the_run(tmp_path):
    from populora.config import load_config, to_yaml

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config("tiny")))
    res = CliRunner().invoke(app, ["train", "--resume", str(run), "--set", "lora.rank=8"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        "error: --set lora.rank: cannot change on --resume (only train.steps, train.checkpoint_every, "
        "train.keep_checkpoints, train.threads, dist.workers, dist.address); start a new run to change it."
    )
