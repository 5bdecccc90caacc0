"""Ctrl-C during training: finish the current step, save a checkpoint, then stop with a line saying how to go on.

`StopRequest` replaces the SIGINT handler while the step loop runs (main thread only: elsewhere it does
nothing). The first Ctrl-C only records the request: the step in flight completes (its logs and, if due, its
evolution), the trainer checkpoints it and raises `TrainingInterrupted`. A second Ctrl-C raises
KeyboardInterrupt at once (the newest checkpoint is kept; the steps after it are re-run on resume).
The sandbox's workers ignore SIGINT (sandbox/_worker.py), so a terminal's Ctrl-C, sent to the whole
foreground process group, does not break the step being finished.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C; `str(err)` is one line naming the run folder, what was saved, how to resume."""

    def __init__(self, run: Path, step: int | None, total: int | None = None) -> None:
        self.run = Path(run)
        self.step = step
        if step is None:
            saved = "the steps after its newest checkpoint are re-run"
        else:
            of = f" of {total}" if total else ""
            saved = f"checkpoint checkpoints/step_{step:06d} saved after step {step}{of}"
        super().__init__(f"interrupted: {saved}; continue with `populora train --resume {self.run}`")


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


__all__ = ["StopRequest", "TrainingInterrupted"]
