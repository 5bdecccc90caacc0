"""The template (zygote) of the sandbox worker script (standard library only): the clean process every job is
forked from.

The supervisor forks it once, after preloading, warming up and isolating, and before it reads any request, so
the template's memory holds nothing of any job and never will: it never parses a request and never sees a
result. Per job it receives exactly two descriptors over a unix socket (SCM_RIGHTS) -- the read end of the
job's own job pipe and the write end of its own result pipe, both made by the supervisor -- and one byte; it
forks the job child (`_job.run_child`), which closes the template's socket before reading its job; it reports
the child's pid (so the supervisor can kill its process group on deadline) and then its wait status (the
template reaps it). Messages to the supervisor are fixed-size: (b"P", pid) then (b"S", status).
"""

import _socket
import os
import struct

from _job import run_child

_MSG = struct.Struct("=ci")


def serve(sock_fd: int, cfg: dict, iso: dict) -> None:
    """The template's loop; never returns (exits when the supervisor closes its end)."""
    sock = _socket.socket(fileno=sock_fd)
    fd_size = _socket.CMSG_LEN(2 * 4)
    while True:
        try:
            data, anc, _, _ = sock.recvmsg(1, fd_size)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)
        fds = []
        for level, kind, payload in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += struct.unpack(f"={len(payload) // 4}i", payload[: len(payload) // 4 * 4])
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            sock.sendall(_MSG.pack(b"E", 0))
            continue
        pid = os.fork()
        if pid == 0:
            try:
                run_child(fds[0], fds[1], cfg, iso)
            finally:
                os._exit(72)
        os.close(fds[0])
        os.close(fds[1])
        sock.sendall(_MSG.pack(b"P", pid))
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        sock.sendall(_MSG.pack(b"S", status))
