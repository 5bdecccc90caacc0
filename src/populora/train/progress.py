"""The training console: one summary line per step, under a rich progress bar on a terminal."""

from __future__ import annotations

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


class StepProgress:
    """A rich progress bar on a terminal (plus one printed summary line per step); plain lines otherwise."""

    def __init__(self, total: int, start: int, console: Console | None, quiet: bool) -> None:
        self.bar = None
        self.console = console if console is not None else Console(stderr=False)
        if not quiet and self.console.is_terminal:
            self.bar = Progress(
                TextColumn("[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.task = self.bar.add_task("train", total=total, completed=start)
            self.bar.start()

    def advance(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, highlight=False)
            self.bar.advance(self.task)
        else:
            print(line, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


__all__ = ["StepProgress", "summary_line"]
