"""The run folder the trainer writes (docs/run-folder.md): config.yaml and the three JSONL logs.

Every JSONL record is appended as one complete line (`populora.diagnostics.sinks.append_jsonl`). On resume from
the checkpoint of step S, `repair` drops a line cut by a kill and every record with step > S (those steps are
re-run), so no line is ever duplicated or corrupt.

Run folders are private: `prepare_run_dir` makes the folder owner-only (0700) and the trainer writes under
umask 077 (files 0600), so other users' jobs on a shared machine (sandboxed or not) cannot read the run's
gold programs (buffers.jsonl, problems.jsonl) or adapters.
"""

from __future__ import annotations

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
    """Create `path` owner-only (0700) and check that files can be written there, before any work starts."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(
            f"{flag} {path}: is a file, not a folder; pass a folder path (it is created if missing)."
        )
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise RunFolderError(
            f"{flag} {path}: cannot write there ({reason}); choose a writable folder, e.g. --run-dir runs/NAME."
        ) from None
    return path


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
        self.logger = MetricLogger(
            self.path,
            tensorboard=tensorboard,
            wandb=wandb,
            mlflow=mlflow,
            config=dict(config) if config else None,
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
