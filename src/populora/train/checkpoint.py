"""Atomic checkpoints and resume (docs/run-folder.md).

    RUN_DIR/checkpoints/step_NNNNNN/
        adapters/<member>/   PEFT LoRA folders, one per live member
        state.json           step, population (ids, roles, ratings, lineage), coverage archive, trainer state
        optimizer.pt         every slot's AdamW moments and step counts
        buffers.jsonl        the task buffers (one problem per line)
        rng.pt               python / numpy / torch RNG states

A checkpoint is first written under `checkpoints/.tmp-step_NNNNNN-<pid>/`, every file flushed to disk, and then
renamed to `step_NNNNNN` in one `os.rename`: a folder with that name is complete by construction, and a kill at
any moment leaves either the previous checkpoints or the new one (plus a temp folder the next save removes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

CKPT_RE = re.compile(r"^step_(\d{6,})$")


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def save_checkpoint(
    run_dir: str | os.PathLike, step: int, write: Callable[[Path], None], keep: int = 0
) -> Path:
    """Create `checkpoints/step_NNNNNN` atomically; `write(tmp_dir)` fills it and must write `state.json`.

    `keep > 0` deletes all but the newest `keep` complete checkpoints afterwards. Returns the final path.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a save that was killed
        shutil.rmtree(stale, ignore_errors=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}-{os.getpid()}"
    tmp.mkdir()
    try:
        write(tmp)
        if not (tmp / "state.json").is_file():
            raise RuntimeError("checkpoint writer did not write state.json")
        _fsync_tree(tmp)
        if final.exists():  # re-saving a step (e.g. after a resume at that step): replace it whole
            old = root / f".tmp-old-{step_dir_name(step)}-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep > 0:
        for _old_step, path in list_checkpoints(run_dir)[:-keep]:
            # Rename first: a kill mid-delete must never leave a half-deleted folder that looks complete.
            doomed = root / f".tmp-prune-{path.name}-{os.getpid()}"
            os.rename(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints `(step, path)`, oldest first (temp folders are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = CKPT_RE.match(p.name)
        if m and p.is_dir() and (p / "state.json").is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def read_state(ckpt: Path) -> dict:
    return json.loads((Path(ckpt) / "state.json").read_text())


def rng_state(py_rng) -> dict:
    """Python (the trainer's `random.Random`), numpy-global and torch RNG states, for `rng.pt`."""
    return {"python": py_rng.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng(state: dict, py_rng) -> None:
    py_rng.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
