"""CLI of the engine: `populora bench engine [--quick]`."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @bench.command("engine")
    def bench_engine(
        quick: bool = typer.Option(False, "--quick", help="Tiny model only, small batches (about a minute)."),
        out: Path = typer.Option(None, "--out", help="JSON output (default bench/results/engine.json)."),
    ) -> None:
        """Mixed 8-slot multi-LoRA batches vs 1 slot, looping slots and PEFT: generate, train_step, memory."""
        from populora.engine.bench import run

        run(quick=quick, out=out)
