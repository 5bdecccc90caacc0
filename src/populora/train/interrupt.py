"""Ctrl-C and SIGTERM during training: stop, clean up, and say in one line how to go on.

`StopRequest` replaces the SIGINT handler while the step loop runs (main thread only: elsewhere it does
nothing). The first Ctrl-C only records the request: the step in flight completes (its logs and, if due, its
evolution), the trainer checkpoints it and raises `TrainingInterrupted`. A second Ctrl-C raises
KeyboardInterrupt at once (the newest checkpoint is kept; the steps after it are re-run on resume).
The sandbox's workers ignore SIGINT (sandbox/_worker.py), so a terminal's Ctrl-C, sent to the whole
foreground process group, does not break the step being finished.

SIGTERM (`kill PID`, a scheduler stopping a job) stops at once, as a second Ctrl-C does: a scheduler follows
it with SIGKILL after a grace period (30 s by default on Kubernetes and Slurm), shorter than a 7B step, so
waiting for the step would lose the cleanup. `sigterm_stops()` raises `Terminated` in the main thread for the
whole run. Either way the entry point then cleans up inside `cleanup_shield()`, where further Ctrl-C and
SIGTERM only print a line: the cleanup is bounded (dist workers are waited on for at most
`DistributedEngine.close_timeout_s` twice), and breaking it is what would leave processes and `/dev/shm`
behind.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C or SIGTERM; `str(err)` is one line naming the run folder, what was saved,
    how to resume. `step`: the step whose checkpoint this stop saved (None: stopped at once, the newest
    checkpoint is `newest`, if any); `exit_code`: 130 (SIGINT) or 143 (SIGTERM), as a shell reports them.

    `--resume` is offered only when the folder holds a config.yaml (a resume needs it; without a checkpoint it
    starts from step 0): a stop while the run was still starting (loading a model) says nothing was saved, and
    `folder_removed()` adds that the entry point removed the empty folder it had created."""

    def __init__(
        self,
        run: Path,
        step: int | None,
        total: int | None = None,
        *,
        signal_name: str = "SIGINT",
        newest: int | None = None,
    ) -> None:
        self.run = Path(run)
        self.step = step
        self.exit_code = 143 if signal_name == "SIGTERM" else 130
        head = "terminated (SIGTERM)" if signal_name == "SIGTERM" else "interrupted"
        self._head = head
        if step is not None:
            of = f" of {total}" if total else ""
            saved = f"checkpoint checkpoints/step_{step:06d} saved after step {step}{of}"
        elif newest is not None:
            saved = (
                f"stopped at once; the newest checkpoint checkpoints/step_{newest:06d} is kept and the steps "
                "after it are re-run"
            )
        elif (self.run / "config.yaml").is_file():
            saved = "stopped at once, before the first checkpoint (a resume starts from step 0)"
        else:  # still starting: nothing a resume could read
            self.resumable = False
            super().__init__(
                f"{head}: stopped while starting, before anything was saved in {self.run}; run the same "
                "command to start again"
            )
            return
        self.resumable = True
        super().__init__(f"{head}: {saved}; continue with `populora train --resume {self.run}`")

    def folder_removed(self) -> None:
        """Say that the (empty) run folder this start had created was removed: run the command again."""
        self.args = (
            f"{self._head}: stopped while starting, before anything was saved; the empty run folder {self.run} was "
            "removed (run the same command to start again)",
        )


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM (inside `sigterm_stops()`): the run stops at once and cleans up."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """While inside: SIGTERM raises `Terminated` at once in the main thread (once; a second SIGTERM during
    the cleanup that follows is ignored). The old handler comes back on exit. Elsewhere than the main
    thread: nothing."""
    if not _main_thread():
        yield
        return

    def handle(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup must not be broken by a repeat
        _received["SIGTERM"] = True
        raise Terminated

    _received["SIGTERM"] = False
    old = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


_received = {"SIGTERM": False}


def sigterm_received() -> bool:
    """Whether SIGTERM arrived inside the current (or last) `sigterm_stops()`. Asked by the entry point
    because `Terminated` may reach it as a plain KeyboardInterrupt: Ray's C++ waits turn an exception a
    signal handler raised into KeyboardInterrupt."""
    return _received["SIGTERM"]


@contextmanager
def cleanup_shield() -> Iterator[None]:
    """While inside (the cleanup after a stop): Ctrl-C and SIGTERM print one line instead of breaking it.
    Main thread only; the old handlers come back on exit."""
    if not _main_thread():
        yield
        return

    def note(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        print("still cleaning up (workers, vLLM, sandbox); a moment more", file=sys.stderr, flush=True)

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class StopRequest:
    """`with StopRequest() as stop:` ... `if stop.requested:` finish up. The old handler comes back on exit."""

    def __init__(self, quiet: bool = False) -> None:
        self.requested = False
        self.quiet = quiet
        self._old = None
        self._installed = False

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        # always shown, even with --quiet: the user pressed a key and waits for an answer
        print(
            "\ninterrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._old)
            self._installed = False


__all__ = [
    "StopRequest",
    "Terminated",
    "TrainingInterrupted",
    "cleanup_shield",
    "sigterm_received",
    "sigterm_stops",
]
