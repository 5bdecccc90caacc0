"""The `populora train` entry point: resolve the config (a preset, or the saved one on `--resume`), prepare the
owner-only run folder, then build the `Trainer`, restore its newest intact checkpoint and fit. User errors
leave as `TrainError` / `ConfigError` with one line naming the fix. A start that fails or is stopped before
anything useful is written removes the run folder it created (`run_folder.remove_unused_run_dir`)."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from populora import safe_files
from populora.config import ConfigError, read_yaml, resume_config, to_yaml
from populora.config_sources import resolve
from populora.diagnostics.sinks import missing_tracker
from populora.train.errors import TrainError
from populora.train.interrupt import (
    Terminated,
    TrainingInterrupted,
    cleanup_shield,
    sigterm_received,
    sigterm_stops,
)
from populora.train.run_folder import (
    PRIVATE_UMASK,
    RunFolderError,
    check_logs,
    lock_run_dir,
    prepare_run_dir,
    remove_unused_run_dir,
)

if TYPE_CHECKING:
    from populora.engine import PolicyEngine


def train(
    preset: str | None = None,
    run_dir: str | Path | None = None,
    overrides: list[str] | tuple = (),
    resume: str | Path | None = None,
    quiet: bool = False,
    engine: PolicyEngine | None = None,
    config_file: str | Path | None = None,
    from_checkpoint: str | None = None,
) -> Path:
    """Run (or resume, or branch) training; returns the run folder. Raises ConfigError / TrainError on user
    errors and `TrainingInterrupted` (a KeyboardInterrupt naming the run folder) on Ctrl-C or SIGTERM, after
    the trainer has closed its engine (dist workers, vLLM, scratch folders) and sandbox.

    `preset` None means the default (tiny), or the `base:` of `config_file` (`populora.config_sources`);
    with `resume` it must stay None (the run keeps its config). The config is resolved and checked before
    torch and the trainer are imported: a config error is instant.
    """
    plan = None
    if resume is None and from_checkpoint is not None:
        raise TrainError("--from-checkpoint needs --resume RUN (the run whose checkpoint is branched).")
    if resume is not None and config_file is not None:
        raise TrainError(
            f"--config {config_file} with --resume {resume}: a run keeps its config; drop --config "
            "(only the keys --resume may change can be set with --set)."
        )
    if resume is not None:
        from populora.train.resume import plan_resume  # reads checkpoints (torch): only when resuming

        plan = plan_resume(resume, run_dir, from_checkpoint, preset)  # refuses contradictory flags
        run_path = plan.branch_from[0] if plan.branch_from else plan.run  # the config comes from the source
        cfg_file = run_path / "config.yaml"
        try:
            # plain data: no link followed, no FIFO waited on (safe_files), aliases refused (config.read_yaml)
            saved = read_yaml(safe_files.read_text(cfg_file))
        except safe_files.RunFileError as err:
            raise TrainError(f"--resume {run_path}: {err}.") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise TrainError(
                f"--resume {run_path}: config.yaml cannot be read ({type(err).__name__}); restore it from "
                "the run's first lines or start a new run."
            ) from None
        if not isinstance(saved, dict):
            raise TrainError(f"--resume {run_path}: config.yaml is not a config; start a new run.")
        # settings that run code (model.trust_remote_code, a model inside the run, dist.address) are taken
        # from this command line only, never from the folder (issue 50): a one-line ConfigError otherwise
        cfg = resume_config(saved, overrides, run_path)
        run_path = plan.run
    else:
        cfg = resolve(preset, config_file, overrides).cfg
        name = Path(config_file or preset or "tiny").stem
        run_path = Path(run_dir) if run_dir else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    missing = missing_tracker(cfg.log.tensorboard, cfg.log.wandb, cfg.log.mlflow)
    if missing:  # before any folder or model: one line, not the tracker's import traceback
        raise ConfigError(missing)
    # Heavy imports (torch, transformers) only now, after the config has been resolved and checked.
    from populora.train import checkpoint as ckpt
    from populora.train.progress import upfront_line
    from populora.train.resume import branch_run, changed_settings, resume_line
    from populora.train.trainer import Trainer

    # A failed start removes the folder only if this start made it (never a --resume run or a folder given)
    created = plan is None and not os.path.lexists(run_path)
    # Owner-only run folder (0700) and files (umask 077): the buffers hold the run's gold programs.
    old_umask = os.umask(PRIVATE_UMASK)
    lock_fd = None
    try:
        try:
            if plan is not None and plan.branch_from:
                branch_run(*plan.branch_from, run_path)  # a new folder: the source run is never changed
            prepare_run_dir(run_path, "--resume" if plan and not plan.branch_from else "--run-dir")
            lock_fd = lock_run_dir(run_path)  # held until this function returns (or the process ends)
            check_logs(run_path)  # a link or FIFO among the logs: one line now, not an append outside later
        except (RunFolderError, safe_files.RunFileError) as err:
            raise TrainError(str(err)) from None
        # checked under the lock: two new runs started on one folder at once cannot both pass
        if resume is None and ((run_path / "metrics.jsonl").exists() or ckpt.list_checkpoints(run_path)):
            raise TrainError(
                f"--run-dir {run_path}: already holds a run; continue it with "
                f"`populora train --resume {run_path}` or choose another --run-dir."
            )
        with sigterm_stops():  # SIGTERM: stop at once, then the same cleanup as Ctrl-C (train/interrupt.py)
            try:
                trainer = Trainer(cfg, run_path, engine=engine, quiet=quiet)
            except Terminated:
                raise TrainingInterrupted(
                    run_path, None, signal_name="SIGTERM", newest=_newest(run_path)
                ) from None
            try:
                trainer.setup()
                start = 0
                if plan is not None:
                    source = plan.branch_from[0] if plan.branch_from else None
                    start = trainer.restore(branched_from=str(source) if source else None)
                    print(resume_line(run_path, start, cfg.train.steps, plan), file=sys.stderr, flush=True)
                    changed = changed_settings(saved, cfg)
                    if changed:
                        print(changed, file=sys.stderr, flush=True)
                trainer.run.write_config(to_yaml(cfg))  # on resume: records a changed train.steps
                if start >= cfg.train.steps:
                    print(
                        f"nothing to do: {run_path} finished all {cfg.train.steps} steps "
                        "(raise train.steps with --set to continue).",
                        file=sys.stderr,
                    )
                # a run estimated over 10 minutes says so before its first step (populora.estimate), once the
                # model has loaded and every check passed: a start that fails prints only its error
                line = None if quiet else upfront_line(cfg, run_path)
                if line:
                    print(line, file=sys.stderr, flush=True)
                trainer.fit(start)
            except safe_files.RunFileError as err:  # a run-folder file that is a link or FIFO (issue 50)
                raise TrainError(f"{run_path}: {err}.") from None
            except OSError as err:
                if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise TrainError(
                        f"cannot write to {run_path} ({err.strerror}); free some space or fix the folder, then "
                        f"continue with `populora train --resume {run_path}` (the newest checkpoint is intact)."
                    ) from None
                raise
            except TrainingInterrupted:
                raise
            except KeyboardInterrupt:  # SIGTERM, a second Ctrl-C, or Ctrl-C before the step loop
                how = "SIGTERM" if sigterm_received() else "SIGINT"
                raise TrainingInterrupted(run_path, None, signal_name=how, newest=_newest(run_path)) from None
            finally:
                with cleanup_shield():  # bounded; a Ctrl-C or SIGTERM here would leave workers behind
                    trainer.close()
    except BaseException as err:
        stop = err
        if isinstance(err, KeyboardInterrupt) and not isinstance(err, TrainingInterrupted):
            # e.g. Ctrl-C while the trainer was being built: the same one line as a stop in the step loop
            how = "SIGTERM" if sigterm_received() else "SIGINT"
            stop = TrainingInterrupted(run_path, None, signal_name=how, newest=_newest(run_path))
        # nothing useful written (only .lock, empty logs): no folder left behind for each failed start. Only
        # under our own lock: two starts racing on one new folder must not remove the other's .lock
        if (
            created
            and lock_fd is not None
            and remove_unused_run_dir(run_path)
            and isinstance(stop, TrainingInterrupted)
        ):
            stop.folder_removed()
        if stop is err:
            raise
        raise stop from None
    finally:
        os.umask(old_umask)
        if lock_fd is not None:
            os.close(lock_fd)
    return run_path


def _newest(run: Path) -> int | None:
    """The step of the run's newest checkpoint, if any (for the line a stop prints)."""
    from populora.train.checkpoint import list_checkpoints

    try:
        found = list_checkpoints(run)
    except OSError:
        return None
    return found[-1][0] if found else None
