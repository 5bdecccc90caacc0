"""The job's /tmp in the sandbox worker script (standard library only): mounting it, emptying it between jobs,
and the PID-namespace shim's mount service.

/tmp is a size- and inode-limited tmpfs owned by the job uid, the only writable place a job sees. After every
job (dead and reaped) the supervisor empties it without recursion: plain files are unlinked, and if the job
left any directory (possibly thousands deep, or made unremovable) the whole tmpfs is replaced by a fresh one
instead of walked, so no shape of tree can crash or slow the cleaner. Under the full syscall filter the
supervisor cannot mount: the shim does it (`serve_mounts`), in the same mount namespace, outside the PID
namespace where no job can see or signal it.
"""

import errno
import os
import select

from _libc import MS_NODEV, MS_NOSUID, MS_REMOUNT, _c, _check, _mount


def _owner(cfg: dict, iso: dict) -> tuple:
    return (cfg["uid"], cfg["gid"]) if iso["uid_drop"] else (os.getuid(), os.getgid())


def mount_tmp(cfg: dict, iso: dict, size_mb: int, remount: bool = False) -> None:
    """Mount (or resize) the worker's private /tmp."""
    uid, gid = _owner(cfg, iso)
    flags = MS_NOSUID | MS_NODEV | (MS_REMOUNT if remount else 0)
    _mount("tmpfs", "/tmp", "tmpfs", flags, f"size={size_mb}m,nr_inodes=4096,mode=0700,uid={uid},gid={gid}")
    cfg["tmp_mb"] = size_mb


def prepare_tmp(cfg: dict, iso: dict, tmp_mb: int) -> str:
    """The job's working directory: /tmp resized to the job's `tmp_mb`, or without a private /tmp a fresh
    directory of its own (removed by `remove_workdir`)."""
    if iso["private_tmp"]:
        if cfg.get("tmp_mb") != tmp_mb:
            tmp_op(cfg, iso, b"R", tmp_mb)
        return "/tmp"
    import tempfile

    workdir = tempfile.mkdtemp(prefix="populora-job-")
    if iso["uid_drop"]:
        os.chown(workdir, cfg["uid"], cfg["gid"])
    return workdir


def remove_workdir(workdir: str) -> None:
    """The fallback per-job directory (no namespaces): removed after the job, however deep its tree."""
    import shutil

    try:
        shutil.rmtree(workdir, ignore_errors=True)
    except RecursionError:  # a tree deeper than the interpreter's recursion limit: left behind, not fatal
        pass


def clean_tmp(cfg: dict, iso: dict) -> None:
    """Empty /tmp after a job and reset its owner and mode. Files are unlinked; any directory, or anything
    that resists, makes the whole tmpfs be replaced with a fresh one (no walk of a tree the job shaped)."""
    fresh = False
    try:
        with os.scandir("/tmp") as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    fresh = True
                    break
                os.unlink("/tmp/" + entry.name)
        if not fresh:
            st = os.lstat("/tmp")
            uid, gid = _owner(cfg, iso)
            if st.st_mode & 0o7777 != 0o700 or st.st_uid != uid or st.st_gid != gid:
                os.chown("/tmp", uid, gid)
                os.chmod("/tmp", 0o700)
            if not os.listdir("/tmp") and not os.listxattr("/tmp"):
                return
    except OSError:
        pass
    tmp_op(cfg, iso, b"F", cfg["tmp_mb"])


def tmp_op(cfg: dict, iso: dict, op: bytes, size_mb: int) -> None:
    """Resize /tmp (op R) or replace it with a fresh tmpfs (op F), through the shim when the supervisor runs
    under the full syscall filter."""
    helper = cfg.get("helper")
    if helper is None or not iso.get("syscall_filter"):
        if op == b"F":
            _check(_c().umount2(b"/tmp", 2), "umount /tmp")  # MNT_DETACH
        mount_tmp(cfg, iso, size_mb, remount=op == b"R")
        return
    uid, gid = _owner(cfg, iso)
    os.write(helper[0], b"%s %d %d %d\n" % (op, size_mb, uid, gid))
    reply = os.read(helper[1], 256)
    if reply != b"ok":
        raise OSError(errno.EIO, f"mount helper: {reply.decode(errors='replace') or 'gone'}")
    cfg["tmp_mb"] = size_mb


def serve_mounts(req_r: int, rep_w: int, worker: int) -> None:
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
