"""CLI: `populora train`, `populora demo`, `populora bench population`.

Heavy imports (torch, the engine, the trainer) happen inside the commands, deliberately: the CLI registers
every command at start-up and `populora --help` must not load torch. Every user-caused error (bad config value,
unknown preset, missing model, a run folder that is not resumable) prints one line and exits with code 2.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from populora.cli_errors import fail
from populora.config import ConfigError

OVERRIDES_HELP = "Config overrides KEY=VALUE, as with --set (e.g. train.steps=5 rl.lr=1e-4)."


def _overrides(set_: list[str], bare: list[str] | None) -> list[str]:
    """`--set` values, then bare `key=value` arguments (torchtune / Hydra style) in the order given."""
    try:
        from populora.config_sources import bare_overrides  # the config models load only when a command runs

        return list(set_) + bare_overrides(bare)
    except ConfigError as err:
        fail(str(err))


def run_training(
    preset: str | None,
    run_dir: Path | None,
    overrides: list[str],
    resume: Path | None,
    quiet: bool = False,
    config_file: Path | None = None,
    from_checkpoint: str | None = None,
) -> Path:
    """Shared by `train` and `demo`: resolve the config, run, and turn user errors into one line.

    `launch.train` resolves and checks the config before it imports torch, so a config error costs no
    import; the engine's error class is only looked up once something failed after that point.
    """
    from populora.train.errors import TrainError

    try:
        from populora.train.launch import train

        return train(
            preset=preset,
            run_dir=run_dir,
            overrides=overrides,
            resume=resume,
            quiet=quiet,
            config_file=config_file,
            from_checkpoint=from_checkpoint,
        )
    except ConfigError as err:
        fail(str(err))
    except TrainError as err:
        fail(str(err))
    except Exception as err:  # not KeyboardInterrupt (a BaseException): handled below
        from populora.engine.types import EngineError

        if not isinstance(err, EngineError):
            raise
        # e.g. a dist worker died mid-run: the message says how to resume
        where = resume or run_dir
        fail(str(err) if where is None else str(err).replace("RUN_DIR", str(where)))
    except KeyboardInterrupt as err:  # TrainingInterrupted names the run folder and what was saved
        # a bare one: stopped before the run folder was prepared (resolving the config, importing torch)
        early = (
            f"interrupted before training started; {resume} is unchanged"
            if resume
            else "interrupted before training started; nothing was saved"
        )
        typer.echo(str(err) or early, err=True)
        raise typer.Exit(getattr(err, "exit_code", 130)) from None  # 143 after SIGTERM
    raise AssertionError("unreachable")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP),
        preset: str = typer.Option(
            None,
            "--preset",
            "-p",
            help="Preset name (tiny, smol, paper-7b, ablation-*) or a YAML file; default tiny.",
        ),
        config_file: Path = typer.Option(
            None,
            "--config",
            "-c",
            help="Your YAML file shaped like a preset, only the keys you change; its base is its `base:`, "
            "else --preset, else tiny.",
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
            False,
            "--help-config",
            help="List every config key with its value under --preset/--config/--set, where that value "
            "comes from and what the key means, then exit.",
        ),
    ) -> None:
        """Self-play training: teachers propose, matched students solve, the population evolves."""
        sets = _overrides(set_, overrides)
        if help_config:
            from populora.config_cli import print_config_help
            from populora.config_sources import read_run_config, resolve

            try:
                # with --resume: the run's saved config, as the resumed run will use it
                print_config_help(
                    read_run_config(resume, sets) if resume else resolve(preset, config_file, sets)
                )
            except ConfigError as err:
                fail(str(err))
            return
        out = run_training(preset, run_dir, sets, resume, quiet, config_file, from_checkpoint)
        typer.echo(f"run folder: {out}")

    @app.command("demo")
    def demo_cmd(
        overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP),
        run_dir: Path = typer.Option(None, "--run-dir", "-o", help="Run folder (default runs/demo-<time>)."),
        set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key (repeatable)."),
    ) -> None:
        """Train the tiny 2T+2S preset on this machine, then write the HTML report."""
        sets = _overrides(set_, overrides)
        out = run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        out = run_training("tiny", out, sets, None)
        typer.echo(f"run folder: {out}")
        report = _write_report(out)
        if report is not None:
            typer.echo(f"report: {report}")

    @bench.command("population")
    def bench_population(
        quick: bool = typer.Option(False, "--quick", help="Fewer steps and configurations (a smoke run)."),
        out: Path = typer.Option(None, "--out", help="JSON output (default bench/results/population.json)."),
        scaling: bool = typer.Option(
            True, "--scaling/--no-scaling", help="Also time single vs 1T+1S vs 2T+2S vs 4T+4S (default on)."
        ),
    ) -> None:
        """A tiny-learn step on the old vs new generation path (and with overlap, bfloat16 generation, the
        prefill on one thread, int8 generation), then single vs 1T+1S vs 2T+2S vs 4T+4S."""
        from populora.train.bench import run

        run(quick=quick, out=out, scaling=scaling)


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
