"""Direct system calls for the sandbox worker script (standard library only): unshare, mount, prctl through
ctypes, with errors raised as OSError. Shared by the isolation, cleanup, template and job modules."""

import ctypes
import os

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


def scrub_cmdline(title: bytes = b"populora-sandbox") -> None:
    """Overwrite this process's command line and initial environment block in place (what /proc/<pid>/cmdline
    and /proc/<pid>/environ show), so no process forked from here -- every job -- can read the worker's
    script path or start-up environment there. `sys.argv` and `os.environ` are copies and stay as they are."""
    with open("/proc/self/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    # fields[0] is field 3 of proc(5): arg_start, arg_end, env_start, env_end are fields 48-51
    arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
    for start, end, text in ((arg_start, arg_end, title), (env_start, env_end, b"")):
        if end > start:
            ctypes.memset(start, 0, end - start)
            ctypes.memmove(start, text, min(len(text), end - start - 1))
