"""Training-dynamics diagnostics derived from a run folder (the paper's figures, as numbers).

- solve rates per task type and their oscillation (direction changes and swing size of the smoothed
  curve, with a hysteresis threshold so noise does not count as a cycle);
- TrueSkill trajectories and evolution events;
- the student-by-teacher solve-rate matrix;
- operator usage and child recovery (steps until a child's reward is back at its parents' level at its
  birth: the paper's retention test, measured in a live run);
- complexity and coverage curves (from problems.jsonl, falling back to metrics.jsonl).
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np

from populora.diagnostics.coverage import CoverageArchive
from populora.diagnostics.features import FEATURES
from populora.diagnostics.run import Run
from populora.names import TASKS

__all__ = [
    "TASKS",
    "smooth",
    "Oscillation",
    "oscillation",
    "noise_threshold",
    "smoothing_window",
    "solve_rates_by_type",
    "oscillation_by_type",
    "rating_history",
    "matchup_matrix",
    "operator_usage",
    "Recovery",
    "child_recovery",
    "complexity_curves",
    "coverage_curve",
    "proposer_roles",
]


def smooth(y: np.ndarray, window: int = 3) -> np.ndarray:
    """Centred moving average of width `window` that ignores NaN (NaN where a window holds no value).

    Windows are truncated at the ends, so the output has the input's length; window 1 is the identity.
    """
    y = np.asarray(y, dtype=float)
    if window <= 1 or y.size == 0:
        return y.copy()
    half = window // 2
    ok = ~np.isnan(y)
    vals = np.where(ok, y, 0.0)
    csum = np.concatenate([[0.0], np.cumsum(vals)])
    ccnt = np.concatenate([[0], np.cumsum(ok)])
    idx = np.arange(y.size)
    lo = np.clip(idx - half, 0, y.size)
    hi = np.clip(idx + (window - half), 0, y.size)
    cnt = ccnt[hi] - ccnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (csum[hi] - csum[lo]) / np.maximum(cnt, 1), np.nan)


@dataclass(frozen=True)
class Oscillation:
    """How much a curve goes up and down rather than trending one way.

    `direction_changes`: turns of the smoothed curve that retrace at least `threshold` (a zigzag
    indicator); `mean_swing`: mean size of its up/down legs, from turning point to turning point (None
    when the curve never turns); `detrended_std`: standard deviation of the smoothed curve around its
    least-squares line (0 for a straight line); `n_points`: finite points used; `threshold`: the
    retrace a turn needed.
    """

    direction_changes: int
    mean_swing: float | None
    detrended_std: float
    n_points: int
    threshold: float = 0.05


def noise_threshold(y: np.ndarray, window: int, floor: float = 0.05, k: float = 3.0) -> float:
    """Smallest swing of the smoothed curve that noise alone is unlikely to make: max(floor, k * sigma_s).

    sigma_s = std(y - smooth(y)) / sqrt(window) estimates the per-step noise left after smoothing (a
    per-step solve rate over a few problems is a noisy binomial fraction, so a fixed threshold would
    count that noise as oscillation).
    """
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(y)
    if window <= 1 or ok.sum() < 3:
        return floor
    resid = (y - smooth(y, window))[ok]
    return max(floor, k * float(np.std(resid)) / float(np.sqrt(window)))


def oscillation(y: np.ndarray, window: int = 3, threshold: float | None = None) -> Oscillation:
    """Measure the oscillation of a series (NaNs dropped) after smoothing with `smooth(window)`.

    `threshold=None` uses `noise_threshold(y, window)`; pass a number for a fixed retrace.
    """
    y = np.asarray(y, dtype=float)
    if threshold is None:
        threshold = noise_threshold(y, window)
    s = smooth(y, window)
    s = s[~np.isnan(s)]
    n = int(s.size)
    if n < 2:
        return Oscillation(0, None, 0.0, n, threshold)
    x = np.arange(n, dtype=float)
    slope, icpt = np.polyfit(x, s, 1)
    detr = float(np.std(s - (slope * x + icpt)))
    # Zigzag: a turn counts once the curve retraces >= threshold from the running extreme of its leg.
    lo = hi = float(s[0])
    pivots: list[float] = []
    direction, extreme = 0, float(s[0])
    for v in map(float, s[1:]):
        if direction == 0:  # no leg yet: wait until the curve has moved `threshold` from its min or max
            lo, hi = min(lo, v), max(hi, v)
            if v - lo >= threshold:
                pivots, direction, extreme = [lo], 1, v
            elif hi - v >= threshold:
                pivots, direction, extreme = [hi], -1, v
        elif direction * (v - extreme) > 0:
            extreme = v  # the leg continues
        elif abs(v - extreme) >= threshold:
            pivots.append(extreme)
            direction, extreme = -direction, v
    if direction == 0:
        return Oscillation(0, None, detr, n, threshold)
    changes = len(pivots) - 1
    legs = np.abs(np.diff([*pivots, extreme]))
    swing = float(legs.mean()) if changes >= 1 else None
    return Oscillation(changes, swing, detr, n, threshold)


def proposer_roles(run: Run) -> tuple[str, ...]:
    return ("single",) if run.mode == "single" else ("teacher",)


def solver_roles(run: Run) -> tuple[str, ...]:
    return ("single",) if run.mode == "single" else ("student",)


def solve_rates_by_type(run: Run) -> dict[str, np.ndarray]:
    """Per-step mean solve rate of the solvers (students, or the single agent) per task type and 'all'."""
    return {t: run.role_series(solver_roles(run), ["solve_rate", t]) for t in (*TASKS, "all")}


def smoothing_window(n_steps: int) -> int:
    """The report's smoothing window: 5 steps, less for short runs (n/8, at least 1)."""
    return max(1, min(5, n_steps // 8 or 1))


def oscillation_by_type(
    run: Run, window: int | None = None, threshold: float | None = None
) -> dict[str, Oscillation]:
    """`oscillation` of the solvers' solve rate per task type (and 'all'), window as in the report."""
    w = smoothing_window(run.n_steps) if window is None else window
    return {t: oscillation(y, w, threshold) for t, y in solve_rates_by_type(run).items()}


def rating_history(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """member -> (mu per step, sigma per step); members whose mu is always null (single mode) are left out."""
    out = {}
    for m in run.members:
        mu, sigma = run.member_series(m, "mu"), run.member_series(m, "sigma")
        if np.isfinite(mu).any():
            out[m] = (mu, sigma)
    return out


def matchup_matrix(
    run: Run, since_step: int | None = None
) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(students, teachers, solve-rate matrix [student, teacher], problem counts) over all matchups.

    Each matchup's solve rate is weighted by its number of problems; cells never played are NaN. Uses
    the `matchups` lists of metrics.jsonl, or `matchup` events when the metrics carry none.
    """
    rows: list[dict] = []
    for rec in run.metrics:
        for m in rec.get("matchups") or []:
            rows.append({**m, "step": rec["step"]})
    if not rows:
        rows = run.events_of("matchup")
    rows = [r for r in rows if since_step is None or r["step"] >= since_step]
    sums: dict[tuple[str, str], float] = {}
    counts: Counter = Counter()
    for r in rows:
        t, s, sr = r.get("teacher"), r.get("student"), r.get("solve_rate")
        if t is None or s is None or t == s or not isinstance(sr, int | float):
            continue
        w = r.get("n_problems") or 1
        sums[(s, t)] = sums.get((s, t), 0.0) + float(sr) * w
        counts[(s, t)] += w
    order = {m: i for i, m in enumerate(run.members)}
    students = sorted({s for s, _ in counts}, key=lambda m: (order.get(m, 1 << 30), m))
    teachers = sorted({t for _, t in counts}, key=lambda m: (order.get(m, 1 << 30), m))
    mat = np.full((len(students), len(teachers)), np.nan)
    cnt = np.zeros((len(students), len(teachers)), dtype=np.int64)
    for (s, t), c in counts.items():
        i, j = students.index(s), teachers.index(t)
        mat[i, j] = sums[(s, t)] / c
        cnt[i, j] = c
    return students, teachers, mat, cnt


def operator_usage(run: Run) -> Counter:
    """How many children each operator produced."""
    return Counter(str(e.get("operator")) for e in run.events_of("evolution") if e.get("operator"))


@dataclass(frozen=True)
class Recovery:
    """One child's recovery after birth: `steps` is None when it had not recovered by `observed` steps."""

    child: str
    role: str | None
    operator: str | None
    parents: tuple[str, ...]
    born_step: int
    parent_level: float | None
    steps: int | None
    observed: int


def child_recovery(run: Run, window: int = 3, key: str = "reward") -> list[Recovery]:
    """Steps until each child's reward is back at its parents' level at the time of its birth.

    Parent level = mean over the parents of their mean `key` in the last `window` logged steps up to and
    including the birth step. The child has recovered at the first later step where the trailing mean of
    its own last `window` values (fewer right after birth) reaches that level; the count is in steps
    since birth. Children without parent data get `parent_level=None`, `steps=None`.
    """
    steps = run.steps
    out = []
    for ev in run.events_of("evolution"):
        child, born = ev.get("child"), int(ev["step"])
        parents = tuple(ev.get("parents") or ())
        if not child:
            continue
        levels = []
        before = steps <= born
        for p in parents:
            vals = run.member_series(p, key)[before]
            vals = vals[np.isfinite(vals)][-window:]
            if vals.size:
                levels.append(float(vals.mean()))
        after = steps > born
        cvals = run.member_series(child, key)[after]
        csteps = steps[after]
        fin = np.isfinite(cvals)
        cvals, csteps = cvals[fin], csteps[fin]
        observed = int(csteps[-1] - born) if csteps.size else 0
        level = float(np.mean(levels)) if levels else None
        rec_steps = None
        if level is not None:
            for i in range(cvals.size):
                if cvals[max(0, i - window + 1) : i + 1].mean() >= level - 1e-12:
                    rec_steps = int(csteps[i] - born)
                    break
        out.append(
            Recovery(child, ev.get("role"), ev.get("operator"), parents, born, level, rec_steps, observed)
        )
    return out


def complexity_curves(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """feature -> (steps, mean, std) of valid proposer programs per step.

    Computed from problems.jsonl features when present (exact pooling over all programs of a step),
    otherwise pooled from the members' `complexity` summaries in metrics.jsonl, weighted by `n_valid`.
    """
    by_step: dict[int, list[dict]] = {}
    for p in run.problems:
        if p.get("valid") and isinstance(p.get("features"), dict):
            by_step.setdefault(int(p["step"]), []).append(p["features"])
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if by_step:
        st = np.array(sorted(by_step))
        for f in FEATURES:
            vals = [[x.get(f) for x in by_step[s] if isinstance(x.get(f), int | float)] for s in st]
            mean = np.array([np.mean(v) if v else np.nan for v in vals])
            std = np.array([np.std(v) if v else np.nan for v in vals])
            out[f] = (st, mean, std)
        return out
    mids = run.members_with_role(*proposer_roles(run))
    for f in FEATURES:
        means, stds = [], []
        for rec in run.metrics:
            ws, ms, vs = [], [], []
            for m in mids:
                mm = (rec.get("members") or {}).get(m) or {}
                c = (mm.get("complexity") or {}).get(f) or {}
                if isinstance(c.get("mean"), int | float):
                    w = mm.get("n_valid") or 1
                    ws.append(w)
                    ms.append(c["mean"])
                    vs.append((c.get("std") or 0.0) ** 2)
            if ws:
                w = np.array(ws, float)
                mu = float(np.average(ms, weights=w))
                # pooled variance: within-member variance plus the spread of member means
                var = float(np.average(np.array(vs) + (np.array(ms) - mu) ** 2, weights=w))
                means.append(mu)
                stds.append(var**0.5)
            else:
                means.append(np.nan)
                stds.append(np.nan)
        out[f] = (run.steps, np.array(means), np.array(stds))
    return out


def coverage_curve(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, coverage 0..1, cells filled): logged values, recomputed from problems.jsonl when absent."""
    cov, cells = run.series("coverage"), run.series("coverage_cells")
    if np.isfinite(cov).any() or not run.problems:
        return run.steps, cov, cells
    arc = CoverageArchive()
    by_step: dict[int, list[dict]] = {}
    for p in run.problems:
        if p.get("valid") and isinstance(p.get("features"), dict):
            by_step.setdefault(int(p["step"]), []).append(p["features"])
    steps = run.steps if run.n_steps else np.array(sorted(by_step), dtype=np.int64)
    cov_out, cells_out = np.zeros(steps.size), np.zeros(steps.size)
    pending = sorted(by_step)
    k = 0
    for i, s in enumerate(steps):
        while k < len(pending) and pending[k] <= s:
            arc.add(by_step[pending[k]])
            k += 1
        cov_out[i], cells_out[i] = arc.coverage, arc.cells_filled
    return steps, cov_out, cells_out


def nanmean(a: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(a)) if np.size(a) else float("nan")
