"""The training console: one summary line per step, under a rich progress bar on a terminal.

While a step runs, a second line updates in place with the phase and its progress ("teacher generation 14/24
prompts, 610 tok/s", "student solve 40/96 rollouts", "update 3/8 micro-batches"): the trainer passes
`StepProgress.callback(phase)` to the engine as `progress=` (engines that do not take it simply get nothing).
`--quiet`, or output that is not a terminal (a log file), shows only the summary lines.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from populora.train.records import mean


def summary_line(rec: dict, events: list[dict], total: int) -> str:
    """One line for a step's metrics.jsonl record: mean rewards, valid and solve rates, coverage, evolution."""
    ms = rec["members"]

    def avg(role: str, key: str, sub: str | None = None) -> str:
        vals = [(m[key][sub] if sub else m[key]) for m in ms.values() if m["role"] in role]
        v = mean(vals)
        return "  -  " if v is None else f"{v:+.2f}" if key == "reward" else f"{v:.2f}"

    evo = [f"{e['replaced']}->{e['child']}({e['operator']})" for e in events if e["type"] == "evolution"]
    if rec["mode"] == "single":
        body = (
            f"valid {avg('single', 'valid_rate')}  solve {avg('single', 'solve_rate', 'all')}  "
            f"reward {avg('single', 'reward')}"
        )
    else:
        body = (
            f"T valid {avg('teacher', 'valid_rate')} reward {avg('teacher', 'reward')}  |  "
            f"S solve {avg('student', 'solve_rate', 'all')} reward {avg('student', 'reward')}"
        )
    tail = f"  |  cov {rec['coverage_cells']} cells  |  {rec['step_s']:.1f}s"
    return f"step {rec['step']:>4}/{total}  {body}{tail}" + (f"  |  evolve {' '.join(evo)}" if evo else "")


# phase -> (label, unit) of the live line
PHASE_LABELS = {
    "teacher": ("teacher generation", "prompts"),
    "student": ("student solve", "rollouts"),
    "update": ("update", "micro-batches"),
    "probe": ("probe", "answers"),  # the fixed probe (train/probe.py): greedy answers of every member
    "probe_style": ("probe, answer style forced", "answers"),
    "probe_valid": ("probe, teachers' fixed prompts", "proposals"),
    "probe_sampled": ("probe, sampled answers", "answers"),
}


# phases without engine progress: what the live line says while they run
PHASE_NAMES = {
    "validate": "validating proposals in the sandbox",
    "score": "scoring answers in the sandbox",
    "evolution": "evolution",
    "matchmaking": "matchmaking",
    "probe_score": "probe, scoring answers in the sandbox",
}


def phase_text(phase: str, done: int, total: int, info: dict | None, seconds: float) -> str:
    """The live line of a phase, e.g. 'teacher generation 14/24 prompts, 610 tok/s'."""
    label, unit = PHASE_LABELS.get(phase, (phase, ""))
    text = f"{label} {done}/{total}" + (f" {unit}" if unit else "")
    tokens = (info or {}).get("tokens")
    if tokens and seconds > 0:
        text += f", {tokens / seconds:.0f} tok/s"
    return text


def accepts_progress(fn: Callable) -> bool:
    """Whether an engine method takes the optional `progress=` keyword (engines may not implement it)."""
    try:
        return "progress" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def note(message: str, quiet: bool = False) -> None:
    """One line on stderr for long one-off work (loading the model, starting the sandbox), unless quiet."""
    if not quiet:
        print(f"... {message}", file=sys.stderr, flush=True)


def upfront_line(cfg, run_path: Path) -> str | None:
    """The line `populora train` prints before it loads anything when the run is estimated to take over 10
    minutes (None otherwise): the steps left at this run's own measured seconds per step when it has steps
    (a resume), else at `populora.estimate`'s per-step model."""
    from populora.estimate import basis, long_line, read_progress, run_seconds, where

    done, spent = read_progress(run_path)
    how = f"`populora train --resume {run_path}` continues"
    if done > 0 and spent > 0:
        left = max(0, cfg.train.steps - done)
        return long_line(left * spent / done, how, f"this run's own {done} steps, {left} to go")
    return long_line(run_seconds(cfg), how, f"{cfg.train.steps} steps; {basis(cfg)}", where(cfg))


class StepProgress:
    """A rich progress bar on a terminal (plus one printed summary line per step); plain lines otherwise."""

    def __init__(self, total: int, start: int, console: Console | None, quiet: bool) -> None:
        self.bar = None
        self.console = console if console is not None else Console(stderr=False)
        if not quiet and self.console.is_terminal:
            # One line: the run's bar, then the running phase and its progress (updated in place).
            self.bar = Progress(
                TextColumn("[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[phase]}"),
                console=self.console,
                transient=True,
            )
            self.task = self.bar.add_task("train", total=total, completed=start, phase="")
            self.bar.start()

    def callback(self, phase: str) -> Callable[[int, int, dict], None] | None:
        """The `progress(done, total, info)` callable for one phase's engine call; None when nothing is shown."""
        if self.bar is None:
            return None
        t0 = last = time.perf_counter()

        def update(done: int, total: int, info: dict | None = None) -> None:
            nonlocal last
            now = time.perf_counter()
            self.bar.update(self.task, phase=phase_text(phase, done, total, info, now - t0))
            # Redraw now at the start and end of the phase and at most 10 times a second in between (rich's own
            # refresh thread alone may miss a short phase entirely).
            if done in (0, total) or now - last > 0.1:
                self.bar.refresh()
                last = now

        return update

    def show(self, phase: str) -> None:
        """Name the phase that starts (its counts follow from the engine's callback, if it has one)."""
        if self.bar is not None:
            label = PHASE_LABELS.get(phase, (PHASE_NAMES.get(phase, phase), ""))[0]
            self.bar.update(self.task, phase=label)
            self.bar.refresh()

    def end_phase(self) -> None:
        """Clear the phase text (after each engine call), so a finished phase is not shown as running."""
        if self.bar is not None:
            self.bar.update(self.task, phase="")

    def line(self, text: str) -> None:
        """Print a summary line that is not a step's (the probe's), above the bar on a terminal."""
        if self.bar is not None:
            self.bar.console.print(text, highlight=False)
        else:
            print(text, flush=True)

    def advance(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, highlight=False)
            self.bar.update(self.task, advance=1, phase="")
        else:
            print(line, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


__all__ = [
    "PHASE_LABELS",
    "StepProgress",
    "accepts_progress",
    "note",
    "phase_text",
    "summary_line",
    "upfront_line",
]
