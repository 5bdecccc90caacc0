"""The run folder the trainer writes (docs/run-folder.md): config.yaml and the three JSONL logs.

Every JSONL record is appended as one complete line (`populora.diagnostics.sinks.append_jsonl`). On resume from
the checkpoint of step S, `repair` drops a line cut by a kill and every record with step > S (those steps are
re-run), so no line is ever duplicated or corrupt.

Run folders are private: `prepare_run_dir` creates a missing folder owner-only (0700) and the trainer writes
under umask 077 (files 0600, folders 0700), so other users' jobs on a shared machine (sandboxed or not) cannot
read the run's gold programs (buffers.jsonl, problems.jsonl) or adapters. A folder that already exists keeps
its mode: it may be a shared directory (1777) or a symlink's target that the project did not create.

One process at a time: `lock_run_dir` holds `RUN_DIR/.lock` (fcntl.flock) for the life of the process; a
second `populora train` on the same folder exits with one line naming the pid that holds it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from populora.diagnostics.sinks import MetricLogger, append_jsonl, read_jsonl, repair_jsonl

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
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
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
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
        """Drop cut lines and records after `last_step` from every log; returns lines removed per file."""
        return {
            name: repair_jsonl(self.path / name, keep=lambda r: int(r.get("step", -1)) <= last_step)
            for name in LOGS
        }

    def read(self, name: str) -> list[dict[str, Any]]:
        return read_jsonl(self.path / name, missing_ok=True)

    def close(self) -> None:
        self.logger.close()
