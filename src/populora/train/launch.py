"""The `populora train` entry point: resolve the config (a preset, or the saved one on `--resume`), prepare the
owner-only run folder, then build the `Trainer`, restore its newest intact checkpoint and fit. User errors
leave as `TrainError` / `ConfigError` with one line naming the fix."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from populora.config import read_yaml, resume_config, to_yaml
from populora.config_sources import resolve
from populora.train.errors import TrainError
from populora.train.run_folder import PRIVATE_UMASK, RunFolderError, lock_run_dir, prepare_run_dir

if TYPE_CHECKING:
    from populora.engine import PolicyEngine


def train(
    preset: str = "tiny",
    run_dir: str | Path | None = None,
    overrides: list[str] | tuple = (),
    resume: str | Path | None = None,
    quiet: bool = False,
    engine: PolicyEngine | None = None,
    config_file: str | Path | None = None,
) -> Path:
    """Run (or resume) training; returns the run folder. Raises ConfigError / TrainError on user errors.

    `preset` None means the default (tiny), or the `base:` of `config_file` (`populora.config_sources`).
    The config is resolved and checked before torch and the trainer are imported: a config error is instant.
    """
    if resume is not None and config_file is not None:
        raise TrainError(
            f"--config {config_file} with --resume {resume}: a run keeps its config; drop --config "
            "(only the keys --resume may change can be set with --set)."
        )
    if resume is not None:
        run_path = Path(resume)
        cfg_file = run_path / "config.yaml"
        if not cfg_file.is_file():
            raise TrainError(
                f"--resume {run_path}: no config.yaml there; pass a run folder written by `populora train`."
            )
        try:
            saved = read_yaml(cfg_file.read_text())  # plain data: aliases refused (config.read_yaml)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise TrainError(
                f"--resume {run_path}: config.yaml cannot be read ({type(err).__name__}); restore it from "
                "the run's first lines or start a new run."
            ) from None
        if not isinstance(saved, dict):
            raise TrainError(f"--resume {run_path}: config.yaml is not a config; start a new run.")
        cfg = resume_config(saved, overrides)
    else:
        cfg = resolve(preset, config_file, overrides).cfg
        name = Path(config_file or preset or "tiny").stem
        run_path = Path(run_dir) if run_dir else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    # Heavy imports (torch, transformers) only now, after the config has been resolved and checked.
    from populora.train import checkpoint as ckpt
    from populora.train.trainer import Trainer

    # Owner-only run folder (0700) and files (umask 077): the buffers hold the run's gold programs.
    old_umask = os.umask(PRIVATE_UMASK)
    lock_fd = None
    try:
        try:
            prepare_run_dir(run_path, "--resume" if resume is not None else "--run-dir")
            lock_fd = lock_run_dir(run_path)  # held until this function returns (or the process ends)
        except RunFolderError as err:
            raise TrainError(str(err)) from None
        # checked under the lock: two new runs started on one folder at once cannot both pass
        if resume is None and ((run_path / "metrics.jsonl").exists() or ckpt.list_checkpoints(run_path)):
            raise TrainError(
                f"--run-dir {run_path}: already holds a run; continue it with "
                f"`populora train --resume {run_path}` or choose another --run-dir."
            )
        trainer = Trainer(cfg, run_path, engine=engine, quiet=quiet)
        try:
            trainer.setup()
            start = trainer.restore() if resume is not None else 0
            trainer.run.write_config(to_yaml(cfg))  # on resume: records a changed train.steps
            if start >= cfg.train.steps:
                print(
                    f"nothing to do: {run_path} finished all {cfg.train.steps} steps "
                    "(raise train.steps with --set to continue).",
                    file=sys.stderr,
                )
            trainer.fit(start)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise TrainError(
                    f"cannot write to {run_path} ({err.strerror}); free some space or fix the folder, then "
                    f"continue with `populora train --resume {run_path}` (the newest checkpoint is intact)."
                ) from None
            raise
        finally:
            trainer.close()
    finally:
        os.umask(old_umask)
        if lock_fd is not None:
            os.close(lock_fd)
    return run_path
