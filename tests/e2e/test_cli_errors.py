"""Bad config values through the CLI: one clear line naming the field and the fix, exit code 2, no traceback."""

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.train.checkpoint import list_checkpoints


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
        (["--set", "population.teachers=64", "--set", "model.memory_gb=0.001"], "adapter slots need"),
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
        == "error: lora.rank: must be >= 1 (every rank of a list), got 0; use e.g. --set lora.rank=8 or lora.rank=8,1."
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
        "train.keep_checkpoints, train.threads, train.overlap, dist.workers, dist.address, rl.micro_batch_tokens, "
        "rl.activation_checkpointing, rl.share_prompt_forward, model.vllm_gpu_memory_utilization, model.vllm_kv_cache_gb, "
        "model.vllm_sleep, model.vllm_seeded, model.trust_remote_code); "
        "start a new run to change it."
    )


# ------------------------------------------------------------------ run folders and checkpoints (issue 13, 10-11)


def _train(args: list[str]) -> SimpleNamespace:
    """`populora train -q ARGS` run in this process by typer's CliRunner: the exit code and what a user sees on
    stderr, without a fresh interpreter importing torch for every call. An exception that escapes the CLI is
    put on stderr as its traceback, as the real entry point would print it (the tests then fail on it); the
    real entry point itself, in a subprocess, is test_real_entry_point_prints_no_traceback."""
    res = CliRunner().invoke(app, ["train", "-q", *args])
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "".join(traceback.format_exception(res.exception))
    return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=err)


def _one_error_line(res, needle: str) -> None:
    err = res.stderr.strip()
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + err and "Aborted" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], err


def _sets(fast: list[str], *extra: str) -> list[str]:
    return [a for kv in [*fast, *extra] for a in ("--set", kv)]


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    return out


def test_run_dir_is_a_file(tmp_path, fast):
    f = tmp_path / "file"
    f.write_text("x")
    _one_error_line(_train(["--run-dir", str(f), *_sets(fast)]), f"--run-dir {f}: is a file, not a folder")


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs mounted for the test (root only): read-only and full-disk cases without mocks."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mounted = []

    def mount(size: str, readonly: bool = False) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        opts = f"size={size}" + (",ro" if readonly else "")
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(point)], capture_output=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_run_dir_read_only(tmpfs, fast):
    ro = tmpfs("1m", readonly=True)
    _one_error_line(
        _train(["--run-dir", str(ro / "run"), *_sets(fast)]), "cannot write there (Read-only file system)"
    )


def test_disk_full_at_checkpoint(tmpfs, fast):
    # 1 MiB holds the config and the logs of a step, not a checkpoint (~1.6 MB): the adapters fit and the
    # optimizer state's write fails half-way, the case users saw as a traceback.
    small = tmpfs("1m")
    run = small / "run"
    res = _train(["--run-dir", str(run), *_sets(fast, "train.steps=1")])
    _one_error_line(res, "cannot write checkpoint step_000001")
    assert "the disk is full" in res.stderr and f"--resume {run}" in res.stderr
    assert not list((run / "checkpoints").iterdir())  # the half-written temp folder is removed
    assert (run / "metrics.jsonl").read_text().count("\n") == 1  # the step's logs are kept


@pytest.mark.parametrize(
    "damage,needle",
    [
        ("state.json", "state.json cannot be read"),
        ("optimizer.safetensors", "optimizer.safetensors cannot be read"),
        ("adapters/T0/adapter_model.safetensors", "adapters/T0 cannot be read"),
        ("rng.json:empty", "rng.json is empty"),
    ],
)
def test_damaged_only_checkpoint_one_line(two_step_run, tmp_path, damage, needle):
    run = _copy(two_step_run, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step_000001")
    name, _, how = damage.partition(":")
    path = run / "checkpoints" / "step_000002" / name
    data = path.read_bytes()
    path.write_bytes(b"" if how == "empty" else data[: len(data) // 2])
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    res = _train(["--resume", str(run), "--set", "train.steps=3"])
    _one_error_line(res, "every checkpoint is damaged")
    assert needle in res.stderr
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing deleted or moved


def test_resume_falls_back_to_newest_intact(two_step_run, tmp_path):
    run = _copy(two_step_run, tmp_path)
    opt = run / "checkpoints" / "step_000002" / "optimizer.safetensors"
    opt.write_bytes(opt.read_bytes()[:1000])
    res = _train(["--resume", str(run), "--set", "train.steps=3"])
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "step_000002: optimizer.safetensors cannot be read" in warn[0]
    assert "resuming from step_000001" in warn[0]
    # The damaged checkpoint is kept under another name; steps 2 and 3 are re-run and checkpointed.
    assert (run / "checkpoints" / "damaged-step_000002" / "optimizer.safetensors").stat().st_size == 1000
    assert [s for s, _ in list_checkpoints(run)] == [1, 2, 3]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert {"step": 1, "type": "resume", "from": "checkpoints/step_000001"} in events
    assert any(e["type"] == "damaged_checkpoint" for e in events)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_run_folder_is_owner_only(two_step_run):
    assert os.stat(two_step_run).st_mode & 0o777 == 0o700
    for p in two_step_run.rglob("*"):
        mode = p.stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{p} is readable by others ({oct(mode)})"


def test_eval_on_a_file(tmp_path):
    f = tmp_path / "adapter_model.safetensors"
    f.write_bytes(b"x")
    res = subprocess.run(
        [sys.executable, "-m", "populora.cli", "eval", str(f)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2
    assert res.stderr.strip().startswith(f"error: TARGET {f} is a file; give a run folder")
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_checkpoint_write_error_types(tmp_path):
    from populora.train.checkpoint import checkpoint_write_error
    from populora.train.errors import TrainError

    torch_full = RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 1024 vs 960")
    st_full = Exception("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: ... })")
    for err in (torch_full, st_full, OSError(28, "No space left on device")):
        out = checkpoint_write_error(err, tmp_path, 4)
        assert isinstance(out, TrainError) and "the disk is full" in str(out) and "step_000004" in str(out)
    bug = ValueError("a bug, not the disk")
    assert checkpoint_write_error(bug, tmp_path, 4) is bug  # real bugs keep their traceback
