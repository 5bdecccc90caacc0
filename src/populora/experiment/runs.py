"""Running the trainings of an experiment: one run folder per (arm, seed), resumable, one or several at a time.

A run is *done* when its metrics.jsonl reaches `train.steps` and its newest checkpoint is the final step's (a
run whose logs reached the end but whose final checkpoint was cut by a kill is resumed: the trainer replays
the steps after its newest intact checkpoint, deterministically). A run with a checkpoint is resumed from its
newest intact one (the trainer falls back past a damaged one); any other folder is started over (a run killed
before its first checkpoint has nothing to keep). So an experiment killed at any point continues where it
stopped, and gives the numbers an uninterrupted one gives.

`run_all(specs, jobs=1)` trains the runs one after the other in this process; `jobs=J > 1` runs J at a time,
each as its own `populora train` process (torch's thread pool is per process) with `threads` torch threads,
its output in `<run folder>.log` beside the run folder. Children die with the experiment (Linux: a kill of
the experiment kills its runs, which keep their newest checkpoint) and stop at a Ctrl-C of the experiment
after checkpointing their step in flight. Both ways print one line per run start and finish and a progress
line every `progress_every` seconds, each with the time left (progress.py).

Stopping an experiment that runs in the background (`nohup ... &`, a scheduler): `kill -INT PID` does what a
Ctrl-C does, and `kill PID` (SIGTERM) stops the runs at once, each keeping its newest checkpoint, as
`populora train` does on SIGTERM (train/interrupt.py). Both are forwarded to the side-by-side runs, which live
in their own sessions. A shell starts a background job with SIGINT ignored, and Python then installs no
handler for it; `stop_signals()` puts Python's back, so that `kill -INT` is not silently dropped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from populora import safe_files
from populora.experiment.progress import Progress, upfront_line
from populora.experiment.settings import ExperimentError

SAME_COMMAND = "give the same command again to continue (finished runs are kept)"


@dataclass
class RunSpec:
    """One training of an experiment: a preset plus overrides, into `path`."""

    name: str
    preset: str
    overrides: list[str]
    path: Path
    meta: dict = field(default_factory=dict)


def last_step(path: Path) -> int:
    """The last step in a run folder's metrics.jsonl (0 when there is none)."""
    f = path / "metrics.jsonl"
    if not f.is_file():
        return 0
    last = 0
    try:
        text = safe_files.read_text(f, errors="replace")  # no link followed, no FIFO waited on (issue 50)
    except OSError:
        return 0
    for line in text.splitlines():
        try:
            last = max(last, int(json.loads(line).get("step", 0)))
        except (ValueError, AttributeError):
            continue  # a line cut by a kill
    return last


def target_steps(spec: RunSpec) -> int:
    from populora.config import load_config

    return load_config(spec.preset, spec.overrides).train.steps


def run_state(path: Path, steps: int) -> tuple[str, int]:
    """('done' | 'resume' | 'new', newest checkpoint step) of a run folder that should reach `steps`."""
    from populora.checkpoint_ref import latest_checkpoint

    newest = latest_checkpoint(path) if path.is_dir() else None
    at = newest[0] if newest else 0
    if last_step(path) >= steps and (newest is None or at >= steps):
        return "done", at  # no checkpoint at all: finished logs whose checkpoints were removed, keep them
    if newest is not None:
        return "resume", at
    return "new", 0


def _start_over(spec: RunSpec) -> None:
    if spec.path.exists():
        shutil.rmtree(spec.path)  # killed before its first checkpoint: nothing to keep
    spec.path.parent.mkdir(parents=True, exist_ok=True)


def run_one(spec: RunSpec, threads: int | None = None) -> str:
    """Train (or resume, or skip) one run in this process; returns 'done', 'resumed' or 'trained'.
    `threads` (train.threads, which a resume may change) when given."""
    from populora.train.launch import train

    extra = [f"train.threads={threads}"] if threads else []
    state, _ = run_state(spec.path, target_steps(spec))
    if state == "done":
        return "done"
    if state == "resume":
        train(resume=spec.path, overrides=extra, quiet=True)
        return "resumed"
    _start_over(spec)
    train(preset=spec.preset, run_dir=spec.path, overrides=[*spec.overrides, *extra], quiet=True)
    return "trained"


def train_command(spec: RunSpec, state: str, threads: int | None) -> list[str]:
    """The `populora train` command line that trains (state 'new') or resumes a run in its own process."""
    extra = [f"train.threads={threads}"] if threads else []
    head = [sys.executable, "-m", "populora.cli", "train", "--quiet"]
    if state == "resume":
        return [*head, "--resume", str(spec.path), *[a for kv in extra for a in ("--set", kv)]]
    sets = [a for kv in [*spec.overrides, *extra] for a in ("--set", kv)]
    return [*head, "--preset", spec.preset, "--run-dir", str(spec.path), *sets]


def log_path(spec: RunSpec) -> Path:
    """Where a run started in its own process writes its output: beside its folder, `<folder>.log`."""
    return spec.path.with_name(spec.path.name + ".log")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL when the experiment dies, so no orphan run keeps its folder locked."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def interrupted_line(specs: Sequence[RunSpec], i: int, err: BaseException, how: str = SAME_COMMAND) -> str:
    """What an experiment interrupted during run `i` (1-based) kept, and how to go on."""
    spec = specs[i - 1]
    saved = getattr(err, "step", None)  # TrainingInterrupted: the step its Ctrl-C checkpoint holds
    if saved is None:
        from populora.checkpoint_ref import latest_checkpoint

        newest = latest_checkpoint(spec.path) if spec.path.is_dir() else None
        saved = newest[0] if newest else None
    where = f"checkpoint at step {saved}" if saved else "no checkpoint yet (it starts over)"
    return (
        f"[{i}/{len(specs)}] interrupted during {spec.name}: {i - 1} of {len(specs)} runs finished, "
        f"{spec.name} has a {where}; {how}."
    )


def _start_line(i: int, n: int, spec: RunSpec, state: str, at: int, steps: int) -> str:
    what = (
        f"resuming from its checkpoint at step {at} of {steps}"
        if state == "resume"
        else f"starting ({steps} steps)"
    )
    return f"[{i}/{n}] {spec.name}: {what} -> {spec.path}"


def _finish_line(
    i: int, n: int, spec: RunSpec, what: str, dt: float, finished: int, progress: Progress
) -> str:
    return (
        f"[{i}/{n}] {spec.name}: {what} in {dt:.0f} s; {finished} of {n} runs finished, {progress.summary()}"
    )


class _Ticker:
    """Calls `tick()` every `every` seconds from a daemon thread until stopped (the in-process progress line)."""

    def __init__(self, every: float, tick: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._thread = None
        if every > 0:
            self._thread = threading.Thread(target=self._loop, args=(every, tick), daemon=True)
            self._thread.start()

    def _loop(self, every: float, tick: Callable[[], None]) -> None:
        while not self._stop.wait(every):
            tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class ExperimentStopped(KeyboardInterrupt):
    """The experiment got SIGTERM: its runs are stopped at once (each keeps its newest checkpoint).
    `exit_code`: 143, as a shell reports a SIGTERM."""

    exit_code = 143


@contextmanager
def stop_signals() -> Iterator[None]:
    """While inside (main thread only): SIGTERM raises `ExperimentStopped` (once; a repeat during the stop is
    ignored), and SIGINT raises KeyboardInterrupt even where the shell started us with SIGINT ignored (a
    background job). The old handlers come back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping the runs must not be broken by a repeat
        raise ExperimentStopped

    old_term = signal.signal(signal.SIGTERM, on_term)
    old_int = signal.getsignal(signal.SIGINT)
    if old_int == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


def run_all(
    specs: Sequence[RunSpec],
    log: Callable[[str], None] = print,
    jobs: int = 1,
    threads: int | None = None,
    progress_every: float = 60.0,
    how: str = SAME_COMMAND,
) -> dict[str, float]:
    """Train every spec (skipping finished ones), `jobs` at a time; returns {name: seconds} of the runs made
    here. `threads`: train.threads of each run (None: the run's own config). `how`: how to continue, for the
    line an interrupt prints."""
    steps = {s.name: target_steps(s) for s in specs}
    # runs of one arm are priced at that arm's own seconds per step (progress.eta_by_kind)
    progress = Progress([(s.name, s.path, steps[s.name], str(s.meta.get("arm", ""))) for s in specs], jobs)
    upfront = upfront_line(specs, jobs, how)  # over 10 minutes: say so, with the estimate, before starting
    if upfront:
        log(upfront)
    with stop_signals():
        if jobs <= 1:
            return _run_in_process(specs, steps, progress, log, threads, progress_every, how)
        return _run_side_by_side(specs, steps, progress, log, jobs, threads, progress_every, how)


def _run_in_process(specs, steps, progress, log, threads, progress_every, how) -> dict[str, float]:
    seconds: dict[str, float] = {}
    n, finished = len(specs), 0
    current: list[str] = []
    ticker = _Ticker(progress_every, lambda: log(f"progress: {progress.summary(current)}"))
    try:
        for i, spec in enumerate(specs, 1):
            state, at = run_state(spec.path, steps[spec.name])
            if state == "done":
                finished += 1
                log(f"[{i}/{n}] {spec.name}: finished before, kept ({spec.path})")
                continue
            log(_start_line(i, n, spec, state, at, steps[spec.name]))
            t0 = time.perf_counter()
            current[:] = [spec.name]
            try:
                what = run_one(spec, threads)
            except KeyboardInterrupt as err:
                log(interrupted_line(specs, i, err, how))
                raise
            current.clear()
            seconds[spec.name] = time.perf_counter() - t0
            finished += 1
            log(_finish_line(i, n, spec, what, seconds[spec.name], finished, progress))
    finally:
        ticker.stop()
    return seconds


def _run_side_by_side(specs, steps, progress, log, jobs, threads, progress_every, how) -> dict[str, float]:
    seconds: dict[str, float] = {}
    n = len(specs)
    todo: list[tuple[int, RunSpec]] = []
    finished = 0
    for i, spec in enumerate(specs, 1):
        if run_state(spec.path, steps[spec.name])[0] == "done":
            finished += 1
            log(f"[{i}/{n}] {spec.name}: finished before, kept ({spec.path})")
        else:
            todo.append((i, spec))
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    running: dict[str, tuple[int, RunSpec, subprocess.Popen, float, object]] = {}
    failed: list[str] = []
    last_tick = time.monotonic()
    try:
        while todo or running:
            while todo and len(running) < jobs and not failed:
                i, spec = todo.pop(0)
                state, at = run_state(spec.path, steps[spec.name])
                if state == "new":
                    _start_over(spec)
                log(_start_line(i, n, spec, state, at, steps[spec.name]) + f" (log: {log_path(spec)})")
                out = open(log_path(spec), "a")  # noqa: SIM115 - closed when the run ends
                proc = subprocess.Popen(
                    train_command(spec, state, threads),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the experiment, which forwards it once
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )
                running[spec.name] = (i, spec, proc, time.perf_counter(), out)
            if failed and not running:
                break
            time.sleep(0.5)
            for name, (i, spec, proc, t0, out) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                out.close()
                del running[name]
                if rc != 0:
                    failed.append(
                        f"{name} (exit code {rc}; {_tail(log_path(spec))}; its log: {log_path(spec)})"
                    )
                    log(f"[{i}/{n}] {name}: failed, exit code {rc}; see {log_path(spec)}")
                    continue
                seconds[name] = time.perf_counter() - t0
                finished += 1
                log(_finish_line(i, n, spec, "trained", seconds[name], finished, progress))
            if progress_every > 0 and time.monotonic() - last_tick >= progress_every and running:
                last_tick = time.monotonic()
                log(f"progress: {progress.summary(list(running))}")
    except KeyboardInterrupt as err:
        _stop_children(running, log, signal.SIGTERM if isinstance(err, ExperimentStopped) else signal.SIGINT)
        names = ", ".join(f"{s.name} ({_saved(s)})" for _, s, *_ in running.values()) or "none"
        log(f"interrupted: {finished} of {n} runs finished; stopped: {names}; {how}.")
        raise
    if failed:
        raise ExperimentError(f"{len(failed)} run(s) failed: {'; '.join(failed)}; fix the cause, then {how}.")
    return seconds


def _stop_children(running: dict, log: Callable[[str], None], sig: int = signal.SIGINT) -> None:
    """Ctrl-C (SIGINT): each child checkpoints its step in flight and stops; a second Ctrl-C kills them at
    once. SIGTERM: each child stops at once, keeping its newest checkpoint."""
    procs = [entry[2] for entry in running.values()]
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    if sig == signal.SIGTERM:
        log(f"terminated (SIGTERM): stopping {len(procs)} run(s) at once (their newest checkpoints stay)")
    else:
        log(
            f"stopping {len(procs)} run(s) after their step in flight (Ctrl-C again kills them; checkpoints stay)"
        )
    try:
        for p in procs:
            p.wait()
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    for entry in running.values():
        entry[4].close()


def _saved(spec: RunSpec) -> str:
    from populora.checkpoint_ref import latest_checkpoint

    newest = latest_checkpoint(spec.path) if spec.path.is_dir() else None
    return f"checkpoint at step {newest[0]}" if newest else "no checkpoint yet"


def _tail(path: Path) -> str:
    """The log's last non-empty line (a run's one-line error), shortened."""
    try:
        lines = [ln for ln in safe_files.read_text(path, errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return f"last line: {lines[-1][:300]}" if lines else "empty log"


__all__ = [
    "ExperimentStopped",
    "RunSpec",
    "interrupted_line",
    "last_step",
    "log_path",
    "run_all",
    "run_one",
    "run_state",
    "stop_signals",
    "target_steps",
    "train_command",
]
