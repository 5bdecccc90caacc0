"""`--eval BENCHMARKS` of an experiment: `populora eval` on every finished run, then the paper's table.

Each run is evaluated by the `populora eval` command itself (a subprocess, so the evaluator's own data
checks, graders and result files are used unchanged), into `OUT/eval/<arm>/seed<S>/results.json`. An
evaluation already written is reused. The table has one row per arm and role statistic (best and mean member
per role, as the paper's table) and one column per benchmark: greedy pass@1 averaged over the seeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np


def evaluate_runs(
    dirs: dict[str, list[Path]],
    benchmarks: str,
    limit: int,
    out: Path,
    log: Callable[[str], None] = print,
) -> dict:
    """{"benchmarks", "limit", "table": {arm: {row: {benchmark: pass@1}}}, "files": [...]}."""
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    files, errors = [], {}
    for arm, runs in dirs.items():
        for run in runs:
            dest = out / arm / run.name
            res = dest / "results.json"
            if not res.is_file():
                log(f"eval {arm} {run.name}: {benchmarks} (first {limit} problems each) ...")
                cmd = [sys.executable, "-m", "populora.cli", "eval", str(run), "-b", benchmarks]
                cmd += ["--limit", str(limit), "--out-dir", str(dest)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0 or not res.is_file():
                    err = (proc.stderr or proc.stdout).strip().splitlines()
                    errors[f"{arm}/{run.name}"] = err[-1] if err else f"exit code {proc.returncode}"
                    log(f"eval {arm} {run.name} failed: {errors[f'{arm}/{run.name}']}")
                    continue
            files.append(str(res))
            rows = json.loads(res.read_text()).get("results", [])
            for key, vals in _role_rows(rows).items():
                for bench, v in vals.items():
                    table.setdefault(arm, {}).setdefault(key, {}).setdefault(bench, []).append(v)
    mean_table = {
        arm: {k: {b: float(np.mean(v)) for b, v in cols.items()} for k, cols in rows.items()}
        for arm, rows in table.items()
    }
    return {"benchmarks": benchmarks, "limit": limit, "table": mean_table, "files": files, "errors": errors}


def _role_rows(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Best and mean member per role and benchmark (and the base model) from one results.json."""
    by: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("pass@1") is None:
            continue
        role = r.get("role") or "base"
        by.setdefault(role, {}).setdefault(r["benchmark"], []).append(float(r["pass@1"]))
    out: dict[str, dict[str, float]] = {}
    for role, benches in by.items():
        if role == "base":
            out["base"] = {b: v[0] for b, v in benches.items()}
            continue
        out[f"{role} best"] = {b: max(v) for b, v in benches.items()}
        out[f"{role} mean"] = {b: float(np.mean(v)) for b, v in benches.items()}
    return out
