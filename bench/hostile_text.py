"""Time the evaluation's extraction and the task parsers on hostile model text (issue 50, item 3).

Cases: the EvalPlus sanitiser on N lines of `x = (` (nothing parses; the old longest-span search parsed every
pair of lines: 200 lines took 12 s, 400 took 66 s in the issue's report), the math answer's `\\[ ... \\]`
fallback and the fence scanner on 60,000 characters of openings (old lazy regular expressions: 21 s and about
5 s), and `parse_call_args` of the issue's `0b` + 15,000 ones (it used to parse and then raise out of
validation). The numbers before the change were measured on the same machine with the old code (see
`before_s`); this script times the current code only.
Usage: PYTHONPATH=src python bench/hostile_text.py [--out bench/results/hostile_text.json]
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

from populora.evaluate.extract import extract_azr_answer, fenced_blocks, sanitize
from populora.tasks.literals import LiteralError, parse_call_args

# Measured with the code of commit e72cec8 on this 2-core machine under load (other agents), one run each.
BEFORE_S = {
    "sanitize: 100 lines of 'x = ('": 1.04,
    "sanitize: 200 lines of 'x = ('": 7.3,
    "math answer: 60,000 chars of '\\['": 27.07,
    "fences: 60,000 chars of '```'": 5.47,
}


def _time(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _huge_literal() -> None:
    try:
        parse_call_args("0b" + "1" * 15_000)
    except LiteralError:
        return
    raise AssertionError("a 15,000-bit literal was accepted")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/hostile_text.json"))
    args = ap.parse_args()
    cases = {
        "sanitize: 100 lines of 'x = ('": lambda: sanitize("x = (\n" * 100, "f"),
        "sanitize: 200 lines of 'x = ('": lambda: sanitize("x = (\n" * 200, "f"),
        "sanitize: 400 lines of 'x = ('": lambda: sanitize("x = (\n" * 400, "f"),
        "sanitize: 2,000 lines of 'x = ('": lambda: sanitize("x = (\n" * 2_000, "f"),
        "sanitize: answer + 150 junk lines": lambda: sanitize(
            "def f(x):\n    return x\n" + "x = (\n" * 150, "f"
        ),
        "math answer: 60,000 chars of '\\['": lambda: extract_azr_answer("\\[" * 30_000),
        "fences: 60,000 chars of '```'": lambda: fenced_blocks("```" * 20_000),
        "literal: 0b + 15,000 ones (refused)": _huge_literal,
    }
    rows = []
    print(f"{'case':42} {'before s':>9} {'now s':>8}")
    for name, fn in cases.items():
        now = _time(fn)
        before = BEFORE_S.get(name)
        rows.append({"case": name, "before_s": before, "now_s": round(now, 4)})
        print(f"{name:42} {before if before is not None else '-':>9} {now:8.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
