"""The `populora` command line: one sub-command per job (train, report, eval, evolve, bench, ...).

Each package contributes its commands through a `commands.py` module exposing
`register(app, bench)`; this file only assembles them. Command modules import heavy libraries
(torch, transformers) inside the command functions, so `populora --help` stays fast.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import typer

from populora import __version__, config_cli

app = typer.Typer(
    name="populora",
    help="Population-based asymmetric self-play RL post-training of LLMs with evolving LoRA adapters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
bench = typer.Typer(
    help="Benchmarks: print a table, write JSON under bench/results/, compare to alternatives.",
    no_args_is_help=True,
)
app.add_typer(bench, name="bench")

# Order fixes the order in `--help`.
COMMAND_PACKAGES = [
    "train",
    "report",
    "experiment",
    "evaluate",
    "operators",
    "engine",
    "pretrain",
    "tasks",
    "sandbox",
]


def _load_commands(package: str):
    """Load `populora/<package>/commands.py` by path, without running the package's `__init__`.

    Package `__init__`s import torch or matplotlib (seconds); the command modules import them only inside
    the command functions, so `populora --help` and config errors appear at once.
    """
    path = Path(__file__).parent / package / "commands.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"populora._commands.{package}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version(value: bool) -> None:
    if value:
        typer.echo(f"populora {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """PopuLoRA: teachers and students are LoRA adapters on one frozen base; they evolve."""


for _package in COMMAND_PACKAGES:
    _module = _load_commands(_package)
    if _module is not None:
        _module.register(app, bench)
config_cli.register(app, bench)  # `populora config show`: config modules only, no package __init__ to skip

from populora import export as _export  # noqa: E402 - a module, not a package; light (heavy imports inside)

_export.register(app, bench)

from populora import doctor as _doctor  # noqa: E402 - a module; heavy imports inside its functions

_doctor.register(app, bench)

if __name__ == "__main__":
    app()
