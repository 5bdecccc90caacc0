"""The `populora` command line: one sub-command per job (train, report, eval, evolve, bench, ...).

Each package contributes its commands through a `commands.py` module exposing
`register(app, bench)`; this file only assembles them. Command modules import heavy libraries
(torch, transformers) inside the command functions, so `populora --help` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

from populora import __version__

app = typer.Typer(
    name="populora",
    help="Population-based asymmetric self-play RL post-training of LLMs with evolving LoRA adapters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
bench = typer.Typer(help="Benchmarks: print a table, write JSON under bench/results/, compare to alternatives.",
                    no_args_is_help=True)
app.add_typer(bench, name="bench")

# Order fixes the order in `--help`.
COMMAND_MODULES = [
    "populora.train.commands",
    "populora.report.commands",
    "populora.evaluate.commands",
    "populora.operators.commands",
    "populora.engine.commands",
    "populora.pretrain.commands",
    "populora.tasks.commands",
    "populora.sandbox.commands",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"populora {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """PopuLoRA: teachers and students are LoRA adapters on one frozen base; they evolve."""


for _name in COMMAND_MODULES:
    # A package whose commands are not written yet is simply absent; an import error in one that exists is real.
    if importlib.util.find_spec(_name.rsplit(".", 1)[0]) and importlib.util.find_spec(_name):
        importlib.import_module(_name).register(app, bench)

if __name__ == "__main__":
    app()
