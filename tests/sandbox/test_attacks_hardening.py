"""Issue 13's attack corpus: hostile programs against the layers added for it (IPC and keyrings, namespaces
and mounts, tracing, the host's files including a run folder's gold programs and the benchmark data, policy
bypasses replayed in the sandbox, memory routes). Each has its exact expected outcome; afterwards the pool is
healthy and the host's IPC objects and /dev/shm are exactly as before. The attack pool pre-imports os,
ctypes, ... so the operating-system layers are what stop these programs, not a failed import."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from sandbox_proc import alive

import populora
from populora.sandbox import Limits, Sandbox

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the namespace layers need root (as in CI)"),
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64"),
]

SC = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "def sc(n, *a):\n    ctypes.set_errno(0)\n    r = libc.syscall(n, *a)\n    return (r, ctypes.get_errno())\n"
)
EPERM = "(-1, 1)"
ENOSYS = "(-1, 38)"
PROJECT_FILE = str(Path(populora.__file__).resolve())


@pytest.fixture(scope="module")
def run_folder():
    """A run folder with the gold programs of the current run, where a hostile answer would look for them."""
    base = Path(
        tempfile.mkdtemp(prefix="populora-run-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    )
    base.chmod(0o755)
    rec = {"task": "code_f", "program": "def f(x):\n    return x * 7", "inputs": ["1"], "outputs": ["7"]}
    (base / "buffers.jsonl").write_text(json.dumps(rec) + "\n")
    (base / "buffers.jsonl").chmod(0o644)
    yield base
    (base / "buffers.jsonl").unlink()
    base.rmdir()


# (id, program, call, expected status, expected error_type (or None), expected value_repr (or None))
CORPUS: list[tuple[str, str, str, str, str | None, str | None]] = [
    # --- IPC and keyrings: EPERM from the syscall filter (and a fresh IPC namespace behind it)
    ("sysv_shmget_128mb", SC, "sc(29, 0, 128 << 20, 0o1000 | 0o600)", "ok", None, EPERM),
    ("sysv_shmget_keyed", SC, "sc(29, 0x5eed, 1 << 20, 0o1000 | 0o666)", "ok", None, EPERM),
    ("sysv_shmat", SC, "sc(30, 0, 0, 0)", "ok", None, EPERM),
    ("sysv_msgget", SC, "sc(68, 0x5eed, 0o1000 | 0o666)", "ok", None, EPERM),
    ("sysv_semget", SC, "sc(64, 0x5eed, 1, 0o1000 | 0o666)", "ok", None, EPERM),
    ("posix_mq_open", SC, "sc(240, b'/populora-q', 0o100 | 2, 0o666, 0)", "ok", None, EPERM),
    (
        "posix_shm_dev_shm",
        "def f():\n    open('/dev/shm/populora-x', 'w')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    ("add_key", SC, "sc(248, b'user', b'populora', b'secret', 6, -2)", "ok", None, EPERM),
    ("request_key", SC, "sc(249, b'user', b'populora', None, 0)", "ok", None, EPERM),
    ("keyctl_join_session", SC, "sc(250, 1, b'populora')", "ok", None, EPERM),
    # --- kernel interfaces a pure function never needs
    ("io_uring_setup", SC, "sc(425, 8, ctypes.create_string_buffer(120))", "ok", None, EPERM),
    ("unshare_user", SC, "sc(272, 0x10000000)", "ok", None, EPERM),
    ("unshare_ipc", SC, "sc(272, 0x08000000)", "ok", None, EPERM),
    (
        "setns_host_ipc",  # hidepid: the supervisor's /proc entry does not exist for a job
        SC + "def f():\n    return sc(308, os.open('/proc/1/ns/ipc', 0), 0)",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    ("setns_own_ipc", SC + "import os\n", "sc(308, os.open('/proc/self/ns/ipc', 0), 0)", "ok", None, EPERM),
    ("clone_newuser", SC, "sc(56, 0x10000000 | 17, 0, 0, 0, 0)", "ok", None, EPERM),
    ("clone3", SC, "sc(435, 0, 0)", "ok", None, ENOSYS),
    (
        "memfd_create",
        "import os\ndef f():\n    os.memfd_create('x')",
        "f()",
        "error",
        "PermissionError",
        None,
    ),
    ("ptrace_traceme", SC, "sc(101, 0, 0, 0, 0)", "ok", None, EPERM),
    ("ptrace_attach_worker", SC, "sc(101, 16, 1, 0, 0)", "ok", None, EPERM),
    ("process_vm_readv", SC, "sc(310, 1, 0, 0, 0, 0, 0)", "ok", None, EPERM),
    ("bpf", SC, "sc(321, 0, 0, 0)", "ok", None, EPERM),
    ("perf_event_open", SC, "sc(298, 0, 0, -1, -1, 0)", "ok", None, EPERM),
    ("userfaultfd", SC, "sc(323, 0)", "ok", None, EPERM),
    ("mount_tmpfs", SC, "sc(165, b'none', b'/tmp', b'tmpfs', 0, None)", "ok", None, EPERM),
    ("umount_proc", SC, "sc(166, b'/proc', 2)", "ok", None, EPERM),
    ("pivot_root", SC, "sc(155, b'/tmp', b'/tmp')", "ok", None, EPERM),
    ("chroot", "import os\ndef f():\n    os.chroot('/tmp')", "f()", "error", "PermissionError", None),
    ("fsopen", SC, "sc(430, b'tmpfs', 0)", "ok", None, EPERM),
    ("personality", SC, "sc(135, 0x0040000)", "ok", None, EPERM),
    # --- the host's files: outside the minimal root nothing exists
    (
        "etc_passwd",
        "def f():\n    return open('/etc/passwd').read()",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "project_source",
        "def f(p):\n    return open(p).read()",
        f"f({PROJECT_FILE!r})",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "work_tree",
        "import os\ndef f():\n    return os.listdir('/work')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "benchmark_data",
        "import os\ndef f():\n    return os.listdir('/work/shared/data')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "code_f_answer_replays_gold_program",
        "import json\ndef f(x):\n    for line in open({buffers!r}):\n        rec = json.loads(line)\n"
        "        ns = {{}}\n        exec(rec['program'], ns)\n        return ns['f'](x)",
        "f(1)",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "proc_1_root",  # hidepid: the supervisor (PID 1) does not even exist for a job
        "def f():\n    return open('/proc/1/root/etc/passwd').read()",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "sys_fs",
        "import os\ndef f():\n    return os.listdir('/sys')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "root_listing",
        "import os\ndef f():\n    return [n for n in ('etc', 'home', 'work', 'var', 'sys') if "
        "os.path.exists('/' + n)]",
        "f()",
        "ok",
        None,
        "[]",
    ),
    (
        "dev_listing",
        "import os\ndef f():\n    return sorted(os.listdir('/dev'))",
        "f()",
        "ok",
        None,
        "['null', 'urandom', 'zero']",
    ),
    (
        "interpreter_stdlib_walk",
        "import os\ndef f():\n    return os.listdir(os.path.dirname(os.__file__))",
        "f()",
        "error",
        "PermissionError",
        None,
    ),
    # --- policy bypasses of issue 13, item 3, replayed in the sandbox: contained by the OS layers anyway
    (
        "collections_sys",
        "import collections\ndef f():\n    return collections._sys.modules['os'].listdir('/work')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "typing_sys_open",
        "import typing\ndef f():\n    return typing.sys.modules['builtins'].open('/etc/passwd')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "dataclasses_inspect",
        "import dataclasses\ndef f():\n    return dataclasses.inspect.os.listdir('/home')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "codecs_open",
        "import codecs\ndef f():\n    return codecs.open('/etc/passwd').read()",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "codecs_builtins_exec",
        "import codecs\ndef f():\n    codecs.builtins.exec(\"import os\\nos.listdir('/work')\")",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "attrgetter_computed_dunder",
        "import operator\ndef f():\n    g = operator.attrgetter('__gl' + 'obals__')\n"
        "    return g(f)['__builtins__'].open('/etc/passwd')",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    # --- memory outside memory_mb
    (
        "memfd_512mb",
        "import os\ndef f():\n    fd = os.memfd_create('m')\n    os.ftruncate(fd, 512 << 20)",
        "f()",
        "error",
        "PermissionError",
        None,
    ),
    (
        "devshm_64mb",
        "def f():\n    open('/dev/shm/m', 'wb').write(b'x' * (64 << 20))",
        "f()",
        "error",
        "FileNotFoundError",
        None,
    ),
    (
        "anonymous_map_1gb",
        "import mmap\ndef f():\n    return len(mmap.mmap(-1, 1 << 30))",
        "f()",
        "error",
        "OSError",
        None,
    ),
    (
        "tmp_fill",
        "def f():\n    open('/tmp/fill', 'wb').write(b'x' * (64 << 20))",
        "f()",
        "error",
        "OSError",
        None,
    ),
]


def _ipcs() -> list[str]:
    """The host's SysV IPC objects owned by the job uid (nobody): other processes on a shared machine may
    create their own meanwhile; anything a job left would be nobody's."""
    out = subprocess.run(["ipcs", "-a"], capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if " nobody " in f" {line} ")


def _dev_shm() -> list[str]:
    if not os.path.isdir("/dev/shm"):
        return []
    return sorted(e.name for e in os.scandir("/dev/shm") if e.stat(follow_symlinks=False).st_uid == 65534)


def test_corpus_has_enough_new_programs() -> None:
    assert len(CORPUS) >= 30 and len({c[0] for c in CORPUS}) == len(CORPUS)


def test_hardening_attack_corpus(attack_sandbox: Sandbox, run_folder: Path) -> None:
    ipcs_before, shm_before = _ipcs(), _dev_shm()
    pids_before = attack_sandbox.worker_pids
    jobs = [(prog.format(buffers=str(run_folder / "buffers.jsonl")), call) for _, prog, call, *_ in CORPUS]
    outs = attack_sandbox.run_many(jobs, limits=Limits(timeout_s=10, memory_mb=256, tmp_mb=8, file_mb=4))
    failures = []
    for (name, _, _, status, etype, value), out in zip(CORPUS, outs, strict=True):
        if (out.status, out.error_type) != (status, etype) or (value is not None and out.value_repr != value):
            failures.append(f"{name}: expected {status}/{etype}/{value}, got {out}")
    assert not failures, "\n".join(failures)
    # nothing left on the host, the pool healthy (same workers, still serving jobs)
    assert _ipcs() == ipcs_before
    assert _dev_shm() == shm_before
    assert attack_sandbox.worker_pids == pids_before and all(alive(p) for p in pids_before)
    assert attack_sandbox.run("def f(x):\n    return x + 1", "f(41)").value_repr == "42"


def test_ipc_objects_do_not_outlive_the_pool() -> None:
    """The issue's measurement: a job left 128 MiB of SysV shared memory on the host, still there after
    `close()`. Now the call is refused, and the host's IPC objects are unchanged after the pool is gone."""
    before = _ipcs()
    with Sandbox(workers=1, preload=("ctypes", "os")) as sb:
        out = sb.run(SC, "sc(29, 0, 128 << 20, 0o1000 | 0o600)")
        assert out.value_repr == EPERM
    assert _ipcs() == before
