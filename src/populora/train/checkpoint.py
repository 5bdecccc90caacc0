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

Resume reads a checkpoint whole into memory (`read_checkpoint`) before anything is applied; a checkpoint whose
files cannot be read back (a truncated state.json, optimizer.pt or adapter, an empty rng.pt) raises
`CheckpointDamaged` naming the file, and the trainer falls back to the next older one. A damaged checkpoint is
renamed `damaged-step_NNNNNN`, never deleted: it stays for inspection and no longer shadows the re-run step.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from populora.train.errors import TrainError

CKPT_RE = re.compile(r"^step_(\d{6,})$")


class CheckpointDamaged(Exception):
    """A checkpoint folder that cannot be read back; the message names the file and what is wrong with it."""


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


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(err).__name__}: {msg[:160]}" if msg else type(err).__name__


def read_checkpoint(
    ckpt: Path, load_adapter: Callable[[Path], Any], load_buffers: Callable[[Path], Any]
) -> dict[str, Any]:
    """Every file of checkpoint `ckpt`, read into memory: state, adapters (by member id), optimizer, rng,
    buffers. Raises `CheckpointDamaged` naming the first file that cannot be read (nothing is applied here,
    so a damaged checkpoint leaves the trainer untouched)."""
    ckpt = Path(ckpt)

    def read(name: str, fn: Callable[[Path], Any]) -> Any:
        path = ckpt / name
        if path.is_file() and path.stat().st_size == 0:
            raise CheckpointDamaged(f"{name} is empty")
        try:
            return fn(path)
        except Exception as err:  # noqa: BLE001 - any failure to read back a file means the checkpoint is damaged
            raise CheckpointDamaged(f"{name} cannot be read ({_short(err)})") from None

    state = read("state.json", lambda p: json.loads(p.read_text()))
    try:
        members = [m["id"] for m in state["population"]["members"]]
    except (KeyError, TypeError) as err:
        raise CheckpointDamaged(f"state.json lacks the population ({_short(err)})") from None
    adapters = {mid: read(f"adapters/{mid}", load_adapter) for mid in members}
    return {
        "state": state,
        "adapters": adapters,
        "optimizer": read("optimizer.pt", lambda p: torch.load(p, weights_only=False)),
        "rng": read("rng.pt", lambda p: torch.load(p, weights_only=False)),
        "buffers": read("buffers.jsonl", load_buffers),
    }


def set_aside(ckpt: Path) -> Path:
    """Rename a damaged checkpoint to `damaged-step_NNNNNN[-k]` (kept for inspection, ignored by resume)."""
    ckpt = Path(ckpt)
    target = ckpt.with_name(f"damaged-{ckpt.name}")
    k = 1
    while target.exists():
        target = ckpt.with_name(f"damaged-{ckpt.name}-{k}")
        k += 1
    os.rename(ckpt, target)
    return target


def rng_state(py_rng) -> dict:
    """Python (the trainer's `random.Random`), numpy-global and torch RNG states, for `rng.pt`."""
    return {"python": py_rng.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng(state: dict, py_rng) -> None:
    py_rng.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def checkpoint_write_error(err: BaseException, run_dir: Path, step: int) -> BaseException:
    """A TrainError naming why checkpoint `step` could not be written (disk full, read-only), or `err` itself
    when it is not a write failure. torch reports a full disk as a RuntimeError ("unexpected pos")."""
    text = str(err)
    write_failure = isinstance(err, OSError) or any(
        s in text
        for s in (
            "unexpected pos",
            "PytorchStreamWriter",
            "file write failed",
            "No space left",
            "StorageFull",
            "os error 28",
        )
    )
    if not write_failure:
        return err
    if isinstance(err, OSError) and err.errno not in (errno.ENOSPC, errno.EDQUOT):
        why = err.strerror or type(err).__name__
    else:
        why = "the disk is full"
    return TrainError(
        f"cannot write checkpoint {step_dir_name(step)} in {run_dir}/checkpoints ({why}); free some space "
        f"(or fix the folder), then continue with `populora train --resume {run_dir}` (the earlier "
        "checkpoints are intact)."
    )
