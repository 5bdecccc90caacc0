"""The evaluation's sandbox pools: one single-worker evaluation `Sandbox` per job uid, jobs spread over them.

Why not one `Sandbox(workers=n, profile="eval")`: its workers all drop their jobs to one uid, and the
evaluation profile grants threads through RLIMIT_NPROC, which the kernel counts per uid. So the jobs running
at once share one thread allowance, and a candidate that starts threads until refused makes a concurrent,
innocent candidate fail with "can't start new thread" (issue 29). Here every worker is a `Sandbox` of its
own with its own job uid; a worker runs one job at a time, so each job has the whole allowance
(`populora.sandbox.EVAL_THREADS`) to itself.

Two pools never share a worker either: the expected outputs (the canonical programs) run in one pool, the
candidates in another (`ground_truth.py`, `code_grader.py`), so no candidate's process descends from a worker
that has seen an expected output.

The uids are ``EVAL_UID_BASE + (pid mod 2**22) * UID_STRIDE + slot``: distinct per worker, per pool (the
candidates take slots from 0, the expected outputs from `GT_SLOT`) and per grading process (two `populora
eval` runs on one machine do not share an allowance either), and far above the uids a system hands out. They
take effect where the sandbox can drop privileges (started as root); elsewhere every job keeps the caller's
uid, as the sandbox documents.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

#: Standard-library modules evalplus lets a solution import, loaded in the evaluation sandbox's workers so a
#: job can use them even where it cannot read the interpreter's files. Modules that register at-fork hooks
#: are loaded per job instead (`EVAL_LAZY_EXTRA`). numpy (with the standard-library modules it imports) and
#: threads come with the sandbox's evaluation profile (`Sandbox(profile="eval")`).
EVAL_PRELOAD_EXTRA: tuple[str, ...] = (
    "signal",
    "csv",
    "pathlib",
    "glob",
    "fnmatch",
    "html",
    "html.parser",
    "xml.etree.ElementTree",
    "ipaddress",
    "locale",
    "shutil",
)
EVAL_LAZY_EXTRA: tuple[str, ...] = ("tempfile", "concurrent.futures", "multiprocessing", "subprocess")
EVAL_UID_BASE = 2_000_000_000
UID_STRIDE = 256
#: Candidate pools use slots [0, GT_SLOT), the expected-output pool [GT_SLOT, UID_STRIDE).
GT_SLOT = 128
MAX_WORKERS = GT_SLOT


def job_uid(slot: int) -> int:
    """The job uid of worker `slot` of this process (see the module docstring)."""
    if not 0 <= slot < UID_STRIDE:
        raise ValueError(f"uid slot must be in [0, {UID_STRIDE}), got {slot}")
    return EVAL_UID_BASE + (os.getpid() % (1 << 22)) * UID_STRIDE + slot


class EvalPool:
    """`run_many` over ``workers`` single-worker evaluation sandboxes, each with its own job uid; order kept.

    ``first_slot`` picks the uid range (`job_uid`): 0 for candidates, `GT_SLOT` for expected outputs."""

    def __init__(self, workers: int, *, first_slot: int = 0):
        from populora.sandbox import DEFAULT_PRELOAD, LAZY_MODULES, Sandbox

        preload = tuple(dict.fromkeys((*DEFAULT_PRELOAD, *EVAL_PRELOAD_EXTRA)))
        lazy = tuple(dict.fromkeys((*LAZY_MODULES, *EVAL_LAZY_EXTRA)))

        workers = int(workers)
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"grading workers must be between 1 and {MAX_WORKERS}, got {workers}")
        if first_slot + workers > UID_STRIDE:
            raise ValueError(f"slots {first_slot}..{first_slot + workers - 1} exceed {UID_STRIDE - 1}")
        self.sandboxes: list = [None] * workers
        self._interrupted = False
        #: The job uid of each worker (where the sandbox can drop privileges).
        self.uids = [job_uid(first_slot + k) for k in range(workers)]
        errors: list[BaseException] = []

        def start(k: int) -> None:
            try:
                self.sandboxes[k] = Sandbox(
                    workers=1, preload=preload, lazy=lazy, profile="eval", uid=self.uids[k]
                )
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after every start has ended
                errors.append(exc)

        # Started in parallel: each boots an interpreter and preloads numpy.
        threads = [threading.Thread(target=start, args=(k,), daemon=True) for k in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.close()
            raise errors[0]

    def run_many(self, jobs: Sequence[tuple[str, str]], limits) -> list:
        """Outcomes of ``jobs`` in order; ``limits`` is one `Limits` or one per job. Each worker takes the
        next job as soon as it is free, so a slow job holds up only its own worker."""
        per = list(limits) if isinstance(limits, list | tuple) else [limits] * len(jobs)
        if len(per) != len(jobs):
            raise ValueError(f"{len(per)} limits for {len(jobs)} jobs")
        out: list = [None] * len(jobs)
        lock = threading.Lock()
        todo = iter(range(len(jobs)))
        errors: list[BaseException] = []

        def serve(sb) -> None:
            while not errors:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                try:
                    out[i] = sb.run(jobs[i][0], jobs[i][1], limits=per[i])
                except BaseException as exc:  # noqa: BLE001 - the sandbox itself failed: stop and re-raise
                    errors.append(exc)
                    return

        if len(self.sandboxes) == 1 or len(jobs) <= 1:
            serve(self.sandboxes[0])
        else:
            threads = [threading.Thread(target=serve, args=(sb,), daemon=True) for sb in self.sandboxes]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    t.join()
            except BaseException as exc:
                # Interrupted (Ctrl-C): no new job starts. A job in flight holds its sandbox's lock until it
                # ends (up to 10 minutes for an expected output), so `close()` must not wait for it.
                errors.append(exc)
                self._interrupted = True
                raise
        if errors:
            raise errors[0]
        return out

    def close(self) -> None:
        for sb in self.sandboxes:
            if sb is None:
                continue
            if self._interrupted:
                # In the background: each Sandbox's own finalizer stops its workers at exit in any case.
                threading.Thread(target=sb.close, daemon=True).start()
            else:
                sb.close()

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
