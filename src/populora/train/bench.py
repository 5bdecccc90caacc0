"""`populora bench population`: wall-clock of the tiny preset, single agent vs 1T+1S vs 2T+2S vs 4T+4S.

Every configuration does the same work per matchup (the same prompts, rollouts and token budgets; the single
agent does one matchup's work with one adapter), so the total work grows with the number of matchups N_T and
the interesting number is how the wall-clock grows with it. Each configuration trains `steps` steps in this
process (imports and the sandbox are warm); the time is the sum of the steps' wall-clock from metrics.jsonl
(model loading and the first checkpoint excluded), together with where a step's time goes (phase timings).

The paper reports 4T+4S (8 adapters) at 1.31x the single agent's wall-clock on 8xH100 with vLLM multi-LoRA
batching; the comparison row explains why a 2-core CPU cannot show the same sub-linear scaling.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

CONFIGS = [
    ("single", ["population.mode=single"]),
    ("1T+1S", ["population.teachers=1", "population.students=1"]),
    ("2T+2S", ["population.teachers=2", "population.students=2"]),
    ("4T+4S", ["population.teachers=4", "population.students=4"]),
]
PAPER = {
    "adapters": 8,
    "config": "4T+4S",
    "ratio_vs_single": 1.31,
    "hardware": "1 node, 8x H100, vLLM multi-LoRA",
}
DEFAULT_OUT = Path("bench/results/population.json")


def _measure(name: str, overrides: list[str], steps: int, extra: list[str]) -> dict:
    from populora.diagnostics.sinks import read_jsonl
    from populora.train.trainer import train

    tmp = Path(tempfile.mkdtemp(prefix=f"populora-bench-{name.replace('+', '')}-"))
    try:
        t0 = time.perf_counter()
        train(
            "tiny",
            tmp / "run",
            [
                *overrides,
                f"train.steps={steps}",
                f"train.checkpoint_every={steps}",
                "evolution.every=0",
                *extra,
            ],
            quiet=True,
        )
        total = time.perf_counter() - t0
        recs = read_jsonl(tmp / "run" / "metrics.jsonl")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    step_s = [r["step_s"] for r in recs]
    phases = {k: sum(r["phase_s"][k] for r in recs) / len(recs) for k in recs[0]["phase_s"]}
    n_adapters = len(recs[0]["members"])
    return {
        "config": name,
        "adapters": n_adapters,
        "matchups": len(recs[0]["matchups"]),
        "steps": len(recs),
        "step_s_mean": sum(step_s) / len(step_s),
        "step_s": step_s,
        "run_s_incl_setup": total,
        "phase_s_mean": phases,
        "gen_tokens_per_step": sum(r["tokens"] for r in recs) / len(recs),
        "train_tokens_per_step": sum(r["train_tokens"] or 0 for r in recs) / len(recs),
        "tokens_per_s": sum(r["tokens"] for r in recs) / max(sum(step_s), 1e-9),
    }


def run(quick: bool = False, out: Path | None = None, extra: list[str] | None = None) -> dict:
    """Measure every configuration, print a rich table, write JSON (default bench/results/population.json)."""
    from rich.console import Console
    from rich.table import Table

    steps = 2 if quick else 3
    configs = CONFIGS[:3] if quick else CONFIGS
    rows = [_measure(name, ov, steps, list(extra or [])) for name, ov in configs]
    base = rows[0]["step_s_mean"]
    for r in rows:
        r["ratio_vs_single"] = r["step_s_mean"] / base
        r["s_per_matchup"] = r["step_s_mean"] / max(r["matchups"], 1)
    four = next((r for r in rows if r["config"] == "4T+4S"), None)
    result = {
        "benchmark": "population",
        "quick": quick,
        "preset": "tiny",
        "steps_per_config": steps,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "extra_overrides": list(extra or []),
        "rows": rows,
        "paper": PAPER,
        "ours_4t4s_vs_single": four["ratio_vs_single"] if four else None,
        "explanation": (
            "Per-adapter work is fixed, so total work grows with the number of matchups (4 for 4T+4S). On the paper's "
            "8xH100 node the frozen 7B base forward is shared by all adapters in one vLLM multi-LoRA batch and the "
            "GPUs are far from saturated by one adapter's rollouts, so 4x the sequences cost only 1.31x the time. "
            "On a 2-core CPU a batched forward is already compute-bound at one matchup's batch size: more rows "
            "cost proportionally more FLOPs, so wall-clock grows nearly linearly with matchups; what batching still "
            "saves here is the per-call overhead (one generate and one train_step for all members)."
        ),
    }
    table = Table(title=f"populora bench population (tiny preset, {steps} steps each, same work per matchup)")
    for col in (
        "config",
        "adapters",
        "matchups",
        "s/step",
        "x single",
        "s/matchup",
        "gen tok/step",
        "tok/s",
        "teacher s",
        "student s",
        "update s",
        "sandbox s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        ph = r["phase_s_mean"]
        table.add_row(
            r["config"],
            str(r["adapters"]),
            str(r["matchups"]),
            f"{r['step_s_mean']:.2f}",
            f"{r['ratio_vs_single']:.2f}",
            f"{r['s_per_matchup']:.2f}",
            f"{r['gen_tokens_per_step']:.0f}",
            f"{r['tokens_per_s']:.0f}",
            f"{ph['teacher']:.2f}",
            f"{ph['student']:.2f}",
            f"{ph['update']:.2f}",
            f"{ph['validate'] + ph['score']:.2f}",
        )
    console = Console(width=150)
    console.print(table)
    if four:
        console.print(
            f"4T+4S / single wall-clock: ours {four['ratio_vs_single']:.2f}x on this machine vs the "
            f"paper's {PAPER['ratio_vs_single']}x on {PAPER['hardware']}."
        )
    out = Path(out) if out else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)
    console.print(f"wrote {out}")
    return result
