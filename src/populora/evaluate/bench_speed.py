"""`populora bench eval`: our EvalPlus grader's verdicts and time against the official evalplus 0.3.1.

Both grade the same samples (`agreement.samples`: canonical, wrong, base-only-right and pathological
programs over 41 HumanEval+/MBPP+ tasks) from a cold start: evalplus computes its ground truth in-process
(``trusted_exec``, what ``evalplus.evaluate`` does before it writes its cache) and checks each sample in a
forked process per phase, ``workers`` at a time; ours runs with an empty ground-truth cache (a temporary
``XDG_CACHE_HOME``) and ``workers`` sandbox workers. Writes ``bench/results/eval.json`` and prints one table.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(out: Path | None = None, workers: int = 2, n_humaneval: int = 22, n_mbpp: int = 18) -> dict:
    from rich.console import Console
    from rich.table import Table

    from populora.evaluate import agreement
    from populora.evaluate import ground_truth as gtm

    old = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="populora-bench-eval-") as tmp:
        os.environ["XDG_CACHE_HOME"] = tmp
        gtm._MEMORY.clear()  # cold: no expected outputs from earlier in this process either
        try:
            res = agreement.compare(n_humaneval, n_mbpp, workers=workers)
        finally:
            if old is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = old
    sec = res["seconds"]
    table = Table(title=f"EvalPlus grading, {res['n_samples']} samples over {res['n_tasks']} tasks")
    for col in ("grader", "seconds", "samples/s", "verdicts differing"):
        table.add_column(col, justify="left" if col == "grader" else "right")
    n = res["n_samples"]
    diff = len(res["disagreements"]) + len(res["expected_differences"])
    table.add_row("evalplus 0.3.1 (official)", f"{sec['evalplus']:.1f}", f"{n / sec['evalplus']:.1f}", "–")
    table.add_row(
        "populora (sandboxed)",
        f"{sec['populora']:.1f}",
        f"{n / sec['populora']:.1f}",
        f"{diff} ({len(res['disagreements'])} unexpected)",
    )
    Console().print(table)
    kinds = sorted(
        {
            "find_zero (HumanEval/32)" if "find_zero" in d["why"] else d["kind"]
            for d in res["expected_differences"]
        }
    )
    Console().print(
        f"ratio official/ours: {sec['evalplus'] / sec['populora']:.2f}x; expected differences: {', '.join(kinds)}"
    )
    payload = {k: v for k, v in res.items() if k != "rows"} | {"workers": workers}
    out = out or REPO / "bench" / "results" / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    Console().print(f"wrote {out}")
    return payload
