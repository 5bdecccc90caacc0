"""Checkpoints of a run (`Trainer.save`, `Trainer.restore`): what a checkpoint holds and how a run continues
from one.

Owns the contents of a checkpoint (every member's adapter as a PEFT folder, the optimiser state, the run's rng,
the buffers, and state.json: the population with its ratings and lineage, the coverage archive, the hall of
fame, whether the final step's evolution is pending) and restoring all of them: the newest intact checkpoint
is chosen, a damaged newer one is set aside (kept, never deleted), the logs are cut back to its step, and a
run extended past a final step that skipped its evolution runs it first (train/evolve.py). The folder-level
mechanics (atomic writes, pruning, reading back, damage checks) are train/checkpoint.py's; the file formats
(data, never pickles) train/state_files.py's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from populora.engine import EngineError
from populora.population.members import Population
from populora.tasks.buffers import TaskBuffers
from populora.train import checkpoint as ckpt
from populora.train.errors import TrainError
from populora.train.evolve import deferred_evolution
from populora.train.state_files import OPTIMIZER_FILE, RNG_FILE, write_rng, write_tree


def save(tr, step: int) -> Path:
    """Write an atomic checkpoint of everything a resume needs (train/checkpoint.py); return its folder."""
    t0 = time.perf_counter()

    def write(d: Path) -> None:
        for m in tr.pop.ordered():
            tr.engine.save_adapter(m.slot, d / "adapters" / m.id)
        write_tree(d / OPTIMIZER_FILE, tr.engine.optimizer_state())  # data, never a pickle
        write_rng(d / RNG_FILE, tr.rng)
        tr.buffers.save(d / "buffers.jsonl")
        ckpt.write_json(
            d / "state.json",
            {
                "step": step,
                "mode": tr.cfg.population.mode,
                "seed": tr.cfg.train.seed,
                "members": tr.pop.to_dict()["members"],
                "population": tr.pop.to_dict(),
                "coverage": tr.coverage.state_dict(),
                "evolution_pending": tr._evolution_pending,
                "hall": tr.hof.state_dict(),
                "time": time.time(),
            },
        )

    try:
        path = ckpt.save_checkpoint(tr.run.path, step, write, keep=tr.cfg.train.keep_checkpoints)
    except Exception as err:  # noqa: BLE001 - torch and safetensors report a full disk in their own types
        raise ckpt.checkpoint_write_error(err, tr.run.path, step) from None
    rel = path.relative_to(tr.run.path).as_posix()
    seconds = time.perf_counter() - t0
    tr.run.event({"step": step, "type": "checkpoint", "path": rel, "seconds": round(seconds, 4)}, fsync=True)
    tr._pending_checkpoint_s = seconds  # the next step's metrics count it (phase_s.checkpoint)
    return path


def restore(tr, branched_from: str | None = None) -> int:
    """Load the newest intact checkpoint; repair the logs to it; return its step. `branched_from` (the
    source run of a branch, train/resume.py) is recorded on the resume event.

    A damaged newer checkpoint (a file that cannot be read back) is reported, renamed `damaged-step_N`
    (kept, never deleted) and the next older one is tried; when none is intact, a TrainError says so."""
    ckpt.clear_leftovers(tr.run.path)  # a kill mid-save or mid-prune: its temp folders are garbage
    found = ckpt.list_checkpoints(tr.run.path)
    if not found:  # killed before the first checkpoint: start over, dropping the partial logs
        tr.run.repair(0)
        return 0
    from populora.lora.peft_io import load_peft

    damaged: list[str] = []
    chosen = None
    like = tr.engine.optimizer_state()  # a checkpoint's optimizer state must have this layout
    for candidate in reversed(found):
        try:
            data = ckpt.read_checkpoint(candidate[1], load_peft, TaskBuffers.load, optimizer_like=like)
            apply_checkpoint(tr, data)
        except ckpt.CheckpointDamaged as err:
            damaged.append(f"{candidate[1].name}: {err}")
            continue
        chosen = candidate
        break
    if chosen is None:
        raise TrainError(
            f"--resume {tr.run.path}: every checkpoint is damaged ({'; '.join(damaged)}); "
            "start a new run with another --run-dir (this folder is left as it is)."
        )
    step, path = chosen
    kept = [ckpt.set_aside(p) for s_, p in reversed(found) if s_ > step]  # newest first, as `damaged`
    for line, moved in zip(damaged, kept, strict=True):
        print(
            f"warning: checkpoint {line}; resuming from {path.name} instead "
            f"(the damaged one is kept as checkpoints/{moved.name}).",
            file=sys.stderr,
            flush=True,
        )
    state = data["state"]
    tr.run.repair(step)
    rel = path.relative_to(tr.run.path).as_posix()
    if not any(e.get("type") == "checkpoint" and e.get("step") == step for e in tr.run.read("events.jsonl")):
        # killed between the checkpoint's rename and its event line: record it now
        tr.run.event({"step": step, "type": "checkpoint", "path": rel, "seconds": None})
    for line in damaged:
        tr.run.event({"step": step, "type": "damaged_checkpoint", "reason": line})
    origin = {"branched_from": branched_from} if branched_from else {}
    tr.run.event({"step": step, "type": "resume", "from": rel, **origin}, fsync=True)
    if state.get("evolution_pending") and step < tr.cfg.train.steps:
        deferred_evolution(tr, step)
    return step


def apply_checkpoint(tr, data: dict) -> None:
    """Load checkpoint `data` (read and checked by `ckpt.read_checkpoint`) into the engine, RNGs, buffers
    and coverage. A part the engine still refuses (e.g. an adapter of another shape) raises
    CheckpointDamaged; every part is overwritten by the next candidate, so a half-applied one leaves
    nothing behind."""
    try:
        pop = Population.from_dict(data["state"]["population"])
        for m in pop.ordered():
            tr.engine.set_adapter(m.slot, data["adapters"][m.id], reset_optimizer=True)
        tr.engine.load_optimizer_state(data["optimizer"])
        tr.coverage.load_state_dict(data["state"]["coverage"])
        tr.hof.restore(tr, data["state"].get("hall"))
    except (EngineError, KeyError, TypeError, ValueError, IndexError) as err:  # AdapterError: a ValueError
        raise ckpt.CheckpointDamaged(
            f"does not fit this run ({type(err).__name__}: {str(err)[:160]})"
        ) from None
    ckpt.restore_rng(data["rng"], tr.rng)  # checked against scratch generators when read
    tr.pop = pop
    tr.buffers = data["buffers"]


__all__ = ["apply_checkpoint", "restore", "save"]
