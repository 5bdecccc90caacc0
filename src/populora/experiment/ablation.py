"""`populora experiment ablation`: the paper's population-size ablation, compute-matched per adapter.

Arms: the single-agent AZR baseline (`single`: one adapter proposes and solves, AZR's buffer-fed solver
data, `population.single_solver=buffer`) and populations of 1T+1S, 2T+2S and 4T+4S, each a preset plus
overrides of `population.*` only, so every adapter does the same work per step (same prompts, rollouts, tokens
and one update: the paper's per-adapter compute match); and the shuffled controls, `shuffled` (2T+2S) and
`4T+4S-shuffled`, with the students' rewards permuted within each step (`rl.student_rewards=shuffled`): the
null for "the population learns from the reward". `--arms` picks some (spelled `1T+1S` or `1T1S`); the
default is single, 1T+1S, 2T+2S, 4T+4S and shuffled. Every arm runs for every seed into
`OUT/runs/<arm>/seed<S>/` (runs.py: resumable run by run, `--jobs` at a time); the experiment's settings are
kept in `OUT/settings.json` (settings.py) so `--resume OUT` continues it as it was started. At the end it
reduces each run with `measures.run_measures`, keeps its raw per-step records (run_records.py), aggregates
the seeds per arm (mean and 95% CI) and writes `OUT/experiment.json` and `OUT/experiment.html`. The claims
are read from `contrasts` (experiment/contrasts.py): each arm's probe change with a bootstrap over seeds and
probe items together; every population arm minus single and each population minus its shuffled control,
paired by seed; each population arm's best member against the best of as many single-agent seeds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from populora.experiment import settings as exp_settings
from populora.experiment.runs import RunSpec, run_all
from populora.experiment.settings import ExperimentError

_SHUFFLED = "rl.student_rewards=shuffled"
ARMS: dict[str, list[str]] = {
    "single": ["population.mode=single", "population.single_solver=buffer"],
    "1T+1S": ["population.mode=population", "population.teachers=1", "population.students=1"],
    "2T+2S": ["population.mode=population", "population.teachers=2", "population.students=2"],
    "4T+4S": ["population.mode=population", "population.teachers=4", "population.students=4"],
    "shuffled": ["population.mode=population", "population.teachers=2", "population.students=2", _SHUFFLED],
    "4T+4S-shuffled": [
        "population.mode=population",
        "population.teachers=4",
        "population.students=4",
        _SHUFFLED,
    ],
}
DEFAULT_ARMS: list[str] = ["single", "1T+1S", "2T+2S", "4T+4S", "shuffled"]
SINGLE = "single"
# arm minus arm, each with its interval: the population against the baseline, and against its own shuffled
# control (pairs whose arms did not run are left out)
CONTRASTS: list[tuple[str, str]] = [
    ("1T+1S", "single"),
    ("2T+2S", "single"),
    ("4T+4S", "single"),
    ("2T+2S", "shuffled"),
    ("4T+4S", "4T+4S-shuffled"),
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
    "diagnostics.probe_proposals=2",  # the teachers' validity probe: 2 prompts per type, not the preset's 32
]


def _key(name: str) -> str:
    return name.strip().replace("+", "").lower()


_ALIASES = {_key(a): a for a in ARMS} | {"2t2s-shuffled": "shuffled"}


def parse_arms(text: str) -> list[str]:
    """`single,1T1S,4T4S,4T4S-shuffled` -> the arms' names (`1T+1S` and `1T1S` are the same arm)."""
    names = [t for t in (x.strip() for x in text.split(",")) if t]
    arms = []
    for t in names:
        if _key(t) not in _ALIASES:
            known = ", ".join(a.replace("+", "") for a in ARMS)
            raise ExperimentError(f"--arms: unknown arm {t!r}; use some of {known} (comma-separated).")
        arm = _ALIASES[_key(t)]
        if arm in arms:
            raise ExperimentError(f"--arms: {t!r} is given twice; name each arm once.")
        arms.append(arm)
    if not arms:
        raise ExperimentError(f"--arms {text!r}: no arm; use some of {', '.join(ARMS)}.")
    return arms


def run_overrides(st: dict) -> list[str]:
    """The overrides every arm of an experiment shares: --quick's, the user's --set, then steps and probes."""
    return [
        *(QUICK if st["quick"] else []),
        *st["overrides"],
        f"train.steps={st['steps']}",
        f"diagnostics.probe_every={st['probe_every']}",
    ]


def specs(
    out: Path,
    preset: str,
    seeds: Sequence[int],
    quick: bool,
    overrides: Sequence[str] = (),
    arms: Sequence[str] | None = None,
) -> list[RunSpec]:
    """The runs of the ablation, seed by seed (every arm of a seed before the next seed): an experiment stopped
    part-way over several sittings then holds whole seeds, each arm paired with the others on it."""
    extra = (QUICK if quick else []) + list(overrides)
    return [
        RunSpec(
            name=f"{arm} seed {seed}",
            preset=preset,
            overrides=[*extra, *ARMS[arm], f"train.seed={seed}"],
            path=out / "runs" / arm / f"seed{seed}",
            meta={"arm": arm, "seed": seed},
        )
        for seed in seeds
        for arm in (arms or DEFAULT_ARMS)
    ]


def resolve_settings(
    preset: str = "tiny-learn",
    steps: int | None = None,
    seeds: int | None = None,
    arms: Sequence[str] | None = None,
    probe_every: int | None = None,
    quick: bool = False,
    overrides: Sequence[str] = (),
    eval_benchmarks: str | None = None,
    eval_limit: int = 20,
) -> dict:
    """The experiment's settings with every default filled in from the preset (settings.KEYS); ConfigError /
    ExperimentError (one line) when they cannot make the experiment."""
    from populora.config import ConfigError, load_config

    cfg = load_config(preset, [*(QUICK if quick else []), *overrides])
    steps = cfg.train.steps if steps is None else steps
    probe_every = cfg.diagnostics.probe_every if probe_every is None else probe_every
    if steps < 1:
        raise ExperimentError(f"--steps {steps}: must be >= 1.")
    if probe_every <= 0:
        raise ConfigError(
            f"experiment ablation: preset {preset!r} has no probe (diagnostics.probe_every=0); use the "
            "tiny-learn preset, --probe-every N or --set diagnostics.probe_every=N."
        )
    if steps % probe_every:
        raise ExperimentError(
            f"--probe-every {probe_every} does not divide --steps {steps}: the last probe would be at step "
            f"{steps - steps % probe_every}, not {steps}; pass a divisor of {steps} (e.g. --probe-every "
            f"{_divisor(steps, probe_every)})."
        )
    st = {
        "preset": preset,
        "steps": steps,
        "seeds": seeds if seeds is not None else (1 if quick else 3),
        "arms": list(arms or DEFAULT_ARMS),
        "probe_every": probe_every,
        "quick": quick,
        "overrides": list(overrides),
        "eval": eval_benchmarks,
        "eval_limit": eval_limit,
    }
    if st["seeds"] < 1:
        raise ExperimentError(f"--seeds {st['seeds']}: must be >= 1.")
    load_config(preset, [*run_overrides(st), *ARMS[st["arms"][0]]])  # the keys together still make a config
    return st


def _divisor(n: int, near: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - near), -d))


def plan_jobs(jobs: int | None, cores: int, run_threads: int, user_threads: bool) -> tuple[int, int | None]:
    """(runs side by side, train.threads per run or None to keep the runs' own). Default jobs: as many runs as
    the cores hold at the preset's threads each; threads: the cores shared out, so jobs x threads <= cores
    (unless the user fixed train.threads with --set: then theirs)."""
    jobs = jobs if jobs is not None else max(1, cores // max(1, run_threads))
    return jobs, (None if user_threads else max(1, cores // jobs))


def aggregate(run_dirs: dict[str, list[Path]]) -> dict:
    """{arm: {"runs": [measures + records...], "summary": {...mean/CI per scalar}}} from finished run folders."""
    from populora.diagnostics.run import load_run
    from populora.experiment.measures import mean_ci, run_measures
    from populora.experiment.run_records import run_records

    out = {}
    for arm, dirs in run_dirs.items():
        runs = []
        for d in dirs:
            m = run_measures(load_run(d))
            m["path"] = str(d)
            m["records"] = run_records(d)
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
        _leaves({k: v for k, v in r.items() if k not in ("path", "probe_steps", "curves", "records")})
        for r in runs
    ]
    for lv in leaves:
        keys += [k for k in lv if k not in keys]
    return {k: mean_ci([lv.get(k) for lv in leaves]) for k in keys}


def experiment_settings(out: Path, resume: bool, flags: dict) -> dict:
    """The settings this sitting runs: those saved in OUT on `--resume` (any given flag must agree, except a
    larger --seeds, which extends the experiment), else the flags resolved, which must agree with an experiment
    already in OUT."""
    saved = exp_settings.load(out)
    if resume:
        given = {k: v for k, v in flags.items() if v is not None and v is not False and v != []}
        if "arms" in given:
            given["arms"] = list(given["arms"])
        exp_settings.check_resume(out, saved, given, resume=True)
        assert saved is not None  # check_resume refuses a folder without settings
        return {**saved, "seeds": given["seeds"]} if exp_settings.adds_seeds(saved, given) else saved
    st = resolve_settings(**flags)
    exp_settings.check_resume(out, saved, st, resume=False)
    return st


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=float) + "\n")
    os.replace(tmp, path)  # a kill while writing leaves the old file whole


def run_ablation(
    out: Path,
    preset: str | None = None,
    seeds: int | None = None,
    quick: bool = False,
    overrides: Sequence[str] = (),
    eval_benchmarks: str | None = None,
    eval_limit: int | None = None,
    log: Callable[[str], None] = print,
    *,
    steps: int | None = None,
    arms: Sequence[str] | None = None,
    probe_every: int | None = None,
    jobs: int | None = None,
    resume: bool = False,
    progress_every: float = 60.0,
) -> dict:
    """Run (or finish) every arm x seed (seeds 0..S-1; default 3, 1 with quick), then write
    OUT/experiment.json and OUT/experiment.html. `resume`: continue the experiment saved in OUT with its
    own settings (the other arguments, where given, must agree with them)."""
    out = Path(out)
    flags = {
        "preset": preset,
        "steps": steps,
        "seeds": seeds,
        "arms": list(arms) if arms else None,
        "probe_every": probe_every,
        "quick": quick,
        "overrides": list(overrides),
        "eval_benchmarks": eval_benchmarks,
        "eval_limit": eval_limit,
    }
    if resume:
        flags = {("eval" if k == "eval_benchmarks" else k): v for k, v in flags.items()}
        st = experiment_settings(out, True, flags)
    else:
        flags["preset"] = preset or "tiny-learn"
        flags["eval_limit"] = 20 if eval_limit is None else eval_limit
        st = experiment_settings(out, False, flags)
    lock_fd = _lock(out)  # one sitting at a time: two would train the same runs twice
    try:
        saved = exp_settings.load(out)
        if saved is None:
            exp_settings.save(out, {**st, "command": exp_settings.command_line(), "created": time.time()})
        elif st["seeds"] > saved["seeds"]:
            log(
                f"extending {out} from {saved['seeds']} to {st['seeds']} seeds per arm (the finished runs stay)"
            )
            st = exp_settings.extend_seeds(out, saved, st["seeds"])
        return _run(out, st, resume, jobs, log, progress_every)
    finally:
        os.close(lock_fd)


def _lock(out: Path) -> int:
    from populora.train.run_folder import RunFolderError, lock_run_dir

    out.mkdir(parents=True, exist_ok=True)
    try:
        return lock_run_dir(out)
    except RunFolderError:
        raise ExperimentError(
            f"{out} is in use by another sitting of this experiment; wait for it to finish or stop it (Ctrl-C), "
            f"then continue with --resume {out}."
        ) from None


def _run(
    out: Path, st: dict, resume: bool, jobs: int | None, log: Callable[[str], None], progress_every: float
) -> dict:
    from populora.config import load_config
    from populora.experiment.page import write_ablation_page

    seed_list = list(range(st["seeds"]))
    shared = run_overrides(st)
    all_specs = specs(out, st["preset"], seed_list, False, shared, st["arms"])
    run_threads = load_config(st["preset"], all_specs[0].overrides).train.threads
    user_threads = any(o.split("=", 1)[0].strip() == "train.threads" for o in st["overrides"])
    cores = os.cpu_count() or 1
    jobs, threads = plan_jobs(jobs, cores, run_threads, user_threads)
    if user_threads and jobs * run_threads > cores:
        log(
            f"note: {jobs} runs x train.threads={run_threads} > {cores} cores: the runs will slow each other down"
        )
    exp_settings.record_sitting(out, resume, jobs, threads)
    log(
        f"experiment {out}: arms {', '.join(st['arms'])} x {st['seeds']} seed(s), {st['steps']} steps, probes "
        f"every {st['probe_every']}; {len(all_specs)} runs, {jobs} at a time"
        + (f", {threads} thread(s) each" if threads else "")
    )
    how = f"continue with `populora experiment ablation --resume {out}` (finished runs are kept)"
    t0 = time.time()
    seconds = run_all(all_specs, log=log, jobs=jobs, threads=threads, progress_every=progress_every, how=how)
    dirs: dict[str, list[Path]] = {}
    for s in all_specs:
        dirs.setdefault(s.meta["arm"], []).append(s.path)
    saved = exp_settings.load(out) or st
    result = {
        "kind": "ablation",
        "preset": st["preset"],
        "seeds": seed_list,
        "steps": st["steps"],
        "probe_every": st["probe_every"],
        "quick": st["quick"],
        "overrides": shared,
        "arms": {arm: ARMS[arm] for arm in st["arms"]},
        "settings": {k: st[k] for k in exp_settings.KEYS},
        "command": saved.get("command"),
        "resume_command": f"populora experiment ablation --resume {out}",
        "sittings": exp_settings.sittings(out),
        "command_seconds": round(time.time() - t0, 1),
        "run_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "results": aggregate(dirs),
    }
    from populora.experiment.contrasts import contrasts

    result["contrasts"] = contrasts(dirs, dict.fromkeys(dirs, seed_list), CONTRASTS, single=SINGLE)
    if st["eval"]:
        from populora.experiment.evaluation import evaluate_runs

        result["eval"] = evaluate_runs(dirs, st["eval"], st["eval_limit"], out / "eval", log=log)
    from populora.experiment.claims import claims
    from populora.experiment.claims_view import claims_figure

    # the paper's claims (a-f) with their verdicts; the curves and records are in each run's `records` already
    answered = claims(out)
    claims_figure(answered, out / "claims.png")
    result["claims"] = {k: v for k, v in answered.items() if k not in ("curves", "records")}
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "experiment.json", result)
    write_ablation_page(result, out / "experiment.html", claims_png=out / "claims.png")
    log(f"wrote {out / 'experiment.json'} and {out / 'experiment.html'}")
    return result
