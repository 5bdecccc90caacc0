"""The sweep after killed workers waits for their whole process group (Ray makes each worker a group leader and
vLLM's processes inherit the group): `_live_in_groups` sees a group's live child after its leader is gone."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.engine.dist_lifecycle import _live_in_groups


def test_a_group_is_live_while_any_member_runs_and_not_after():
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    # a leader that starts a child (same group) and then exits: the child alone keeps the group live
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            " print(p.pid, flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    group = leader.pid
    child = int(leader.stdout.readline())
    leader.wait()
    try:
        assert _live_in_groups({group})
        assert not _live_in_groups({group + 1_000_000}) and not _live_in_groups(set())
    finally:
        os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _live_in_groups({group}) and time.monotonic() < deadline:  # the orphan is reaped by init
        time.sleep(0.05)
    assert not _live_in_groups({group}), child
