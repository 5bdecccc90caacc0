"""The raw per-step record of one finished run that an experiment keeps in its JSON (issue 31 §2).

`run_records(path)` reads the run folder's logs as they are, without reducing them, so the claims can be
answered later from the experiment file alone:

- `probe`: every probe the run logged (step 0 included), with every `probe*` entry of its metrics record as
  written (`probe`, `probe_style`, `probe_valid` and whatever a newer prober adds, e.g. per-level results);
- `steps`: per training step, columns aligned on `step`: seconds per step and per probe, coverage (fraction and
  cells), the single agent's self-solve rate (None in population mode), the step's valid-proposal rate,
  the mean complexity of its valid proposals per feature, the distinct valid programs (of the step, and
  cumulative since step 1) and the valid proposals made so far (`valid_total`);
- `games`: per step, each member's wins, draws and losses (metrics.jsonl `games`);
- `ratings`: per member, its TrueSkill mu and sigma over steps (None while it was not alive or unrated);
- `roles`: member -> role.
"""

from __future__ import annotations

from pathlib import Path

from populora.diagnostics.sinks import read_jsonl

# metrics keys that start with "probe" but are no probe result: a timing and a per-step count
_NOT_PROBE = {"probe_s", "probe_collisions"}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _by_step(records: list[dict]) -> list[dict]:
    """One record per step (the last written wins: a resumed run repeats none, but an old log might)."""
    seen: dict[int, dict] = {}
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("step"), int):
            seen[r["step"]] = r
    return [seen[s] for s in sorted(seen)]


def run_records(path: Path) -> dict:
    path = Path(path)
    records = _by_step(read_jsonl(path / "metrics.jsonl", missing_ok=True))
    probes = [
        {"step": r["step"], **{k: v for k, v in r.items() if k.startswith("probe") and k not in _NOT_PROBE}}
        for r in records
        if isinstance(r.get("probe"), dict)
    ]
    steps = [r for r in records if isinstance(r.get("members"), dict)]  # the step-0 probe record has none
    problems = [p for p in read_jsonl(path / "problems.jsonl", missing_ok=True) if isinstance(p, dict)]
    valid_by_step: dict[int, list[dict]] = {}
    proposed_by_step: dict[int, int] = {}
    for p in problems:
        s = p.get("step")
        proposed_by_step[s] = proposed_by_step.get(s, 0) + 1
        if p.get("valid"):
            valid_by_step.setdefault(s, []).append(p)
    features = sorted({f for ps in valid_by_step.values() for p in ps for f in (p.get("features") or {})})
    seen_programs: set[str] = set()
    distinct, distinct_total, valid_total = [], [], []
    complexity: dict[str, list[float | None]] = {f: [] for f in features}
    for r in steps:
        valid = valid_by_step.get(r["step"], [])
        programs = {p["program"] for p in valid if p.get("program")}
        seen_programs |= programs
        distinct.append(len(programs))
        distinct_total.append(len(seen_programs))
        valid_total.append((valid_total[-1] if valid_total else 0) + len(valid))
        for f in features:
            complexity[f].append(
                _mean([p["features"][f] for p in valid if (p.get("features") or {}).get(f) is not None])
            )

    def col(key: str) -> list:
        return [r.get(key) for r in steps]

    roles: dict[str, str] = {}
    for r in steps:
        for mid, m in r["members"].items():
            if isinstance(m, dict) and m.get("role"):
                roles.setdefault(mid, m["role"])
    ratings = {
        mid: {
            "mu": [(r["members"].get(mid) or {}).get("mu") for r in steps],
            "sigma": [(r["members"].get(mid) or {}).get("sigma") for r in steps],
        }
        for mid in roles
    }
    return {
        "roles": roles,
        "probe": probes,
        "steps": {
            "step": col("step"),
            "step_s": col("step_s"),
            "probe_s": col("probe_s"),
            "coverage": col("coverage"),
            "coverage_cells": col("coverage_cells"),
            "self_solve_rate": col("self_solve_rate"),
            "valid_rate": [
                len(valid_by_step.get(r["step"], [])) / proposed_by_step[r["step"]]
                if proposed_by_step.get(r["step"])
                else None
                for r in steps
            ],
            "complexity": complexity,
            "distinct_programs": distinct,
            "distinct_programs_total": distinct_total,
            # valid proposals made so far: coverage at an equal budget across arms (matched.py)
            "valid_total": valid_total,
        },
        "games": [{"step": r["step"], "games": r.get("games") or {}} for r in steps],
        "ratings": ratings,
    }


__all__ = ["run_records"]
