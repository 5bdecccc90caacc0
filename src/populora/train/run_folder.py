"""The run folder the trainer writes (docs/run-folder.md): config.yaml and the three JSONL logs.

Every JSONL record is appended as one complete line (`populora.diagnostics.sinks.append_jsonl`). On resume from
the checkpoint of step S, `repair` drops a line cut by a kill and every record with step > S (those steps are
re-run), so no line is ever duplicated or corrupt.

Run folders are private: `prepare_run_dir` creates a missing folder owner-only (0700) and the trainer writes
under umask 077 (files 0600, folders 0700), so other users' jobs on a shared machine (sandboxed or not) cannot
read the run's gold programs (buffers.jsonl, problems.jsonl) or adapters. A folder that already exists keeps
its mode: it may be a shared directory (1777) or a symlink's target that the project did not create.

A run folder is data (issue 50): every file of it is opened through `populora.safe_files` (never through a
symbolic link, only a regular file: a FIFO cannot hang a read), `check_logs` refuses a link or FIFO among the
logs before the run starts, and `repair` drops corrupt lines (unparsable, not an object, a `step` that is not a
whole number) with one stderr line naming how many from which file, instead of a traceback or silence.

One process at a time: `lock_run_dir` holds `RUN_DIR/.lock` (fcntl.flock) for the life of the process; a
second `populora train` on the same folder exits with one line naming the pid that holds it.

A start that fails before anything useful is written (a config check after the folder is made, a missing
model, Ctrl-C while loading) removes the folder it created (`remove_unused_run_dir`): failed starts leave no
folders holding only `.lock`.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populora import safe_files
from populora.diagnostics.sinks import MetricLogger, append_jsonl, read_jsonl

LOGS = ("metrics.jsonl", "problems.jsonl", "events.jsonl")
PRIVATE_UMASK = 0o077


class RunFolderError(RuntimeError):
    """The run folder cannot be used (a file, read-only, ...); the message names the problem and the fix."""


def prepare_run_dir(path: str | os.PathLike, flag: str = "--run-dir") -> Path:
    """Create `path` owner-only (0700) if it is missing and check that files can be written there, before any
    work starts. An existing folder's mode is left alone (never chmod what the project did not create)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(
            f"{flag} {path}: is a file, not a folder; pass a folder path (it is created if missing)."
        )
    probe = path / f".write-test-{os.getpid()}"
    try:
        # mode 0o700 is masked by the umask, so a created folder is at most 0700; nothing else is chmodded
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        safe_files.write_bytes_new(probe, b"")  # O_EXCL, no link followed: a planted link is not truncated
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise RunFolderError(
            f"{flag} {path}: cannot write there ({reason}); choose a writable folder, e.g. --run-dir runs/NAME."
        ) from None
    return path


LOCK_NAME = ".lock"


def lock_run_dir(path: str | os.PathLike) -> int:
    """Take `RUN_DIR/.lock` for this process (released when the returned fd is closed or the process ends);
    raise RunFolderError naming the folder and the holder's pid when another process has it."""
    lock = Path(path) / LOCK_NAME
    # a regular file, never through a link: a link, FIFO or device as .lock is a RunFileError (an OSError)
    fd = safe_files.open_fd(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunFolderError(
            f"{path} is in use by another populora process (pid {holder}); wait for it to finish or stop it, "
            "then run again (two processes on one run folder would duplicate its steps)."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def remove_unused_run_dir(path: str | os.PathLike) -> bool:
    """Remove a run folder that a failed start created and left with nothing useful: only `.lock` and empty
    logs (a start stopped while loading, or refused by a check after the folder was made). Anything else in it
    (config.yaml, a checkpoint, a log with a line, a file the user put there) keeps the whole folder. Returns
    whether it was removed. The caller calls it only for a folder it created itself, while holding the lock."""
    path = Path(path)
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    disposable = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return False
        empty_log = entry.name in LOGS and stat.S_ISREG(st.st_mode) and st.st_size == 0
        if not (entry.name == LOCK_NAME and stat.S_ISREG(st.st_mode)) and not empty_log:
            return False
        disposable.append(Path(entry.path))
    try:
        for f in disposable:
            f.unlink()
        path.rmdir()  # fails (kept) if anything appeared meanwhile
    except OSError:
        return False
    return True


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` whole (temp file + rename). The temp name is created fresh (O_EXCL, no link
    followed) and the rename replaces a link at `path` itself, never its target."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    safe_files.write_bytes_new(tmp, text.encode("utf-8"), fsync=True)
    os.replace(tmp, path)


def check_logs(path: str | os.PathLike) -> None:
    """RunFolderError when config.yaml or a log of the run folder is a link, FIFO, device or folder: the
    trainer would append through it (outside the folder) or block on it. Missing files are fine."""
    for name in ("config.yaml", *LOGS):
        try:
            safe_files.check_regular(Path(path) / name)
        except safe_files.RunFileError as err:
            raise RunFolderError(str(err)) from None


@dataclass
class Repaired:
    """What `repair_log` removed from one log: a `cut` last line (a kill mid-write), `corrupt` lines
    (unparsable, not a JSON object, a `step` that is not a whole number) and `later` records (step past the
    checkpoint: those steps are re-run)."""

    cut: int = 0
    corrupt: int = 0
    later: int = 0

    @property
    def removed(self) -> int:
        return self.cut + self.corrupt + self.later


def record_step(record: Mapping[str, Any]) -> int | None:
    """A record's step (-1 when it has none: such records are kept), None when `step` is not a whole number."""
    step = record.get("step", -1)
    return step if type(step) is int else None


def repair_log(path: Path, last_step: int) -> Repaired:
    """Make one JSONL log safe to append to after a resume at `last_step` (rewritten atomically when anything
    is removed; a missing file stays missing). Read through `safe_files`: a link or FIFO is RunFileError."""
    out = Repaired()
    if not os.path.lexists(path):
        return out
    data = safe_files.read_bytes(path)
    lines = data.split(b"\n")
    cut = lines.pop()  # b"" when the file ends with a newline
    if cut.strip():
        out.cut = 1
    kept: list[bytes] = []
    for raw in lines:
        if not raw.strip():
            continue  # blank lines are harmless; dropping them is not a removal
        try:
            rec = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            rec = None
        step = record_step(rec) if isinstance(rec, dict) else None
        if step is None:
            out.corrupt += 1
        elif step > last_step:
            out.later += 1
        else:
            kept.append(raw)
    if out.removed == 0 and not cut:
        return out
    safe_files.replace_lines(path, kept)
    return out


def corrupt_line(path: Path, repaired: Mapping[str, Repaired]) -> str | None:
    """The one line a resume prints when it dropped corrupt lines: which files, how many; None if none."""
    bad = [f"{n} from {name}" for name, r in repaired.items() if (n := r.corrupt)]
    if not bad:
        return None
    return (
        f"warning: {path}: dropped corrupt lines ({', '.join(bad)}): not JSON objects or without a whole-number "
        "step; the rest of each log is kept."
    )


class RunFolder:
    """Paths and appends for one run; `metrics` goes through a `MetricLogger` (JSONL + optional trackers)."""

    def __init__(
        self,
        path: str | os.PathLike,
        tensorboard: bool = False,
        wandb: bool = False,
        mlflow: bool = False,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        log = dict((config or {}).get("log") or {})  # the tracker's names: project, entity, run name, tags
        self.logger = MetricLogger(
            self.path,
            tensorboard=tensorboard,
            wandb=wandb,
            mlflow=mlflow,
            config=dict(config) if config else None,
            project=log.get("project") or "populora",
            entity=log.get("entity"),
            run_name=log.get("run_name"),
            tags=log.get("tags") or (),
        )

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def write_config(self, text: str) -> None:
        write_text_atomic(self.config_path, text)

    def metric(self, record: Mapping[str, Any]) -> None:
        self.logger.log(record)

    def problem(self, record: Mapping[str, Any]) -> None:
        append_jsonl(self.path / "problems.jsonl", record)

    def event(self, record: Mapping[str, Any], fsync: bool = False) -> None:
        append_jsonl(self.path / "events.jsonl", record, fsync=fsync)
        self.logger.observe(record)  # evolution: the child continues its predecessor's tracker curves

    def repair(self, last_step: int) -> dict[str, int]:
        """Drop cut and corrupt lines and records after `last_step` from every log (`repair_log`); print one
        line to stderr when corrupt lines were dropped; returns the lines removed per file."""
        repaired = {name: repair_log(self.path / name, last_step) for name in LOGS}
        line = corrupt_line(self.path, repaired)
        if line:
            print(line, file=sys.stderr, flush=True)
        return {name: r.removed for name, r in repaired.items()}

    def read(self, name: str) -> list[dict[str, Any]]:
        return read_jsonl(self.path / name, missing_ok=True)

    def close(self) -> None:
        self.logger.close()
