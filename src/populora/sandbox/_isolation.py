"""The once-per-worker isolation layers of the sandbox worker script (standard library only).

New network, UTS, IPC, mount and PID namespaces; a minimal root (`_minimal_root`: a tmpfs with only the
interpreter, its standard library and shared libraries read-only, the worker's own /dev/null, /dev/zero,
/dev/urandom, a private /proc and /tmp) that the worker pivots into; with `hardened=False`, the earlier view
(every host mount remounted read-only) instead. The private /proc is mounted with `hidepid=2` (a job, running as
`nobody`, sees no process but its own: not the supervisor's or the template's command line, environment or
mounts) and the host-wide files a job has no use for (`MASKED_PROC`: kernel command line, boot id, load
average, uptime, CPU and memory counters, pressure, the lock table) are covered by the worker's /dev/null or an
empty directory. Everything here runs before the template is forked, so every job inherits it for free.
"""

import errno
import importlib
import os
import signal
import stat
import sys

from _cleanup import mount_tmp, serve_mounts
from _libc import (
    _PIVOT_ROOT,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    PR_SET_PDEATHSIG,
    _c,
    _check,
    _mount,
    _mountpoints,
    _prctl,
    _unshare,
)

CLONE_NEWUTS = 0x04000000
#: Host-wide /proc files covered by /dev/null for jobs (directories: by an empty read-only tmpfs): they say
#: nothing a pure function needs and identify or describe the host, its other tenants' load, or the other
#: workers' jobs (issue 50: `stat` has the boot time and the host's fork counter, by which one job counted
#: another worker's jobs; `pressure/*` and `meminfo` move with their load; `locks` lists every file lock).
MASKED_PROC = (
    "cmdline",
    "loadavg",
    "uptime",
    "sys/kernel/random/boot_id",
    "stat",
    "meminfo",
    "pressure",
    "locks",
)
#: The device nodes of the minimal root: (name, major, minor). Each worker makes its own (`mknod` on a tmpfs of
#: its own), so no two workers share an inode a job could `flock` to pass bits to another (issue 50: the host's
#: /dev/null, bound into every worker, was such an inode).
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("urandom", 1, 9))


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
        "proc_hidden": False,
        "uts_namespace": False,
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
        try:  # the host's name is not the job's business either
            _unshare(CLONE_NEWUTS)
            _sethostname(b"sandbox")
            iso["uts_namespace"] = True
        except OSError as e:
            warns.append(f"no UTS namespace ({e.strerror})")
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
                mount_tmp(cfg, iso | {"uid_drop": root}, 32)
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


def _mount_proc(iso: dict, warns: list, target: str, null: str = "/dev/null") -> None:
    """A /proc that shows only this PID namespace's processes (read-only), and of those only the job's own
    to the job: `hidepid=2` hides the processes of other uids (the supervisor and template are root) from a
    job running as `nobody`. Host-wide files (`MASKED_PROC`) are covered by `null` (the worker's own
    /dev/null in the minimal root, so the masks share no inode with another worker), directories by an
    empty read-only tmpfs; a name this kernel does not have needs no mask."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY
    hidden = False
    try:
        try:
            _mount("proc", target, "proc", flags, "hidepid=2")
            hidden = True
        except OSError:  # a kernel without per-mount options: the plain private /proc
            _mount("proc", target, "proc", flags, None)
        iso["private_proc"] = True
    except OSError as e:
        warns.append(f"no private /proc ({e.strerror})")
        return
    masked = 0
    for name in MASKED_PROC:
        path = f"{target}/{name}"
        try:
            if os.path.isdir(path):
                _mount(
                    "tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555"
                )
            elif os.path.exists(path):
                _mount(null, path, None, MS_BIND, None)
                _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, None)
            masked += 1
        except OSError as e:
            warns.append(f"/proc/{name} not masked ({e.strerror})")
    iso["proc_hidden"] = hidden and masked == len(MASKED_PROC)


def _sethostname(name: bytes) -> None:
    _check(_c().sethostname(name, len(name)), "sethostname")


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


# Where the new root is assembled: a directory the worker's private mount namespace may cover with a tmpfs.
# It must not hold any bind source (a checkout or virtual environment under /tmp, say), or covering it would
# hide that source before it is bound.
_STAGING_CANDIDATES = ("/mnt", "/media", "/srv", "/tmp", "/var/tmp", "/opt", "/home", "/run")


# A host path under /tmp cannot keep its place in the minimal root: the job's private /tmp is mounted there
# and would cover it (a checkout or virtual environment under /tmp, whose numpy the evaluation profile binds).
# Such paths are bound under this prefix instead, and the worker's import paths are rewritten to match.
_JOB_TMP = "/tmp"
_ALIAS = "/.populora-host"


def _in_root(path: str) -> str:
    """Where a host path is bound inside the minimal root."""
    return _ALIAS + path if path == _JOB_TMP or path.startswith(_JOB_TMP + "/") else path


def _alias_import_paths() -> None:
    """After the pivot: point sys.path and every loaded package's search path at the aliased binds, so
    lazily imported submodules of a preloaded package (numpy.polynomial, say) are found."""
    prefix = _JOB_TMP + "/"
    sys.path[:] = [_in_root(p) if p.startswith(prefix) else p for p in sys.path]
    for mod in list(sys.modules.values()):
        paths = getattr(mod, "__path__", None)
        if isinstance(paths, list) and any(p.startswith(prefix) for p in paths):
            paths[:] = [_in_root(p) for p in paths]
            spec = getattr(mod, "__spec__", None)
            locs = getattr(spec, "submodule_search_locations", None)
            if isinstance(locs, list):
                locs[:] = [_in_root(p) for p in locs]
    importlib.invalidate_caches()


def _staging_dir(sources: list) -> str:
    for cand in _STAGING_CANDIDATES:
        if os.path.isdir(cand) and not os.path.islink(cand):
            if not any(src == cand or src.startswith(cand + "/") for src in sources):
                return cand
    raise OSError(errno.ENOENT, "no directory to build the minimal root on (all hold bind sources)")


def _minimal_root(cfg: dict, iso: dict) -> None:
    """Build the job's whole file system on a tmpfs and pivot into it, once per worker (as nsjail and
    bubblewrap do): read-only binds of `_root_sources()` at their usual paths, an empty read-only tmpfs over
    the interpreter's site-packages, /dev with only null, zero and urandom, a private /proc (this PID
    namespace) and an empty /tmp (the per-job tmpfs goes there). In the evaluation profile, also the
    `import_roots` package folders at their host paths, the only host files a job can read. Everything else
    of the host -- /etc, /home, the project's source, run folders, benchmark data, /dev/shm -- does not exist
    for a job."""
    new = _staging_dir(_root_sources(cfg))
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
        dst = new + _in_root(src)
        if os.path.isdir(src):
            mkdirs(_in_root(src))
        else:
            mkdirs(os.path.dirname(_in_root(src)))
            open(dst, "a").close()
        _mount(src, dst, None, MS_BIND, None)
        _mount(None, dst, None, MS_REMOUNT | MS_BIND | flags | (os.statvfs(src).f_flag & 0xF), None)

    for src in _root_sources(cfg):
        bind(src, MS_RDONLY | MS_NOSUID | MS_NODEV)
    for src in cfg.get("import_roots", ()):
        # The package folders are the one part of the host a job may read (to import what the worker did
        # not preload): their parents, which hold nothing else here, become traversable (not listable).
        parent = os.path.dirname(_in_root(src))
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
    _devices(new, bind)
    mkdirs("/proc")
    if iso["pidns"]:
        _mount_proc(iso, [], new + "/proc", new + "/dev/null")
    mkdirs("/tmp")
    os.chdir(new)
    _check(_c().syscall(_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check(_c().umount2(b".", 2), "umount old root")  # MNT_DETACH: the host's tree is gone from here on
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def _devices(new: str, bind) -> None:
    """/dev of the minimal root: the worker's own `DEVICES` nodes on a tmpfs of its own (read-only once made;
    writes to a device node ignore that flag, as they should for /dev/null). Where the kernel refuses `mknod`
    (no CAP_MKNOD), the host's nodes are bound instead, as before issue 50 (their inodes are then shared)."""
    dev = new + "/dev"
    os.mkdir(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,nr_inodes=16,mode=755")
    try:
        for name, major, minor in DEVICES:
            os.mknod(f"{dev}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(f"{dev}/{name}", 0o666)  # mknod's mode passes through the umask
    except OSError:
        _check(_c().umount2(dev.encode(), 2), "umount /dev")
        for name, _, _ in DEVICES:
            bind(f"/dev/{name}", MS_RDONLY | MS_NOSUID | MS_NOEXEC)
        os.chmod(dev, 0o755)
        return
    _mount(None, dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "size=4k,nr_inodes=16,mode=755")


def _enter_pid_namespace(cfg: dict, iso: dict, warns: list, have_mountns: bool) -> None:
    """Continue as PID 1 of a new PID namespace, so jobs can neither see nor signal any process outside it
    (`kill(-1, SIGKILL)` from a job reaches nothing), and so every job dies with the worker: when the
    namespace's init exits, the kernel kills everything in it. The original process stays as a small shim
    that waits for the inner worker and exits with it, and serves the worker's mount requests
    (`_cleanup.serve_mounts`); the inner one dies (PDEATHSIG) if the shim is killed."""
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
        serve_mounts(req_r, rep_w, pid)  # never returns
    os.close(req_r)
    os.close(rep_w)
    cfg["helper"] = (req_w, rep_r)  # see `_cleanup.tmp_op`
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != 0:  # in a new PID namespace our parent (outside it) shows as 0
        warns.append(f"PID namespace: unexpected parent {os.getppid()} (shim {shim})")
    iso["pidns"] = True
    if have_mountns:
        _mount_proc(iso, warns, "/proc")
