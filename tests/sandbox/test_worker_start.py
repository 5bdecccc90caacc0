"""A worker whose pool goes away before configuring it (Ctrl-C while the sandbox starts) exits quietly: no
EOFError traceback on the console."""

import subprocess
import sys
from pathlib import Path

import populora.sandbox

WORKER = Path(populora.sandbox.__file__).parent / "_worker.py"


def test_a_worker_whose_config_pipe_closes_exits_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-s", "-S", "-B", str(WORKER)],
        stdin=subprocess.DEVNULL,  # the config pipe closes before a byte arrives
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and proc.stderr == "", proc.stderr
