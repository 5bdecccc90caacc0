"""The `Sandbox`: a pool of warm worker interpreters that run untrusted Python, one forked process per job.

Workers are fresh interpreters (`python -s -S -P -B _worker.py`), never forks of the caller, so a caller that
has imported torch pays nothing for it and no caller state leaks into jobs. Each worker applies the
once-per-worker isolation (network and mount namespaces) at start, pre-imports the allowed stdlib modules, then
forks one child per job (see `_worker.py` for the per-job layers). This module owns the parent side: spawning,
the ready handshake, dispatching `run_many` over the workers in parallel with order kept, healing (a worker
that dies or wedges is killed and replaced; its job is reported `crashed`), and a clean `close()`.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import selectors
import struct
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from populora.sandbox.contract import Limits, Outcome

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")

#: Standard-library modules every worker imports before forking jobs. A job that has dropped to `nobody`
#: cannot read the interpreter's files (on machines where they live under /root), so these (and `LAZY_MODULES`)
#: are the modules a job can import. Which imports are *allowed* is the tasks package's AST policy, not ours.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "abc",
    "array",
    "ast",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "collections.abc",
    "contextlib",
    "copy",
    "dataclasses",
    "datetime",
    "_strptime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "graphlib",
    "hashlib",
    "heapq",
    "hmac",
    "io",
    "itertools",
    "json",
    "keyword",
    "math",
    "numbers",
    "operator",
    "pprint",
    "re",
    "string",
    "struct",
    "textwrap",
    "time",
    "types",
    "typing",
    "unicodedata",
    "uuid",
    "weakref",
    "zlib",
    "encodings.ascii",
    "encodings.latin_1",
    "encodings.utf_16",
    "encodings.utf_32",
    "encodings.cp1252",
)

#: Modules imported only by the jobs whose source mentions them, in the job's process before it drops its
#: privileges (a few ms for those jobs). They stay out of the warm worker because they register at-fork
#: hooks (`random` reseeds, `threading` rebuilds its state) that would make *every* fork slower (~40% more
#: page faults per job); `statistics` and `secrets` import `random`, `queue` imports `threading`.
LAZY_MODULES: tuple[str, ...] = ("random", "statistics", "secrets", "queue", "threading")

NOBODY = 65534
_WARNED: set[str] = set()
_ids = itertools.count()


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


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker could not start), as opposed to a job failing."""


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


def _shutdown(workers: list[_Worker], owner_pid: int) -> None:
    """Close every worker: EOF on its request pipe makes it exit; kill the ones that do not within 2 s.
    In a forked copy of the owning process (a DataLoader worker, a plain `os.fork`) this does nothing: the
    workers belong to the parent, which is still using them."""
    if os.getpid() != owner_pid:
        workers.clear()
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


class Sandbox:
    """Run untrusted Python: `run(program, call) -> Outcome`, `run_many([(program, call), ...])`.

    `program` is module source; `call` an expression evaluated after it; the outcome carries `repr()` of its
    value. Use as a context manager or call `close()`. Thread-safe (calls are serialized).

    Options: `preload` (stdlib modules jobs can import; default `DEFAULT_PRELOAD`), `lazy` (modules imported
    only for jobs whose source names them; default `LAZY_MODULES`), `isolate=False` (skip the
    namespaces and the uid drop; rlimits stay), `uid`/`gid` of jobs when started as root, `pipeline_depth`
    (jobs queued per worker while many are pending), `wedge_grace_s` (how long past a job's timeout a silent
    worker is declared wedged and replaced).
    """

    def __init__(
        self,
        workers: int = 2,
        limits: Limits | None = None,
        *,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        lazy: Sequence[str] = LAZY_MODULES,
        isolate: bool = True,
        uid: int = NOBODY,
        gid: int = NOBODY,
        startup_timeout_s: float = 30.0,
        pipeline_depth: int = 2,
        wedge_grace_s: float = 10.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"Sandbox(workers=) must be >= 1, got {workers}")
        self.limits = limits or Limits()
        self.n_workers = workers
        self._cfg = {
            "preload": list(preload),
            "lazy": list(lazy),
            "isolate": bool(isolate),
            "uid": uid,
            "gid": gid,
        }
        self._startup_timeout_s = startup_timeout_s
        self._depth = max(1, pipeline_depth)
        self._wedge_grace_s = wedge_grace_s
        self._lock = threading.RLock()
        self._workers: list[_Worker] = []
        self._closed = False
        self.restarts = 0
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._pid)
        procs: list[subprocess.Popen] = []
        try:
            for _ in range(workers):  # start all first: they boot in parallel
                procs.append(self._popen())
            for p in procs:
                self._workers.append(self._handshake(p))
        except BaseException:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.close()
            raise
        info = self._workers[0].info
        self.isolation: dict[str, bool] = dict(info["isolation"])
        self.preloaded: list[str] = list(info["preloaded"])
        missing_layers = [k for k, v in self.isolation.items() if not v]
        if missing_layers and isolate:
            key = ",".join(missing_layers)
            if key not in _WARNED:
                _WARNED.add(key)
                detail = "; ".join(info.get("warnings", []))
                warnings.warn(
                    f"populora.sandbox: isolation layers not available here: {key}"
                    f"{' (' + detail + ')' if detail else ''}; running with the rest "
                    "(see Sandbox.isolation)",
                    RuntimeWarning,
                    stacklevel=2,
                )

    # ------------------------------------------------------------------------------------------ workers

    def _popen(self) -> subprocess.Popen:
        env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        # -s -S: no site (nothing from site-packages); -P: no script dir on sys.path; -B: no .pyc writes.
        # Not -I/-E: those would ignore PYTHONHASHSEED, which makes set/dict-of-str reprs reproducible.
        cmd = [_interpreter(), "-s", "-S", "-P", "-B", str(WORKER_SCRIPT), json.dumps(self._cfg)]
        return subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )

    def _handshake(self, proc: subprocess.Popen) -> _Worker:
        w = _Worker(proc)
        deadline = time.monotonic() + self._startup_timeout_s
        sel = selectors.DefaultSelector()
        sel.register(w.rfd, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    w.kill()
                    raise SandboxError(f"sandbox worker did not start within {self._startup_timeout_s} s")
                data = os.read(w.rfd, 1 << 16)
                if not data:
                    w.kill()
                    raise SandboxError(
                        f"sandbox worker exited at start (code {proc.poll()}); interpreter {_interpreter()}"
                    )
                msgs = w.frames(data)
                if msgs:
                    w.info = msgs[0]
                    return w
        finally:
            sel.close()

    def _replace(self, slot: int) -> None:
        self._workers[slot].kill()
        self._workers[slot] = self._handshake(self._popen())
        self.restarts += 1

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    # --------------------------------------------------------------------------------------------- jobs

    def run(self, program: str, call: str, limits: Limits | None = None) -> Outcome:
        """Run one job: exec `program`, eval `call`, return its outcome."""
        return self.run_many([(program, call)], limits=limits)[0]

    def run_many(self, jobs: Sequence[tuple[str, str]], limits: Limits | None = None) -> list[Outcome]:
        """Run jobs in parallel over the workers; the outcomes come back in the order of `jobs`."""
        lim = limits or self.limits
        for job in jobs:
            if not (isinstance(job, tuple | list) and len(job) == 2 and all(isinstance(x, str) for x in job)):
                raise TypeError(f"run_many() takes (program: str, call: str) pairs, got {job!r:.80}")
        wire = lim.wire()
        grace = (
            lim.timeout_s + self._wedge_grace_s
        )  # the worker kills its job at timeout_s; past this it is wedged
        results: list[Outcome | None] = [None] * len(jobs)
        with self._lock:
            if self._closed:
                raise SandboxError("Sandbox is closed")
            if os.getpid() != self._pid:
                raise SandboxError(
                    "this Sandbox belongs to the process that created it; create a new one after fork"
                )
            queue = deque(range(len(jobs)))
            retried: dict[int, int] = {}
            done = 0
            sel = selectors.DefaultSelector()
            try:
                for slot, w in enumerate(self._workers):
                    sel.register(w.rfd, selectors.EVENT_READ, slot)
                while done < len(jobs):
                    for w in self._workers:
                        # Two jobs in flight per worker while plenty are queued, so a worker never waits for
                        # our round trip; one near the end, so no job waits behind a slow one while a
                        # worker is idle.
                        depth = self._depth if len(queue) > len(self._workers) * self._depth else 1
                        while len(w.inflight) < depth and queue:
                            i = queue.popleft()
                            jid = next(_ids)
                            program, call = jobs[i]
                            msg = {
                                "id": jid,
                                "program": program,
                                "call": call,
                                "limits": wire,
                                "max_stdout_chars": lim.max_stdout_chars,
                            }
                            w.inflight.append((i, jid, time.monotonic()))
                            w.out += _frame(msg)
                    for slot, w in enumerate(self._workers):
                        w.flush()
                        registered = w.wfd in sel.get_map()
                        if w.out and not registered:
                            sel.register(w.wfd, selectors.EVENT_WRITE, slot)
                        elif registered and not w.out:
                            sel.unregister(w.wfd)
                    for key, _ in sel.select(timeout=0.5):
                        slot = key.data
                        w = self._workers[slot]
                        if key.fd == w.wfd:
                            w.flush()
                            continue
                        if key.fd != w.rfd:
                            continue  # a replaced worker's stale event
                        try:
                            data = os.read(w.rfd, 1 << 16)
                        except OSError:
                            data = b""
                        if not data:
                            done += self._heal(sel, slot, results, queue, "worker died", retried)
                            continue
                        for m in w.frames(data):
                            i, jid, _ = w.inflight.popleft()
                            if m.get("id") != jid:  # cannot happen unless the worker is broken
                                raise SandboxError(
                                    f"sandbox protocol error: expected job {jid}, got {m.get('id')}"
                                )
                            results[i] = Outcome(
                                status=m["status"],
                                value_repr=m.get("value_repr"),
                                error_type=m.get("error_type"),
                                elapsed_s=float(m.get("elapsed_s", 0.0)),
                                error_message=m.get("error_message"),
                                stdout=m.get("stdout") or "",
                                plain=bool(m.get("plain", False)),
                            )
                            done += 1
                            if w.inflight:  # the queued job starts now; the wedge clock counts from here
                                w.inflight[0] = (*w.inflight[0][:2], time.monotonic())
                    now = time.monotonic()
                    for slot, w in enumerate(self._workers):
                        if w.inflight and now - w.inflight[0][2] > grace:
                            done += self._heal(sel, slot, results, queue, "worker wedged", retried)
            finally:
                sel.close()
        return results  # type: ignore[return-value]

    def _heal(
        self,
        sel: selectors.BaseSelector,
        slot: int,
        results: list,
        queue: deque,
        why: str,
        retried: dict[int, int],
    ) -> int:
        """Replace a dead or wedged worker. Its running job is `crashed`; jobs queued behind it are retried."""
        w = self._workers[slot]
        sel.unregister(w.rfd)
        if w.wfd in sel.get_map():
            sel.unregister(w.wfd)
        w.out.clear()
        finished = 0
        if w.inflight:
            i, _, sent = w.inflight.popleft()
            # The worker may have died before this job started (killed from outside while idle): retry it
            # once on the fresh worker; a job that takes its worker down twice is reported `crashed`.
            if retried.get(i, 0) >= 1 or why == "worker wedged":
                results[i] = Outcome(
                    status="crashed",
                    error_type="WorkerDied",
                    elapsed_s=time.monotonic() - sent,
                    error_message=f"sandbox {why} while running this job; it was replaced",
                )
                finished = 1
            else:
                retried[i] = retried.get(i, 0) + 1
                w.inflight.appendleft((i, 0, sent))
            for i, _, _ in reversed(w.inflight):
                queue.appendleft(i)
            w.inflight.clear()
        self._replace(slot)
        sel.register(self._workers[slot].rfd, selectors.EVENT_READ, slot)
        return finished

    # ------------------------------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop every worker (and so every job); idempotent."""
        with self._lock:
            self._closed = True
            _shutdown(self._workers, self._pid)
            self._finalizer.detach()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        layers = ",".join(k for k, v in getattr(self, "isolation", {}).items() if v)
        return f"Sandbox(workers={self.n_workers}, limits={self.limits}, isolation=[{layers}])"


_shared: Sandbox | None = None
_shared_lock = threading.Lock()


def shared_sandbox(workers: int = 2) -> Sandbox:
    """A process-wide `Sandbox` (default limits), started on first use and closed at interpreter exit: for
    tests and tools that want one pool without managing its life time. A closed one is replaced, and a forked
    child gets its own."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed or _shared._pid != os.getpid():  # a forked child gets its own
            _shared = Sandbox(workers=workers)
            atexit.register(_shared.close)
        return _shared
