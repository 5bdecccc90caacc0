"""CLI of the sandbox: `populora sandbox run FILE --call EXPR`, `populora sandbox isolation`, and
`populora bench sandbox [--quick]`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

#: `sandbox run --indent` above this is a mistake (issue 50: 100000000 printed 700 MB); typer refuses it with
#: "Invalid value for '--indent'" and exit code 2. The other numbers go through `Limits`, which bounds them.
MAX_INDENT = 16


def register(app: typer.Typer, bench: typer.Typer) -> None:
    sandbox = typer.Typer(help="Run untrusted Python in the isolated sandbox.", no_args_is_help=True)
    app.add_typer(sandbox, name="sandbox")

    @sandbox.command("run")
    def run_cmd(
        file: Path = typer.Argument(..., help="Python source file (the program; module level)."),
        call: str = typer.Option(
            ..., "--call", "-c", help="Expression evaluated after the program, e.g. 'f(1)'."
        ),
        timeout_s: float = typer.Option(5.0, "--timeout", help="Wall-clock limit in seconds."),
        memory_mb: int = typer.Option(512, "--memory-mb", help="Address-space limit in MB."),
        max_output_chars: int = typer.Option(4000, "--max-output-chars", help="Longest accepted repr."),
        indent: int = typer.Option(
            2, "--indent", min=0, max=MAX_INDENT, help=f"JSON indentation, 0 to {MAX_INDENT} (0: one line)."
        ),
    ) -> None:
        """Run FILE in the sandbox, evaluate --call, print the Outcome as JSON (exit 0 also for job errors)."""
        from populora.sandbox import Limits, Sandbox

        if not file.is_file():
            typer.echo(f"error: {file} is not a file; pass the path of a Python source file", err=True)
            raise typer.Exit(2)
        try:
            program = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            typer.echo(f"error: cannot read {file} ({e}); pass a readable UTF-8 text file", err=True)
            raise typer.Exit(2) from None
        try:
            limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        with Sandbox(workers=1, limits=limits) as sb:
            out = sb.run(program, call)
        typer.echo(json.dumps(out.to_dict(), indent=indent or None))

    @sandbox.command("isolation")
    def isolation_cmd(
        profile: str = typer.Option(
            "train",
            "--profile",
            help="train (the default: standard library only, no threads) or eval (benchmarks: numpy and "
            "threads too, as evalplus allows; the same OS layers).",
        ),
    ) -> None:
        """Print which isolation layers are in force on this machine, and what the profile grants, as JSON."""
        import warnings

        from populora.sandbox import Sandbox

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                sb = Sandbox(workers=1, profile=profile)
            except ValueError as e:
                typer.echo(f"error: {e}", err=True)
                raise typer.Exit(2) from None
            with sb:
                info = {
                    "profile": profile,
                    "isolation": sb.isolation,
                    "grants": sb.grants,
                    "preloaded": sb.preloaded,
                }
        info["warnings"] = [str(w.message) for w in caught]
        typer.echo(json.dumps(info, indent=2))

    @bench.command("sandbox")
    def bench_cmd(
        quick: bool = typer.Option(False, "--quick", help="Fewer jobs (a smoke run)."),
        out: Path | None = typer.Option(
            None, "--out", help="JSON path (default bench/results/sandbox.json)."
        ),
    ) -> None:
        """Jobs/s and p50/p95 latency: this sandbox vs a fresh `python -I` per job vs an unisolated exec pool."""
        from populora.sandbox.bench import run

        run(quick=quick, out=out)
