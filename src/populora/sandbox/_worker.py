"""The sandbox worker: a fresh interpreter that supervises jobs, each forked from a clean template.

This file runs as a script (``python -s -S -P -B _worker.py``, its configuration in the first frame on stdin,
never on its command line) in a fresh interpreter started by `populora.sandbox.pool.Sandbox`; it and its
sibling modules import nothing outside the standard library, because whatever they import is inherited by
every job. A job's life-cycle, one module each:

- `_isolation`: once per worker, the namespaces, the minimal root, the private /proc (`_libc`: the syscalls);
- `_template`: the zygote, forked once after preloading and isolating and before any request is read; every
  job is forked from it, so no job is ever a fork of a process that has seen another job;
- `_job`: the job child (reads only its own job, limits, uid drop, exec, eval, result);
- `_channel`: the wire formats (pool frames, the job's bytes, the result frame and its sanitising);
- `_cleanup`: the job's /tmp (emptied after every job, without walking the job's tree).

This module is the supervisor (PID 1 of the worker's PID namespace): it reads requests from the pool, makes
each job's two pipes and hands their child ends to the template, enforces the wall-clock deadline (SIGKILL of
the job's process group), sanitises the result and replies. It never forks a job itself: its memory holds
requests and results, and no job inherits it.

Protocol with the pool: frames of a 4-byte big-endian length and UTF-8 JSON, requests on fd 0 and replies
on fd 1 (both moved to private descriptors at start; 0-2 then point at /dev/null).
"""

import json
import math
import os
import resource
import select
import signal
import struct
import sys
import time
import types

# The sibling modules of this script (the worker runs with -P: its own directory is not on sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _socket  # noqa: E402

from _channel import SETUP_FAILED, SETUP_OK, pack_job, read_exact, sanitize, send_frame  # noqa: E402
from _cleanup import clean_tmp, prepare_tmp, remove_workdir  # noqa: E402
from _isolation import _alias_import_paths, setup_isolation  # noqa: E402
from _job import Capture, is_plain  # noqa: E402
from _libc import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, _prctl, scrub_cmdline  # noqa: E402
from _seccomp import build_filter, build_no_fork_filter, install_filter, install_no_exec_filter  # noqa: E402
from _template import _MSG, serve  # noqa: E402

del sys.path[0]


def preload(names: list) -> tuple:
    import importlib

    ok, missing = [], []
    for name in names:
        try:
            importlib.import_module(name)
            ok.append(name)
        except Exception:
            missing.append(name)
    return ok, missing


def _warm_up() -> None:
    """Run the job path once before the template is forked. compile() builds the ~120 AST node types on first
    use, and the type caches fill on first use: done here once, they are inherited by every job, instead of
    being rebuilt (and their pages copied) in each child -- this halves the cost of a trivial job."""
    import ast  # noqa: F401  (initialises the AST types for compile())

    from _channel import encode

    mod = types.ModuleType("__warm_up__")
    exec(
        compile(
            "def f(x, *a, **k):\n    return [x, {'a': (x, 1.5, None, True)}, {1}, 'é']\n", "<program>", "exec"
        ),
        mod.__dict__,
    )
    value = eval(compile("f(1, b=2)", "<call>", "eval"), mod.__dict__)
    cap = Capture(10)
    cap.write("warm")
    encode(
        {
            "status": "ok",
            "value_repr": repr(value),
            "error_type": None,
            "error_message": None,
            "plain": is_plain(value),
            "stdout": cap.text(),
            "elapsed_s": 0.0,
        }
    )


def _heap_shift() -> list:
    """Objects for a determinism-check worker (variant >= 1) to keep alive in its template, so that every
    object a job makes lands at an address of this worker's own: in every pymalloc size class (16 to 512
    bytes) a random number of blocks, up to one pool's worth (16 KiB), moves the next free block anywhere in
    its pool, and up to 64 pools of 512-byte blocks move which pools come next. On top of the kernel's ASLR
    (arena and library bases) and the worker's own hash seed, any bit of `id()` (the parity of `id(object())`
    included: the old shift, bytearrays only, never touched the 16-byte class) is then a fresh draw per
    worker. At most ~1.5 MiB, once per worker, shared copy-on-write by its jobs."""
    r = os.urandom(66)
    keep: list = [object() for _ in range(int.from_bytes(r[0:2], "big") % 1024)]  # 16-byte blocks
    keep += [float(k) for k in range(int.from_bytes(r[2:4], "big") % 512)]  # a float is 24 bytes: 32
    for k in range(3, 33):  # bytes(n) is n + 33 bytes: the 48 .. 512-byte classes
        keep += [bytes(16 * k - 33) for _ in range(int.from_bytes(r[2 * k - 2 : 2 * k], "big") % (1024 // k))]
    keep += [bytes(479) for _ in range(int.from_bytes(r[64:66], "big") % 2048)]  # 0-63 whole pools
    return keep


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class Template:
    """The supervisor's end of the template's control socket."""

    def __init__(self, sock: _socket.socket, pid: int) -> None:
        self.sock, self.pid = sock, pid

    def start(self, job_r: int, res_w: int) -> int:
        """Hand the child's two pipe ends to the template; return the job's pid."""
        self.sock.sendmsg(
            [b"J"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("=ii", job_r, res_w))]
        )
        kind, pid = self.message()
        if kind != b"P":
            raise OSError(f"template refused the job ({kind!r})")
        return pid

    def message(self, timeout: float | None = None) -> tuple | None:
        """The template's next message, or None if `timeout` passes first."""
        if timeout is not None:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not ready:
                return None
        data = b""
        while len(data) < _MSG.size:
            chunk = self.sock.recv(_MSG.size - len(data))
            if not chunk:
                raise EOFError("the template is gone")
            data += chunk
        return _MSG.unpack(data)

    def wait_status(self) -> int:
        kind, status = self.message()
        if kind != b"S":
            raise OSError(f"template protocol error ({kind!r})")
        return status


def _bad_result(why: str) -> dict:
    return {
        "status": "crashed",
        "value_repr": None,
        "error_type": "BadResult",
        "plain": False,
        "error_message": why,
        "stdout": "",
    }


def run_job(job: dict, cfg: dict, iso: dict, template: Template) -> tuple:
    """Run one job in a child of the template; return (result, whether its exit status is still to be read,
    whether the worker failed to set it up)."""
    lim = job["limits"]
    lim["cpu_s_int"] = max(1, int(math.ceil(float(lim["cpu_s"]))))
    lim["max_stdout_chars"] = int(job.get("max_stdout_chars", lim.get("max_stdout_chars", 2000)))
    workdir = prepare_tmp(cfg, iso, int(lim["tmp_mb"]))
    data = pack_job(job["program"], job["call"], lim, workdir)
    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    os.set_blocking(job_w, False)
    try:
        sent = os.write(job_w, data)  # a job under the pipe's 64 KiB goes in whole, before the child exists
    except BlockingIOError:
        sent = 0
    t0 = time.monotonic()
    try:
        pid = template.start(job_r, res_w)
    finally:
        os.close(job_r)
        os.close(res_w)
    try:
        if sent < len(data):
            os.set_blocking(job_w, True)
            view = memoryview(data)[sent:]
            while view:
                view = view[os.write(job_w, view) :]
    except BrokenPipeError:  # the child died before reading its whole job: its status says how
        pass
    finally:
        os.close(job_w)
    deadline = t0 + float(lim["timeout_s"])
    cap = 4 * int(lim["max_output_chars"]) + 4 * lim["max_stdout_chars"] + 65536
    buf = bytearray()
    timed_out = oversize = False
    status = None  # the child's wait status, once the template has reaped it
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([res_r], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(res_r, 1 << 16)
            if not chunk:  # EOF without a whole result: wait for the child's exit (it may still run)
                msg = template.message(deadline - time.monotonic())
                timed_out = msg is None
                if msg is not None:
                    status = msg[1]
                break
            buf += chunk
            if len(buf) >= 5 and len(buf) - 5 >= struct.unpack(">I", buf[1:5])[0]:
                break  # a whole result: no need to wait for EOF
            if len(buf) > cap:
                oversize = True
                break
    finally:
        os.close(res_r)
    elapsed = time.monotonic() - t0
    if status is None:
        try:
            os.killpg(pid, signal.SIGKILL)  # the whole group (only the template's forks can reuse the pid)
        except OSError:
            pass
    setup, buf = bytes(buf[:1]), buf[1:]
    result = None
    if setup == SETUP_FAILED:  # written by our child code before any job code ran: the job cannot forge it
        if status is None:
            status = template.wait_status()
        return (
            {
                "status": "crashed",
                "error_type": "SandboxSetupError",
                "elapsed_s": 0.0,
                "error_message": _setup_error(buf),
            },
            False,
            True,
        )
    if setup == SETUP_OK and not oversize and len(buf) >= 4:
        n = struct.unpack(">I", buf[:4])[0]
        if len(buf) - 4 >= n:
            try:
                result = sanitize(json.loads(bytes(buf[4 : 4 + n]).decode("utf-8", "surrogatepass")), lim)
            except (ValueError, RecursionError, MemoryError):  # a forged frame: bad JSON, deep nesting, huge
                result = None
            if result is None:  # a whole frame, but not one our child code writes: the job forged it
                result = _bad_result("the job wrote a malformed result")
    if result is not None and workdir == "/tmp" and status is None:
        # The job is dead (SIGKILLed above) and its result is in: reply first and read its exit afterwards,
        # so the kernel's teardown of the job overlaps with the pool's round trip.
        result["elapsed_s"] = elapsed
        return result, True, False
    if status is None:
        status = template.wait_status()
    if workdir != "/tmp":
        remove_workdir(workdir)
    if result is None:
        result = _from_status(status, timed_out, elapsed, lim)
    result["elapsed_s"] = elapsed
    return result, False, False


def _setup_error(buf: bytearray) -> str:
    try:
        n = struct.unpack(">I", buf[:4])[0]
        return str(json.loads(bytes(buf[4 : 4 + n]))["error_message"])[:500]
    except Exception:
        return "the job's setup failed"


def _from_status(wstatus: int, timed_out: bool, elapsed: float, lim: dict) -> dict:
    """The outcome of a job that left no result, from how its process ended."""
    if timed_out:
        return {
            "status": "timeout",
            "error_type": "Timeout",
            "error_message": f"wall-clock limit of {lim['timeout_s']} s exceeded",
        }
    if (
        os.WIFSIGNALED(wstatus)
        and os.WTERMSIG(wstatus) in (signal.SIGXCPU, signal.SIGKILL)
        and elapsed >= min(float(lim["cpu_s"]), float(lim["timeout_s"])) * 0.9
    ):
        return {
            "status": "timeout",
            "error_type": "Timeout",
            "error_message": f"CPU limit of {lim['cpu_s']} s exceeded",
        }
    if os.WIFSIGNALED(wstatus):
        sig = _signame(os.WTERMSIG(wstatus))
        return {"status": "crashed", "error_type": sig, "error_message": f"job killed by {sig}"}
    code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else -1
    return {
        "status": "crashed",
        "error_type": "Exit",
        "error_message": f"job exited with code {code} without a result",
    }


def _fork_template(cfg: dict, iso: dict) -> Template:
    """Fork the template now, before any request exists in this process."""
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            for fd in (cfg["fin"], cfg["fout"], *cfg.get("helper", ())):
                os.close(fd)  # the pool's pipes and the shim's: nothing of the supervisor's channels
            cfg.pop("helper", None)
            if not iso["pidns"]:  # without a PID namespace, die with the supervisor explicitly
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            serve(theirs.detach(), cfg, iso)
        finally:
            os._exit(75)
    theirs.close()
    return Template(ours, pid)


def _read_config(fin: int) -> dict:
    (n,) = struct.unpack(">I", read_exact(fin, 4))
    return json.loads(read_exact(fin, n))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when a worker stops
    fin, fout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    # The configuration comes on a pipe, not argv: /proc/<pid>/cmdline shows none. A pool that went away before
    # writing it (Ctrl-C while the sandbox starts) ends the worker quietly, without a traceback on the console.
    try:
        cfg = _read_config(fin)
    except EOFError:
        os._exit(0)
    cfg["fin"], cfg["fout"], cfg["devnull"] = fin, fout, devnull  # jobs dup devnull onto 0-2
    cfg.setdefault("lazy", [])
    for folder in dict.fromkeys(os.path.dirname(r) for r in cfg.get("import_roots", ())):
        sys.path.append(folder)  # in the minimal root this folder holds only the bound package folders
    ok, missing = preload(cfg.get("preload", []))
    # The determinism check's workers (variant >= 1): made before the template is forked, so every job
    # forked from it inherits the shift.
    heap_shift = _heap_shift() if cfg.get("heap_shift") else None
    _warm_up()
    iso, warns = setup_isolation(cfg)
    if iso.get("minimal_root"):
        _alias_import_paths()
    if iso["pidns"]:
        scrub_cmdline()  # the supervisor, the template and every job; the shim outside keeps its own
    # What every job inherits, set once here rather than in each child: a clean environment (the hash seed
    # has done its work at interpreter start), no core dumps.
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"})
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # inherited by every job; the worker itself never execs
    if cfg.get("isolate", True) and not cfg.get("hardened", True):
        iso["no_exec"] = install_no_exec_filter()  # inherited by every job, like no-new-privs
        if not iso["no_exec"]:
            warns.append("no seccomp exec filter (execve is then blocked only by RLIMIT_NPROC)")
    elif cfg.get("isolate", True):
        # Installed once here and inherited by the template and every job: attaching a filter per job would
        # cost ~0.2 ms of CPU each. The supervisor's own mounts after this point go through the shim
        # (`_cleanup.serve_mounts`); without a PID namespace there is no shim, and the exec-only filter.
        full = cfg.get("helper") is not None or not iso["private_tmp"]
        iso["no_exec"] = iso["syscall_filter"] = install_filter(build_filter(full=full))
        if not full:
            iso["syscall_filter"] = False
        if not iso["syscall_filter"]:
            warns.append("no seccomp syscall filter (execve is then blocked only by RLIMIT_NPROC)")
    threads = 0
    if cfg.get("threads") and cfg.get("isolate", True) and iso["no_exec"]:
        # The evaluation profile: threads, but still no new process. Stacked per job (the template must
        # fork), so it costs each job of this profile one filter attach.
        cfg["no_fork"] = build_no_fork_filter()
        threads = int(cfg["threads"]) if cfg["no_fork"] is not None else 0
    if cfg.get("threads") and not threads:
        warns.append("threads not granted: the no-fork syscall filter is unavailable (RLIMIT_NPROC stays 0)")
    if iso["uid_drop"]:
        # Inherited by jobs; root's own forks are exempt. The count is per uid: with threads granted it caps
        # the threads of all jobs running at once, while the no-fork filter refuses new processes.
        resource.setrlimit(resource.RLIMIT_NPROC, (threads, threads))
    if ("threading" in sys.modules or "random" in sys.modules) and not cfg.get("import_roots"):
        warns.append("threading/random are preloaded: their at-fork hooks make every job slower")
    template = _fork_template(cfg, iso)
    del heap_shift  # the template holds it; the supervisor has no use for it
    send_frame(
        fout,
        {
            "ready": True,
            "pid": os.getpid(),
            "isolation": iso,
            "warnings": warns,
            "preloaded": ok,
            "missing": missing,
            "grants": {"threads": threads, "import_roots": list(cfg.get("import_roots", ()))},
        },
    )
    _serve(cfg, iso, template)


def _serve(cfg: dict, iso: dict, template: Template) -> None:
    """The request loop: one job at a time, each in a fresh child of the template."""
    fin, fout = cfg["fin"], cfg["fout"]
    while True:
        try:
            (n,) = struct.unpack(">I", read_exact(fin, 4))
            job = json.loads(read_exact(fin, n))
        except EOFError:
            break
        pending = False
        try:
            result, pending, failed = run_job(job, cfg, iso, template)
        except Exception as e:  # the supervisor itself could not start the job (its /tmp, the template)
            result = {
                "status": "crashed",
                "error_type": "SandboxError",
                "error_message": f"{type(e).__name__}: {e}"[:500],
                "elapsed_s": 0.0,
            }
            failed = True
        result["id"] = job["id"]
        if failed:
            # Only the supervisor's own channels say so (the setup byte, an exception here), never anything a
            # job wrote: the pool replaces this worker and retries the job on a fresh one.
            result["worker_failed"] = True
        try:
            send_frame(fout, result)
            if pending:
                template.wait_status()  # the job is reaped: its /tmp can be emptied
        except (OSError, EOFError):
            break
        if failed:
            break
        if iso["private_tmp"]:
            try:
                clean_tmp(cfg, iso)  # off the critical path: the pool already has the result
            except OSError:
                break  # /tmp cannot be reset: exit, and the pool starts a fresh worker


if __name__ == "__main__":
    main()
