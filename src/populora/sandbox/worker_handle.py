"""The parent side of one sandbox worker process (`populora.sandbox.pool.Sandbox` owns the pool): the worker
script and the real interpreter it runs under, the request framing (`_frame`: a 4-byte big-endian length and
JSON, as `_channel` reads it), the handle of one worker with its pipes and in-flight jobs (`_Worker`), and the
shutdown of every worker of a pool (`_shutdown`).

Spawning, the ready handshake, dispatch and healing stay in `pool`, which re-exports these names.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")


def _interpreter() -> str:
    """The real interpreter binary: resolve venv symlinks and never go through a pyenv shim (a shell script)."""
    for cand in (sys.executable, getattr(sys, "_base_executable", "")):
        if not cand:
            continue
        path = os.path.realpath(cand)
        try:
            with open(path, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    return path
        except OSError:
            continue
    return os.path.realpath(sys.executable)


def _frame(msg: dict) -> bytes:
    data = json.dumps(msg).encode()
    return struct.pack(">I", len(data)) + data


class _Worker:
    """Parent-side handle of one worker process and the jobs sent to it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.rfd = proc.stdout.fileno()
        self.wfd = proc.stdin.fileno()
        # Requests go out non-blocking through `out`: a blocking write of a large program to a worker that is
        # itself blocked writing a large result to us would deadlock.
        os.set_blocking(self.wfd, False)
        self.out = bytearray()
        self.buf = bytearray()
        self.inflight: deque[tuple[int, int, float]] = deque()  # (job index, job id, sent at)
        self.info: dict = {}
        self.broken = False  # replaced before the next call (killed by an interrupted call or a deadline)

    def frames(self, data: bytes) -> list[dict]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (n,) = struct.unpack(">I", self.buf[:4])
            if len(self.buf) - 4 < n:
                break
            out.append(json.loads(bytes(self.buf[4 : 4 + n])))
            del self.buf[: 4 + n]
        return out

    def flush(self) -> None:
        """Write as much of the pending requests as the pipe takes now."""
        while self.out:
            try:
                n = os.write(self.wfd, self.out)
            except BlockingIOError:
                return
            except OSError:  # the worker is gone; the EOF on its stdout heals it
                self.out.clear()
                return
            del self.out[:n]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def _shutdown(pools: dict[int, list[_Worker]], owner_pid: int) -> None:
    """Close every worker: EOF on its request pipe makes it exit; kill the ones that do not within 2 s.
    In a forked copy of the owning process (a DataLoader worker, a plain `os.fork`) this does nothing: the
    workers belong to the parent, which is still using them."""
    workers = [w for pool in pools.values() for w in pool]
    for pool in pools.values():
        pool.clear()
    if os.getpid() != owner_pid:
        return
    for w in workers:
        try:
            w.proc.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + 2.0
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        w.kill()
    workers.clear()
