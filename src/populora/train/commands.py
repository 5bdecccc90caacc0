"""CLI: `populora train`, `populora demo`, `populora bench population`.

Heavy imports (torch, the engine, the trainer) happen inside the commands, deliberately: the CLI registers
every command at start-up and `populora --help` must not load torch. Every user-caused error (bad config value,
unknown preset, missing model, a run folder that is not resumable) prints one line and exits with code 2.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from populora.config import Config, ConfigError, field_docs, to_dict


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _print_config_help() -> None:
    defaults = to_dict(Config())
    for key, doc in field_docs().items():
        section, name = key.split(".", 1)
        typer.echo(f"{key} = {defaults[section][name]!r}\n    {doc}")


def run_training(
    preset: str | None,
    run_dir: Path | None,
    overrides: list[str],
    resume: Path | None,
    quiet: bool = False,
    from_checkpoint: str | None = None,
) -> Path:
    """Shared by `train` and `demo`: resolve the config, run, and turn user errors into one line."""
    from populora.engine.types import EngineError

    try:
        from populora.train.errors import TrainError
        from populora.train.launch import train

        return train(
            preset=preset,
            run_dir=run_dir,
            overrides=overrides,
            resume=resume,
            quiet=quiet,
            from_checkpoint=from_checkpoint,
        )
    except ConfigError as err:
        _fail(str(err))
    except TrainError as err:
        _fail(str(err))
    except EngineError as err:  # e.g. a dist worker died mid-run: the message says how to resume
        where = resume or run_dir
        _fail(str(err) if where is None else str(err).replace("RUN_DIR", str(where)))
    except KeyboardInterrupt as err:  # TrainingInterrupted names the run folder and what was saved
        typer.echo(str(err) or "interrupted; the newest checkpoint is kept", err=True)
        raise typer.Exit(130) from None
    raise AssertionError("unreachable")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        preset: str = typer.Option(
            None,
            "--preset",
            "-p",
            help="Preset name (tiny, smol, paper-7b, ablation-*) or a YAML file (default tiny).",
        ),
        run_dir: Path = typer.Option(
            None, "--run-dir", "-o", help="Run folder (default runs/<preset>-<time>)."
        ),
        set_: list[str] = typer.Option(
            [], "--set", "-s", help="Override a config key: --set rl.lr=1e-4 (repeatable)."
        ),
        resume: Path = typer.Option(
            None,
            "--resume",
            help="Continue the run in this folder (or RUN/checkpoints/step_N) from its newest checkpoint.",
        ),
        from_checkpoint: str = typer.Option(
            None,
            "--from-checkpoint",
            help="With --resume RUN and --run-dir NEW: copy RUN up to this checkpoint (step_N, N or latest) "
            "into NEW and continue there; RUN is not changed.",
        ),
        quiet: bool = typer.Option(
            False, "--quiet", "-q", help="No progress bar; one summary line per step."
        ),
        help_config: bool = typer.Option(
            False, "--help-config", help="List every config key with its default and meaning, then exit."
        ),
    ) -> None:
        """Self-play training: teachers propose, matched students solve, the population evolves."""
        if help_config:
            _print_config_help()
            return
        out = run_training(preset, run_dir, list(set_), resume, quiet, from_checkpoint)
        typer.echo(f"run folder: {out}")

    @app.command("demo")
    def demo_cmd(
        run_dir: Path = typer.Option(None, "--run-dir", "-o", help="Run folder (default runs/demo-<time>)."),
        set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key (repeatable)."),
    ) -> None:
        """Train the tiny 2T+2S preset on this machine, then write the HTML report."""
        out = run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        out = run_training("tiny", out, list(set_), None)
        typer.echo(f"run folder: {out}")
        report = _write_report(out)
        if report is not None:
            typer.echo(f"report: {report}")

    @bench.command("population")
    def bench_population(
        quick: bool = typer.Option(False, "--quick", help="Fewer steps and configurations (a smoke run)."),
        out: Path = typer.Option(None, "--out", help="JSON output (default bench/results/population.json)."),
    ) -> None:
        """Wall-clock of single vs 1T+1S vs 2T+2S vs 4T+4S at the same per-adapter work, with phase timings."""
        from populora.train.bench import run

        run(quick=quick, out=out)


def _write_report(run_dir: Path) -> Path | None:
    try:
        from populora.report import write_report
    except ImportError:
        typer.echo(
            "note: the report package is not installed; run `populora report RUN_DIR` later.", err=True
        )
        return None
    try:
        return Path(write_report(run_dir))
    except Exception as err:  # noqa: BLE001 - a report failure must not hide a finished run
        typer.echo(f"note: could not write the report ({err}); the run folder is complete.", err=True)
        return None
