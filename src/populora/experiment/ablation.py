"""`populora experiment ablation`: the paper's population-size ablation, compute-matched per adapter.

Arms: the single-agent AZR baseline and populations of 1T+1S, 2T+2S and 4T+4S, each a preset plus overrides
of `population.*` only, so every adapter does the same work per step (same prompts, rollouts, tokens and one
update: the paper's per-adapter compute match); and `shuffled`, 2T+2S with the students' rewards permuted
within each step (`rl.student_rewards=shuffled`), the null for "the population learns from the reward". Every arm runs for every seed into
`OUT/runs/<arm>/seed<S>/`; the command is resumable run by run (runs.py). At the end it reduces each run with
`measures.run_measures`, aggregates the seeds per arm (mean and 95% CI) and writes `OUT/experiment.json` and
`OUT/experiment.html`. The claims are read from `contrasts` (experiment/contrasts.py): each arm's probe change
with a bootstrap over seeds and probe items together; every population arm minus single and 2T+2S minus
shuffled, paired by seed; each population arm's best member against the best of as many single-agent seeds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from populora.experiment.runs import RunSpec, run_all

ARMS: dict[str, list[str]] = {
    "single": ["population.mode=single"],
    "1T+1S": ["population.mode=population", "population.teachers=1", "population.students=1"],
    "2T+2S": ["population.mode=population", "population.teachers=2", "population.students=2"],
    "4T+4S": ["population.mode=population", "population.teachers=4", "population.students=4"],
    "shuffled": [
        "population.mode=population",
        "population.teachers=2",
        "population.students=2",
        "rl.student_rewards=shuffled",
    ],
}
SINGLE = "single"
# arm minus arm, each with its interval: the population against the baseline, and against its own shuffled control
CONTRASTS: list[tuple[str, str]] = [
    ("1T+1S", "single"),
    ("2T+2S", "single"),
    ("4T+4S", "single"),
    ("2T+2S", "shuffled"),
]
# --quick: every arm, one seed, a few steps, a small probe. It checks the pipeline end to end and gives the
# table's shape; its numbers are too short to show learning.
QUICK: list[str] = [
    "train.steps=2",
    "train.checkpoint_every=2",
    "evolution.every=2",
    "tasks.prompts=3",
    "rl.rollouts=2",
    "diagnostics.probe_every=2",
    "diagnostics.probe_size=4",
]


def specs(
    out: Path, preset: str, seeds: Sequence[int], quick: bool, overrides: Sequence[str] = ()
) -> list[RunSpec]:
    """The runs of the ablation, arm by arm (all seeds of an arm before the next arm)."""
    extra = (QUICK if quick else []) + list(overrides)
    return [
        RunSpec(
            name=f"{arm} seed {seed}",
            preset=preset,
            overrides=[*extra, *ARMS[arm], f"train.seed={seed}"],
            path=out / "runs" / arm / f"seed{seed}",
            meta={"arm": arm, "seed": seed},
        )
        for arm in ARMS
        for seed in seeds
    ]


def _check_probe(preset: str, overrides: Sequence[str]) -> None:
    from populora.config import ConfigError, load_config

    if load_config(preset, list(overrides)).diagnostics.probe_every <= 0:
        raise ConfigError(
            f"experiment ablation: preset {preset!r} has no probe (diagnostics.probe_every=0); use the "
            "tiny-learn preset or --set diagnostics.probe_every=N."
        )


def aggregate(run_dirs: dict[str, list[Path]]) -> dict:
    """{arm: {"runs": [measures...], "summary": {...mean/CI per scalar}}} from finished run folders."""
    from populora.diagnostics.run import load_run
    from populora.experiment.measures import mean_ci, run_measures

    out = {}
    for arm, dirs in run_dirs.items():
        runs = []
        for d in dirs:
            m = run_measures(load_run(d))
            m["path"] = str(d)
            runs.append(m)
        out[arm] = {"runs": runs, "summary": summarize(runs, mean_ci)}
    return out


def _leaves(d: dict, prefix: str = "") -> dict[str, float | None]:
    flat: dict[str, float | None] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_leaves(v, key + "."))
        elif v is None or isinstance(v, int | float) and not isinstance(v, bool):
            flat[key] = v
    return flat


def summarize(runs: list[dict], mean_ci: Callable) -> dict:
    """Mean and CI over the seeds of every numeric leaf of the runs' measures (dotted keys)."""
    keys: list[str] = []
    leaves = [
        _leaves({k: v for k, v in r.items() if k not in ("path", "probe_steps", "curves")}) for r in runs
    ]
    for lv in leaves:
        keys += [k for k in lv if k not in keys]
    return {k: mean_ci([lv.get(k) for lv in leaves]) for k in keys}


def run_ablation(
    out: Path,
    preset: str = "tiny-learn",
    seeds: int | None = None,
    quick: bool = False,
    overrides: Sequence[str] = (),
    eval_benchmarks: str | None = None,
    eval_limit: int = 20,
    log: Callable[[str], None] = print,
) -> dict:
    """Run (or finish) every arm x seed (seeds 0..S-1; default 3, 1 with quick), then write
    OUT/experiment.json and OUT/experiment.html."""
    from populora.experiment.page import write_ablation_page

    out = Path(out)
    seeds = list(range(seeds if seeds is not None else (1 if quick else 3)))
    all_specs = specs(out, preset, seeds, quick, overrides)
    _check_probe(preset, all_specs[0].overrides)
    t0 = time.time()
    seconds = run_all(all_specs, log=log)
    dirs: dict[str, list[Path]] = {}
    for s in all_specs:
        dirs.setdefault(s.meta["arm"], []).append(s.path)
    result = {
        "kind": "ablation",
        "preset": preset,
        "seeds": seeds,
        "quick": quick,
        "overrides": list(overrides) + (QUICK if quick else []),
        "arms": {arm: ARMS[arm] for arm in ARMS},
        "command_seconds": round(time.time() - t0, 1),
        "run_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "results": aggregate(dirs),
    }
    from populora.experiment.contrasts import contrasts

    result["contrasts"] = contrasts(dirs, dict.fromkeys(dirs, seeds), CONTRASTS, single=SINGLE)
    if eval_benchmarks:
        from populora.experiment.evaluation import evaluate_runs

        result["eval"] = evaluate_runs(dirs, eval_benchmarks, eval_limit, out / "eval", log=log)
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    write_ablation_page(result, out / "experiment.html")
    log(f"wrote {out / 'experiment.json'} and {out / 'experiment.html'}")
    return result
