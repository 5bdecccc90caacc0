"""One process per run folder, and no chmod of folders the project did not create (issue 29)."""

import os
import stat
import subprocess
import sys

import pytest

from populora.train.run_folder import RunFolderError, lock_run_dir, prepare_run_dir


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_existing_shared_folder_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    prepare_run_dir(shared)
    assert _mode(shared) == 0o1777


def test_symlinks_target_keeps_its_mode(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    os.chmod(target, 0o755)
    link = tmp_path / "link"
    link.symlink_to(target)
    prepare_run_dir(link)
    assert _mode(target) == 0o755


def test_created_folder_is_owner_only(tmp_path):
    old = os.umask(0o022)  # even under a permissive umask
    try:
        prepare_run_dir(tmp_path / "a" / "run")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a" / "run") == 0o700


def test_second_lock_names_the_holder(tmp_path):
    fd = lock_run_dir(tmp_path)
    try:
        code = (
            "import sys\nfrom populora.train.run_folder import lock_run_dir, RunFolderError\n"
            "try:\n    lock_run_dir(sys.argv[1])\nexcept RunFolderError as e:\n    print(e); sys.exit(3)\n"
        )
        res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
        assert res.returncode == 3, res.stderr
        assert f"{tmp_path} is in use by another populora process (pid {os.getpid()})" in res.stdout
    finally:
        os.close(fd)
    os.close(lock_run_dir(tmp_path))  # released with the fd: the next process gets it


def test_lock_file_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "elsewhere").write_text("x")
    (tmp_path / ".lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        lock_run_dir(tmp_path)
    assert (tmp_path / "elsewhere").read_text() == "x"


@pytest.mark.parametrize("flag", ["--resume", "--run-dir"])
def test_train_on_a_locked_folder_exits_with_one_line(tmp_path, flag):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("train: {steps: 1}\n")
    fd = lock_run_dir(run)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "populora.cli", "train", "-q", flag, str(run)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.close(fd)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in res.stderr
    assert err[0].startswith(f"error: {run} is in use by another populora process (pid {os.getpid()})")
    with pytest.raises(RunFolderError):  # sanity: RunFolderError is what the CLI turned into that line
        fd = lock_run_dir(run)
        try:
            lock_run_dir(run)
        finally:
            os.close(fd)
