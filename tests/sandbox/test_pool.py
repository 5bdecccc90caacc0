"""Pool life cycle: healing after a worker is killed or wedged, concurrency, and no process left behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from sandbox_proc import alive, worker_children

from populora.sandbox import Limits, Sandbox, SandboxError


def _tree(sb: Sandbox) -> list[int]:
    """Every process of the pool: the shims, the workers inside their PID namespaces, and running jobs."""
    pids = list(sb.worker_pids)
    for shim in sb.worker_pids:
        for inner in worker_children(shim):
            pids += [inner, *worker_children(inner)]
    return pids


def _gone(pids: list[int], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_killed_idle_worker_is_replaced_transparently() -> None:
    with Sandbox(workers=2) as sb:
        victim = sb.worker_pids[0]
        os.kill(victim, signal.SIGKILL)
        outs = sb.run_many([("", f"{i} * 2") for i in range(6)])
        assert [o.value_repr for o in outs] == [str(i * 2) for i in range(6)]
        assert sb.restarts == 1 and victim not in sb.worker_pids and _gone([victim])


def test_worker_killed_mid_job_is_replaced_and_the_job_retried() -> None:
    with Sandbox(workers=1) as sb:
        shim = sb.worker_pids[0]
        result: list = []
        t = threading.Thread(
            target=lambda: result.append(sb.run("import time\n", "time.sleep(1.5) or 'slept'"))
        )
        t.start()
        deadline = time.monotonic() + 10
        while not any(worker_children(c) for c in worker_children(shim)) and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until the job is running
        job_tree = _tree(sb)
        os.kill(shim, signal.SIGKILL)
        t.join(30)
        assert result[0].value_repr == "'slept'" and sb.restarts == 1
        assert _gone(job_tree)  # the old worker and its running job died with the shim


def test_wedged_worker_is_killed_and_its_job_reported_crashed() -> None:
    with Sandbox(workers=1, wedge_grace_s=0.5) as sb:
        shim = sb.worker_pids[0]
        (inner,) = worker_children(shim)
        os.kill(inner, signal.SIGSTOP)  # the worker stops answering
        out = sb.run("", "1", Limits(timeout_s=0.5))
        assert (out.status, out.error_type) == ("crashed", "WorkerDied")
        assert _gone([shim, inner]) and sb.restarts == 1
        assert sb.run("", "1").value_repr == "1"


def test_close_leaves_no_process_and_is_idempotent() -> None:
    sb = Sandbox(workers=2)
    assert sb.run_many([("", "1")] * 4)[0].value_repr == "1"
    pids = _tree(sb)
    assert len(pids) >= 4
    sb.close()
    sb.close()
    assert _gone(pids)
    with pytest.raises(SandboxError, match="closed"):
        sb.run("", "1")


def test_garbage_collected_sandbox_stops_its_workers() -> None:
    sb = Sandbox(workers=1)
    pids = _tree(sb)
    del sb
    gc.collect()
    assert _gone(pids)


def test_workers_exit_when_the_caller_dies() -> None:
    code = textwrap.dedent("""
        import os, sys
        from populora.sandbox import Sandbox
        sb = Sandbox(workers=2)
        print(' '.join(map(str, sb.worker_pids)), flush=True)
        sb.run('', '1')
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2 and _gone(pids)


def test_concurrent_callers_get_their_own_results() -> None:
    with Sandbox(workers=2) as sb:
        results: dict[int, list] = {}

        def call(k: int) -> None:
            results[k] = [o.value_repr for o in sb.run_many([("", f"{k} * 100 + {i}") for i in range(20)])]

        threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {k: [str(k * 100 + i) for i in range(20)] for k in range(4)}


def test_shared_sandbox_is_one_pool_and_replaced_when_closed() -> None:
    from populora.sandbox import shared_sandbox

    a = shared_sandbox()
    assert shared_sandbox() is a and a.run("", "1 + 1").value_repr == "2"
    a.close()
    b = shared_sandbox()
    assert b is not a and b.run("", "2 + 2").value_repr == "4"
    b.close()


def test_a_forked_copy_of_the_caller_neither_uses_nor_stops_the_pool() -> None:
    with Sandbox(workers=1) as sb:
        pid = os.fork()
        if pid == 0:  # a forked child (e.g. a data-loader worker) that exits normally, running finalizers
            code = 0
            try:
                sb.run("", "1")
                code = 3  # it must refuse
            except SandboxError:
                pass
            sb.close()
            del sb
            gc.collect()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert sb.run("", "6 * 7").value_repr == "42" and sb.restarts == 0
