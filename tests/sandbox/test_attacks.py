"""The attack corpus: hostile programs, each with its exact expected status, and checks that the host, the
pool and later jobs are unaffected. The attack pool pre-imports os, socket, subprocess, ctypes, ... so it is
the isolation layers that stop these programs, not a failed import."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from sandbox_proc import alive, worker_children

from populora.sandbox import Limits, Sandbox


@pytest.fixture(scope="module")
def planted():
    """Files a job must not read, change or delete; a world-writable directory it must not write into."""
    base = Path(
        tempfile.mkdtemp(prefix="populora-attack-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    )
    base.chmod(0o755)
    private = base / "private.txt"
    private.write_text("TOP-SECRET")
    private.chmod(0o600)
    victim = base / "victim.txt"
    victim.write_text("precious")
    victim.chmod(0o666)
    open_dir = base / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (open_dir / "victim2.txt").write_text("precious")
    (open_dir / "victim2.txt").chmod(0o666)
    yield base
    for p in sorted(base.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() else p.rmdir()
    base.rmdir()


# (id, program, call, expected status, expected error_type or None)
CORPUS: list[tuple[str, str, str, str, str | None]] = [
    # --- runaway CPU and processes
    ("infinite_loop", "def f():\n    while True:\n        pass", "f()", "timeout", "Timeout"),
    (
        "loop_catching_everything",
        "def f():\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass",
        "f()",
        "timeout",
        "Timeout",
    ),
    (
        "ignore_sigterm_and_sleep",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\ndef f():\n    time.sleep(100)",
        "f()",
        "timeout",
        "Timeout",
    ),
    (
        "thread_spin",
        "import threading\ndef f():\n    t = threading.Thread(target=lambda: [0 for _ in iter(int, 1)])\n"
        "    t.start()\n    t.join()",
        "f()",
        "error",
        "RuntimeError",
    ),
    (
        "thread_bomb",
        "import threading\ndef f():\n    for _ in range(10000):\n"
        "        threading.Thread(target=lambda: None).start()",
        "f()",
        "error",
        "RuntimeError",
    ),
    (
        "fork_bomb",
        "import os\ndef f():\n    while True:\n        os.fork()",
        "f()",
        "error",
        "BlockingIOError",
    ),
    (
        "subprocess_run",
        "import subprocess\ndef f():\n    return subprocess.run(['id'], capture_output=True).stdout",
        "f()",
        "error",
        "BlockingIOError",
    ),
    (
        "multiprocessing",
        "import multiprocessing\ndef f():\n    p = multiprocessing.Process(target=print)\n"
        "    p.start()\n    p.join()",
        "f()",
        "error",
        "BlockingIOError",
    ),
    (
        "os_system",
        "import os\ndef f():\n    return os.system('touch /var/tmp/populora-pwned')",
        "f()",
        "ok",
        None,
    ),
    (
        "exec_shell",
        "import os\ndef f():\n    os.execv('/bin/sh', ['sh', '-c', 'echo pwned'])",
        "f()",
        "error",
        "BlockingIOError",
    ),
    # --- memory
    ("memory_bomb_string", "def f():\n    return len('x' * 10**10)", "f()", "memory", "MemoryError"),
    (
        "memory_bomb_list",
        "def f():\n    a = []\n    while True:\n        a.append([0] * 10**6)",
        "f()",
        "memory",
        "MemoryError",
    ),
    ("memory_bomb_bytearray", "def f():\n    return bytearray(2**33)", "f()", "memory", "MemoryError"),
    (
        "raise_own_memory_limit",
        "import resource\ndef f():\n    resource.setrlimit(resource.RLIMIT_AS, (2**40, 2**40))",
        "f()",
        "error",
        "ValueError",
    ),
    # --- files: outside the minimal root the host does not exist (FileNotFoundError), /root is traverse-only
    (
        "write_var_tmp",
        "def f():\n    open('/var/tmp/populora-pwned', 'w').write('x')",
        "f()",
        "error",
        "FileNotFoundError",
    ),
    (
        "write_world_writable_dir",
        "def f(d):\n    open(d + '/open/new.txt', 'w').write('x')",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    (
        "truncate_world_writable_file",
        "def f(d):\n    open(d + '/victim.txt', 'w')",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    (
        "delete_file",
        "import os\ndef f(d):\n    os.remove(d + '/open/victim2.txt')",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    (
        "rename_file",
        "import os\ndef f(d):\n    os.rename(d + '/victim.txt', d + '/open/x')",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    (
        "delete_tree",
        "import shutil\ndef f(d):\n    shutil.rmtree(d)",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    (
        "read_private_file",
        "def f(d):\n    return open(d + '/private.txt').read()",
        "f({dir!r})",
        "error",
        "FileNotFoundError",
    ),
    ("read_shadow", "def f():\n    return open('/etc/shadow').read()", "f()", "error", "FileNotFoundError"),
    (
        "read_root_home",
        "import os\ndef f():\n    return os.listdir('/root')",
        "f()",
        "error",
        "PermissionError",
    ),
    (
        "write_dev_shm",
        "def f():\n    open('/dev/shm/populora-pwned', 'w').write('x')",
        "f()",
        "error",
        "FileNotFoundError",
    ),
    (
        "write_proc_sys",
        "def f():\n    open('/proc/sys/kernel/hostname', 'w').write('pwned')",
        "f()",
        "error",
        "OSError",
    ),
    (
        "fill_tmp_disk",
        "def f():\n    i = 0\n    while True:\n        with open(f'/tmp/f{{i}}', 'wb') as fh:\n"
        "            fh.write(b'x' * 2**20)\n        i += 1",
        "f()",
        "error",
        "OSError",
    ),
    ("huge_file", "def f():\n    open('big', 'wb').write(b'x' * 64 * 2**20)", "f()", "error", "OSError"),
    (
        "write_tmp_is_private",
        "import os\ndef f():\n    open('/tmp/populora-private', 'w').write('x')\n"
        "    return os.listdir('/tmp')",
        "f()",
        "ok",
        None,
    ),
    # --- network
    (
        "connect_localhost_listener",
        "import socket\ndef f(port):\n    socket.create_connection(('127.0.0.1', port), timeout=1)",
        "f({port})",
        "error",
        "OSError",
    ),
    (
        "connect_internet",
        "import socket\ndef f():\n    socket.create_connection(('1.1.1.1', 53), timeout=1)",
        "f()",
        "error",
        "OSError",
    ),
    # Binding works, but in the job's own network namespace: nothing outside can reach it.
    (
        "bind_listen_port",
        "import socket\ndef f():\n    s = socket.socket()\n    s.bind(('0.0.0.0', 8765))\n"
        "    s.listen()\n    return s.getsockname()",
        "f()",
        "ok",
        None,
    ),
    (
        "unix_socket_to_host",
        "import socket\ndef f():\n    s = socket.socket(socket.AF_UNIX)\n"
        "    s.connect('\\0populora-test-abstract')",
        "f()",
        "error",
        "ConnectionRefusedError",
    ),
    # --- signals and privileges
    ("kill_parent", "import os\ndef f():\n    os.kill(os.getppid(), 9)", "f()", "error", "PermissionError"),
    (
        # The kernel answers kill(-1) with success when some process was tried, even if every one refused
        # (the supervisor and the template, both root): nothing is killed, the job and the pool go on.
        "kill_everything",
        "import os\ndef f():\n    os.kill(-1, 9)\n    return 'survived'",
        "f()",
        "ok",
        None,
    ),
    ("setuid_root", "import os\ndef f():\n    os.setuid(0)", "f()", "error", "PermissionError"),
    (
        "read_worker_environ",  # hidepid: the supervisor (PID 1) does not even exist for a job
        "def f():\n    return open('/proc/1/environ').read()",
        "f()",
        "error",
        "FileNotFoundError",
    ),
    (
        "mount_via_ctypes",
        "import ctypes\ndef f():\n    return ctypes.CDLL(None).mount(b'none', b'/mnt', b'tmpfs', 0, None)",
        "f()",
        "ok",
        None,
    ),
    # --- output and repr
    (
        "huge_stdout",
        "import sys, os\ndef f():\n    print('x' * 10**7)\n    os.write(1, b'y' * 10**6)\n"
        "    sys.__stdout__.write('z' * 10**6)\n    return 'done'",
        "f()",
        "ok",
        None,
    ),
    ("huge_repr", "def f():\n    return list(range(10**6))", "f()", "output_limit", "OutputLimit"),
    (
        "slow_repr",
        "class A:\n    def __repr__(self):\n        while True:\n            pass\n",
        "A()",
        "timeout",
        "Timeout",
    ),
    (
        "raising_repr",
        "class A:\n    def __repr__(self):\n        raise KeyError('no')\n",
        "A()",
        "error",
        "KeyError",
    ),
    # Recursion through a C function (the lru_cache wrapper) with the limit lifted overflows the C stack.
    (
        "c_stack_overflow",
        "import sys, functools\nsys.setrecursionlimit(10**8)\n@functools.lru_cache(None)\n"
        "def f(n):\n    return f(n + 1) + 1",
        "f(0)",
        "crashed",
        "SIGSEGV",
    ),
    ("deep_python_recursion", "def f(n):\n    return f(n + 1) + 1", "f(0)", "error", "RecursionError"),
    # --- ways out of the interpreter
    ("sys_exit", "import sys\ndef f():\n    sys.exit(0)", "f()", "error", "SystemExit"),
    ("os_exit", "import os\ndef f():\n    os._exit(0)", "f()", "crashed", "Exit"),
    (
        "base_exception",
        "class Out(BaseException):\n    pass\ndef f():\n    raise Out()",
        "f()",
        "error",
        "Out",
    ),
    ("keyboard_interrupt", "def f():\n    raise KeyboardInterrupt", "f()", "error", "KeyboardInterrupt"),
    (
        "ctypes_segfault",
        "import ctypes\ndef f():\n    return ctypes.string_at(0)",
        "f()",
        "crashed",
        "SIGSEGV",
    ),
    ("abort", "import os\ndef f():\n    os.abort()", "f()", "crashed", "SIGABRT"),
    (
        "close_fds_0_2",
        "import os\ndef f():\n    for fd in (0, 1, 2):\n        os.close(fd)\n    print('x')\n"
        "    return 'still here'",
        "f()",
        "ok",
        None,
    ),
    (
        "close_all_fds",
        "import os\ndef f():\n    os.closerange(0, 4096)\n    return 1",
        "f()",
        "crashed",
        "Exit",
    ),
    # Forging a malformed result on the job's own result pipe (found through the frames) is refused.
    (
        "forge_bad_result",
        "import sys, os, struct, json\ndef f():\n    fr = sys._getframe()\n"
        "    while 'res_w' not in fr.f_locals:\n        fr = fr.f_back\n"
        "    data = json.dumps({'status': 'ok', 'value_repr': ['x'] * 9, 'plain': 'yes'}).encode()\n"
        "    os.write(fr.f_locals['res_w'], struct.pack('>I', len(data)) + data)\n    os._exit(0)",
        "f()",
        "crashed",
        "BadResult",
    ),
]


def _format(text: str, dir: Path, port: int) -> str:
    return (
        text.replace("{dir!r}", repr(str(dir)))
        .replace("{port}", str(port))
        .replace("{{", "{")
        .replace("}}", "}")
    )


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30 and len({c[0] for c in CORPUS}) == len(CORPUS)


@pytest.fixture(scope="module")
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    # An abstract unix socket is scoped by network namespace: the job must not reach this one either.
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0populora-test-abstract")
    unix.listen()
    unix.settimeout(0.2)
    yield srv, unix
    unix.close()
    srv.close()


def test_attack_corpus(
    attack_sandbox: Sandbox, planted: Path, listener: tuple[socket.socket, socket.socket]
) -> None:
    sb = attack_sandbox
    tcp, unix = listener
    if not all(sb.isolation.values()):
        pytest.skip(f"not every isolation layer is available here: {sb.isolation}")
    pids = sb.worker_pids
    port = tcp.getsockname()[1]
    jobs = [(_format(p, planted, port), _format(c, planted, port)) for _, p, c, _, _ in CORPUS]
    # The programs expected to time out get a short limit; the rest a long one, so that a slow, loaded machine
    # cannot turn an expected MemoryError or SIGSEGV into a timeout.
    slow = [i for i, c in enumerate(CORPUS) if c[3] == "timeout"]
    rest = [i for i, c in enumerate(CORPUS) if c[3] != "timeout"]
    outs = [None] * len(CORPUS)
    for idx, lim in (
        (slow, Limits(timeout_s=1.0, memory_mb=256, tmp_mb=8, file_mb=4)),
        (rest, Limits(timeout_s=20, memory_mb=256, tmp_mb=8, file_mb=4)),
    ):
        for i, out in zip(idx, sb.run_many([jobs[i] for i in idx], limits=lim), strict=True):
            outs[i] = out
    failures = []
    for (name, _, _, status, etype), out in zip(CORPUS, outs, strict=True):
        if (out.status, out.error_type) != (status, etype):
            failures.append(f"{name}: expected {status}/{etype}, got {out}")
    assert not failures, "\n".join(failures)
    by = {c[0]: o for c, o in zip(CORPUS, outs, strict=True)}

    # The host is unaffected.
    assert (planted / "private.txt").read_text() == "TOP-SECRET"
    assert (planted / "victim.txt").read_text() == "precious"
    assert (planted / "open" / "victim2.txt").read_text() == "precious"
    assert sorted(p.name for p in (planted / "open").iterdir()) == ["victim2.txt"]
    assert not Path("/var/tmp/populora-pwned").exists() and not Path("/dev/shm/populora-pwned").exists()
    assert not Path("/tmp/populora-private").exists()
    assert stat.S_IMODE(planted.stat().st_mode) == 0o755
    for srv in (tcp, unix):
        with pytest.raises(TimeoutError):
            srv.accept()  # nothing ever connected
    # What the jobs saw.
    assert by["os_system"].value_repr != "0"  # system() could not fork; nothing ran
    assert by["mount_via_ctypes"].value_repr == "-1"
    assert by["write_tmp_is_private"].value_repr == "['populora-private']"
    assert (
        by["huge_stdout"].value_repr == "'done'"
        and len(by["huge_stdout"].stdout) <= Limits().max_stdout_chars
    )
    assert by["close_fds_0_2"].value_repr == "'still here'"
    assert by["infinite_loop"].elapsed_s < 1.0 + 2.0

    # The pool is unaffected: same workers, no job left running, later jobs see a clean world.
    assert sb.worker_pids == pids and all(alive(p) for p in pids)
    after = sb.run_many([("import os\n", "sorted(os.listdir('.')) + sorted(os.listdir('/tmp'))")] * 4)
    assert [o.value_repr for o in after] == ["[]"] * 4


def test_monkeypatching_does_not_reach_later_jobs(attack_sandbox: Sandbox) -> None:
    poison = (
        "import builtins, math, json, sys\nbuiltins.len = lambda x: 42\nbuiltins.print = None\n"
        "math.pi = 3\njson.dumps = lambda *a, **k: 'forged'\nsys.modules['re'] = None\n"
        "sorted.__class__  # builtins types themselves are immutable\n",
        "len([1])",
    )
    check = ("import math, re\n", "(len([1]), math.pi, re.sub('a', 'b', 'aa'))")
    outs = attack_sandbox.run_many([poison, check, poison, check, check])
    assert outs[0].value_repr == "42"
    assert [o.value_repr for o in outs[1::2] + [outs[4]]] == ["(1, 3.141592653589793, 'bb')"] * 3


def test_environment_is_clean_even_with_secrets_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPULORA_TEST_SECRET", "hunter2")
    with Sandbox(workers=1) as sb:
        out = sb.run("import os\n", "dict(os.environ)")
    assert "hunter2" not in out.value_repr and "POPULORA_TEST_SECRET" not in out.value_repr


def test_timed_out_job_leaves_no_process(attack_sandbox: Sandbox) -> None:
    outs = attack_sandbox.run_many([("import time\n", "time.sleep(30)")] * 2, limits=Limits(timeout_s=0.3))
    assert [o.status for o in outs] == ["timeout", "timeout"], outs
    for pid in attack_sandbox.worker_pids:
        # shim -> supervisor (PID 1 of its namespace) -> template; no job process is left under the template
        for supervisor in worker_children(pid):
            templates = worker_children(supervisor)
            assert len(templates) <= 1 and all(worker_children(t) == [] for t in templates)


def test_job_directory_is_fresh_for_every_job(attack_sandbox: Sandbox) -> None:
    poison = (
        "import os\nos.makedirs('/tmp/a/b/c')\nopen('/tmp/a/b/c/f', 'w').write('x')\nos.symlink('/etc', 'l')\n"
        "os.mkfifo('p')\nos.chmod('/tmp/a', 0)\nos.setxattr('/tmp', 'user.mark', b'1')\nos.chmod('/tmp', 0o500)\n",
        "sorted(os.listdir('/tmp'))",
    )
    check = (
        "import os, stat\n",
        "(os.listdir('/tmp'), oct(stat.S_IMODE(os.stat('/tmp').st_mode)), "
        "os.listxattr('/tmp'), open('/tmp/new', 'w').write('ok'))",
    )
    outs = attack_sandbox.run_many([poison, poison, check, check, check, check])
    assert [o.value_repr for o in outs[:2]] == ["['a', 'l', 'p']"] * 2, outs[:2]
    assert [o.value_repr for o in outs[2:]] == ["([], '0o700', [], 2)"] * 4
