"""Warm sandbox worker: a fresh interpreter that forks one isolated child per job.

This file runs as a script (``python -s -S -P -B _worker.py CONFIG_JSON``) in a fresh interpreter started by
`populora.sandbox.pool.Sandbox`; it must import nothing outside the standard library (and nothing heavy),
because whatever it imports is inherited by every job. It owns:

- the once-per-worker isolation layers: new network, IPC, mount and PID namespaces, and a minimal root
  (`_minimal_root`: a tmpfs with only the interpreter, its standard library and shared libraries read-only,
  /dev/null, /dev/zero, /dev/urandom, a private /proc and /tmp) that the worker pivots into; with
  `hardened=False`, the earlier view (every host mount remounted read-only) instead;
- pre-importing the safe standard-library modules jobs may use (after the job drops to `nobody` it cannot
  reach the interpreter's files, so only modules already in `sys.modules` are importable);
- the per-job child: own session/process group, the worker's private size-limited tmpfs on /tmp as its
  working directory (emptied after every job), a fresh IPC namespace, rlimits, dropping to uid/gid 65534, a
  clean environment, the seccomp filter (`build_filter`), bounded stdout/stderr capture, exec of the program
  and eval of the call, and the result as JSON;
- the per-job supervision: wall-clock deadline, SIGKILL of the job's process group, reaping, and turning
  how the child ended into an outcome.

Protocol with the parent: frames of a 4-byte big-endian length and UTF-8 JSON, requests on fd 0 and replies
on fd 1 (both moved to private descriptors at start; 0-2 then point at /dev/null).
"""

import builtins
import ctypes
import errno
import importlib
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
from _seccomp import build_filter, build_no_fork_filter, install_filter, install_no_exec_filter  # noqa: E402

del sys.path[0]

# Everything the job child uses after the job's code has run is bound here, before any job exists, so a job that
# monkeypatches builtins or modules (builtins.isinstance, os.write, json.dumps, ...) cannot break the reporting
# of its own outcome. (A job that digs into this module's internals can at worst spoil its own outcome: it could
# return any value it likes anyway.) Each job is a fresh fork, so nothing it patches reaches the next job.
_repr, _len, _type, _str, _int = builtins.repr, builtins.len, builtins.type, builtins.str, builtins.int
_write, _exit, _pack, _memoryview = os.write, os._exit, struct.pack, builtins.memoryview
try:
    from _json import make_encoder as _c_make_encoder  # the C encoder: no Python-level lookups while encoding

    _C_ENCODER = _c_make_encoder(
        None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
except ImportError:  # pragma: no cover - CPython always has _json
    _C_ENCODER = None
_dumps = json.dumps


def _encode(msg: dict) -> str:
    return "".join(_C_ENCODER(msg, 0)) if _C_ENCODER is not None else _dumps(msg)


CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
_MOUNT_OPT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}

_libc = None
_HEAP_SHIFT = None
_HELPER = None  # (request fd, reply fd) to the shim that mounts for the filtered worker (see `_serve_mounts`)
_NO_FORK = None  # the evaluation profile's per-job filter (`build_no_fork_filter`), when threads are granted


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_c().unshare(flags), "unshare")


def _mount(src, target, fstype, flags, data) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_c().mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _prctl(option: int, arg: int) -> None:
    _check(_c().prctl(option, arg, 0, 0, 0), "prctl")


def _mountpoints() -> list:
    """(mount point, per-mount flags) from /proc/self/mountinfo, parents before children."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            mp = parts[4].encode().decode("unicode_escape")  # octal escapes like \040 for spaces
            flags = 0
            for opt in parts[5].split(","):
                flags |= _MOUNT_OPT_FLAGS.get(opt, 0)
            out.append((mp, flags))
    return out


def setup_isolation(cfg: dict) -> tuple:
    """Apply the once-per-worker layers; return (isolation dict, warnings).

    With `hardened` (the default) the worker pivots into a minimal root (`_minimal_root`) and every job gets
    a fresh IPC namespace and the full syscall filter; `hardened=False` keeps the earlier configuration (the
    host's file system read-only, the exec-only filter, the host's IPC namespace), for comparison."""
    hardened = cfg.get("hardened", True)
    iso = {
        "netns": False,
        "ipc_namespace": False,
        "mountns_readonly_root": False,
        "minimal_root": False,
        "private_tmp": False,
        "pidns": False,
        "private_proc": False,
        "uid_drop": False,
        "rlimits": True,
        "no_new_processes": False,
        "no_new_privs": False,
        "no_exec": False,
        "syscall_filter": False,
        "clean_env": True,
    }
    warns = []
    root = os.geteuid() == 0
    if cfg.get("isolate", True):
        try:
            _unshare(CLONE_NEWNET)
            iso["netns"] = True
        except OSError as e:
            warns.append(f"no network namespace ({e.strerror})")
        if hardened:
            # The worker's own IPC namespace (so nothing of the host's is reachable even before a job's
            # per-job namespace is made); each job then gets a fresh one (`_child`).
            try:
                _unshare(CLONE_NEWIPC)
                iso["ipc_namespace"] = True
            except OSError as e:
                warns.append(f"no IPC namespace ({e.strerror})")
        try:
            _unshare(CLONE_NEWNS)
            _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
            have_mountns = True
        except OSError as e:
            warns.append(f"no mount namespace ({e.strerror})")
            have_mountns = False
        if have_mountns and not hardened:
            _readonly_host(iso, warns)
        _enter_pid_namespace(cfg, iso, warns, have_mountns and not hardened)
        if have_mountns and hardened:
            try:
                _minimal_root(cfg, iso)
                iso["minimal_root"] = iso["mountns_readonly_root"] = True
            except OSError as e:
                warns.append(f"no minimal root ({e}); falling back to a read-only view of the host")
                _readonly_host(iso, warns)
                if iso["pidns"]:
                    _mount_proc(iso, warns, "/proc")
        if have_mountns:
            try:
                _mount_tmp(cfg, iso | {"uid_drop": root}, 32)
                iso["private_tmp"] = True
            except OSError as e:
                warns.append(f"no private /tmp ({e.strerror})")
    if root and cfg.get("isolate", True):
        iso["uid_drop"] = True  # verified per job; a failure there is reported as crashed
    # RLIMIT_NPROC is not enforced for root; it is for any other uid.
    iso["no_new_processes"] = iso["uid_drop"] or not root
    iso["no_new_privs"] = True
    return iso, warns


def _readonly_host(iso: dict, warns: list) -> None:
    """The legacy view: every mount of the host remounted read-only and nosuid in our mount namespace."""
    failed = []
    for mp, flags in _mountpoints():
        try:
            _mount(None, mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | flags, None)
        except OSError:
            failed.append(mp)
    if failed:
        warns.append("could not remount read-only: " + ", ".join(failed))
    iso["mountns_readonly_root"] = not failed  # one writable mount left is a hole


def _mount_proc(iso: dict, warns: list, target: str) -> None:
    try:  # a /proc that shows only this PID namespace's processes (read-only)
        _mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, None)
        iso["private_proc"] = True
    except OSError as e:
        warns.append(f"no private /proc ({e.strerror})")


def _root_sources(cfg: dict) -> list:
    """What the minimal root shows of the host, read-only: the interpreter binary, its standard library,
    the directories of the shared libraries it has loaded (so a lazily imported extension module finds
    its dependencies), and the evaluation profile's package folders (`import_roots`). Nested paths are
    covered by their parent."""
    paths = {os.path.realpath(sys.executable), os.path.dirname(os.path.realpath(os.__file__))}
    paths.update(cfg.get("import_roots", ()))
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
                paths.add(os.path.dirname(os.path.realpath(parts[5].strip())))
    out = []
    for p in sorted(paths):
        if not any(p == q or p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _minimal_root(cfg: dict, iso: dict) -> None:
    """Build the job's whole file system on a tmpfs and pivot into it, once per worker (as nsjail and
    bubblewrap do): read-only binds of `_root_sources()` at their usual paths, an empty read-only tmpfs over
    the interpreter's site-packages, /dev with only null, zero and urandom, a private /proc (this PID
    namespace) and an empty /tmp (the per-job tmpfs goes there). In the evaluation profile, also the
    `import_roots` package folders at their host paths, the only host files a job can read. Everything else
    of the host -- /etc, /home, the project's source, run folders, benchmark data, /dev/shm -- does not exist
    for a job."""
    new = "/tmp"  # a mount point we may cover: this mount namespace is private
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")

    def mkdirs(path: str) -> None:
        parts = path.strip("/").split("/")
        for k in range(1, len(parts) + 1):
            d = new + "/" + "/".join(parts[:k])
            if not os.path.isdir(d):
                os.mkdir(d)
                # Root-only: after its uid drop a job cannot even pass through to the interpreter's files
                # (so, as on a machine where they live under /root, it imports only what is preloaded).
                os.chmod(d, 0o700)

    def bind(src: str, flags: int) -> None:
        dst = new + src
        if os.path.isdir(src):
            mkdirs(src)
        else:
            mkdirs(os.path.dirname(src))
            open(dst, "a").close()
        _mount(src, dst, None, MS_BIND, None)
        _mount(None, dst, None, MS_REMOUNT | MS_BIND | flags | (os.statvfs(src).f_flag & 0xF), None)

    for src in _root_sources(cfg):
        bind(src, MS_RDONLY | MS_NOSUID | MS_NODEV)
    for src in cfg.get("import_roots", ()):
        # The package folders are the one part of the host a job may read (to import what the worker did
        # not preload): their parents, which hold nothing else here, become traversable (not listable).
        parent = os.path.dirname(src)
        while parent != "/":
            try:
                os.chmod(new + parent, 0o711)
            except OSError:  # a bound host folder (read-only): its own mode applies
                pass
            parent = os.path.dirname(parent)
    for host_link in ("/lib", "/lib64", "/bin"):  # merged-/usr symlinks, so library search paths resolve
        if os.path.islink(host_link):
            os.symlink(os.readlink(host_link), new + host_link)
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    if os.path.isdir(stdlib + "/site-packages"):
        _mount("tmpfs", new + stdlib + "/site-packages", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k")
    for dev in ("/dev/null", "/dev/zero", "/dev/urandom"):
        bind(dev, MS_RDONLY | MS_NOSUID | MS_NOEXEC)  # writes to a device node ignore the read-only flag
    mkdirs("/proc")
    os.chmod(new + "/dev", 0o755)
    if iso["pidns"]:
        _mount_proc(iso, [], new + "/proc")
    mkdirs("/tmp")
    os.chdir(new)
    _check(_c().syscall(_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(_c().umount2(b".", 2), "umount old root")  # MNT_DETACH: the host's tree is gone from here on
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def _enter_pid_namespace(cfg: dict, iso: dict, warns: list, have_mountns: bool) -> None:
    """Continue as PID 1 of a new PID namespace, so jobs can neither see nor signal any process outside it
    (`kill(-1, SIGKILL)` from a job reaches nothing), and so every job dies with the worker: when the
    namespace's init exits, the kernel kills everything in it. The original process stays as a small shim
    that waits for the inner worker and exits with it, and serves the worker's mount requests
    (`_serve_mounts`); the inner one dies (PDEATHSIG) if the shim is killed."""
    global _HELPER
    CLONE_NEWPID = 0x20000000
    try:
        _unshare(CLONE_NEWPID)
    except OSError as e:
        warns.append(f"no PID namespace ({e.strerror})")
        return
    shim = os.getpid()
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(cfg["fin"])
        os.close(cfg["fout"])
        os.close(req_w)
        os.close(rep_r)
        _serve_mounts(req_r, rep_w, pid)  # never returns
    os.close(req_r)
    os.close(rep_w)
    _HELPER = (req_w, rep_r)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != 0:  # in a new PID namespace our parent (outside it) shows as 0
        warns.append(f"PID namespace: unexpected parent {os.getppid()} (shim {shim})")
    iso["pidns"] = True
    if have_mountns:
        _mount_proc(iso, warns, "/proc")


def preload(names: list) -> tuple:
    ok, missing = [], []
    for name in names:
        try:
            importlib.import_module(name)
            ok.append(name)
        except Exception:
            missing.append(name)
    return ok, missing


# ----------------------------------------------------------------------------------------------- job child


class _Capture:
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


def _is_plain(v, depth: int = 0) -> bool:
    """True when v is built only from exact builtin literal types, so `values.parse_value(repr(v))` gives
    it back (a subclass, e.g. one with a lying __repr__, is not plain)."""
    if depth > 50:
        return False
    t = _type(v)
    if t in _PLAIN_SCALARS:
        return True
    if t in _PLAIN_CONTAINERS:
        for x in v:
            if not _is_plain(x, depth + 1):
                return False
        return True
    if t is _DICT:
        for k, x in _DICT.items(v):
            if not (_is_plain(k, depth + 1) and _is_plain(x, depth + 1)):
                return False
        return True
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


def _child(job: dict, wfd: int, cfg: dict, iso: dict) -> None:
    """Runs in the forked job process; never returns.

    Kept lean on purpose: every Python object this touches costs a copy-on-write page fault per job, which is
    most of a job's cost. The environment, signal dispositions, /tmp and the file limits are set up once in
    the worker instead (see `setup_isolation` and `_prepare`)."""
    status, value_repr, error_type, message, plain = "crashed", None, None, None, False
    out = _Capture(job["max_stdout_chars"])
    try:
        os.setsid()  # own session and process group, so the worker can kill the whole group
        lim = job["limits"]
        program = job["program"]
        if "import" in program:  # while we can still read the stdlib (see LAZY_MODULES in pool.py)
            for name in cfg["lazy"]:
                if name in program and name not in sys.modules:
                    try:
                        importlib.import_module(name)
                    except ImportError:
                        pass
        workdir = job["workdir"]
        os.chdir(workdir)
        devnull = cfg["devnull"]
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
        cpu = lim["cpu_s_int"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        _limit(resource.RLIMIT_AS, lim["memory_mb"] << 20)
        if iso["ipc_namespace"]:
            # A fresh IPC namespace per job (needs root, so before the uid drop): nothing one job could leave
            # in SysV/POSIX IPC reaches a later job or the host, even if the syscall filter missed a route.
            _unshare(CLONE_NEWIPC)
        # The file limits are set here, not once in the worker: a container may deny even root raising a
        # hard limit again, so a worker that lowered them for one job could not serve a later, larger one.
        _limit(resource.RLIMIT_FSIZE, int(lim["file_mb"] * 1048576))
        _limit(resource.RLIMIT_NOFILE, int(lim["nofile"]))
        if iso["uid_drop"]:
            # RLIMIT_NPROC=0 and no-new-privs are already set on the worker (root forks are exempt from
            # NPROC); NPROC being exceeded at the uid change below makes the kernel refuse execve too
            # (EAGAIN), not only fork/clone (threads count as processes).
            gid, uid = cfg["gid"], cfg["uid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        elif iso["no_new_processes"] and _NO_FORK is None:
            _limit(resource.RLIMIT_NPROC, 0)
        if _NO_FORK is not None and not install_filter(_NO_FORK):
            # Threads are granted, so RLIMIT_NPROC is above 0: without this filter a job could fork.
            raise OSError(errno.EPERM, "cannot install the no-fork syscall filter")
        if not iso[
            "pidns"
        ]:  # with a PID namespace the kernel kills every job when the worker (its init) dies
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
        if workdir != "/tmp":  # the fallback per-job directory (the worker's environ says /tmp)
            os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    except BaseException as e:  # a setup failure must never run the job with less isolation
        _send(
            wfd,
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
        code = compile(job["program"], "<program>", "exec")
        exec(code, mod.__dict__)
        value = eval(compile(job["call"], "<call>", "eval"), mod.__dict__)
        r = _repr(value)
        if _type(r) is not _str:
            raise TypeError("__repr__ returned non-string")
        if _len(r) > max_chars:
            status, error_type = "output_limit", "OutputLimit"
            message = (
                f"repr of the value has {_len(r)} characters > max_output_chars={lim['max_output_chars']}"
            )
        else:
            status, value_repr, plain = "ok", r, _is_plain(value)
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
        _send(wfd, msg)
    except BaseException:
        _exit(71)
    _exit(0)


def _send(fd: int, msg: dict) -> None:
    data = _encode(msg).encode("ascii")
    view = _memoryview(_pack(">I", _len(data)) + data)
    while view:
        n = _write(fd, view)
        view = view[n:]


# ------------------------------------------------------------------------------------------- supervision


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _wait_exit(pid: int, deadline: float) -> bool:
    """Wait until child `pid` has exited (without reaping it) or the deadline passes; True if it exited."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], remaining)
            else:
                time.sleep(min(remaining, 0.002))
    finally:
        if fd is not None:
            os.close(fd)


def _prepare(job: dict, cfg: dict, iso: dict) -> None:
    """Worker-side per-job preparation: integer limits and the job directory."""
    lim = job["limits"]
    lim["cpu_s_int"] = max(1, int(math.ceil(float(lim["cpu_s"]))))
    lim["memory_mb"] = int(lim["memory_mb"])
    job.setdefault("max_stdout_chars", 2000)
    if iso["private_tmp"]:
        if cfg.get("tmp_mb") != int(lim["tmp_mb"]):
            _tmp_op(cfg, iso, b"R", int(lim["tmp_mb"]))
        job["workdir"] = "/tmp"
    else:
        import tempfile

        workdir = tempfile.mkdtemp(prefix="populora-job-")
        if iso["uid_drop"]:
            os.chown(workdir, cfg["uid"], cfg["gid"])
        job["workdir"] = workdir


def _mount_tmp(cfg: dict, iso: dict, size_mb: int, remount: bool = False) -> None:
    """The worker's private /tmp: a size- and inode-limited tmpfs owned by the job uid, the only writable place
    a job sees; it is emptied after every job (`_clean_tmp`)."""
    uid = cfg["uid"] if iso["uid_drop"] else os.getuid()
    gid = cfg["gid"] if iso["uid_drop"] else os.getgid()
    flags = MS_NOSUID | MS_NODEV | (MS_REMOUNT if remount else 0)
    _mount("tmpfs", "/tmp", "tmpfs", flags, f"size={size_mb}m,nr_inodes=4096,mode=0700,uid={uid},gid={gid}")
    cfg["tmp_mb"] = size_mb


def _clean_tmp(cfg: dict, iso: dict) -> None:
    """Empty /tmp after a job (which is dead and reaped), and reset its owner and mode; if anything resists,
    replace the whole tmpfs with a fresh one."""
    try:
        for name in os.listdir("/tmp"):
            path = "/tmp/" + name
            if os.path.isdir(path) and not os.path.islink(path):
                import shutil

                shutil.rmtree(path)
            else:
                os.unlink(path)
        st = os.lstat("/tmp")
        uid = cfg["uid"] if iso["uid_drop"] else os.getuid()
        if st.st_mode & 0o7777 != 0o700 or st.st_uid != uid:
            os.chown("/tmp", uid, cfg["gid"] if iso["uid_drop"] else os.getgid())
            os.chmod("/tmp", 0o700)
        if not os.listdir("/tmp") and not os.listxattr("/tmp"):
            return
    except OSError:
        pass
    _tmp_op(cfg, iso, b"F", cfg["tmp_mb"])


def _tmp_op(cfg: dict, iso: dict, op: bytes, size_mb: int) -> None:
    """Resize /tmp (op R) or replace it with a fresh tmpfs (op F). Under the full syscall filter the worker
    itself cannot mount: the shim does it (`_serve_mounts`), in the same mount namespace."""
    if _HELPER is None or not iso.get("syscall_filter"):
        if op == b"F":
            _check(_c().umount2(b"/tmp", 2), "umount /tmp")  # MNT_DETACH
        _mount_tmp(cfg, iso, size_mb, remount=op == b"R")
        return
    uid = cfg["uid"] if iso["uid_drop"] else os.getuid()
    gid = cfg["gid"] if iso["uid_drop"] else os.getgid()
    os.write(_HELPER[0], b"%s %d %d %d\n" % (op, size_mb, uid, gid))
    reply = os.read(_HELPER[1], 256)
    if reply != b"ok":
        raise OSError(errno.EIO, f"mount helper: {reply.decode(errors='replace') or 'gone'}")
    cfg["tmp_mb"] = size_mb


def _serve_mounts(req_r: int, rep_w: int, worker: int) -> None:
    """The shim's loop (outside the PID namespace, so no job can see or signal it; root, in the worker's
    mount namespace, without the syscall filter): resize or replace the worker's /tmp on request -- rare, for
    a job with another `tmp_mb` or a /tmp that cannot be emptied -- so that neither the worker nor any job
    needs `mount`. Exits with the worker's status when the worker exits."""
    pidfd = os.pidfd_open(worker)
    buf, fds = b"", [req_r, pidfd]
    while True:
        try:
            ready, _, _ = select.select(fds, [], [])
        except InterruptedError:
            continue
        if pidfd in ready:
            _, status = os.waitpid(worker, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0x7F if os.WIFEXITED(status) else 1)
        chunk = os.read(req_r, 256)
        if not chunk:
            fds = [pidfd]
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                op, size, uid, gid = line.split()
                if op == b"F":
                    _check(_c().umount2(b"/tmp", 2), "umount /tmp")
                flags = MS_NOSUID | MS_NODEV | (MS_REMOUNT if op == b"R" else 0)
                data = f"size={int(size)}m,nr_inodes=4096,mode=0700,uid={int(uid)},gid={int(gid)}"
                _mount("tmpfs", "/tmp", "tmpfs", flags, data)
                os.write(rep_w, b"ok")
            except Exception as e:  # reported to the worker, which then gives up on this job
                os.write(rep_w, f"{type(e).__name__}: {e}".encode()[:200] or b"error")


_RESULT_FIELDS = {
    "status": str,
    "value_repr": (str, type(None)),
    "error_type": (str, type(None)),
    "error_message": (str, type(None)),
    "plain": bool,
    "stdout": str,
}


def _sanitize(result: object, job: dict) -> dict | None:
    """The child's result as the parent may trust it, or None. The job runs in the child's process, so it
    could write anything to the result pipe: only well-formed results within the limits pass."""
    if not isinstance(result, dict) or result.get("status") not in (
        "ok",
        "error",
        "memory",
        "output_limit",
        "crashed",
    ):
        return None
    clean = {}
    for key, types_ in _RESULT_FIELDS.items():
        value = result.get(key, False if key == "plain" else "" if key == "stdout" else None)
        if not isinstance(value, types_):
            return None
        clean[key] = value
    if (clean["status"] == "ok") != isinstance(clean["value_repr"], str):
        return None
    if clean["value_repr"] is not None and _len(clean["value_repr"]) > int(job["limits"]["max_output_chars"]):
        return None
    clean["stdout"] = clean["stdout"][: int(job["max_stdout_chars"])]
    for key in ("error_type", "error_message"):
        if clean[key] is not None:
            clean[key] = clean[key][:1000]
    return clean


def run_job(job: dict, cfg: dict, iso: dict) -> tuple:
    """Run one job in a forked child; return (result, pid still to reap or None)."""
    lim = job["limits"]
    _prepare(job, cfg, iso)
    workdir = None if iso["private_tmp"] else job["workdir"]
    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(cfg["fin"])
            os.close(cfg["fout"])
            if _HELPER is not None:
                os.close(_HELPER[0])
                os.close(_HELPER[1])
            _child(job, w, cfg, iso)
        finally:
            os._exit(72)
    os.close(w)
    deadline = t0 + float(lim["timeout_s"])
    cap = 4 * int(lim["max_output_chars"]) + 4 * int(job.get("max_stdout_chars", 2000)) + 65536
    buf = bytearray()
    timed_out = oversize = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:  # EOF without a whole result: let the child finish dying (it may still run)
                timed_out = not _wait_exit(pid, deadline)
                break
            buf += chunk
            if _len(buf) >= 4 and _len(buf) - 4 >= struct.unpack(">I", buf[:4])[0]:
                break  # a whole result: no need to wait for EOF
            if _len(buf) > cap:
                oversize = True
                break
    finally:
        os.close(r)
    elapsed = time.monotonic() - t0
    try:
        os.killpg(pid, signal.SIGKILL)  # the whole group, before reaping (the pgid cannot be reused yet)
    except OSError:
        pass
    result = None
    if not oversize and _len(buf) >= 4:
        n = struct.unpack(">I", buf[:4])[0]
        if _len(buf) - 4 >= n:
            try:
                result = _sanitize(json.loads(bytes(buf[4 : 4 + n]).decode("utf-8", "surrogatepass")), job)
            except (ValueError, RecursionError, MemoryError):  # a forged frame: bad JSON, deep nesting, huge
                result = None
            if result is None:  # a whole frame, but not one our child code writes: the job forged it
                result = {
                    "status": "crashed",
                    "value_repr": None,
                    "error_type": "BadResult",
                    "plain": False,
                    "error_message": "the job wrote a malformed result",
                    "stdout": "",
                }
    if result is not None and workdir is None:
        # The job is dead (SIGKILLed above) and its result is in: reply first and reap afterwards, so the
        # kernel's teardown of its mount namespace overlaps with the parent's round trip.
        result["elapsed_s"] = elapsed
        return result, pid
    _, wstatus = os.waitpid(pid, 0)
    if workdir is not None:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    if result is None:
        if timed_out:
            result = {
                "status": "timeout",
                "error_type": "Timeout",
                "error_message": f"wall-clock limit of {lim['timeout_s']} s exceeded",
            }
        elif (
            os.WIFSIGNALED(wstatus)
            and os.WTERMSIG(wstatus) in (signal.SIGXCPU, signal.SIGKILL)
            and elapsed >= min(float(lim["cpu_s"]), float(lim["timeout_s"])) * 0.9
        ):
            result = {
                "status": "timeout",
                "error_type": "Timeout",
                "error_message": f"CPU limit of {lim['cpu_s']} s exceeded",
            }
        elif os.WIFSIGNALED(wstatus):
            sig = _signame(os.WTERMSIG(wstatus))
            result = {"status": "crashed", "error_type": sig, "error_message": f"job killed by {sig}"}
        else:
            code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else -1
            result = {
                "status": "crashed",
                "error_type": "Exit",
                "error_message": f"job exited with code {code} without a result",
            }
    result["elapsed_s"] = elapsed
    return result, None


def _warm_up() -> None:
    """Run the job path once in the worker itself. compile() builds the ~120 AST node types on first use, and
    the type caches fill on first use: done here once, they are inherited by every job, instead of being
    rebuilt (and their pages copied) in each child -- this halves the cost of a trivial job."""
    import ast  # noqa: F401  (initialises the AST types for compile())

    mod = types.ModuleType("__warm_up__")
    exec(
        compile(
            "def f(x, *a, **k):\n    return [x, {'a': (x, 1.5, None, True)}, {1}, 'é']\n", "<program>", "exec"
        ),
        mod.__dict__,
    )
    value = eval(compile("f(1, b=2)", "<call>", "eval"), mod.__dict__)
    cap = _Capture(10)
    cap.write("warm")
    _encode(
        {
            "status": "ok",
            "value_repr": _repr(value),
            "error_type": None,
            "error_message": None,
            "plain": _is_plain(value),
            "stdout": cap.text(),
            "elapsed_s": 0.0,
        }
    )


def _read_exact(fd: int, n: int) -> bytes:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= _len(chunk)
    return b"".join(parts)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a worker stops
    fin, fout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    cfg["fin"], cfg["fout"], cfg["devnull"] = fin, fout, devnull  # jobs dup devnull onto 0-2
    cfg.setdefault("lazy", [])
    for folder in dict.fromkeys(os.path.dirname(r) for r in cfg.get("import_roots", ())):
        sys.path.append(folder)  # in the minimal root this folder holds only the bound package folders
    ok, missing = preload(cfg.get("preload", []))
    if cfg.get("heap_shift"):
        # The determinism check's second-pass workers: on top of the kernel's ASLR (which may be off), move
        # where later objects land by a random amount, so id()-dependent output differs from pass 1.
        global _HEAP_SHIFT
        _HEAP_SHIFT = [bytearray(16 * (1 + b)) for b in os.urandom(64)]
    _warm_up()
    iso, warns = setup_isolation(cfg)
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
        # Installed once here and inherited by every job: attaching a filter per job would cost ~0.2 ms of
        # CPU each. The worker's own mounts after this point go through the shim (`_serve_mounts`); without
        # a PID namespace there is no shim, and the worker keeps the exec-only filter.
        full = _HELPER is not None or not iso["private_tmp"]
        iso["no_exec"] = iso["syscall_filter"] = install_filter(build_filter(full=full))
        if not full:
            iso["syscall_filter"] = False
        if not iso["syscall_filter"]:
            warns.append("no seccomp syscall filter (execve is then blocked only by RLIMIT_NPROC)")
    threads = 0
    if cfg.get("threads") and cfg.get("isolate", True) and iso["no_exec"]:
        # The evaluation profile: threads, but still no new process. Stacked per job (the worker itself must
        # fork), so it costs each job of this profile one filter attach.
        global _NO_FORK
        _NO_FORK = build_no_fork_filter()
        threads = int(cfg["threads"]) if _NO_FORK is not None else 0
    if cfg.get("threads") and not threads:
        warns.append("threads not granted: the no-fork syscall filter is unavailable (RLIMIT_NPROC stays 0)")
    if iso["uid_drop"]:
        # Inherited by jobs; root's own forks are exempt. The count is per uid: with threads granted it caps
        # the threads of all jobs running at once, while the no-fork filter refuses new processes.
        resource.setrlimit(resource.RLIMIT_NPROC, (threads, threads))
    if ("threading" in sys.modules or "random" in sys.modules) and not cfg.get("import_roots"):
        warns.append("threading/random are preloaded: their at-fork hooks make every job slower")
    _send(
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
    while True:
        try:
            (n,) = struct.unpack(">I", _read_exact(fin, 4))
            job = json.loads(_read_exact(fin, n))
        except EOFError:
            break
        reap = None
        try:
            result, reap = run_job(job, cfg, iso)
            # A job whose own setup failed (in the child, before any job code ran) says the worker can no
            # longer start jobs as it should: report it and let the pool replace this worker.
            failed = result.get("error_type") == "SandboxSetupError"
        except Exception as e:  # the worker itself could not prepare the job (e.g. its /tmp)
            result = {
                "status": "crashed",
                "error_type": "SandboxError",
                "error_message": f"{type(e).__name__}: {e}"[:500],
                "elapsed_s": 0.0,
            }
            failed = True
        result["id"] = job["id"]
        if failed:
            result["worker_failed"] = True
        try:
            _send(fout, result)
        except OSError:
            break
        finally:
            if reap is not None:
                os.waitpid(reap, 0)
        if failed:
            break  # exit: the parent replaces this worker with a fresh one
        if iso["private_tmp"]:
            try:
                _clean_tmp(cfg, iso)  # off the critical path: the parent already has the result
            except OSError:
                break  # /tmp cannot be reset: exit, and the parent starts a fresh worker


if __name__ == "__main__":
    main()
