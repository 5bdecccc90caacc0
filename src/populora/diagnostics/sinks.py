"""Metric sinks: crash-safe JSONL files (always) and, when asked for, TensorBoard, W&B and MLflow.

JSONL discipline (docs/run-folder.md): every record is one complete line written with a single
`write` on a file opened in append mode, then flushed, so a concurrent reader sees whole lines plus at
most one partial last line, and a run killed mid-write leaves at most one cut last line. `read_jsonl`
skips such a line; `repair_jsonl` (used by `--resume`) truncates it and can drop steps after a checkpoint.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from populora import safe_files
from populora.diagnostics.tracker_scalars import Lineages, tracker_scalars

__all__ = [
    "append_jsonl",
    "read_jsonl",
    "iter_jsonl",
    "repair_jsonl",
    "flatten_scalars",
    "MetricLogger",
    "TrackerError",
    "missing_tracker",
]


def _default(obj: Any) -> Any:
    # numpy scalars and arrays, Paths and sets appear in metric dicts; make them plain JSON.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _dumps(obj: Any) -> str:
    # NaN/inf are not JSON; write them as null so every reader (browsers, jq, pandas) accepts the file.
    text = json.dumps(obj, default=_default, ensure_ascii=False, separators=(", ", ": "), allow_nan=True)
    if "NaN" in text or "Infinity" in text:
        text = json.dumps(_nan_to_none(json.loads(text)), ensure_ascii=False, separators=(", ", ": "))
    return text


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def append_jsonl(path: str | os.PathLike, obj: Mapping[str, Any], fsync: bool = False) -> None:
    """Append `obj` as one JSON line to `path` (created with its parent folder if missing).

    The line is written with one `os.write` on an O_APPEND descriptor, so it lands whole at the end of the
    file even with several writers; `fsync=True` also forces it to disk (checkpoint events).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (_dumps(obj) + "\n").encode("utf-8")
    safe_files.append_bytes(path, data, fsync=fsync)  # never through a link, never into a FIFO (issue 50)


def iter_jsonl(path: str | os.PathLike, missing_ok: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file, skipping a cut (unterminated or unparsable) last line.

    A corrupt line in the middle (a run resumed without repair) is skipped with a warning naming the
    file and line, so that a report can still be drawn; blank lines are ignored.
    """
    path = Path(path)
    if not os.path.lexists(path):  # a dangling link is not "missing": read_bytes refuses it
        if missing_ok:
            return
        raise FileNotFoundError(f"{path} does not exist")
    data = safe_files.read_bytes(path)  # a link or a FIFO: RunFileError, never a hang (issue 50)
    # Everything after the last newline is a write in progress or a line cut by a kill: never trust it.
    body = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
    for lineno, raw in enumerate(body, start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            warnings.warn(
                f"{path}:{lineno}: skipping a corrupt line (`populora train --resume` repairs it)",
                stacklevel=2,
            )
            continue
        if isinstance(rec, dict):
            yield rec


def read_jsonl(path: str | os.PathLike, missing_ok: bool = False) -> list[dict[str, Any]]:
    """Read every complete record of a JSONL file (see `iter_jsonl`)."""
    return list(iter_jsonl(path, missing_ok=missing_ok))


def repair_jsonl(path: str | os.PathLike, keep: Callable[[dict[str, Any]], bool] | None = None) -> int:
    """Make a JSONL file safe to append to again; return the number of lines removed.

    Drops a cut last line and any unparsable line; with `keep`, also drops records for which
    `keep(record)` is False (e.g. `keep=lambda r: r["step"] <= ckpt_step` on resume). The file is
    rewritten atomically (temporary file + rename); a missing file is left missing (0 returned).
    """
    path = Path(path)
    if not os.path.lexists(path):
        return 0
    data = safe_files.read_bytes(path)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    kept: list[bytes] = []
    removed = 0
    for i, raw in enumerate(lines):
        cut = i == len(lines) - 1 and not data.endswith(b"\n")
        try:
            rec = None if cut else json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            rec = None
        if not raw.strip() and not cut:
            continue  # blank lines are harmless; dropping them is not a removal
        if rec is None or not isinstance(rec, dict) or (keep is not None and not keep(rec)):
            removed += 1
            continue
        kept.append(raw)
    if removed == 0 and (not lines or data.endswith(b"\n")):
        return 0
    safe_files.replace_lines(path, kept)
    return removed


def flatten_scalars(obj: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, float]:
    """Flatten nested dicts into `{"members/T0/solve_rate/code_i": 0.5, ...}` keeping finite numbers only.

    Lists are flattened when they are the per-step matchups (keyed `matchups/<teacher>-<student>/...`);
    other lists, strings and None are skipped. Booleans become 0/1.
    """
    out: dict[str, float] = {}
    for key, val in obj.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(val, bool):
            out[name] = float(val)
        elif isinstance(val, int | float):
            if math.isfinite(val):
                out[name] = float(val)
        elif isinstance(val, Mapping):
            out.update(flatten_scalars(val, name, sep))
        elif isinstance(val, list) and key == "matchups":
            for m in val:
                if isinstance(m, Mapping) and "teacher" in m and "student" in m:
                    rest = {k: v for k, v in m.items() if k not in ("teacher", "student")}
                    out.update(flatten_scalars(rest, f"{name}{sep}{m['teacher']}-{m['student']}", sep))
    return out


def _flatten_params(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, val in obj.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(val, Mapping):
            out.update(_flatten_params(val, name))
        else:
            out[name] = str(val)
    return out


# flag -> (module to import, what to install)
TRACKERS = {
    "tensorboard": ("tensorboard", "pip install tensorboard"),
    "wandb": ("wandb", "pip install wandb"),
    "mlflow": ("mlflow", "pip install mlflow"),
}


class TrackerError(RuntimeError):
    """A tracker was asked for but cannot be used; `str(err)` is one line naming the fix."""


def _installed(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None  # None: the import is blocked
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_tracker(tensorboard: bool = False, wandb: bool = False, mlflow: bool = False) -> str | None:
    """One line for the first tracker asked for whose package is not installed, else None. Cheap (nothing is
    imported), so `populora train` checks it before loading a model."""
    for flag, on in (("tensorboard", tensorboard), ("wandb", wandb), ("mlflow", mlflow)):
        module, install = TRACKERS[flag]
        if on and not _installed(module):
            return (
                f"log.{flag}=true needs the {module} package, which is not installed: {install} "
                f"(or pip install 'populora[tracking]'), or drop log.{flag}."
            )
    return None


class MetricLogger:
    """Per-step metric logging: `RUN_DIR/metrics.jsonl` always, plus optional trackers.

    `tensorboard=True` writes under `RUN_DIR/tensorboard/`; `wandb=True` / `mlflow=True` log to those services
    (their usual environment variables pick the server; `project` is the W&B project and MLflow experiment,
    `entity` the W&B entity, `run_name` and `tags` name the run in both). Trackers get the per-role aggregates
    and per-lineage member curves of `diagnostics.tracker_scalars`, not every JSONL number. A missing package
    raises TrackerError (one line). Records must carry an integer `"step"`.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        tensorboard: bool = False,
        wandb: bool = False,
        mlflow: bool = False,
        config: Mapping[str, Any] | None = None,
        project: str = "populora",
        run_name: str | None = None,
        entity: str | None = None,
        tags: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._tb = None
        self._wandb = None
        self._mlflow = None
        missing = missing_tracker(tensorboard, wandb, mlflow)
        if missing:
            raise TrackerError(missing)
        self.lineages = Lineages()
        if tensorboard or wandb or mlflow:  # a resumed run: its lineages so far, from its own logs
            first = next(iter_jsonl(self.path, missing_ok=True), None)
            if first and isinstance(first.get("members"), Mapping):
                self.lineages.start(first["members"])
                self.lineages.replay(iter_jsonl(self.run_dir / "events.jsonl", missing_ok=True))
        name = run_name or self.run_dir.name
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if wandb:
            import wandb as _wandb

            self._wandb = _wandb.init(
                project=project,
                entity=entity or None,
                name=name,
                tags=list(tags) or None,
                dir=str(self.run_dir),
                config=dict(config or {}),
            )
        if mlflow:
            import mlflow as _mlflow

            _mlflow.set_experiment(project)
            self._mlflow = _mlflow.start_run(run_name=name, tags={t: "" for t in tags} or None)
            if config:
                _mlflow.log_params(_flatten_params(config))
            self._mlflow_mod = _mlflow

    def observe(self, event: Mapping[str, Any]) -> None:
        """See an events.jsonl record: an evolution's child takes over the lineage of the member it replaced."""
        if event.get("type") == "evolution" and event.get("child") and event.get("replaced"):
            self.lineages.inherit(str(event["child"]), str(event["replaced"]))

    def log(self, step_metrics: Mapping[str, Any]) -> None:
        """Append one step's record to metrics.jsonl and send its scalars to the enabled trackers."""
        if "step" not in step_metrics:
            raise ValueError("a metrics record needs a 'step' key")
        append_jsonl(self.path, step_metrics)
        if self._tb is None and self._wandb is None and self._mlflow is None:
            return
        step = int(step_metrics["step"])
        scalars = tracker_scalars(step_metrics, self.lineages)
        if self._tb is not None:
            for key, val in scalars.items():
                self._tb.add_scalar(key, val, global_step=step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._mlflow is not None:
            self._mlflow_mod.log_metrics(scalars, step=step)

    def close(self) -> None:
        """Flush and close the trackers (the JSONL file needs nothing: every line is already flushed)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._mlflow is not None:
            self._mlflow_mod.end_run()
            self._mlflow = None

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
