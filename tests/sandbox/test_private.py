"""The owner-only helpers for run folders (issue 13, item 2)."""

import os
import stat

from populora.sandbox.private import make_private, owner_only


def test_owner_only_creates_private_dirs_and_files(tmp_path):
    run = tmp_path / "run"
    old = os.umask(0o022)
    try:
        with owner_only():
            (run / "checkpoints").mkdir(parents=True)
            (run / "buffers.jsonl").write_text("{}\n")
        assert os.umask(0o022) == 0o022  # restored
    finally:
        os.umask(old)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE((run / "checkpoints").stat().st_mode) == 0o700
    assert stat.S_IMODE((run / "buffers.jsonl").stat().st_mode) == 0o600


def test_make_private_fixes_an_existing_tree(tmp_path):
    (tmp_path / "d").mkdir(mode=0o755)
    f = tmp_path / "d" / "buffers.jsonl"
    f.write_text("x")
    f.chmod(0o644)
    (tmp_path / "link").symlink_to("/etc/hostname")
    assert make_private(tmp_path) >= 2
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
