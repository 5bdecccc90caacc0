"""CLI of the engine: `populora bench engine [--quick]`, `populora bench dist [--quick]`."""

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

    @bench.command("dist")
    def bench_dist(
        quick: bool = typer.Option(False, "--quick", help="Fewer, shorter rounds (about a minute)."),
        out: Path = typer.Option(None, "--out", help="JSON output (default bench/results/dist.json)."),
        workers: int = typer.Option(2, "--workers", help="Ray workers to compare with one process."),
    ) -> None:
        """The same generate + train_step work on N Ray workers (dist.workers) vs 1 process: time and overhead."""
        from populora.engine.dist_bench import run

        run(quick=quick, out=out, workers=workers)
