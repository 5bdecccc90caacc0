"""CLI: `populora report RUN_DIR` and `populora compare RUN_A RUN_B [...] --out FILE.html`."""

from __future__ import annotations

from pathlib import Path

import typer

from populora.cli_errors import fail
from populora.safe_files import RunFileError


def display(s: object) -> str:
    """`populora.report.text.display` (paths and messages may hold a non-UTF-8 folder name), imported when
    first used: `populora.report`'s __init__ loads matplotlib (1-2 s), which every other command would pay."""
    from populora.report.text import display as safe

    return safe(s)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("report")
    def report(
        run_dir: Path = typer.Argument(..., help="A run folder written by `populora train`."),
        out: Path | None = typer.Option(
            None, "--out", help="Where to write the page (default RUN_DIR/report.html)."
        ),
        shot: Path | None = typer.Option(
            None, "--screenshot", help="Also save a PNG of the page's top (Chromium)."
        ),
        shot_height: int = typer.Option(2400, "--screenshot-height", help="Screenshot height in CSS pixels."),
    ) -> None:
        """Write RUN_DIR/report.html: one self-contained page with the run's diagnostic plots."""
        from populora.diagnostics.run import NotARunError, load_run
        from populora.report.html import write_report

        try:
            for w in load_run(run_dir).warnings:  # never skip run data silently
                typer.echo(f"warning: {display(w)}", err=True)
            path = write_report(run_dir, out)
        except NotARunError as exc:
            fail(display(str(exc)))
        except RunFileError as exc:  # a log that is a link or a FIFO (issue 50): one line, never a hang
            fail(display(str(exc)))
        except OSError as exc:
            fail(display(f"could not write the report: {exc}"))
        typer.echo(f"wrote {display(path)}")
        if shot is not None:
            from populora.report.screenshot import ScreenshotError, screenshot

            try:
                typer.echo(f"wrote {screenshot(path, shot, height=shot_height)}")
            except ScreenshotError as exc:
                fail(display(str(exc)))

    @app.command("compare")
    def compare(
        run_dirs: list[Path] = typer.Argument(..., help="Two or more run folders to overlay."),
        out: Path = typer.Option(Path("compare.html"), "--out", help="The HTML file to write."),
    ) -> None:
        """Overlay several runs (e.g. baseline vs population, population sizes) on the same axes."""
        from populora.diagnostics.run import NotARunError
        from populora.report.html import write_compare

        if len(run_dirs) < 2:
            fail("compare needs at least two run folders (use `populora report RUN_DIR` for one)")
        try:
            path = write_compare(run_dirs, out)
        except NotARunError as exc:
            fail(display(str(exc)))
        except RunFileError as exc:
            fail(display(str(exc)))
        except OSError as exc:
            fail(display(f"could not write {out}: {exc}"))
        typer.echo(f"wrote {display(path)}")
