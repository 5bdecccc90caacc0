"""What validation's per-proposal budget (`TaskConfig.validate_deadline_s`, issue 50 item 4) saves and costs.

Cases, each one code_f proposal of 10 inputs validated on a warm `Sandbox(workers=2)` (limits: 5 s a job), with
the default budget (30 s of sandbox time) and without one (`validate_deadline_s=None`, what main did):

- `slow calls`: `sum(range(n))` on inputs that make each call slow (the issue's case: about 0.4 s a call held
  both workers for 39-44 s);
- `slow on re-runs`: fast on its first call in a process, slow from the second on: pass 1 sees nothing, and the
  later jobs (10 calls each) are cut at their share of the budget;
- `fast`: the usual proposal (a few milliseconds a call): the verdict and the cost with and without the budget.

Prints a table (verdict, wall seconds) and writes JSON.

    python bench/validation_deadline.py [--out bench/results/validation_deadline.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from populora import tasks
from populora.sandbox import Limits, Sandbox
from populora.tasks import Proposal

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "validation_deadline.json"
PROGRAM = "def f(n):\n    return sum(range(n))"
RE_RUNS = "seen = []\n\ndef f(n):\n    seen.append(n)\n    return sum(range(12_000_000)) * 0 + n if len(seen) > 1 else n"
CASES = {
    "slow calls": Proposal(PROGRAM, tuple(str(12_000_000 + k) for k in range(10)), "sums"),
    "slow on re-runs": Proposal(RE_RUNS, tuple(str(k) for k in range(10)), "echo"),
    "fast": Proposal(PROGRAM, tuple(str(k) for k in range(10)), "sums"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = []
    with Sandbox(workers=2, limits=Limits(timeout_s=5.0, memory_mb=512)) as sb:
        tasks.get("code_f").validate([CASES["fast"]], sb)  # warm the determinism pools
        one_call = sb.run(PROGRAM, "f(12000000)").elapsed_s
        for name, proposal in CASES.items():
            for budget in (30.0, None):
                t = tasks.get("code_f", validate_deadline_s=budget)
                t0 = time.monotonic()
                (res,) = t.validate([proposal], sb)
                rows.append(
                    {
                        "case": name,
                        "validate_deadline_s": budget,
                        "valid": not hasattr(res, "reason"),
                        "reason": getattr(res, "reason", None),
                        "wall_s": round(time.monotonic() - t0, 3),
                    }
                )
                r = rows[-1]
                print(
                    f"{name:16} budget {budget!s:5}  {'valid' if r['valid'] else 'invalid':8} {r['wall_s']:7.2f} s"
                    f"  {r['reason'] or ''}"
                )
    out = {
        "bench": "validation_deadline",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 2),
        "one_slow_call_s": round(one_call, 3),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
