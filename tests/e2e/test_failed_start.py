"""A start that cannot or does not get going: a population past the bound is refused in one line before anything
is made; a start that fails or is stopped before anything useful is written leaves no run folder behind (only a
folder it created itself) and does not offer a `--resume` that would fail for want of a config.yaml."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.config import MAX_ROLE_MEMBERS, MAX_SLOTS, ConfigError, load_config
from populora.train.run_folder import remove_unused_run_dir

ENV_KEYS = {"OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "populora.cli", *args]


def test_population_past_the_bound_is_one_line_and_makes_no_folder(tmp_path, model_name):
    """The trial's 10,000 + 10,000 passed every check and hung while loading; now one line, at once."""
    run = tmp_path / "r"
    res = subprocess.run(
        _cli("train", "--run-dir", str(run), "--set", f"model.name={model_name}",
             "--set", "population.teachers=10000", "--set", "population.students=10000"),
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [
        f"error: population.teachers: at most {MAX_ROLE_MEMBERS} per role, got 10000; every member is an adapter "
        "slot the engine holds with its AdamW state and plays every step (the paper's largest population is "
        "8 + 8); use e.g. population.teachers=8."
    ]
    assert not run.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["population.students=65"], "population.students: at most 64 per role, got 65"),
        (
            ["population.teachers=64", "population.students=64", "hof.every=5", "hof.size=2"],
            "population: 128 members + 5 hall-of-fame slots need 133 adapter slots, more than the 128",
        ),
    ],
)
def test_population_and_slot_bounds(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny", overrides=overrides)
    assert needle in str(err.value)
    # the edge itself passes: 64 + 64 members are the 128 slots a run holds
    cfg = load_config(preset="tiny", overrides=["population.teachers=64", "population.students=64"])
    assert cfg.n_slots == MAX_SLOTS == 2 * MAX_ROLE_MEMBERS
    single = load_config(preset="tiny", overrides=["population.mode=single", "population.teachers=1000"])
    assert single.n_slots == 1  # single mode ignores the role sizes


def test_failed_start_removes_the_folder_it_created(tmp_path, model_name):
    """A check that runs after the folder is made (the memory check) leaves no folder holding only `.lock`."""
    run = tmp_path / "new"
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--run-dir",
            str(run),
            "--set",
            f"model.name={model_name}",
            "--set",
            "model.memory_gb=0.001",
        ],
    )
    assert res.exit_code == 2 and "adapter slots need" in res.output, res.output
    assert not run.exists()
    # a folder the user gave, already there: never removed, whatever happens
    given = tmp_path / "given"
    given.mkdir()
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--run-dir",
            str(given),
            "--set",
            f"model.name={model_name}",
            "--set",
            "model.memory_gb=0.001",
        ],
    )
    assert res.exit_code == 2 and given.is_dir()


def _stop_while_loading(run: Path, model_name: str, sig: signal.Signals, cwd: Path) -> tuple[int, str]:
    """Start `populora train`, send `sig` once it says it is loading the model (before config.yaml is written)."""
    proc = subprocess.Popen(
        _cli("train", "--run-dir", str(run), "--set", f"model.name={model_name}", "--set", "sandbox.workers=1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **ENV_KEYS},
    )  # fmt: skip
    seen = ""
    deadline = time.time() + 300
    while time.time() < deadline:
        line = proc.stderr.readline()
        seen += line
        if not line or "loading the model" in line:
            break
    assert "loading the model" in seen and proc.poll() is None, seen[-2000:]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, seen + err


def test_ctrl_c_while_loading_offers_no_resume_and_leaves_no_folder(tmp_path, model_name):
    run = tmp_path / "r"
    rc, err = _stop_while_loading(run, model_name, signal.SIGINT, tmp_path)
    assert rc == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == (
        f"interrupted: stopped while starting, before anything was saved; the empty run folder {run} was "
        "removed (run the same command to start again)"
    )
    assert "--resume" not in err and not run.exists()


def test_sigterm_while_loading_keeps_a_folder_it_did_not_create(tmp_path, model_name):
    run = tmp_path / "mine"
    run.mkdir()
    rc, err = _stop_while_loading(run, model_name, signal.SIGTERM, tmp_path)
    assert rc == 143, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == (
        f"terminated (SIGTERM): stopped while starting, before anything was saved in {run}; run the same "
        "command to start again"
    )
    assert "--resume" not in err and run.is_dir()


@pytest.mark.parametrize(
    "files,removed",
    [
        ({".lock": "123\n"}, True),
        ({".lock": "", "metrics.jsonl": "", "events.jsonl": ""}, True),
        ({".lock": "", "config.yaml": "train: {}\n"}, False),  # a resume can read it
        ({".lock": "", "metrics.jsonl": '{"step": 1}\n'}, False),  # a logged step
        ({".lock": "", "notes.txt": ""}, False),  # a file the user put there
    ],
)
def test_remove_unused_run_dir_removes_only_lock_and_empty_logs(tmp_path, files, removed):
    run = tmp_path / "r"
    run.mkdir()
    for name, text in files.items():
        (run / name).write_text(text)
    assert remove_unused_run_dir(run) is removed
    assert run.exists() is not removed
    if not removed:
        assert sorted(p.name for p in run.iterdir()) == sorted(files)  # nothing touched


def test_remove_unused_run_dir_keeps_a_checkpoints_folder(tmp_path):
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / ".lock").write_text("")
    assert remove_unused_run_dir(run) is False and (run / "checkpoints").is_dir()
