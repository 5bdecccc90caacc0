"""What `populora train --resume` does with its flags: which folder trains, from which checkpoint.

`plan_resume` turns `--resume`, `--run-dir`, `--from-checkpoint` and `--preset` into a `ResumePlan`, refusing
contradictory combinations with one line each:

    --resume RUN                                          continue RUN from its newest checkpoint
    --resume RUN/checkpoints/step_N                       the same, when step_N is RUN's newest checkpoint
    --resume RUN --from-checkpoint step_N --run-dir NEW   branch: copy RUN up to step N into NEW, continue there
    --resume RUN/checkpoints/step_N --run-dir NEW         the same branch

A branch never changes RUN: `branch_run` builds the new folder beside NEW (config.yaml, the one checkpoint, the
three logs cut back to step N) and renames it into place, so an interrupted copy leaves nothing half-made.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from populora import checkpoint_ref as ckpt  # torch-free: a resume is planned before torch is imported
from populora import safe_files
from populora.config import RESUMABLE_KEYS, Config, from_dict, to_dict
from populora.train.errors import TrainError
from populora.train.run_folder import LOGS, repair_log


@dataclass(frozen=True)
class ResumePlan:
    """`run` trains; `branch_from` is (source run, checkpoint step) when `run` is a new branch to copy first."""

    run: Path
    branch_from: tuple[Path, int] | None = None


def _checkpoint_parts(path: Path) -> tuple[Path, int] | None:
    """(run folder, step) when `path` names a checkpoint folder `RUN/checkpoints/step_NNNNNN`, else None."""
    m = ckpt.CKPT_RE.match(path.name)
    if m and path.parent.name == "checkpoints":
        return path.parent.parent, int(m.group(1))
    return None


def _find_step(run: Path, text: str) -> int:
    """The step of checkpoint `text` of `run`: `step_000010`, `10` or `latest`; one line naming those there."""
    found = ckpt.list_checkpoints(run)
    steps = [s for s, _ in found]
    listing = ", ".join(p.name for _, p in found) or "none"
    if text in ("latest", "last", "newest"):
        if not steps:
            raise TrainError(
                f"--from-checkpoint {text}: {run} has no checkpoint yet; start a new run instead."
            )
        return steps[-1]
    m = ckpt.CKPT_RE.match(text)
    raw = m.group(1) if m else text
    if not raw.isdigit() or int(raw) not in steps:
        raise TrainError(
            f"--from-checkpoint {text}: no such checkpoint in {run}/checkpoints (there: {listing}); "
            "name one of those, its step number or `latest`."
        )
    return int(raw)


def _same(a: Path, b: Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b) or (a.exists() and b.exists() and a.samefile(b))


def plan_resume(
    resume: str | os.PathLike,
    run_dir: str | os.PathLike | None = None,
    from_checkpoint: str | None = None,
    preset: str | None = None,
) -> ResumePlan:
    """Check the flags given with `--resume` and say which folder trains; TrainError (one line) when they
    contradict each other."""
    source = Path(resume)
    parts = _checkpoint_parts(source)
    if parts is not None:
        run, step = parts
        if from_checkpoint is not None:
            raise TrainError(
                f"--resume {source} names a checkpoint and --from-checkpoint another; give "
                f"`--resume {run} --from-checkpoint {source.name}` (and --run-dir NEW) instead."
            )
        from_checkpoint = source.name
        source = run
    if preset is not None:
        raise TrainError(
            f"--preset {preset} with --resume: a resumed run keeps its own config ({source}/config.yaml); "
            f"drop --preset (--set may change only {', '.join(RESUMABLE_KEYS)})."
        )
    if not os.path.lexists(source / "config.yaml"):  # a link or FIFO there is refused when it is read
        # inside a run folder (its checkpoints/ folder, a damaged checkpoint, an adapter): name the run
        up = next((q for q in list(source.parents)[:3] if (q / "config.yaml").is_file()), None)
        hint = f" (it is inside the run folder {up}: pass --resume {up})" if up is not None else ""
        raise TrainError(
            f"--resume {source}: no config.yaml there{hint}; pass a run folder written by `populora train`."
        )
    newest = ckpt.latest_checkpoint(source)
    if from_checkpoint is None:
        if run_dir is not None and not _same(Path(run_dir), source):
            raise TrainError(
                f"--resume {source} continues that run in place, not in --run-dir {run_dir}; drop --run-dir, or "
                f"copy the run there and continue the copy with --from-checkpoint latest --run-dir {run_dir}."
            )
        return ResumePlan(source)
    step = _find_step(source, from_checkpoint)
    if run_dir is None:
        if newest is not None and step == newest[0]:
            return ResumePlan(source)  # the newest checkpoint: a plain resume of the run
        raise TrainError(
            f"--from-checkpoint {ckpt.step_dir_name(step)} is older than {source}'s newest checkpoint "
            f"({newest[1].name if newest else 'none'}); resuming in place would drop the steps after it: branch "
            f"into a new folder with `populora train --resume {source} --from-checkpoint "
            f"{ckpt.step_dir_name(step)} --run-dir NEW` (the run is not changed)."
        )
    dest = Path(run_dir)
    if _same(dest, source):
        raise TrainError(
            f"--run-dir {dest} is the run being branched; a branch goes into a new folder "
            "(the original run is never changed)."
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TrainError(
            f"--run-dir {dest}: not an empty folder; a branch is copied into a new (or empty) folder, "
            "choose another --run-dir."
        )
    return ResumePlan(dest, branch_from=(source, step))


def branch_run(source: Path, step: int, dest: Path) -> Path:
    """Copy `source` up to checkpoint `step` into `dest` (missing or empty): config.yaml, that checkpoint and
    the logs cut to records with step <= `step`. Built in a hidden sibling folder and renamed into place."""
    src_ckpt = source / "checkpoints" / ckpt.step_dir_name(step)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.branch-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(mode=0o700)
        # config.yaml and the logs are read as data (no link followed, no FIFO waited on: safe_files)
        safe_files.write_bytes_new(tmp / "config.yaml", safe_files.read_bytes(source / "config.yaml"))
        # symlinks are copied as links and then refused by the checkpoint reader, as in the source
        shutil.copytree(src_ckpt, tmp / "checkpoints" / src_ckpt.name, symlinks=True)
        for name in LOGS:
            if os.path.lexists(source / name):
                safe_files.write_bytes_new(tmp / name, safe_files.read_bytes(source / name))
                repair_log(tmp / name, step)
        if dest.exists():
            dest.rmdir()  # checked empty by plan_resume
        os.rename(tmp, dest)
    except safe_files.RunFileError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TrainError(f"--resume {source}: {err.strerror}.") from None
    except FileNotFoundError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TrainError(
            f"--from-checkpoint {src_ckpt.name}: {err.filename} vanished while copying (pruned by a run still "
            "writing the folder?); pick a checkpoint that is kept."
        ) from None
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TrainError(
            f"--run-dir {dest}: cannot copy the run there ({err.strerror or type(err).__name__}); "
            "choose a writable folder with space."
        ) from None
    return dest


def resume_line(run: Path, start: int, total: int, plan: ResumePlan) -> str:
    """The line a resume prints: which folder, from which checkpoint, how far along (and a branch's source)."""
    if plan.branch_from:
        source, step = plan.branch_from
        head = f"branched {source} at {ckpt.step_dir_name(step)} into {run}; "
    else:
        head = ""
    if start == 0:
        return f"{head}{run} has no checkpoint yet: starting it over from step 0 (of {total})"
    return f"{head}resuming {run} from checkpoint {ckpt.step_dir_name(start)} (step {start} of {total})"


def changed_settings(saved: dict, cfg: Config) -> str | None:
    """The line a resume prints when `--set` changed any of `RESUMABLE_KEYS` against the run's saved config
    (`saved`, config.yaml as loaded): `changed on resume: rl.micro_batch_tokens 4096 -> 2048, ...`; None when
    nothing changed. E.g. a run that ran out of GPU memory continues with smaller memory settings."""
    before, after = to_dict(from_dict(saved, check=False)), to_dict(cfg)
    changes = []
    for key in RESUMABLE_KEYS:
        section, name = key.split(".", 1)
        old, new = before.get(section, {}).get(name), after.get(section, {}).get(name)
        if old != new:
            changes.append(f"{key} {old!r} -> {new!r}")
    trust = before.get("model", {}).get("trust_remote_code"), after["model"]["trust_remote_code"]
    if trust[0] != trust[1]:  # given on this command line (a run folder cannot set it: config.CODE_KEYS)
        changes.append(f"model.trust_remote_code {trust[0]!r} -> {trust[1]!r}")
    if not changes:
        return None
    # train.steps is the run's length, not a memory or layout setting: its own words (issue 53)
    length = [c for c in changes if c.startswith("train.steps ")]
    rest = [c for c in changes if c not in length]
    parts = [
        f"{c} (the run's length: the steps done are kept, training goes on to the new end)" for c in length
    ]
    if rest:
        parts.append(
            ", ".join(rest)
            + " (memory, layout, checkpoint and loading settings: the update is the same up to "
            "float rounding)"
        )
    return "changed on resume: " + "; ".join(parts) + "; config.yaml now records the new values"


__all__ = ["ResumePlan", "branch_run", "changed_settings", "plan_resume", "resume_line"]
