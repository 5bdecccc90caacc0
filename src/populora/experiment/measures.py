"""The numbers an experiment compares, read from finished run folders through `populora.diagnostics`.

`run_measures(run)` reduces one run to scalars (probe change per role, complexity slopes, coverage growth,
solve-rate oscillation, rating spread, wall-clock per step); `mean_ci(values)` is the mean and 95% t-interval
over seeds. Nothing here re-derives a measure: each comes from the diagnostics module the report uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from populora.diagnostics.dynamics import (
    complexity_curves,
    coverage_curve,
    oscillation_by_type,
    proposer_roles,
    rating_history,
    solver_roles,
)
from populora.diagnostics.features import FEATURES
from populora.diagnostics.probe import PROBE_KEYS, probe_by_role
from populora.diagnostics.run import Run
from populora.names import TASKS

__all__ = ["as_array", "as_list", "edge_means", "mean_ci", "run_curves", "run_measures", "slope"]


def mean_ci(values: Sequence[float | None], level: float = 0.95) -> dict:
    """`{"mean", "lo", "hi", "n"}`: Student-t interval over the finite values (lo = hi = None for n < 2)."""
    xs = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(xs.size)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    m = float(xs.mean())
    if n < 2:
        return {"mean": m, "lo": None, "hi": None, "n": 1}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * xs.std(ddof=1) / math.sqrt(n))
    return {"mean": m, "lo": m - half, "hi": m + half, "n": n}


def slope(x: np.ndarray, y: np.ndarray) -> float | None:
    """Least-squares slope of y on x over the finite points (None with fewer than 3)."""
    ok = np.isfinite(y)
    if ok.sum() < 3:
        return None
    return float(np.polyfit(np.asarray(x, float)[ok], np.asarray(y, float)[ok], 1)[0])


def edge_means(y: np.ndarray, frac: float = 0.25) -> tuple[float | None, float | None]:
    """Mean of the first and of the last `frac` of the finite values (a trend robust to one noisy step)."""
    y = y[np.isfinite(y)]
    if y.size == 0:
        return None, None
    k = max(1, int(round(frac * y.size)))
    return float(y[:k].mean()), float(y[-k:].mean())


def probe_edges(run: Run, which: str = "probe") -> dict:
    """`{role: {key: {stat: {"start", "end", "change"}}}}`: first and last probed value of each curve."""
    out: dict = {}
    for role, curves in probe_by_role(run, which).items():
        out[role] = {}
        for key in PROBE_KEYS:
            entry = {}
            for stat in ("best", "mean", "worst"):
                y = getattr(curves[key], stat)
                fin = np.flatnonzero(np.isfinite(y))
                start = float(y[fin[0]]) if fin.size else None
                end = float(y[fin[-1]]) if fin.size else None
                entry[stat] = {
                    "start": start,
                    "end": end,
                    "change": None if start is None or fin.size < 2 else end - start,
                }
            out[role][key] = entry
    return out


def run_measures(run: Run) -> dict:
    """Every scalar an experiment compares for one run (None where the run has no data for it)."""
    out: dict = {"steps": run.n_steps}
    # Fixed probe: start (step 0) and end per role, best / mean / worst member, per task type and 'all';
    # the teachers' validity probe (`probe_valid`) the same way.
    out["probe"] = probe_edges(run)
    out["probe_valid"] = probe_edges(run, "probe_valid")
    out["probe_sampled"] = probe_edges(run, "probe_sampled")  # {} unless diagnostics.probe_samples > 0
    out["probe_steps"] = [int(s) for s in run.probe_steps]
    # Proposers: valid-proposal rate at the start and end (first / last quarter of the steps).
    vr = run.role_series(proposer_roles(run), "valid_rate")
    first, last = edge_means(vr)
    out["valid_rate"] = {"start": first, "end": last, "slope": slope(run.steps, vr)}
    # Complexity of valid proposer programs: slope per step and start/end means per feature.
    cx = complexity_curves(run)
    out["complexity"] = {}
    for f in FEATURES:
        if f in cx:
            st, mean, _ = cx[f]
            a, b = edge_means(mean)
            out["complexity"][f] = {"slope": slope(st, mean), "start": a, "end": b}
    # Coverage: cells filled at the middle and end of the run (growth in the second half).
    steps, cov, cells = coverage_curve(run)
    fin = np.flatnonzero(np.isfinite(cells))
    if fin.size:
        mid = fin[len(fin) // 2]
        out["coverage"] = {
            "end": float(cov[fin[-1]]),
            "cells_end": int(cells[fin[-1]]),
            "cells_mid": int(cells[mid]),
            "growth_second_half": int(cells[fin[-1]] - cells[mid]),
        }
    else:
        out["coverage"] = {"end": None, "cells_end": None, "cells_mid": None, "growth_second_half": None}
    # Solver solve rate: direction changes of the smoothed curve (the report's oscillation measure).
    osc = oscillation_by_type(run)
    out["oscillation"] = {t: osc[t].direction_changes for t in (*TASKS, "all")}
    sr = run.role_series(solver_roles(run), ["solve_rate", "all"])
    a, b = edge_means(sr)
    out["solve_rate"] = {"start": a, "end": b}
    # Rating spread: standard deviation of mu over the living members of each role at the last step.
    hist = rating_history(run)
    spread = {}
    for role in ("teacher", "student"):
        mus = [mu[-1] for m, (mu, _) in hist.items() if run.role_of(m) == role and np.isfinite(mu[-1])]
        spread[role] = float(np.std(mus)) if len(mus) >= 2 else None
    out["rating_spread"] = spread
    # Wall-clock: mean seconds per training step (probe excluded), and the probe's own seconds.
    step_s = run.series("step_s")
    out["step_s"] = float(np.nanmean(step_s)) if np.isfinite(step_s).any() else None
    out["probe_s"] = sum(float(r.get("probe_s") or 0.0) for r in run.metrics) or None
    out["curves"] = run_curves(run)
    return out


def as_list(y: np.ndarray) -> list[float | None]:
    """A float array as JSON-ready values (NaN -> None); `as_array` is its inverse."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(y, dtype=float)]


def as_array(xs: Sequence) -> np.ndarray:
    """JSON values as a float array (None -> NaN)."""
    return np.array([np.nan if v is None else float(v) for v in xs], dtype=float)


def run_curves(run: Run) -> dict:
    """The per-step curves an experiment page plots, as JSON-ready lists (None for missing values)."""

    def probe_curves(which: str) -> dict:
        return {
            role: {
                key: {
                    "steps": [int(s) for s in c.steps],
                    "best": as_list(c.best),
                    "mean": as_list(c.mean),
                    "worst": as_list(c.worst),
                }
                for key, c in curves.items()
            }
            for role, curves in probe_by_role(run, which).items()
        }

    cx = {
        f: {"steps": [int(s) for s in st], "mean": as_list(m)}
        for f, (st, m, _) in complexity_curves(run).items()
    }
    steps, cov, cells = coverage_curve(run)
    return {
        "probe": probe_curves("probe"),
        "probe_valid": probe_curves("probe_valid"),
        "complexity": cx,
        "coverage": {"steps": [int(s) for s in steps], "cells": as_list(cells)},
        "solve_rate": {
            "steps": [int(s) for s in run.steps],
            "all": as_list(run.role_series(solver_roles(run), ["solve_rate", "all"])),
        },
        "valid_rate": {
            "steps": [int(s) for s in run.steps],
            "all": as_list(run.role_series(proposer_roles(run), "valid_rate")),
        },
    }
