"""How far an experiment is and how long is left, read from its run folders' metrics.jsonl.

The estimate uses the runs' own finished steps: the seconds a step took (`step_s`, plus the probe's `probe_s`
where one ran) summed over every step done so far, in this sitting or an earlier one, divided by those steps,
times the steps left, divided by how many runs go side by side. Steps measured while J runs shared the cores
already carry that slowdown, so dividing by J is right. Model loading between runs is not counted.

Runs of one kind (an ablation's arm) cost alike and different kinds do not (a 4T+4S step does four matchups'
work and probes eight members, a single agent's one matchup and one member), so each kind's steps left are
priced at that kind's own seconds per step once one of its runs has a step done, and at the mean of all runs
before that (`eta_by_kind`).

Before the first step, `upfront_line` gives the whole experiment's estimate from the per-step seconds model of
`populora.estimate` (each run not yet started priced at its preset's measured seconds per step, scaled to its
population; a run with steps done at its own measured rate), and returns the line to print when that is over
10 minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from populora.estimate import read_progress  # (last step, seconds in steps and probes) of a run folder


def eta_by_kind(rows: Sequence[tuple[str, int, int, float]], parallel: int) -> float | None:
    """Seconds left for runs `(kind, steps done, steps to reach, seconds spent)`: each kind's steps left at its
    own seconds per step (the mean of all runs for a kind with none done yet), `parallel` at a time."""
    done = sum(min(d, t) for _, d, t, _ in rows)
    spent = sum(s for *_, s in rows)
    if done <= 0 or spent <= 0:
        return None
    per_kind: dict[str, list[float]] = {}
    for kind, d, t, s in rows:
        acc = per_kind.setdefault(kind, [0, 0.0])
        acc[0] += min(d, t)
        acc[1] += s
    rate = {k: (s / d if d > 0 else spent / done) for k, (d, s) in per_kind.items()}
    return sum(max(0, t - d) * rate[kind] for kind, d, t, _ in rows) / max(1, parallel)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown until a step is done"
    s = int(round(seconds))
    if s < 90:
        return f"about {s} s left"
    h, m = divmod(round(s / 60), 60)
    return f"about {m} min left" if h == 0 else f"about {h} h {m:02d} min left"


def experiment_seconds(runs: Sequence[tuple[object, Path]], jobs: int) -> float | None:
    """Estimated seconds left for runs `(config, folder)`, `jobs` at a time: a run with steps done at its own
    measured seconds per step, a new one at `estimate.run_seconds`; None when any run has no estimate."""
    from populora.estimate import run_seconds

    total, left = 0.0, 0
    for cfg, path in runs:
        done, spent = read_progress(path)
        target = cfg.train.steps
        if done >= target:
            continue
        left += 1
        if done > 0 and spent > 0:
            total += (target - done) * spent / done
            continue
        s = run_seconds(cfg)
        if s is None:
            return None
        total += s
    return total / max(1, min(jobs, left)) if left else 0.0


def upfront_line(specs: Sequence, jobs: int, how: str) -> str | None:
    """The line an experiment prints before it starts when its estimate is over 10 minutes (else None).
    `specs`: the runs (`.preset`, `.overrides`, `.path`); `how`: how to continue after a Ctrl-C."""
    from populora.config import load_config
    from populora.estimate import basis, long_line

    cfgs = [(load_config(s.preset, s.overrides), Path(s.path)) for s in specs]
    if not cfgs:
        return None
    seconds = experiment_seconds(cfgs, jobs)
    steps = sum(c.train.steps for c, _ in cfgs)
    side = f", {jobs} side by side" if jobs > 1 else ""
    what = f"{len(cfgs)} runs, {steps:,} steps{side}; {basis(cfgs[0][0])}"
    return long_line(seconds, how, what)


@dataclass
class Progress:
    """The experiment's runs (name, folder, steps it should reach), `jobs` at a time."""

    runs: Sequence[tuple[str, Path, int]] | Sequence[tuple[str, Path, int, str]]  # (..., kind): priced apart
    jobs: int

    def snapshot(self) -> dict[str, tuple[int, float]]:
        return {name: read_progress(path) for name, path, *_ in self.runs}

    def summary(self, running: Sequence[str] = ()) -> str:
        """`712/2000 steps (36%); running: single seed 2 at step 12/100; about 3 h 08 min left`."""
        snap = self.snapshot()
        target = {run[0]: run[2] for run in self.runs}
        kind = {run[0]: (run[3] if len(run) > 3 else "") for run in self.runs}
        done = sum(min(snap[n][0], target[n]) for n in target)
        total = sum(target.values())
        left_runs = sum(1 for n in target if snap[n][0] < target[n])
        rows = [(kind[n], snap[n][0], target[n], snap[n][1]) for n in target]
        eta = eta_by_kind(rows, min(self.jobs, left_runs) or 1)
        now = (
            "; running: " + ", ".join(f"{n} at step {snap[n][0]}/{target[n]}" for n in running)
            if running
            else ""
        )
        pct = 100 * done / total if total else 100.0
        return f"{done}/{total} steps ({pct:.0f}%){now}; {fmt_duration(eta)}"


__all__ = ["Progress", "eta_by_kind", "experiment_seconds", "fmt_duration", "read_progress", "upfront_line"]
