"""The `Sandbox`: a pool of warm worker interpreters that run untrusted Python, one forked process per job.

Workers are fresh interpreters (`python -s -S -P -B _worker.py`), never forks of the caller, so a caller that
has imported torch pays nothing for it and no caller state leaks into jobs. Each worker applies the
once-per-worker isolation (network and mount namespaces) at start, pre-imports the allowed stdlib modules, then
forks one child per job (see `_worker.py` for the per-job layers). This module owns the parent side: spawning,
the ready handshake, dispatching `run_many` over the workers in parallel with order kept (with an optional
overall deadline, and on the determinism check's variant pools: `variant=k` for k >= 1 runs on workers of
their own, each pool with its own random hash seed and heap layout, so k = 1..R are R processes that differ in
everything a process can differ in), healing (a worker that dies, wedges or cannot start a job is killed and replaced; an interrupted
call replaces the workers it left mid-job), and a clean `close()`. What jobs may import under each profile is
in `profiles`, the handle of one worker process (framing, pipes, shutdown) in `worker_handle`; this module
re-exports their names.
"""

from __future__ import annotations

import atexit
import itertools
import os
import selectors
import subprocess
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Sequence

from populora.sandbox.contract import Limits, Outcome
from populora.sandbox.profiles import (
    DEFAULT_PRELOAD,
    EVAL_IMPORT_PACKAGES,
    EVAL_PACKAGE_PRELOAD,
    EVAL_THREADS,
    LAZY_MODULES,
    PROFILES,
    package_roots,
)
from populora.sandbox.worker_handle import WORKER_SCRIPT, _frame, _interpreter, _shutdown, _Worker

NOBODY = 65534
#: More workers than this is a mistake (each is a process tree and a tmpfs), never a need.
MAX_WORKERS = 256
#: `run_many(variant=k)` takes 0 (the scoring workers, hash seed 0) to this (one pool per determinism round;
#: the tasks' `determinism_repeats` is at most 32 too).
MAX_VARIANTS = 32
_WARNED: set[str] = set()
_ids = itertools.count()


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker could not start), as opposed to a job failing."""


class Sandbox:
    """Run untrusted Python: `run(program, call) -> Outcome`, `run_many([(program, call), ...])`.

    `program` is module source; `call` an expression evaluated after it; the outcome carries `repr()` of its
    value. Use as a context manager or call `close()`. Thread-safe (calls are serialized).

    Options: `preload` (stdlib modules jobs can import; default `DEFAULT_PRELOAD`), `lazy` (modules imported
    only for jobs whose source names them; default `LAZY_MODULES`), `isolate=False` (skip the
    namespaces and the uid drop; rlimits stay), `profile` ("train", the default: standard library only, no
    threads; "eval": what evalplus allows, see below), `hardened=False` (the earlier layers only: the host's file
    system read-only instead of a minimal root, the host's IPC namespace, a filter for exec only -- kept to
    measure what the hardening costs), `uid`/`gid` of jobs when started as root, `variant_workers` (workers
    of each determinism-check pool, `run_many(variant=k)` for k >= 1; default a quarter of `workers`, at least
    one, since the R pools of a check run at once), `pipeline_depth`
    (jobs queued per worker while many are pending), `wedge_grace_s` (how long past a job's timeout a silent
    worker is declared wedged and replaced).

    The evaluation profile (`profile="eval"`) keeps every OS layer (minimal root, namespaces, uid drop,
    syscall filter, no exec, no new processes) and adds what an evalplus-allowed solution needs:
    `import_packages` (default `EVAL_IMPORT_PACKAGES`, numpy) are bound read-only into the minimal root at
    their host paths and put on the job's path (`EVAL_PACKAGE_PRELOAD` of them is imported in the worker), and
    `threads` (default `EVAL_THREADS`) threads may run: the syscall filter then refuses fork, vfork and clone
    without CLONE_THREAD per job (EAGAIN, as the process limit does), and RLIMIT_NPROC becomes `threads` for
    the job uid (shared by the jobs running at once) instead of 0. Both knobs can also be given explicitly.
    """

    #: `run_many(variant=k)`, k in 1..`MAX_VARIANTS`, runs on pool k: workers started on first use with their
    #: own random hash seed and heap layout (duck-typed callers such as the tasks' determinism check look for
    #: this flag and for `max_variants`).
    supports_variants = True
    max_variants = MAX_VARIANTS

    def __init__(
        self,
        workers: int = 2,
        limits: Limits | None = None,
        *,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        lazy: Sequence[str] = LAZY_MODULES,
        isolate: bool = True,
        profile: str = "train",
        import_packages: Sequence[str] | None = None,
        threads: int | None = None,
        hardened: bool = True,
        uid: int = NOBODY,
        gid: int = NOBODY,
        variant_workers: int | None = None,
        startup_timeout_s: float = 30.0,
        pipeline_depth: int = 2,
        wedge_grace_s: float = 10.0,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
            raise ValueError(
                f"Sandbox(workers=) must be an integer between 1 and {MAX_WORKERS}, got {workers!r}"
            )
        if profile not in PROFILES:
            raise ValueError(f"Sandbox(profile=) must be one of {PROFILES}, got {profile!r}")
        if variant_workers is None:
            variant_workers = max(1, -(-workers // 4))
        if (
            isinstance(variant_workers, bool)
            or not isinstance(variant_workers, int)
            or not 1 <= variant_workers <= MAX_WORKERS
        ):
            raise ValueError(
                f"Sandbox(variant_workers=) must be an integer between 1 and {MAX_WORKERS}, "
                f"got {variant_workers!r}"
            )
        evaluation = profile == "eval"
        if import_packages is None:
            import_packages = EVAL_IMPORT_PACKAGES if evaluation else ()
        if threads is None:
            threads = EVAL_THREADS if evaluation else 0
        if threads < 0:
            raise ValueError(f"Sandbox(threads=) must be >= 0, got {threads}")
        if evaluation:
            preload = tuple(dict.fromkeys((*preload, *EVAL_PACKAGE_PRELOAD)))
        self.profile = profile
        self.limits = limits or Limits()
        self.n_workers = workers
        self.variant_workers = variant_workers
        self._cfg = {
            "preload": list(preload),
            "lazy": list(lazy),
            "isolate": bool(isolate),
            "hardened": bool(hardened),
            "import_roots": package_roots(import_packages),
            "threads": int(threads),
            "uid": uid,
            "gid": gid,
        }
        self._startup_timeout_s = startup_timeout_s
        self._depth = max(1, pipeline_depth)
        self._wedge_grace_s = wedge_grace_s
        self._lock = threading.RLock()
        self._workers: list[_Worker] = []
        self._pools: dict[int, list[_Worker]] = {0: self._workers}
        self._closed = False
        self.restarts = 0
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _shutdown, self._pools, self._pid)
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
        #: What the profile grants jobs, as in force: threads allowed per job uid, package folders visible.
        self.grants: dict = dict(info.get("grants", {}))
        if threads and not self.grants.get("threads"):
            warnings.warn(
                f"populora.sandbox: threads cannot be allowed here ({'; '.join(info.get('warnings', []))}); "
                "jobs run without them",
                RuntimeWarning,
                stacklevel=2,
            )
        off_by_choice = set() if hardened else {"ipc_namespace", "minimal_root", "syscall_filter"}
        missing_layers = [k for k, v in self.isolation.items() if not v and k not in off_by_choice]
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

    def _popen(self, variant: int = 0) -> subprocess.Popen:
        # Variant 0 workers share hash seed 0, so set/dict-of-str reprs are reproducible across them and
        # across runs. Every worker of a variant k >= 1 (the determinism check's rounds, `run_many(variant=k)`)
        # gets a random seed of its own and a randomly shifted heap in every size class on top of the kernel's
        # ASLR (`_worker._heap_shift`), so output that depends on the process (hash order, id(), addresses)
        # is an independent draw in every such worker, not one draw shared by all rounds.
        seed = "0" if variant == 0 else str(int.from_bytes(os.urandom(4), "big") % 4294967294 + 1)
        env = {"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if self._cfg["import_roots"]:
            # Numerical libraries loaded in the worker must not start thread pools: a worker with threads
            # cannot enter its namespaces (and evalplus runs with one BLAS thread too).
            env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cfg = self._cfg if variant == 0 else {**self._cfg, "heap_shift": True}
        # -s -S: no site (nothing from site-packages); -P: no script dir on sys.path; -B: no .pyc writes.
        # Not -I/-E: those would ignore PYTHONHASHSEED, which makes set/dict-of-str reprs reproducible.
        cmd = [_interpreter(), "-s", "-S", "-P", "-B", str(WORKER_SCRIPT)]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        # The configuration goes on the request pipe, not the command line: a command line is readable in
        # /proc by other processes (and jobs must not learn the host's paths from it).
        try:
            proc.stdin.write(_frame(cfg))
            proc.stdin.flush()
        except OSError:  # it died at once: the handshake reports it
            pass
        return proc

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

    def _start_pools(self, variants: Sequence[int]) -> None:
        """Start the pools of `variants` that are not running yet (variant 0 runs from the start; variant k >= 1
        gets `variant_workers` workers), all at once so they boot in parallel."""
        missing = [v for v in dict.fromkeys(variants) if not self._pools.get(v)]
        procs = [
            (v, self._popen(v))
            for v in missing
            for _ in range(self.n_workers if v == 0 else self.variant_workers)
        ]
        try:
            for v, p in procs:
                self._pools.setdefault(v, []).append(self._handshake(p))
        except BaseException:
            for _, p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for v in missing:  # a half-started pool is not used: its workers are stopped
                for w in self._pools.pop(v, []):
                    w.kill()
            raise

    def _replace(self, workers: list[_Worker], slots: list[tuple[int, int]], slot: int) -> None:
        """Replace the worker at `slot` of a call's worker list, in its pool too."""
        variant, index = slots[slot]
        pool = self._pools[variant]
        pool[index].kill()
        pool[index] = workers[slot] = self._handshake(self._popen(variant))
        self.restarts += 1

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    # --------------------------------------------------------------------------------------------- jobs

    def run(self, program: str, call: str, limits: Limits | None = None) -> Outcome:
        """Run one job: exec `program`, eval `call`, return its outcome."""
        return self.run_many([(program, call)], limits=limits)[0]

    def run_many(
        self,
        jobs: Sequence[tuple[str, str]],
        limits: Limits | None = None,
        *,
        deadline_s: float | None = None,
        variant: int | Sequence[int] = 0,
    ) -> list[Outcome]:
        """Run jobs in parallel over the workers; the outcomes come back in the order of `jobs`.

        `deadline_s` bounds the whole call: jobs still running then are killed (their workers replaced) and,
        like jobs not started, reported `timeout` with error_type "Deadline". `variant=k` (k in
        1..`MAX_VARIANTS`) runs the jobs on pool k, whose workers each have their own random hash seed and heap
        layout; a sequence gives one variant per job, and the pools named run at once (the determinism check:
        round r of every proposal on pool r).
        If the call is interrupted (an exception, KeyboardInterrupt), the workers that had jobs in flight
        are replaced before the next call, so no stale result ever reaches a later call."""
        lim = limits or self.limits
        if not isinstance(lim, Limits):
            raise TypeError(f"run_many(limits=) takes a Limits, got {type(lim).__name__}")
        lim.validate()  # a Limits built around __post_init__ (object.__setattr__) is caught here
        for job in jobs:
            if not (isinstance(job, tuple | list) and len(job) == 2 and all(isinstance(x, str) for x in job)):
                raise TypeError(f"run_many() takes (program: str, call: str) pairs, got {job!r:.80}")
        variants = (
            [variant] * len(jobs)
            if isinstance(variant, int)
            else list(variant)
            if isinstance(variant, list | tuple)
            else [None]
        )
        if len(variants) != len(jobs) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_VARIANTS for v in variants
        ):
            raise ValueError(
                f"run_many(variant=) must be an integer from 0 to {MAX_VARIANTS}, or a sequence of such "
                f"integers, one per job; got {variant!r:.80}"
            )
        if deadline_s is not None and not (isinstance(deadline_s, int | float) and deadline_s > 0):
            raise ValueError(
                f"run_many(deadline_s=) must be a positive number of seconds, got {deadline_s!r}"
            )
        wire = lim.wire()
        grace = (
            lim.timeout_s + self._wedge_grace_s
        )  # the worker kills its job at timeout_s; past this: wedged
        results: list[Outcome | None] = [None] * len(jobs)
        with self._lock:
            if self._closed:
                raise SandboxError("Sandbox is closed")
            if os.getpid() != self._pid:
                raise SandboxError(
                    "this Sandbox belongs to the process that created it; create a new one after fork"
                )
            t0 = time.monotonic()
            end = None if deadline_s is None else t0 + deadline_s
            used = sorted(set(variants)) or [0]
            self._start_pools(used)
            # This call's workers: every worker of every pool it uses, each taking jobs only from its own
            # pool's queue; `slots` says where each one lives (pool, index) for replacing it.
            slots = [(v, k) for v in used for k in range(len(self._pools[v]))]
            workers = [self._pools[v][k] for v, k in slots]
            for slot, w in enumerate(workers):  # left mid-job by an interrupted call: replace first
                if w.inflight or w.buf or w.out or w.broken:
                    self._replace(workers, slots, slot)
            queues = {v: deque() for v in used}
            for i, v in enumerate(variants):
                queues[v].append(i)
            retried: dict[int, int] = {}
            done = 0
            sel = selectors.DefaultSelector()
            finished = False
            try:
                for slot, w in enumerate(workers):
                    sel.register(w.rfd, selectors.EVENT_READ, slot)
                while done < len(jobs):
                    for slot, w in enumerate(workers):
                        # Two jobs in flight per worker while plenty are queued, so a worker never waits for
                        # our round trip; one near the end, so no job waits behind a slow one while a
                        # worker is idle.
                        v = slots[slot][0]
                        queue = queues[v]
                        depth = self._depth if len(queue) > len(self._pools[v]) * self._depth else 1
                        while len(w.inflight) < depth and queue and not w.broken:
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
                    for slot, w in enumerate(workers):
                        w.flush()
                        registered = w.wfd in sel.get_map()
                        if w.out and not registered:
                            sel.register(w.wfd, selectors.EVENT_WRITE, slot)
                        elif registered and not w.out:
                            sel.unregister(w.wfd)
                    wait = 0.5 if end is None else max(0.0, min(0.5, end - time.monotonic()))
                    for key, _ in sel.select(timeout=wait):
                        slot = key.data
                        w = workers[slot]
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
                            done += self._heal(
                                sel, workers, slots, slot, results, queues, "worker died", retried
                            )
                            continue
                        for m in w.frames(data):
                            i, jid, _ = w.inflight.popleft()
                            if m.get("id") != jid:  # cannot happen unless the worker is broken
                                raise SandboxError(
                                    f"sandbox protocol error: expected job {jid}, got {m.get('id')}"
                                )
                            if m.get("worker_failed"):
                                # The worker could not set up this job (its own state is broken, e.g. its
                                # /tmp): it exits after this reply and the EOF that follows replaces it. The
                                # job is not at fault: retry it once on the fresh worker.
                                w.broken = True
                                if retried.get(i, 0) < 1:
                                    retried[i] = retried.get(i, 0) + 1
                                    queues[slots[slot][0]].appendleft(i)
                                    continue
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
                    for slot, w in enumerate(workers):
                        if w.inflight and now - w.inflight[0][2] > grace:
                            done += self._heal(
                                sel, workers, slots, slot, results, queues, "worker wedged", retried
                            )
                    if end is not None and now >= end and done < len(jobs):
                        done += self._expire(workers, results, deadline_s)
                finished = True
            finally:
                sel.close()
                if not finished:  # interrupted: whatever is in flight must not reach a later call
                    for w in workers:
                        if w.inflight or w.buf or w.out:
                            w.kill()
                            w.broken = True
                            w.inflight.clear()
                            w.buf.clear()
                            w.out.clear()
        return results  # type: ignore[return-value]

    def _expire(self, workers: list[_Worker], results: list, deadline_s: float) -> int:
        """The overall deadline has passed: every job without a result is `timeout`; the workers still busy
        are killed (and replaced at the next call)."""
        n = 0
        for w in workers:
            if w.inflight:
                w.kill()
                w.broken = True
                w.inflight.clear()
                w.buf.clear()
                w.out.clear()
        for i, r in enumerate(results):
            if r is None:
                results[i] = Outcome(
                    status="timeout",
                    error_type="Deadline",
                    error_message=f"run_many deadline of {deadline_s} s passed before this job finished",
                )
                n += 1
        return n

    def _heal(
        self,
        sel: selectors.BaseSelector,
        workers: list[_Worker],
        slots: list[tuple[int, int]],
        slot: int,
        results: list,
        queues: dict[int, deque],
        why: str,
        retried: dict[int, int],
    ) -> int:
        """Replace a dead or wedged worker. Its running job is `crashed`; jobs queued behind it are retried."""
        w = workers[slot]
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
                queues[slots[slot][0]].appendleft(i)
            w.inflight.clear()
        self._replace(workers, slots, slot)
        sel.register(workers[slot].rfd, selectors.EVENT_READ, slot)
        return finished

    # ------------------------------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Stop every worker (and so every job); idempotent."""
        with self._lock:
            self._closed = True
            _shutdown(self._pools, self._pid)
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
