"""The job child of the sandbox worker script (standard library only): one process per job, forked from the
template, that reads only its own job, isolates itself, runs it and writes its result.

In order: cut every descriptor but its own job pipe, result pipe and a /dev/null of its own (the template's
control socket first, before any job data exists in this process); read the job (program, call, limits: nothing else);
own session and process group, the per-job working directory, a fresh IPC namespace, rlimits, the uid drop,
the evaluation profile's no-fork filter; write the setup byte (`SETUP_OK`, or `SETUP_FAILED` and why: the
supervisor then replaces its worker, and no job code can fake this, since the byte is written before it runs);
then exec the program, eval the call, bounded stdout/stderr capture, `repr` and plainness of the value, and the
result frame.

Kept lean on purpose: every Python object this touches costs a copy-on-write page fault per job, which is most
of a job's cost. The environment, signal dispositions, /tmp and the filters are set up once in the supervisor
before the template is forked.
"""

import builtins
import errno
import gc
import importlib
import os
import resource
import signal
import sys
import types

from _channel import SETUP_FAILED, SETUP_OK, send_frame, unpack_job
from _libc import CLONE_NEWIPC, PR_SET_PDEATHSIG, _prctl, _unshare
from _seccomp import install_filter

# Everything used after the job's code has run is bound here, before any job exists, so a job that
# monkeypatches builtins or modules (builtins.isinstance, os.write, ...) cannot break the reporting of its own
# outcome. (A job that digs into these internals can at worst spoil its own outcome: it could return any value
# it likes anyway.)
_repr, _len, _type, _str, _int = builtins.repr, builtins.len, builtins.type, builtins.str, builtins.int
_write, _exit = os.write, os._exit
_gc_disable, _setswitch, _getsignal, _setsignal = (
    gc.disable,
    sys.setswitchinterval,
    signal.getsignal,
    signal.signal,
)
_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


class Capture:
    """A text sink for sys.stdout/sys.stderr that keeps the first `cap` characters and drops the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts = []
        self.size = 0
        self.dropped = False

    def write(self, s) -> int:
        if _type(s) is not _str:
            raise TypeError(f"write() argument must be str, not {_type(s).__name__}")
        n = _len(s)
        room = self.cap - self.size
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.size += _len(piece)
        if n > room:
            self.dropped = True
        return n

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def text(self) -> str:
        return "".join(self.parts)


_PLAIN_SCALARS = (int, float, str, bool, type(None), bytes, complex, type(...))
_PLAIN_CONTAINERS = (list, tuple, set, frozenset)
_DICT = dict


def is_plain(v, depth: int = 0) -> bool:
    """True when v is built only from exact builtin literal types, so `values.parse_value(repr(v))` gives
    it back (a subclass, e.g. one with a lying __repr__, is not plain)."""
    if depth > 50:
        return False
    t = _type(v)
    if t in _PLAIN_SCALARS:
        return True
    if t in _PLAIN_CONTAINERS:
        for x in v:
            if not is_plain(x, depth + 1):
                return False
        return True
    if t is _DICT:
        for k, x in _DICT.items(v):
            if not (is_plain(k, depth + 1) and is_plain(x, depth + 1)):
                return False
        return True
    return False


def plain_repr_matches(value, r: str) -> bool:
    """Whether `value` is plain *and* `r` (its repr, taken earlier, when the job's own code may have run and
    changed it) is exactly its repr now. With the collector off, no Python signal handler left and no thread
    switch, a plain value's repr runs no job code, so it cannot change while it is checked: a value that
    rewrote itself during the first repr is then either not plain or its repr differs."""
    if not is_plain(value):
        return False  # a safe answer whatever the value does
    _gc_disable()  # no finalizer (__del__, weakref callback) can run during the check
    _setswitch(1e6)  # no other thread of the job runs before the job ends
    for sig in _SIGNALS:  # no Python-level signal handler runs (a pending one finds SIG_IGN)
        h = _getsignal(sig)
        if h is not None and h not in (signal.SIG_IGN, signal.SIG_DFL, signal.default_int_handler):
            _setsignal(sig, signal.SIG_IGN)
    try:
        return is_plain(value) and _repr(value) == r
    except BaseException:
        return False


def _limit(res: int, value: int) -> None:
    try:
        resource.setrlimit(res, (value, value))
    except (ValueError, OSError):
        soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY and value > hard:
            resource.setrlimit(res, (hard, hard))
        else:
            raise


def _keep_only(fds: tuple) -> None:
    """Close every descriptor but 0-2 and `fds` (the template's socket, the supervisor's pipes, anything)."""
    prev = 2
    for fd in sorted(fds):
        os.closerange(prev + 1, fd)
        prev = fd
    os.closerange(prev + 1, 1 << 20)


def run_child(job_r: int, res_w: int, cfg: dict, iso: dict) -> None:
    """The job process; never returns."""
    status, value_repr, error_type, message, plain = "crashed", None, None, None, False
    try:
        # Its own open /dev/null (the worker's node in the minimal root), not the template's: a lock a job
        # takes on an open file description that outlives it (the template's) would be seen by later jobs.
        devnull = os.open("/dev/null", os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        _keep_only((job_r, res_w))  # before any job data is read: nothing but its own pipes stays open
        os.setsid()  # own session and process group, so the supervisor can kill the whole group
        job = unpack_job(job_r)
        os.close(job_r)
        lim = job["limits"]
        out = Capture(lim["max_stdout_chars"])
        program = job["program"]
        if "import" in program:  # while we can still read the stdlib (see LAZY_MODULES in profiles.py)
            for name in cfg["lazy"]:
                if name in program and name not in sys.modules:
                    try:
                        importlib.import_module(name)
                    except ImportError:
                        pass
        workdir = job["workdir"]
        os.chdir(workdir)
        cpu = lim["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        _limit(resource.RLIMIT_AS, lim["memory_mb"] << 20)
        if iso["ipc_namespace"]:
            # A fresh IPC namespace per job (needs root, so before the uid drop): nothing one job could leave
            # in SysV/POSIX IPC reaches a later job or the host, even if the syscall filter missed a route.
            _unshare(CLONE_NEWIPC)
        # The file limits are set here, not once in the supervisor: a container may deny even root raising a
        # hard limit again, so a worker that lowered them for one job could not serve a later, larger one.
        _limit(resource.RLIMIT_FSIZE, lim["file_bytes"])
        _limit(resource.RLIMIT_NOFILE, lim["nofile"])
        no_fork = cfg.get("no_fork")
        if iso["uid_drop"]:
            # RLIMIT_NPROC=0 and no-new-privs are already set (root forks are exempt from NPROC); NPROC being
            # exceeded at the uid change below makes the kernel refuse execve too (EAGAIN), not only fork.
            gid, uid = cfg["gid"], cfg["uid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        elif iso["no_new_processes"] and no_fork is None:
            _limit(resource.RLIMIT_NPROC, 0)
        if no_fork is not None and not install_filter(no_fork):
            # Threads are granted, so RLIMIT_NPROC is above 0: without this filter a job could fork.
            raise OSError(errno.EPERM, "cannot install the no-fork syscall filter")
        if not iso["pidns"]:  # with a PID namespace the kernel kills every job when the supervisor dies
            _prctl(PR_SET_PDEATHSIG, 9)  # after the uid change, which clears it
        if workdir != "/tmp":  # the fallback per-job directory (the environment says /tmp)
            os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        _write(res_w, SETUP_OK)
    except BaseException as e:  # a setup failure must never run the job with less isolation
        _write(res_w, SETUP_FAILED)
        send_frame(
            res_w,
            {
                "status": "crashed",
                "error_type": "SandboxSetupError",
                "error_message": f"{type(e).__name__}: {e}"[:500],
            },
        )
        os._exit(70)

    try:
        max_chars = _int(lim["max_output_chars"])
        mod = types.ModuleType("__main__")
        mod.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = mod
        sys.stdout = sys.stderr = out
        sys.argv = ["<program>"]
        call = job["call"]
        code = compile(program, "<program>", "exec")
        job = program = None
        exec(code, mod.__dict__)
        value = eval(compile(call, "<call>", "eval"), mod.__dict__)
        r = _repr(value)
        if _type(r) is not _str:
            raise TypeError("__repr__ returned non-string")
        if _len(r) > max_chars:
            status, error_type = "output_limit", "OutputLimit"
            message = f"repr of the value has {_len(r)} characters > max_output_chars={max_chars}"
        else:
            status, value_repr, plain = "ok", r, plain_repr_matches(value, r)
        value = r = None
    except MemoryError:
        status, error_type = "memory", "MemoryError"
    except BaseException as e:  # SystemExit, KeyboardInterrupt and custom BaseExceptions are job errors too
        status = "error"
        try:
            error_type = _type(e).__name__[:200]
            message = f"{error_type}: {_str(e)[:500]}"
        except BaseException:
            message = error_type
    sys.stdout = sys.stderr = sys.__stderr__
    msg = {
        "status": status,
        "value_repr": value_repr,
        "error_type": error_type,
        "error_message": message,
        "plain": plain,
        "stdout": out.text(),
    }
    try:
        send_frame(res_w, msg)
    except BaseException:
        _exit(71)
    _exit(0)
