"""Issue 50, items 1 and 6: nothing a job can observe of its process or of the other workers lets two
workers disagree or talk. The determinism check's variant pools (`run_many(variant=k)`) are separate processes
with their own hash seed and heap layout; /proc's host-wide counters are masked; no inode is shared between
workers that a job could `flock` to pass bits to another; `sandbox run --indent` is bounded."""

from __future__ import annotations

import pytest

from populora.sandbox import DEFAULT_PRELOAD, Limits, Sandbox
from populora.sandbox.pool import MAX_VARIANTS

#: Where an address taken when the module runs lands: its bits 4-13 (the block inside a 16 KiB pool) and the
#: string hash of the process, as one value.
PROCESS_PRINT = (
    "A = [object() for _ in range(3)]\nB = id(object())\ndef f():\n    return (hash('ab'), B >> 4 & 1023)"
)


def test_each_variant_pool_is_a_process_of_its_own():
    # The old check had one second set of workers: every round saw one hash seed. Now pool k has its own, so
    # `hash('ab')` (a 64-bit value of the seed) takes a different value in each of 12 pools, and in none of
    # them the value of the scoring workers (seed 0); all pools of one call run at once, order kept.
    with Sandbox(workers=2) as sb:
        variants = [0, 0, *range(1, 13)]
        outs = sb.run_many([(PROCESS_PRINT, "f()")] * len(variants), variant=variants)
        assert all(o.status == "ok" for o in outs), outs
        hashes = [eval(o.value_repr)[0] for o in outs]
        assert hashes[0] == hashes[1]  # the scoring workers agree with each other
        assert len(set(hashes[2:])) == 12 and hashes[0] not in hashes[2:]
        # Only the pools named were started, each with `variant_workers` workers (a quarter of 2: one).
        assert sorted(sb._pools) == list(range(13)) and all(len(sb._pools[k]) == 1 for k in range(1, 13))
        again = sb.run_many([(PROCESS_PRINT, "f()")] * 3, variant=5)  # a pool keeps its processes
        assert {o.value_repr for o in again} == {outs[6].value_repr}


def test_module_level_addresses_differ_between_variant_pools():
    # The old heap shift (bytearrays) never touched the 16-byte class, so `id(object())` taken at import kept
    # its low bits in most variant workers; the new one moves every size class. Among 8 pools at least two
    # distinct values of bits 4-13 (all 8 equal by chance: far below 1e-9 for a uniform 10-bit value).
    prog = "X = [object() for _ in range(3)]\nB = id(object())\ndef f():\n    return B >> 4 & 1023"
    with Sandbox(workers=1) as sb:
        outs = sb.run_many([(prog, "f()")] * 8, variant=list(range(1, 9)))
        assert len({o.value_repr for o in outs}) > 1, outs


def test_a_dead_variant_worker_is_replaced_in_its_own_pool():
    with Sandbox(workers=2) as sb:
        before = sb.run_many([(PROCESS_PRINT, "f()")] * 2, variant=[3, 4])
        dead = sb._pools[3][0]
        dead.proc.kill()
        dead.proc.wait()
        outs = sb.run_many([(PROCESS_PRINT, "f()")] * 3, variant=[3, 4, 0])
        assert [o.status for o in outs] == ["ok"] * 3 and sb.restarts == 1
        assert sb._pools[3][0] is not dead and outs[1].value_repr == before[1].value_repr  # pool 4 untouched
        assert outs[0].value_repr != before[0].value_repr  # a fresh process: a fresh seed


@pytest.mark.parametrize("bad", [-1, MAX_VARIANTS + 1, True, 1.0, [0, 1, 2], "1"])
def test_bad_variant_is_refused(sandbox, bad):
    with pytest.raises(ValueError, match=r"run_many\(variant=\) must be an integer from 0 to"):
        sandbox.run_many([("x = 1", "x")] * 2, variant=bad)


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, MAX_VARIANTS * 100])
def test_bad_variant_workers_is_refused(bad):
    with pytest.raises(ValueError, match=r"Sandbox\(variant_workers=\) must be an integer between 1 and"):
        Sandbox(workers=1, variant_workers=bad)


PROC_PROBE = """
import os
def f():
    out = {}
    for name in ("stat", "meminfo", "loadavg", "uptime", "locks"):
        try:
            with open("/proc/" + name) as fh:
                out[name] = len(fh.read())
        except OSError as e:
            out[name] = type(e).__name__
    out["pressure"] = sorted(os.listdir("/proc/pressure")) if os.path.isdir("/proc/pressure") else []
    return out
"""


def test_host_wide_proc_counters_are_masked(attack_sandbox):
    # /proc/stat (boot time, the host's fork counter: one job counted another worker's jobs), /proc/meminfo,
    # /proc/pressure/* and the lock table were readable; now empty, like loadavg and uptime.
    out = attack_sandbox.run(PROC_PROBE, "f()")
    assert out.status == "ok", out
    assert eval(out.value_repr) == {
        "stat": 0,
        "meminfo": 0,
        "loadavg": 0,
        "uptime": 0,
        "locks": 0,
        "pressure": [],
    }


FLOCK = """
import fcntl, os, time
def take():
    # Lock the job's stdin (/dev/null) and leave.
    try:
        fcntl.flock(0, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 'locked already'
    return 'taken'
def hold(seconds):
    fd = os.open("/dev/null", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    time.sleep(seconds)
    return 'held'
def probe(seconds=0.0):
    # Is /dev/null (or /proc/loadavg, a mask of it) locked by anyone? Polls for `seconds`.
    end = time.monotonic() + seconds
    while True:
        for path in ("/dev/null", "/proc/loadavg", "/dev/zero"):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 'locked: ' + path
            finally:
                os.close(fd)
        if time.monotonic() >= end:
            return 'free'
        time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def flock_sandbox():
    limits = Limits(timeout_s=10, memory_mb=256)
    with Sandbox(workers=2, limits=limits, preload=DEFAULT_PRELOAD + ("os", "fcntl")) as sb:
        yield sb


def test_a_lock_a_job_leaves_behind_reaches_no_other_job(flock_sandbox):
    # Every job's stdin was the worker's one open /dev/null (the host's inode): a lock on it outlived the job,
    # and every later job of every worker saw it. Now each job opens its own, of its worker's own node.
    first = flock_sandbox.run_many([(FLOCK, "take()")] * 2)
    assert [o.value_repr for o in first] == ["'taken'"] * 2, first
    later = flock_sandbox.run_many([(FLOCK, "probe()")] * 4)
    assert [o.value_repr for o in later] == ["'free'"] * 4, later


def test_concurrent_jobs_on_two_workers_share_no_lockable_inode(flock_sandbox):
    # One job holds a lock on /dev/null for 2 s while a job on the other worker polls for it: the host's
    # /dev/null, bound into both workers, carried the bit (`locked`); each worker's own node does not.
    outs = flock_sandbox.run_many([(FLOCK, "hold(2.0)"), (FLOCK, "probe(2.0)")])
    assert [o.value_repr for o in outs] == ["'held'", "'free'"], outs


def test_cli_indent_is_bounded(tmp_path):
    from typer.testing import CliRunner

    from populora.cli import app

    prog = tmp_path / "p.py"
    prog.write_text("def f(x):\n    return x\n")
    res = CliRunner().invoke(app, ["sandbox", "run", str(prog), "--call", "f(2)", "--indent", "100000000"])
    assert res.exit_code == 2 and len(res.output) < 2000
    assert "--indent" in res.output and "16" in res.output
    res = CliRunner().invoke(app, ["sandbox", "run", str(prog), "--call", "f(2)", "--indent", "-1"])
    assert res.exit_code == 2 and "--indent" in res.output
    res = CliRunner().invoke(app, ["sandbox", "run", str(prog), "--call", "f(2)", "--indent", "16"])
    assert res.exit_code == 0 and '"value_repr": "2"' in res.output


SYSINFO = """
import ctypes
def f():
    buf = ctypes.create_string_buffer(256)
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.sysinfo(buf), ctypes.get_errno()
"""


def test_sysinfo_is_refused(attack_sandbox):
    # sysinfo(2) gives uptime, load averages and the host's process count (which moves with every job any
    # worker forks): the same counters as the masked /proc files, so the syscall filter refuses it (EPERM).
    out = attack_sandbox.run(SYSINFO, "f()")
    assert out.status == "ok" and eval(out.value_repr) == (-1, 1), out
