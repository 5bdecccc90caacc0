"""A `dist.address` that answers nothing fails at once with one line naming it (issue 51): Ray's own join loop
retries such an address for minutes without a word, so the engine probes it first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from populora.engine import EngineError
from populora.engine.dist import probe_address


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_train_with_an_address_nobody_answers_at_exits_with_one_line(tmp_path):
    port = _closed_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "populora.cli", "train", "--quiet", "--run-dir", str(tmp_path / "run")]
    cmd += ["--set", "dist.workers=2", "--set", f"dist.address=127.0.0.1:{port}"]
    got = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=100, cwd=tmp_path)
    assert got.returncode != 0
    lines = [ln for ln in (got.stdout + got.stderr).splitlines() if f"dist.address=127.0.0.1:{port}" in ln]
    assert lines, got.stdout + got.stderr
    assert f"nothing answers at 127.0.0.1:{port} (connection refused)" in lines[0]
    assert "ray start --head" in lines[0]
    assert "Traceback" not in got.stderr


def test_probe_accepts_a_listener_and_leaves_other_forms_to_ray():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        probe_address(f"127.0.0.1:{port}")
        probe_address(f"ray://127.0.0.1:{port}")  # Ray client addresses are probed the same way
    for address in ("", None, "auto", "local", "headnode"):  # no port: Ray resolves these itself
        probe_address(address)


def test_probe_names_the_address_and_the_fix():
    port = _closed_port()
    with pytest.raises(EngineError) as err:
        probe_address(f"ray://127.0.0.1:{port}")
    line = str(err.value)
    assert line.startswith(f"dist.address=ray://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}")
    assert "\n" not in line
    with pytest.raises(EngineError, match=r"dist.address=head:6x79: not HOST:PORT"):
        probe_address("head:6x79")
