"""Checkpoint references: the one resolver for `latest`, `final`, a step number and paths through an alias.

    resolve_checkpoint(run, "latest")    # RUN/checkpoints/step_000024: the newest complete checkpoint
    resolve_checkpoint(run, "final")     # the checkpoint of the run's last step (config.yaml train.steps)
    resolve_checkpoint(run, "12")        # or "step_000012": that step's checkpoint
    resolve_alias_path("RUN/checkpoints/latest/adapters/T0")   # -> RUN/checkpoints/step_000024/adapters/T0

Every command that takes a checkpoint or a path inside one (`populora eval TARGET --checkpoint REF`,
`populora evolve --parent`, ...) goes through these two functions, so the aliases mean the same everywhere.
`final` differs from `latest` only for a run that stopped early: then it is an error naming the newest
step and how to finish the run. A complete checkpoint is a `step_NNNNNN` folder holding `state.json`; the
folder-naming rule and the listing live here, torch-free, and `train.checkpoint` (save, resume) re-exports
them, so one rule serves both and a resume can be planned before torch is imported. Imports only pathlib, re,
yaml and `populora.safe_files` (no torch).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from populora import safe_files

ALIASES = ("latest", "final")
_STEP_DIR = CKPT_RE = re.compile(r"^step_(\d{6,})$")
_STEP_REF = re.compile(r"^(?:step_)?(\d+)$")


class CheckpointRefError(ValueError):
    """A checkpoint reference that names no checkpoint; the message says which exist and what to use."""


def complete_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """`(step, path)` of the run's complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / "state.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def step_dir_name(step: int) -> str:
    """The folder name of step `step`'s checkpoint: step_000024."""
    return f"step_{step:06d}"


list_checkpoints = complete_checkpoints  # the name train.checkpoint has always used


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    """`(step, path)` of the newest complete checkpoint, None when there is none."""
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def _planned_steps(run_dir: Path) -> int | None:
    """`train.steps` of the run's config.yaml (raised by a `--resume --set train.steps=N`), None if unreadable."""
    try:
        saved = yaml.safe_load(safe_files.read_text(run_dir / "config.yaml"))  # no link, no FIFO
        steps = saved["train"]["steps"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def resolve_checkpoint(run_dir: str | Path, ref: str = "latest") -> Path:
    """The checkpoint folder `ref` names in `run_dir`: latest, final, a step number or step_NNNNNN."""
    run_dir = Path(run_dir)
    ref = str(ref).strip()
    ckpts = complete_checkpoints(run_dir)
    if not ckpts:
        raise CheckpointRefError(
            f"{run_dir} has no complete checkpoint (checkpoints/step_*/ with state.json); train until the "
            "first one (train.checkpoint_every steps) or give another run folder."
        )
    newest_step, newest = ckpts[-1]
    if ref == "latest":
        return newest
    if ref == "final":
        planned = _planned_steps(run_dir)
        if planned is None:
            raise CheckpointRefError(
                f"{run_dir}: cannot read train.steps from config.yaml to find the final checkpoint; "
                "use `latest` or a step number."
            )
        if newest_step < planned:
            raise CheckpointRefError(
                f"{run_dir}: no final checkpoint, the run stopped at step {newest_step} of {planned}; use "
                f"`latest`, or finish it with `populora train --resume {run_dir}`."
            )
        return newest
    m = _STEP_REF.match(ref)
    steps = [s for s, _ in ckpts]
    if m:
        for step, path in ckpts:
            if step == int(m.group(1)):
                return path
    listing = ", ".join(map(str, steps[-8:])) + (" ..." if len(steps) > 8 else "")
    what = f"no checkpoint of step {int(m.group(1))}" if m else f"unknown checkpoint {ref[:80]!r}"
    raise CheckpointRefError(
        f"{run_dir}: {what}; use latest, final or a saved step ({listing}; older ones are pruned by "
        "train.keep_checkpoints)."
    )


def resolve_alias_path(path: str | Path) -> Path:
    """`path` with a `checkpoints/latest` or `checkpoints/final` component replaced by the checkpoint it
    names (`RUN/checkpoints/latest/adapters/T0`); any other path, or one that exists as written, unchanged."""
    path = Path(path)
    if path.exists():
        return path
    parts = path.parts
    for i in range(1, len(parts)):
        if parts[i] in ALIASES and parts[i - 1] == "checkpoints":
            run_dir = Path(*parts[: i - 1]) if i > 1 else Path(".")
            return resolve_checkpoint(run_dir, parts[i]).joinpath(*parts[i + 1 :])
    return path


__all__ = [
    "ALIASES",
    "CheckpointRefError",
    "complete_checkpoints",
    "resolve_alias_path",
    "resolve_checkpoint",
]
