"""The fixed probe of a run (metrics.jsonl `probe`, written by train/probe.py) as per-role curves.

At every probed step each member has a greedy accuracy per task type; `probe_by_role` reduces the members of
one role to the best, the mean and the worst member at that step (per task type, and over the three types as
'all': a member's 'all' is the mean of its task accuracies). The report, `populora compare` and
`populora experiment` all read the probe through these functions. `which="probe_valid"` reads the teachers'
validity probe (metrics.jsonl `probe_valid`: each teacher's valid-proposal rate on fixed prompts) the same way.
`flaw_curves` reads the misconception probe (`probe_flaws`, `diagnostics.probe_flaws`) per task type and class.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from populora.diagnostics.run import Run
from populora.names import ROLES, TASKS

__all__ = ["PROBE_KEYS", "ProbeCurve", "flaw_curves", "member_probe", "probe_by_role", "probe_change"]

PROBE_KEYS: tuple[str, ...] = (*TASKS, "all")


@dataclass(frozen=True)
class ProbeCurve:
    """One role's probe accuracy on one key over the probed steps: best, mean and worst member."""

    steps: np.ndarray
    best: np.ndarray
    mean: np.ndarray
    worst: np.ndarray
    n_members: np.ndarray


def member_probe(run: Run, member: str, key: str, which: str = "probe") -> np.ndarray:
    """A member's probe accuracy at each probed step ('all' = mean over the task types it was probed on)."""
    if key != "all":
        return run.probe_series(member, key, which)
    stack = np.vstack([run.probe_series(member, t, which) for t in TASKS])
    ok = np.isfinite(stack)
    with np.errstate(invalid="ignore"):
        return np.where(ok.any(axis=0), np.nansum(stack, axis=0) / np.maximum(ok.sum(axis=0), 1), np.nan)


def probe_by_role(run: Run, which: str = "probe") -> dict[str, dict[str, ProbeCurve]]:
    """{role: {key: ProbeCurve}} for every role with probed members; {} when the run has no probe
    (`which="probe_valid"`: the teachers' validity probe, so only proposer roles)."""
    if not any(which in p for p in run.probes):
        return {}
    steps = run.probe_steps
    probed = sorted({m for p in run.probes for m in p.get(which) or {}})
    out: dict[str, dict[str, ProbeCurve]] = {}
    for role in ROLES:
        mids = [m for m in probed if run.role_of(m) == role]
        if not mids:
            continue
        curves = {}
        for key in PROBE_KEYS:
            stack = np.vstack([member_probe(run, m, key, which) for m in mids])
            n = np.isfinite(stack).sum(axis=0)
            with warnings.catch_warnings():
                warnings.simplefilter(
                    "ignore", RuntimeWarning
                )  # a step where no member of the role was probed
                curves[key] = ProbeCurve(
                    steps,
                    np.nanmax(stack, axis=0),
                    np.nanmean(stack, axis=0),
                    np.nanmin(stack, axis=0),
                    n,
                )
        out[role] = curves
    return out


def probe_change(
    run: Run, role: str, key: str = "all", stat: str = "mean", which: str = "probe"
) -> float | None:
    """Last probed value minus the step-0 (first probed) value of a role's best/mean/worst curve."""
    curve = probe_by_role(run, which).get(role, {}).get(key)
    if curve is None:
        return None
    y = getattr(curve, stat)
    fin = np.flatnonzero(np.isfinite(y))
    if fin.size < 2:
        return None
    return float(y[fin[-1]] - y[fin[0]])


def flaw_curves(run: Run, rate: str = "right") -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The misconception probe (`probe_flaws`) of the solvers (students, or the single agent): `{task: {class:
    (steps, mean member's rate)}}` where `rate` is "right" or "misconceived"; {} when the run has none."""
    probes = [p for p in run.probes if isinstance(p.get("probe_flaws"), dict)]
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    if not probes:
        return out
    steps = np.asarray([p["step"] for p in probes])
    keys = sorted(
        {
            (t, c)
            for p in probes
            for by_task in p["probe_flaws"].values()
            for t, v in by_task.items()
            for c in v
        }
    )
    for task, flaw in keys:
        ys = []
        for p in probes:
            vals = [
                by_task[task][flaw][rate]
                for m, by_task in p["probe_flaws"].items()
                if run.role_of(m) in ("student", "single") and flaw in by_task.get(task, {})
            ]
            ys.append(float(np.mean(vals)) if vals else np.nan)
        out.setdefault(task, {})[flaw] = (steps, np.asarray(ys))
    return out
