"""Sandbox work overlapped with decoding (`train.overlap`, issue 32 §3): a `SandboxLane` is a background thread
that runs the sandbox side of a phase on the rows the engine has already finished, while the rest still decode.

A step's phases depend on each other (students answer only valid problems; the update needs every reward), but
inside a phase the rows are independent: a proposal that stopped early can be validated while the others still
decode, and a problem whose rollouts are all in can be scored. The engine hands each row over as it stops
(`generate(on_finish=)`, engine/hf.py, engine/vllm.py, engine/dist.py); the trainer `put`s the work item; the lane's thread takes whatever is
queued, runs it as one batch (one `validate` per task type, one `score_many`), takes the next batch, and so on.
`join` ends the lane after the phase's generation and waits for the last batch: the phase after it (validate,
score) then only waits for what decoding could not hide. The step's deadlines for validation and scoring count
from `joined_at` (the end of generation) or, for a batch begun before it, from the batch's start, so neither
phase ends later after generation than without the lane (train/validate.py `check_proposals`, train/score.py
`score_ready`).

Results are the sequential path's: validation and scoring give a proposal or a problem the same verdict in any
batch (`CodeTask.validate`, `tasks.score_many`), the lane writes nothing the main thread reads before `join`,
and everything order-dependent (buffers, coverage, rewards, the run's random draws) stays on the main thread, in
trace order, after it. The sandbox pool serialises its calls under a lock and spawns its replacement workers
from whichever thread calls it, so one lane thread calling it while the main thread decodes is safe (the main
thread does not call the sandbox until `join` returns).
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_END = object()  # put by `join` / `abort`: no more items


class SandboxLane:
    """Runs `work(items)` on a background thread over batches of the items `put` so far; see the module
    docstring. `join()` waits for every item and re-raises the thread's exception; `abort()` stops it without
    running what is still queued (on an error in the main thread). `busy_s` is the thread's seconds in
    `work`, `batches` how many calls it made, `joined_at` the `time.monotonic()` when `join` began (the end of
    the phase's generation; scoring measures its step deadline from it)."""

    def __init__(self, work: Callable[[list[Any]], None], name: str = "sandbox-lane") -> None:
        self._work = work
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._stop = False
        self.busy_s = 0.0
        self.batches = 0
        self.joined_at: float | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Any) -> None:
        """Hand one finished item to the lane (cheap: the engine's decode loop calls it)."""
        self._queue.put(item)

    def _loop(self) -> None:
        ended = False
        while not ended:
            batch = [self._queue.get()]  # wait for the first item, then take everything already queued
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            ended = batch[-1] is _END
            batch = [x for x in batch if x is not _END]
            if not batch or self._stop or self._error is not None:
                continue  # after an error or abort: drain to the end marker, run nothing more
            t0 = time.perf_counter()
            try:
                self._work(batch)
            except BaseException as err:  # noqa: BLE001 - re-raised on the main thread by `join`
                self._error = err
            self.busy_s += time.perf_counter() - t0
            self.batches += 1

    def join(self) -> None:
        """No more items: wait until every queued item is done; re-raise the lane's exception, if any."""
        if self.joined_at is None:
            self.joined_at = time.monotonic()
            self._queue.put(_END)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Stop after the batch in flight (a sandbox call is bounded by its timeouts); queued items are dropped."""
        self._stop = True
        if self.joined_at is None:
            self.joined_at = time.monotonic()
            self._queue.put(_END)
        self._thread.join()


def accepts_on_finish(fn: Callable) -> bool:
    """Whether an engine's `generate` takes `on_finish=` (the hf, vllm and distributed engines do; an engine
    that does not returns every row at the end, and the trainer hands them over then, in order)."""
    try:
        return "on_finish" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


@contextmanager
def open_lane(work: Callable[[list[Any]], None], enabled: bool = True) -> Iterator[SandboxLane | None]:
    """A `SandboxLane` running `work` while the block runs (None when not `enabled`: `train.overlap` off).
    An error in the block aborts it, so its thread never outlives the step; otherwise it is joined at the end
    (a no-op when the phase joined it already)."""
    if not enabled:
        yield None
        return
    lane = SandboxLane(work)
    try:
        yield lane
    except BaseException:
        lane.abort()
        raise
    lane.join()


__all__ = ["SandboxLane", "accepts_on_finish", "open_lane"]
