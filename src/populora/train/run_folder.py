"""The run folder the trainer writes (docs/run-folder.md): config.yaml and the three JSONL logs.

Every JSONL record is appended as one complete line (`populora.diagnostics.sinks.append_jsonl`). On resume from
the checkpoint of step S, `repair` drops a line cut by a kill and every record with step > S (those steps are
re-run), so no line is ever duplicated or corrupt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from populora.diagnostics.sinks import MetricLogger, append_jsonl, read_jsonl, repair_jsonl

LOGS = ("metrics.jsonl", "problems.jsonl", "events.jsonl")


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
