"""`make demo` on a fresh machine says what it is doing (issue 33 §4): a line before each install step, and the
long dependency install is not silenced (pip's own per-package output), so ~4 minutes never look stuck."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_announces_each_step(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # -n prints the recipe without running it; a venv path that does not exist makes every step due
    proc = subprocess.run(
        ["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    steps = [
        i
        for i, line in enumerate(lines)
        if line.startswith("echo ") and ("install " in line or "demo:" in line)
    ]
    assert len(steps) >= 3, (
        lines
    )  # the venv, the package, the demo (test_makefile_demo_install.py: no extras)
    heavy = next(i for i, line in enumerate(lines) if "pip install" in line and " -e " in line)
    assert " -q" not in lines[heavy], lines[heavy]  # pip shows each package it fetches
    assert any(s < heavy for s in steps)  # announced before it starts, with its duration
    assert "min" in lines[max(s for s in steps if s < heavy)]
