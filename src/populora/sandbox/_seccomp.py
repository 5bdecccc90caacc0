"""The sandbox's seccomp filters, as raw BPF built with ctypes (no libseccomp). Imported by `_worker.py`, which
runs as a script in a fresh interpreter, so this module too imports nothing outside the standard library.

Two filters, both returning an errno, never killing (a job that tries a forbidden call gets an OSError it may
catch, and its outcome stays a normal result):

- the exec-only one (`Sandbox(hardened=False)`): execve/execveat fail with EAGAIN. RLIMIT_NPROC only blocks
  execve when another process of the job's uid exists at the uid change, so on its own it races; EAGAIN is
  what the NPROC layer gives, so a program sees the same error whichever layer stops it;
- the full one, installed in the worker after its setup and inherited by every job: the same, plus EPERM for
  every system call a pure-Python function never needs and that reaches shared kernel state or widens the
  job's view (IPC, keyrings, io_uring, namespaces, mounts, tracing, BPF, perf, memfds, modules, clocks,
  sysinfo, ...),
  clone() with a namespace flag, unshare() with anything but CLONE_NEWIPC alone, ENOSYS for clone3 (so libc
  falls back to clone, whose flags the filter can see), and ENOSYS for any other ABI (32-bit or x32 entry
  points would otherwise bypass the numbers below);
- the no-fork one (`build_no_fork_filter`), stacked per job on top of the full one in the evaluation profile,
  where threads are allowed and RLIMIT_NPROC therefore no longer stops new processes: clone() without
  CLONE_THREAD, fork and vfork fail with EAGAIN (what the process limit gives). Threads pass: glibc's
  pthread_create tries clone3 first, gets ENOSYS from the full filter, and falls back to clone.
"""

import ctypes
import errno
import os

CLONE_NEWIPC = 0x08000000
CLONE_THREAD = 0x00010000
# prctl with a pointer as its third argument (PR_SET_SECCOMP takes the filter's address)
_prctl_ptr = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_void_p,
    ctypes.c_ulong,
    ctypes.c_ulong,
    use_errno=True,
)(("prctl", ctypes.CDLL(None, use_errno=True)))

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_EXEC_SYSCALLS = {"x86_64": (59, 322), "aarch64": (221, 281)}  # execve, execveat
_CLONE = {"x86_64": (56, 435), "aarch64": (220, 435)}  # clone, clone3
_FORK = {"x86_64": (57, 58), "aarch64": ()}  # fork, vfork (aarch64 has only clone)
#: Denied with EPERM. Names for readers; the numbers are per architecture.
_DENIED_SYSCALLS = {
    "x86_64": {
        # SysV IPC: shmget shmat shmctl semget semop semctl shmdt msgget msgsnd msgrcv msgctl semtimedop
        "sysv_ipc": (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220),
        "posix_mq": (240, 241, 242, 243, 244, 245),  # mq_open .. mq_getsetattr
        "keyrings": (248, 249, 250),  # add_key request_key keyctl
        "io_uring": (425, 426, 427),
        "namespaces": (272, 308),  # unshare setns
        "memfd": (319, 447),  # memfd_create memfd_secret
        "tracing": (101, 310, 311, 312, 321, 298, 323),  # ptrace process_vm_* kcmp bpf perf_event_open uffd
        # mount umount2 pivot_root chroot open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr
        "mounts": (165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442),
        # swapon swapoff reboot sethostname setdomainname init/delete/finit_module kexec_load kexec_file_load
        # acct quotactl syslog personality uselib iopl ioperm name_to_handle_at open_by_handle_at vhangup
        # settimeofday clock_settime adjtimex clock_adjtime fanotify_init
        # sysinfo: uptime, load and the host's process count, which moves with other workers' jobs (issue 50)
        "host_counters": (99,),
        "system": (
            167,
            168,
            169,
            170,
            171,
            175,
            176,
            313,
            246,
            320,
            163,
            179,
            103,
            135,
            134,
            172,
            173,
            303,
            304,
            153,
            164,
            227,
            159,
            305,
            300,
        ),
    },
    "aarch64": {
        "sysv_ipc": (194, 195, 196, 197, 190, 191, 192, 193, 186, 187, 188, 189),
        "posix_mq": (180, 181, 182, 183, 184, 185),
        "keyrings": (217, 218, 219),
        "io_uring": (425, 426, 427),
        "namespaces": (97, 268),
        "memfd": (279, 447),
        "tracing": (117, 270, 271, 272, 280, 241, 282),
        "mounts": (40, 39, 41, 51, 428, 429, 430, 431, 432, 433, 442),
        "host_counters": (179,),
        "system": (
            224,
            225,
            142,
            161,
            162,
            105,
            106,
            273,
            104,
            294,
            89,
            60,
            116,
            92,
            264,
            265,
            58,
            170,
            112,
            171,
            266,
            262,
        ),
    },
}
#: CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET: clone() with any of these is refused.
#: (CLONE_NEWTIME, 0x80, is only accepted by unshare and clone3, both denied; in clone() those bits are the
#: exit signal.)
_CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def build_filter(full: bool):
    """The BPF program (a `_SockFprog`, kept alive with its array) or None on an unknown architecture."""
    machine = os.uname().machine
    if machine not in _ARCH:
        return None
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow = 0x7FFF0000
    errno_ret = lambda e: 0x00050000 | e  # noqa: E731  (SECCOMP_RET_ERRNO)
    execve, execveat = _EXEC_SYSCALLS[machine]
    clone, clone3 = _CLONE[machine]
    unshare = _DENIED_SYSCALLS[machine]["namespaces"][0]
    denied = (
        sorted({n for group in _DENIED_SYSCALLS[machine].values() for n in group} - {unshare}) if full else []
    )
    # Layout: header, then one `jeq nr` per denied number, then the tails; jump offsets are computed from the
    # end so each check jumps forward to its tail (offsets fit a byte: < 100 instructions in all).
    body = []  # (code, target label or None, k)
    body.append((ld_abs, None, 4))  # A = arch
    body.append((jeq, ("next", "bad_arch"), _ARCH[machine]))
    body.append((ld_abs, None, 0))  # A = nr
    body.append((jge, ("x32", "next"), 0x40000000))  # x32 ABI numbers
    body.append((jeq, ("exec", "next"), execve))
    body.append((jeq, ("exec", "next"), execveat))
    if full:
        body.append((jeq, ("enosys", "next"), clone3))
        body.append((jeq, ("clone", "next"), clone))
        body.append((jeq, ("unshare", "next"), unshare))
        for n in denied:
            body.append((jeq, ("eperm", "next"), n))
    body.append((ret, None, allow))
    tails = {}  # BPF jumps only go forward: the clone check comes before the tails it jumps to
    if full:
        tails["clone"] = [
            (ld_abs, None, 16),  # A = low 32 bits of args[0] (the flags)
            (jset, ("eperm", "allow"), _CLONE_NS_FLAGS),
        ]
        # unshare(CLONE_NEWIPC) alone stays open: the worker makes each job's IPC namespace with it, in the
        # job's process before the uid drop; a job (no capabilities left) gets EPERM from the kernel for it.
        tails["unshare"] = [
            (ld_abs, None, 16),
            (jeq, ("allow", "eperm"), CLONE_NEWIPC),
        ]
        tails["allow"] = [(ret, None, allow)]
    tails.update(
        bad_arch=[(ret, None, errno_ret(errno.ENOSYS))],
        x32=[(ret, None, errno_ret(errno.ENOSYS))],
        exec=[(ret, None, errno_ret(errno.EAGAIN))],
        enosys=[(ret, None, errno_ret(errno.ENOSYS))],
        eperm=[(ret, None, errno_ret(errno.EPERM))],
    )
    labels, pos = {}, len(body)
    for name, ins in tails.items():
        labels[name] = pos
        pos += len(ins)
    prog = []
    for code_list in (body, *tails.values()):
        for code, jumps, k in code_list:
            idx = len(prog)
            jt = jf = 0
            if jumps is not None:
                jt, jf = (0 if j == "next" else labels[j] - idx - 1 for j in jumps)
            prog.append(_SockFilter(code, jt, jf, k))
    arr = (_SockFilter * len(prog))(*prog)
    fprog = _SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(_SockFilter)))
    fprog._keep = arr
    return fprog


def build_no_fork_filter():
    """The per-job filter of the evaluation profile (a `_SockFprog`), or None on an unknown architecture:
    EAGAIN for fork, vfork and clone() without CLONE_THREAD; everything else is left to the full filter."""
    machine = os.uname().machine
    if machine not in _ARCH:
        return None
    ld_abs, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eagain = 0x7FFF0000, 0x00050000 | errno.EAGAIN
    clone = _CLONE[machine][0]
    forks = _FORK[machine]
    n = len(forks)
    # 0 A=arch, 1 our arch?, 2 A=nr, 3 clone?, 4..3+n fork/vfork?, 4+n allow, 5+n A=flags, 6+n CLONE_THREAD?,
    # 7+n allow, 8+n EAGAIN. Jump offsets count from the next instruction.
    prog = [
        (ld_abs, 0, 0, 4),
        (jeq, 0, 2 + n, _ARCH[machine]),  # another ABI: the full filter already answers ENOSYS
        (ld_abs, 0, 0, 0),
        (jeq, 1 + n, 0, clone),
    ]
    for i, nr in enumerate(forks):
        prog.append((jeq, 3 + n - i, 0, nr))  # to the last instruction (EAGAIN)
    prog += [
        (ret, 0, 0, allow),
        (ld_abs, 0, 0, 16),  # low 32 bits of args[0]: clone's flags
        (jset, 0, 1, CLONE_THREAD),
        (ret, 0, 0, allow),
        (ret, 0, 0, eagain),
    ]
    arr = (_SockFilter * len(prog))(*(_SockFilter(c, jt, jf, k) for c, jt, jf, k in prog))
    fprog = _SockFprog(len(prog), ctypes.cast(arr, ctypes.POINTER(_SockFilter)))
    fprog._keep = arr
    return fprog


def install_filter(fprog) -> bool:
    """Install a filter from `build_filter` for this process and its children (needs no-new-privs)."""
    if fprog is None:
        return False
    return _prctl_ptr(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) == 0


def install_no_exec_filter() -> bool:
    """Forbid execve/execveat for this process and its children (needs no-new-privs); False if unsupported."""
    return install_filter(build_filter(full=False))
