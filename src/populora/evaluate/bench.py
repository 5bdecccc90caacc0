"""`populora bench eval-oracle`: the graders' self-check on the full data (gold ~100%, wrong ~0%).

Writes ``bench/results/eval_oracle.json``: for each mode the `EvalReport` JSON (rows with member "oracle",
the exceptions and why) plus the wall time, and prints one table. This is a correctness benchmark, not a speed
one; the "alternative" a user would run is ``evalplus.evaluate`` (not installed: see `code_grader.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

from populora.evaluate.data import BENCHMARKS, DISPLAY

REPO = Path(__file__).resolve().parents[3]


def run(quick: bool = False, out: Path | None = None, data_dir: Path | None = None, workers: int = 2) -> dict:
    from rich.console import Console
    from rich.table import Table

    from populora.evaluate.runner import EvalOptions, run_oracle

    reports = {}
    for mode in ("gold", "wrong"):
        opts = EvalOptions(
            benchmarks=list(BENCHMARKS), limit=20 if quick else None, data_dir=data_dir, workers=workers
        )
        reports[mode] = run_oracle(mode, opts)
    table = Table(title="Grader oracle: gold answers should pass, wrong ones fail")
    for col in ("benchmark", "n", "gold pass@1 %", "wrong pass@1 %", "exceptions (gold / wrong)"):
        table.add_column(col, justify="left" if col == "benchmark" else "right")
    rows = {m: {r["benchmark"]: r for r in rep.rows} for m, rep in reports.items()}
    for b in BENCHMARKS:
        if b not in rows["gold"] and b not in rows["wrong"]:
            why = reports["gold"].unavailable.get(b, "")
            table.add_row(DISPLAY[b], "–", "n/a", "n/a", why[:40])
            continue
        g, w = rows["gold"].get(b), rows["wrong"].get(b)
        ex = f"{len(reports['gold'].exceptions.get(b, []))} / {len(reports['wrong'].exceptions.get(b, []))}"
        table.add_row(
            DISPLAY[b],
            str((g or w)["n"]),
            f"{100 * g['pass@1']:.1f}" if g else "n/a",
            f"{100 * w['pass@1']:.1f}" if w else "n/a",
            ex,
        )
    Console().print(table)
    payload = {
        "quick": quick,
        "gold": reports["gold"].to_json(),
        "wrong": reports["wrong"].to_json(),
        "markdown": {m: r.markdown() for m, r in reports.items()},
    }
    out = out or REPO / "bench" / "results" / "eval_oracle.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    Console().print(f"wrote {out}")
    return payload
