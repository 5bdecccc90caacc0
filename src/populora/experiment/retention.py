"""`populora experiment retention`: the paper's crossover retention test at laptop scale.

1. Two single-task specialists: single-agent runs of the preset with `tasks.types=code_o` and
   `tasks.types=code_i` (OUT/specialists/<task>/, resumable like any experiment run).
2. Children: every crossover operator applied to (code_o specialist, code_i specialist), seed 0.
3. Each child (and each parent, as the reference) is loaded into a fresh single-agent trainer on all task
   types for `recovery_steps` steps with the probe at step 0 and at the end (OUT/recovery/<name>/): the
   step-0 probe is the child at birth, the last one after recovery.
4. A table of probe accuracy per task type, and of how much of each specialist's skill on its own task every
   child keeps (child / specialist), at birth and after recovery: OUT/experiment.json and experiment.html.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from populora.experiment.runs import RunSpec, last_step, run_all

SPECIALISTS: tuple[str, ...] = ("code_o", "code_i")
CROSSOVERS: tuple[str, ...] = ("X1", "X2", "X3", "X4", "X5", "X6", "X7", "X8", "X9")
QUICK: list[str] = ["tasks.prompts=3", "rl.rollouts=2", "diagnostics.probe_size=4"]


def _probes(run_dir: Path) -> dict[int, dict]:
    """{step: probe} of a run folder's metrics.jsonl."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec.get("probe"), dict):
            out[int(rec["step"])] = rec["probe"]
    return out


def recover(adapter, preset: str, overrides: Sequence[str], steps: int, run_dir: Path) -> None:
    """Train `adapter` as a single agent on every task type for `steps` steps, probing at 0 and `steps`."""
    from populora.config import load_config, to_yaml
    from populora.train.setup import build_engine
    from populora.train.trainer import Trainer

    if last_step(run_dir) >= steps:
        return
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a short run: redo it rather than resume it
    cfg = load_config(
        preset,
        [
            *overrides,
            "population.mode=single",
            "tasks.types=code_i,code_o,code_f",
            f"train.steps={steps}",
            f"train.checkpoint_every={steps}",
            f"diagnostics.probe_every={steps}",
        ],
    )
    engine = build_engine(cfg)
    trainer = Trainer(cfg, run_dir, engine=engine, quiet=True)
    try:
        trainer.setup()
        engine.set_adapter(0, adapter, reset_optimizer=True)
        trainer.run.write_config(to_yaml(cfg))
        trainer.fit(0)
    finally:
        trainer.close()


def run_retention(
    out: Path,
    preset: str = "tiny-learn",
    quick: bool = False,
    specialist_steps: int | None = None,
    recovery_steps: int | None = None,
    operators: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> dict:
    """Train the specialists, make and recover the children, write OUT/experiment.json and .html."""
    from populora.experiment.page import write_retention_page
    from populora.lora.peft_io import load_peft
    from populora.operators import apply

    out = Path(out)
    extra = (QUICK if quick else []) + list(overrides)
    s_steps = specialist_steps or (2 if quick else 30)
    r_steps = recovery_steps or (1 if quick else 5)
    ops = list(operators or (("X1", "X2") if quick else CROSSOVERS))
    t0 = time.time()
    specs = [
        RunSpec(
            name=f"{task} specialist",
            preset=preset,
            overrides=[
                *extra,
                "population.mode=single",
                f"tasks.types={task}",
                f"train.steps={s_steps}",
                f"train.checkpoint_every={s_steps}",
                f"diagnostics.probe_every={s_steps}",
            ],
            path=out / "specialists" / task,
        )
        for task in SPECIALISTS
    ]
    run_all(specs, log=log)
    parents = {
        task: load_peft(spec.path / "checkpoints" / f"step_{s_steps:06d}" / "adapters" / "A0")
        for task, spec in zip(SPECIALISTS, specs, strict=True)
    }
    adapters = {f"{t} specialist": parents[t] for t in SPECIALISTS}
    for op in ops:
        adapters[f"{op} child"] = apply(op, parents=[parents[t] for t in SPECIALISTS], seed=0)
    for i, (name, adapter) in enumerate(adapters.items(), 1):
        log(f"[{i}/{len(adapters)}] recovery of {name}: {r_steps} steps ...")
        recover(adapter, preset, extra, r_steps, out / "recovery" / name.replace(" ", "_"))
    base = _probes(specs[0].path)[0]["A0"]  # step 0 of a specialist run: the base model
    rows: dict[str, dict] = {"base model": {"birth": base, "after": None}}
    for name in adapters:
        pr = _probes(out / "recovery" / name.replace(" ", "_"))
        rows[name] = {"birth": pr[0]["A0"], "after": pr[r_steps]["A0"]}
    for row in rows.values():
        row["kept"] = {}
        for t in SPECIALISTS:
            ref = rows[f"{t} specialist"]["birth"][t]
            row["kept"][t] = {
                k: (row[k][t] / ref if ref and row.get(k) else None) for k in ("birth", "after")
            }
    result = {
        "kind": "retention",
        "preset": preset,
        "quick": quick,
        "overrides": extra,
        "specialist_tasks": list(SPECIALISTS),
        "specialist_steps": s_steps,
        "recovery_steps": r_steps,
        "operators": ops,
        "rows": rows,
        "command_seconds": round(time.time() - t0, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(result, indent=1) + "\n")
    write_retention_page(result, out / "experiment.html")
    log(f"wrote {out / 'experiment.json'} and {out / 'experiment.html'}")
    return result
