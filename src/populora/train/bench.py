"""`populora bench population`: wall-clock of the tiny preset, single agent vs 1T+1S vs 2T+2S vs 4T+4S.

Every configuration does the same work per matchup (the same prompts, rollouts and token budgets; the single
agent does one matchup's work with one adapter), so the total work grows with the number of matchups N_T and
the interesting number is how the wall-clock grows with it. All configurations are built first (model loading
excluded) and their steps then run round-robin, so the load of a shared machine hits them alike; the first
step of each is a warm-up and is not timed. Reported: the mean step wall-clock, the ratio to the single agent,
and where a step's time goes (phase timings).

The paper reports 4T+4S (8 adapters) at 1.31x the single agent's wall-clock on 8xH100 with vLLM multi-LoRA
batching; the comparison row explains why a 2-core CPU cannot show the same sub-linear scaling.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from populora.config import load_config
from populora.train.trainer import Trainer

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


def _summarise(name: str, recs: list[dict], warmup: int) -> dict:
    timed = recs[warmup:] or recs
    step_s = [r["step_s"] for r in timed]
    phases = {k: sum(r["phase_s"][k] for r in timed) / len(timed) for k in timed[0]["phase_s"]}
    return {
        "config": name,
        "adapters": len(recs[0]["members"]),
        "matchups": len(recs[0]["matchups"]),
        "steps_timed": len(timed),
        "step_s_mean": sum(step_s) / len(step_s),
        "step_s": step_s,
        "phase_s_mean": phases,
        "gen_tokens_per_step": sum(r["tokens"] for r in timed) / len(timed),
        "train_tokens_per_step": sum(r["train_tokens"] or 0 for r in timed) / len(timed),
        "tokens_per_s": sum(r["tokens"] for r in timed) / max(sum(step_s), 1e-9),
    }


def _measure_interleaved(configs: list[tuple[str, list[str]]], steps: int, extra: list[str]) -> list[dict]:
    """Build one trainer per configuration, then run their steps round-robin (step 1 of every configuration,
    then step 2, ...), so a change in the machine's load hits every configuration alike."""
    tmp = Path(tempfile.mkdtemp(prefix="populora-bench-population-"))
    trainers, recs = [], {name: [] for name, _ in configs}
    try:
        for name, overrides in configs:
            cfg = load_config("tiny", [*overrides, f"train.steps={steps}", "evolution.every=0", *extra])
            tr = Trainer(cfg, tmp / name.replace("+", ""), quiet=True)
            tr.setup()
            trainers.append((name, tr))
        for step in range(1, steps + 1):
            for name, tr in trainers:
                recs[name].append(tr.step(step).record)
    finally:
        for _, tr in trainers:
            tr.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return [_summarise(name, recs[name], warmup=1) for name, _ in configs]


def run(quick: bool = False, out: Path | None = None, extra: list[str] | None = None) -> dict:
    """Measure every configuration, print a rich table, write JSON (default bench/results/population.json)."""
    steps = 3 if quick else 6
    configs = CONFIGS[:3] if quick else CONFIGS
    rows = _measure_interleaved(configs, steps, list(extra or []))
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
        "warmup_steps_excluded": 1,
        "method": "one trainer per configuration, steps run round-robin across configurations",
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
            "On a 2-core CPU a batched forward is already close to compute-bound at one matchup's batch size: more "
            "rows cost nearly proportionally more FLOPs, so wall-clock grows close to linearly with matchups; what "
            "batching still saves here is per-call overhead (one generate and one train_step for all members)."
        ),
    }
    table = Table(
        title=f"populora bench population (tiny preset, {steps - 1} timed steps each, interleaved, same work per matchup)"
    )
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
