"""Coverage and distinct programs at an equal number of valid proposals (a reading of claims (c) and (d)).

Why: in the same number of steps a 4T+4S population proposes four times as many problems as the single agent
(4 teachers x `tasks.prompts` against 1 x `tasks.prompts`), so "cells filled in the second half" compares arms
that made very different numbers of proposals: a population can fill more cells simply by drawing more, or
fewer new ones late because its early draws already took the common cells. The paper's claim is about what
the proposals are like (a narrow band of easy programs against a spread), so this module also compares the
arms at the same budget: the CVT cells filled, and the distinct valid programs made, by the time a run had
made its first `n` valid proposals, where `n` is the smallest total any compared run reached.

This is a secondary reading, reported next to the claims' pre-set rules, not a rule of its own: it was added
after the first seeds were seen (2026-12-05), and no verdict reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def value_at_budget(valid_total: Sequence, ys: Sequence, budget: int) -> float | None:
    """`ys` at the first step whose cumulative valid proposals reach `budget` (None: the run never did, or the
    value there is missing). `valid_total` and `ys` are per-step columns of one run (run_records.py)."""
    for total, y in zip(valid_total, ys, strict=False):
        if total is not None and total >= budget:
            return None if y is None else float(y)
    return None


def common_budget(records: Sequence[dict]) -> int | None:
    """The largest number of valid proposals every one of `records` reached (its runs' smallest final total),
    or None when a run has no valid proposal at all or no count (an older run folder)."""
    finals = []
    for rec in records:
        totals = [t for t in rec["steps"].get("valid_total") or [] if t is not None]
        if not totals or totals[-1] <= 0:
            return None
        finals.append(int(totals[-1]))
    return min(finals) if finals else None


def matched_measures(rec: dict, budget: int) -> dict:
    """One run's CVT cells and distinct valid programs when it had made `budget` valid proposals. (A rate of
    new cells per proposal over each run's second half would not compare: the population's second half starts
    several times further along its coverage curve, where any proposer finds fewer new cells.)"""
    st = rec["steps"]
    totals = st.get("valid_total") or []
    return {
        "cells": value_at_budget(totals, st.get("coverage_cells") or [], budget),
        "distinct_programs": value_at_budget(totals, st.get("distinct_programs_total") or [], budget),
    }


def budget_curve(rec: dict) -> tuple[list[float], list[float]]:
    """(valid proposals so far, CVT cells filled) per step of one run: the figure's coverage-per-proposal panel."""
    st = rec["steps"]
    xs, ys = [], []
    for t, c in zip(st.get("valid_total") or [], st.get("coverage_cells") or [], strict=False):
        if t is not None and c is not None:
            xs.append(float(t))
            ys.append(float(c))
    return xs, ys


def mean_curve_on_grid(curves: Sequence[tuple[Sequence, Sequence]], points: int = 50) -> tuple:
    """Curves with different x (valid proposals) averaged on a common grid over the x every curve covers (linear
    interpolation between steps): `(grid, mean)`, or two empty arrays."""
    usable = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x) >= 2]
    if not usable:
        return np.array([]), np.array([])
    lo, top = max(x[0] for x, _ in usable), min(x[-1] for x, _ in usable)
    if top <= lo:
        return np.array([]), np.array([])
    grid = np.linspace(lo, top, points)
    return grid, np.mean([np.interp(grid, x, y) for x, y in usable], axis=0)


__all__ = [
    "budget_curve",
    "common_budget",
    "matched_measures",
    "mean_curve_on_grid",
    "value_at_budget",
]
