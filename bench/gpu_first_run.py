"""The JSON of the first GPU sitting (bench/gpu_first_run.sh runs the phases; this assembles their record).

One file, `bench/results/gpu_first_run.json` on a GPU: per phase its status (pass / fail / timeout / skipped),
seconds and timeout; the doctor's lines; each gpu_check check's status, line, expected and measured seconds, and
the memory numbers that decide a run's settings; per real `paper-7b` step its seconds by phase, generation
tokens/s, valid proposals, solve rates and train tokens; and whether the resume continued from the step-2
checkpoint. `passed` is true when every phase passed. docs/engine.md, "The first GPU sitting", reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# gpu_check numbers worth a line of their own: (check, key)
CHECK_NUMBERS = (
    ("train_max_row", "device_peak_bytes"),
    ("train_max_row", "device_peak_at_wake_bytes"),
    ("train_max_row", "device_peak_before_sleep_bytes"),
    ("preflight", "plan"),
    ("vllm_colocated", "gen_tokens_per_s"),
    ("vllm_colocated", "vllm_bytes"),
    ("kv_pressure", "demand_tokens"),
    ("kv_pressure", "kv_capacity_tokens"),
    ("adapter_refresh", "refresh_s"),
    ("sleep_wake_greedy", "rows_equal"),
)


def read_json(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


def read_jsonl(path: Path) -> list[dict]:
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def step_summary(m: dict) -> dict:
    """A metrics.jsonl step, reduced to what the sitting reads: time, speed, validity, solving, training."""
    members = m.get("members", {}).values()
    teachers = [x for x in members if x.get("role") == "teacher"]
    students = [x for x in members if x.get("role") == "student"]
    return {
        "step": m.get("step"),
        "step_s": m.get("step_s"),
        "phase_s": m.get("phase_s"),
        "gen_tokens": m.get("tokens"),
        "gen_tokens_per_s": m.get("tokens_per_s"),
        "train_tokens": m.get("train_tokens"),
        "proposals": sum(x.get("n_proposed") or 0 for x in teachers),
        "valid": sum(x.get("n_valid") or 0 for x in teachers),
        "student_solve_rate": [(x.get("solve_rate") or {}).get("all") for x in students],
        "student_loss": [x.get("loss") for x in students],
    }


def gpu_check_summary(r: dict | None) -> dict | None:
    if r is None:
        return None
    checks = r.get("checks", {})
    numbers = {
        f"{name}.{key}": checks[name][key]
        for name, key in CHECK_NUMBERS
        if name in checks and checks[name].get(key) is not None
    }
    return {
        "passed": r.get("passed"),
        "complete": r.get("complete"),
        "device": r.get("device"),
        "python": r.get("python"),
        "vllm": r.get("vllm"),
        "wall_s": r.get("wall_s"),
        "checks": {
            k: {x: v.get(x) for x in ("status", "line", "expected_s", "measured_s")}
            for k, v in checks.items()
        },
        "numbers": numbers,
    }


def assemble(work: Path, run: Path, model: str, budget_s: float, wall_s: float | None = None) -> dict:
    """The sitting's record from `work` (phases.jsonl, doctor.json, gpu_check.json) and the run folder."""
    phases = read_jsonl(work / "phases.jsonl")
    steps = read_jsonl(run / "metrics.jsonl")
    events = read_jsonl(run / "events.jsonl")
    by_name = {p.get("name"): p for p in phases}
    resumed = by_name.get("resume", {}).get("status") == "pass"
    return {
        "what": "the first GPU sitting: doctor, gpu_check, two real paper-7b steps, a resume (bench/gpu_first_run.sh)",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "commit": _commit(),
        "model": model,
        "budget_s": budget_s,
        "wall_s": wall_s,
        "passed": bool(phases) and all(p.get("status") == "pass" for p in phases),
        "phases": phases,
        "doctor": read_json(work / "doctor.json"),
        "gpu_check": gpu_check_summary(read_json(work / "gpu_check.json")),
        "steps": [step_summary(m) for m in steps],
        "resume": {
            "passed": resumed,
            "continued_to_step": max((m.get("step") or 0 for m in steps), default=None) if resumed else None,
            "checkpoints": sorted(p.name for p in (run / "checkpoints").glob("step_*"))
            if run.is_dir()
            else [],
        },
        "evolutions": sum(e.get("type") == "evolution" for e in events),
        "logs_tail": {
            p.stem: p.read_text(errors="replace")[-1500:]
            for p in sorted(work.glob("*.log"))
            if by_name.get(p.stem, {}).get("status") not in ("pass", None)
        },
    }


def _commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--work", type=Path, required=True, help="the sitting's scratch folder (phases.jsonl, ...)"
    )
    ap.add_argument("--run", type=Path, required=True, help="the run folder of the real steps")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--budget-s", type=float, default=900)
    ap.add_argument("--wall-s", type=float, default=None)
    args = ap.parse_args(argv)
    res = assemble(args.work, args.run, args.model, args.budget_s, args.wall_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    for p in res["phases"]:
        extra = (
            f" in {p['seconds']} s (timeout {p['limit_s']} s)" if "seconds" in p else f": {p.get('why', '')}"
        )
        print(f"{p.get('status', '?').upper():8} {p.get('name')}{extra}")
    for s in res["steps"]:
        print(
            f"step {s['step']}: {s['step_s'] or 0:.0f} s, {s['gen_tokens_per_s'] or 0:.0f} generated tokens/s, "
            f"{s['valid']}/{s['proposals']} valid proposals, student solve rates {s['student_solve_rate']}"
        )
    print(f"{'passed' if res['passed'] else 'FAILED'} in {res['wall_s']} s; wrote {args.out}")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
