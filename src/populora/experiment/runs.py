"""Running the trainings of an experiment: one run folder per (arm, seed), resumable, with progress lines.

A run is *done* when its metrics.jsonl reaches `train.steps`; a run with a checkpoint is resumed from it; any
other folder is started over (a run killed before its first checkpoint has nothing to keep). So an
experiment killed at any point continues where it stopped when the same command is given again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


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
    for line in f.read_text().splitlines():
        try:
            last = max(last, int(json.loads(line).get("step", 0)))
        except (ValueError, AttributeError):
            continue  # a line cut by a kill
    return last


def target_steps(spec: RunSpec) -> int:
    from populora.config import load_config

    return load_config(spec.preset, spec.overrides).train.steps


def run_one(spec: RunSpec) -> str:
    """Train (or resume, or skip) one run; returns what was done: 'done', 'resumed' or 'trained'."""
    import shutil

    from populora.train import checkpoint as ckpt
    from populora.train.launch import train

    steps = target_steps(spec)
    if last_step(spec.path) >= steps:
        return "done"
    if spec.path.exists() and ckpt.latest_checkpoint(spec.path) is not None:
        train(resume=spec.path, quiet=True)
        return "resumed"
    if spec.path.exists():
        shutil.rmtree(spec.path)  # killed before its first checkpoint: nothing to keep
    spec.path.parent.mkdir(parents=True, exist_ok=True)
    train(preset=spec.preset, run_dir=spec.path, overrides=spec.overrides, quiet=True)
    return "trained"


def interrupted_line(specs: Sequence[RunSpec], i: int, err: BaseException) -> str:
    """What an experiment interrupted during run `i` (1-based) kept, and how to go on."""
    spec = specs[i - 1]
    saved = getattr(err, "step", None)  # TrainingInterrupted: the step its Ctrl-C checkpoint holds
    if saved is None:
        from populora.train import checkpoint as ckpt

        newest = ckpt.latest_checkpoint(spec.path) if spec.path.is_dir() else None
        saved = newest[0] if newest else None
    where = f"checkpoint at step {saved}" if saved else "no checkpoint yet (it starts over)"
    return (
        f"[{i}/{len(specs)}] interrupted during {spec.name}: {i - 1} of {len(specs)} runs finished, "
        f"{spec.name} has a {where}; give the same command again to continue (finished runs are kept)."
    )


def run_all(specs: Sequence[RunSpec], log: Callable[[str], None] = print) -> dict[str, float]:
    """Run every spec in order with one progress line each; returns {name: seconds} of the runs made here."""
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    for i, spec in enumerate(specs, 1):
        t0 = time.perf_counter()
        log(f"[{i}/{len(specs)}] {spec.name}: {spec.path} ...")
        try:
            what = run_one(spec)
        except KeyboardInterrupt as err:
            log(interrupted_line(specs, i, err))
            raise
        dt = time.perf_counter() - t0
        if what != "done":
            seconds[spec.name] = dt
        made = [s for s in seconds.values()]
        left = len(specs) - i
        eta = f", about {left * sum(made) / len(made) / 60:.0f} min left" if made and left else ""
        log(
            f"[{i}/{len(specs)}] {spec.name}: {what} in {dt:.0f} s "
            f"(elapsed {(time.perf_counter() - t_all) / 60:.1f} min{eta})"
        )
    return seconds
