"""Atomic checkpoints and resume (docs/run-folder.md).

    RUN_DIR/checkpoints/step_NNNNNN/
        adapters/<member>/   PEFT LoRA folders, one per live member
        state.json           step, population (ids, roles, ratings, lineage), coverage archive, trainer state
        optimizer.safetensors  every slot's AdamW moments and step counts (structure in its metadata)
        buffers.jsonl        the task buffers (one problem per line)
        rng.json             python / numpy / torch RNG states

A checkpoint is first written under `checkpoints/.tmp-step_NNNNNN-<pid>/`, every file flushed to disk, and then
renamed to `step_NNNNNN` in one `os.rename`: a folder with that name is complete by construction, and a kill at
any moment leaves either the previous checkpoints or the new one (plus a temp folder the next save removes).

Resume reads a checkpoint whole into memory (`read_checkpoint`) before anything is applied; a checkpoint whose
files cannot be read back (a truncated state.json, optimizer state or adapter, an empty rng.json) raises
`CheckpointDamaged` naming the file, and the trainer falls back to the next older one. A damaged checkpoint is
renamed `damaged-step_NNNNNN`, never deleted: it stays for inspection and no longer shadows the re-run step.

A run folder holds data, never code (issue 29): no file is unpickled beyond torch's restricted loader
(`state_files`), every member id is checked against `ID_RE` before it names a path, every path read stays
inside the checkpoint, and a file that reads but does not fit (`check_state`, `state_files.misfit`) is damaged
like one that does not read.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from populora import safe_files

# The step folders' naming and listing are torch-free, shared with the checkpoint references (and re-exported).
from populora.checkpoint_ref import (  # noqa: F401 - re-exported
    CKPT_RE,
    latest_checkpoint,
    list_checkpoints,
    step_dir_name,
)
from populora.population.members import ROLE_PREFIX, Member
from populora.train import state_files as sf
from populora.train.errors import TrainError
from populora.train.state_files import restore_rng, rng_state  # noqa: F401 - re-exported

# Member ids the trainer makes are T0, S3, A0, ...; anything else in a state.json (`../x`, `/etc`) is refused
# before it can name a path.
ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class CheckpointDamaged(Exception):
    """A checkpoint folder that cannot be read back; the message names the file and what is wrong with it."""


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


def clear_leftovers(run_dir: str | os.PathLike) -> None:
    """Delete the temp folders (`checkpoints/.tmp-*`) a killed save or prune left: never a complete checkpoint
    (those are renamed into place or out of it whole). Called before each save and when a run is restored,
    so a kill during the last save's prune leaves nothing behind once the run resumes."""
    for stale in (Path(run_dir) / "checkpoints").glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def save_checkpoint(
    run_dir: str | os.PathLike, step: int, write: Callable[[Path], None], keep: int = 0
) -> Path:
    """Create `checkpoints/step_NNNNNN` atomically; `write(tmp_dir)` fills it and must write `state.json`.

    `keep > 0` deletes all but the newest `keep` complete checkpoints afterwards. Returns the final path.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    clear_leftovers(run_dir)
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


def read_state(ckpt: Path) -> dict:
    return json.loads(safe_files.read_text(Path(ckpt) / "state.json"))


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(err).__name__}: {msg[:160]}" if msg else type(err).__name__


def _is_int(x: Any, lo: int = 0) -> bool:
    return type(x) is int and x >= lo


def _is_number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def check_state(state: Any) -> str | None:
    """Why `state.json` cannot be resumed from (the first problem found), or None when it fits: the population
    (ids matching ID_RE with their role's prefix, distinct slots, finite ratings), the coverage archive and
    the trainer flags, each of the type the trainer writes."""
    if not isinstance(state, dict):
        return "is not a JSON object"
    pop = state.get("population")
    if not isinstance(pop, dict) or not isinstance(pop.get("members"), list) or not pop["members"]:
        return "lacks the population (population.members)"
    nxt = pop.get("next_index")
    if not isinstance(nxt, dict) or not all(k in ROLE_PREFIX.values() and _is_int(v) for k, v in nxt.items()):
        return "population.next_index is not a map of role prefixes to counts"
    fields = {f.name for f in dataclasses.fields(Member)}
    slots = set()
    for m in pop["members"]:
        if not isinstance(m, dict) or not {"id", "role", "slot", "mu", "sigma"} <= set(m) <= fields:
            return "a population member lacks id/role/slot/mu/sigma or has unknown keys"
        mid = m["id"]
        if not isinstance(mid, str) or not ID_RE.match(mid):
            return f"member id {str(mid)[:40]!r} is not an id (letters, digits, _ and -, from a letter)"
        if m["role"] not in ROLE_PREFIX or not mid.startswith(ROLE_PREFIX[m["role"]]):
            return f"member {mid}: role {str(m['role'])[:20]!r} does not match its id"
        if not _is_int(m["slot"]) or m["slot"] in slots:
            return f"member {mid}: slot {str(m['slot'])[:20]!r} is not a distinct slot number"
        slots.add(m["slot"])
        if not (_is_number(m["mu"]) and _is_number(m["sigma"]) and m["sigma"] > 0):
            return f"member {mid}: rating mu/sigma is not a pair of finite numbers (sigma > 0)"
        parents = m.get("parents", [])
        if not isinstance(parents, list) or not all(isinstance(p, str) and ID_RE.match(p) for p in parents):
            return f"member {mid}: parents is not a list of ids"
        if not (_is_int(m.get("born_step", 0)) and _is_int(m.get("games", 0))):
            return f"member {mid}: born_step/games is not a count"
        if m.get("operator") is not None and not isinstance(m["operator"], str):
            return f"member {mid}: operator is not a name"
    if len({m["id"] for m in pop["members"]}) != len(pop["members"]):
        return "two members share an id"
    cov = state.get("coverage")
    if not isinstance(cov, dict) or not _is_int(cov.get("n_cells"), 1):
        return "coverage lacks n_cells"
    cells, counts = cov.get("cells"), cov.get("counts")
    if not (
        isinstance(cells, list)
        and isinstance(counts, list)
        and len(cells) == len(counts)
        and all(_is_int(c) and c < cov["n_cells"] for c in cells)
        and all(_is_int(c) for c in counts)
    ):
        return "coverage cells/counts are not matching lists of cell numbers and counts"
    if not isinstance(state.get("evolution_pending", False), bool):
        return "evolution_pending is not true/false"
    return None


def _not_data(path: Path) -> str | None:
    """Why `path` (a checkpoint file, or an adapter folder and its files) is not plain data, or None: a FIFO,
    device or socket would block or feed a reader forever (issue 50), an empty file is a cut write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None  # the reader says "cannot be read (FileNotFoundError)"
    if stat.S_ISDIR(st.st_mode):
        for entry in os.scandir(path):
            if not (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False)):
                return f"holds {entry.name}, which is a link or not a regular file"
        return None
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, device or socket)"
    return "is empty" if st.st_size == 0 else None


def read_checkpoint(
    ckpt: Path,
    load_adapter: Callable[[Path], Any],
    load_buffers: Callable[[Path], Any],
    optimizer_like: Any = None,
) -> dict[str, Any]:
    """Every file of checkpoint `ckpt`, read into memory and checked: state, adapters (by member id),
    optimizer, rng, buffers. Raises `CheckpointDamaged` naming the first file that cannot be read or does
    not fit (nothing is applied here, so a damaged checkpoint leaves the trainer untouched). With
    `optimizer_like` (the running engine's `optimizer_state()`), the optimizer state must match its layout.

    RNG and optimizer state come from `rng.json` / `optimizer.safetensors`; a checkpoint written before
    those existed is read from `rng.pt` / `optimizer.pt` with torch's restricted (weights-only) unpickler."""
    ckpt = Path(ckpt)
    inside = ckpt.resolve()

    def read(name: str, fn: Callable[[Path], Any]) -> Any:
        path = ckpt / name
        if path.is_symlink() or not path.resolve().is_relative_to(inside):
            raise CheckpointDamaged(f"{name} is a link; a checkpoint holds its own files")
        problem = _not_data(path)
        if problem:
            raise CheckpointDamaged(f"{name} {problem}")
        try:
            return fn(path)
        except Exception as err:  # noqa: BLE001 - any failure to read back a file means the checkpoint is damaged
            raise CheckpointDamaged(f"{name} cannot be read ({_short(err)})") from None

    def pick(new: str, legacy: str) -> str:
        return legacy if not (ckpt / new).exists() and (ckpt / legacy).exists() else new

    state = read("state.json", lambda p: json.loads(safe_files.read_text(p)))
    problem = check_state(state)
    if problem:
        raise CheckpointDamaged(f"state.json does not fit: {problem}")
    members = [m["id"] for m in state["population"]["members"]]
    adapters = {mid: read(f"adapters/{mid}", load_adapter) for mid in members}
    opt_name = pick(sf.OPTIMIZER_FILE, sf.LEGACY_OPTIMIZER_FILE)
    optimizer = read(opt_name, sf.read_tree if opt_name == sf.OPTIMIZER_FILE else sf.read_legacy)
    if optimizer_like is not None:
        problem = sf.misfit(optimizer, optimizer_like)
        if problem:
            raise CheckpointDamaged(f"{opt_name} does not fit this run: {problem}")
    rng_name = pick(sf.RNG_FILE, sf.LEGACY_RNG_FILE)
    rng = read(
        rng_name, sf.read_rng if rng_name == sf.RNG_FILE else lambda p: sf.check_rng(sf.read_legacy(p))
    )
    return {
        "state": state,
        "adapters": adapters,
        "optimizer": optimizer,
        "rng": rng,
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
