"""The report's counts of the rated games and of what the evolution operators did, from a run's records.

Games: metrics.jsonl `games` holds each member's wins, draws and losses in that step's matchups (one zero-sum
game per matchup, population/ratings.py); here they are summed per role over the steps and per member over the
run. Operators: events.jsonl evolution events name the operator drawn (`planned`) and the one applied
(`operator`); X4 declines to extrapolate below its cosine gate and applies X5, with the reason in `declined`
and its cosine in `cos`. Runs written before these keys existed give empty counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from populora.diagnostics.run import Run

RESULTS = ("win", "draw", "loss")


def role_games(run: Run) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
    """(steps, {role: {result: cumulative count up to each step}}) over the records that log `games`."""
    recs = [r for r in run.metrics if isinstance(r.get("games"), dict) and "members" in r]
    steps = np.array([int(r["step"]) for r in recs], dtype=np.int64)
    per_step: dict[str, dict[str, np.ndarray]] = {}
    for i, rec in enumerate(recs):
        for mid, counts in rec["games"].items():
            role = run.role_of(mid)
            if role not in ("teacher", "student") or not isinstance(counts, dict):
                continue
            arrs = per_step.setdefault(role, {k: np.zeros(len(recs), dtype=np.int64) for k in RESULTS})
            for k in RESULTS:
                arrs[k][i] += int(counts.get(k, 0))
    return steps, {role: {k: np.cumsum(v) for k, v in arrs.items()} for role, arrs in per_step.items()}


def member_games(run: Run) -> dict[str, dict[str, int]]:
    """{member: {result: total over the run}} for every member that played a rated game."""
    out: dict[str, dict[str, int]] = {}
    for rec in run.metrics:
        for mid, counts in (rec.get("games") or {}).items():
            if isinstance(counts, dict):
                tot = out.setdefault(mid, dict.fromkeys(RESULTS, 0))
                for k in RESULTS:
                    tot[k] += int(counts.get(k, 0))
    return {m: c for m, c in out.items() if sum(c.values())}


@dataclass(frozen=True)
class OperatorCounts:
    """Evolution operators: how often each was applied, how often X4 was drawn, extrapolated or fell back."""

    applied: Counter
    x4_planned: int
    x4_extrapolated: int
    x4_fell_back: int
    x4_cos: tuple[float, ...]  # the cosine of every X4 draw that logged one


def operator_counts(run: Run) -> OperatorCounts:
    events = run.events_of("evolution")
    applied = Counter(str(e["operator"]) for e in events if e.get("operator"))
    x4 = [e for e in events if e.get("planned", e.get("operator")) == "X4"]
    fell = sum(1 for e in x4 if e.get("operator") != "X4")
    cos = tuple(float(e["cos"]) for e in x4 if isinstance(e.get("cos"), int | float))
    return OperatorCounts(applied, len(x4), len(x4) - fell, fell, cos)


__all__ = ["RESULTS", "OperatorCounts", "member_games", "operator_counts", "role_games"]
