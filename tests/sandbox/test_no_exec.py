"""execve is refused deterministically, also when no other job of the sandbox user is running.

RLIMIT_NPROC alone blocks execve only when another process of the job's uid exists at the uid change (the
kernel counts before the change), so a lone job on a one-worker pool used to exec /bin/sh; the seccomp layer
closes that race.
"""

import pytest

from populora.sandbox import Limits, Sandbox

EXEC_SHELL = "import os\ndef f():\n    os.execv('/bin/sh', ['sh', '-c', 'echo pwned'])\n"
EXECVE_PY = "import os\ndef f():\n    os.execve('/usr/bin/env', ['env'], {})\n"


def test_exec_is_refused_for_a_lone_job():
    with Sandbox(workers=1, limits=Limits(timeout_s=2)) as sb:
        if not sb.isolation.get("no_exec"):
            pytest.skip("seccomp exec filter not available on this OS")
        for program in (EXEC_SHELL, EXECVE_PY):
            for _ in range(3):  # sequential: never another sandbox-user process alive at the uid change
                out = sb.run(program, "f()")
                assert (out.status, out.error_type) == ("error", "BlockingIOError"), out
        ok = sb.run("def f(x):\n    return x + 1\n", "f(1)")
        assert (ok.status, ok.value_repr) == ("ok", "2")
