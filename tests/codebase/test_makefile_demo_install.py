"""`make demo` installs only what the demo runs (populora and its dependencies), not the dev, smol and docs
extras that `make install` / `make test` need (ray, selenium, tensorboard, mkdocs, ...: about 0.5 GiB); read from
`make -n` (the recipes without running them), as tests/codebase/test_makefile_progress.py does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str, venv: Path, *extra: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line and "--upgrade pip" not in line]


def test_make_demo_installs_no_extras(tmp_path):
    lines = _recipe("demo", tmp_path / "venv")  # a venv that does not exist: every step is due
    installs = _installs(lines)
    assert installs and all(" -e ." in line and "[" not in line for line in installs), installs
    assert not any(x in line for line in installs for x in ("dev", "docs", "smol", "evalplus")), installs
    assert lines[-1].endswith("populora demo")


def test_make_install_keeps_the_extras_and_counts_for_the_demo(tmp_path):
    venv = tmp_path / "venv"
    installs = _installs(_recipe("install", venv))
    assert any("'.[dev,smol,docs]'" in line for line in installs), installs
    # after a full install, `make demo` installs nothing more
    venv.mkdir()
    (venv / "bin").mkdir()
    (venv / "bin" / "python").touch()
    lines = _recipe("install", venv)
    assert any(f"touch {venv}/.installed {venv}/.demo-installed" in line for line in lines), lines
    (venv / ".installed").touch()
    (venv / ".demo-installed").touch()
    assert _installs(_recipe("demo", venv)) == []
