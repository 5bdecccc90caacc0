"""`populora experiment ablation` end to end (real trainer, tiny model, sandbox): --quick over every arm, its
settings kept and checked, and an experiment interrupted after a checkpoint then resumed (`--resume`, the
runs side by side in their own processes) giving the same numbers as the uninterrupted one, and a background
experiment stopped by `kill -INT` or `kill` stopping its side-by-side runs."""

import json
import math
import os

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.experiment.ablation import ARMS, DEFAULT_ARMS, parse_arms, plan_jobs, specs
from populora.experiment.measures import mean_ci
from populora.experiment.progress import eta_by_kind, fmt_duration
from populora.experiment.run_records import run_records
from populora.experiment.settings import ExperimentError

# every quick experiment here: a checkpoint every step (so a resume has one to start from) and one thread per
# run, the same in this process and in the side-by-side processes, so the numbers can be compared exactly
SETS = ["--set", "train.checkpoint_every=1", "--set", "train.threads=1", "--progress-every", "0"]


def test_mean_ci_is_the_student_t_interval():
    s = mean_ci([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3)
    assert s["mean"] == 2.0 and s["n"] == 3
    assert math.isclose(s["hi"] - 2.0, 4.302653 / math.sqrt(3), rel_tol=1e-5)
    assert mean_ci([0.5, None, float("nan")]) == {"mean": 0.5, "lo": None, "hi": None, "n": 1}
    assert mean_ci([])["mean"] is None


def test_arms_are_compute_matched_population_settings_only(tmp_path):
    runs = specs(tmp_path, "tiny-learn", [0, 1], quick=False, arms=list(ARMS))
    # seed by seed: a part-way experiment holds whole seeds
    assert [(r.meta["seed"], r.meta["arm"]) for r in runs] == [(s, a) for s in (0, 1) for a in ARMS]
    for r in runs:  # an arm changes who plays (the shuffled controls also the students' reward), nothing else
        extra = ["rl.student_rewards=shuffled"] if r.meta["arm"].endswith("shuffled") else []
        assert [o for o in r.overrides[:-1] if not o.startswith("population.")] == extra
        assert r.overrides[-1] == f"train.seed={r.meta['seed']}"
    assert "population.single_solver=buffer" in ARMS["single"]  # AZR's loop
    assert [r.meta["arm"] for r in specs(tmp_path, "tiny-learn", [0], quick=False)] == DEFAULT_ARMS


def test_arms_are_named_with_or_without_plus():
    assert parse_arms("single,1T1S,4T4S,4T4S-shuffled") == ["single", "1T+1S", "4T+4S", "4T+4S-shuffled"]
    assert parse_arms(" 2t+2s , shuffled") == ["2T+2S", "shuffled"]
    with pytest.raises(ExperimentError, match="unknown arm '8T8S'"):
        parse_arms("single,8T8S")
    with pytest.raises(ExperimentError, match="given twice"):
        parse_arms("4T4S,4T+4S")


def test_eta_and_jobs_are_hand_computed():
    # one kind: 30 of 200 steps done in 600 s: 20 s a step, 170 steps left, 2 at a time: 1700 s
    assert eta_by_kind([("", 30, 200, 600.0)], 2) == 1700.0
    # by kind: single 50/100 steps in 250 s (5 s a step), 4T+4S 10/100 in 200 s (20 s a step), 2T+2S none yet
    # (priced at the mean, 450 s / 60 steps = 7.5 s): (50 x 5 + 90 x 20 + 100 x 7.5) / 2 = 1400 s
    rows = [("single", 50, 100, 250.0), ("4T+4S", 10, 100, 200.0), ("2T+2S", 0, 100, 0.0)]
    assert eta_by_kind(rows, 2) == 1400.0
    assert eta_by_kind([("single", 0, 100, 0.0)], 1) is None
    assert fmt_duration(1700.0) == "about 28 min left"
    assert fmt_duration(7500.0) == "about 2 h 05 min left"
    assert fmt_duration(42.0) == "about 42 s left"
    assert fmt_duration(7170.0) == "about 2 h 00 min left"  # 119.5 min rounds to 2 h, never "1 h 60 min"
    # 16 cores, runs of 2 threads: 8 side by side; --jobs 3: 5 threads each (3 x 5 <= 16); a user's threads kept
    assert plan_jobs(None, 16, 2, False) == (8, 2)
    assert plan_jobs(3, 16, 2, False) == (3, 5)
    assert plan_jobs(None, 2, 2, False) == (1, 2)
    assert plan_jobs(2, 2, 1, True) == (2, None)


def test_run_records_keep_the_raw_per_step_data(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    metrics = [
        {"step": 0, "probe": {"A0": {"code_i": 0.5}}, "probe_levels": {"A0": {"1": 0.75}}, "probe_s": 2.0},
        {"step": 1, "members": {"A0": {"role": "single", "mu": None}}, "step_s": 3.0, "coverage": 0.1,
         "coverage_cells": 2, "self_solve_rate": 0.25, "games": {}, "probe_collisions": {"code_i": 1}},
        {"step": 2, "members": {"A0": {"role": "single", "mu": None}}, "step_s": 5.0, "coverage": 0.2,
         "coverage_cells": 3, "self_solve_rate": 0.5, "games": {"A0": {"win": 1, "draw": 0, "loss": 0}},
         "probe": {"A0": {"code_i": 0.75}}, "probe_s": 1.0},
    ]  # fmt: skip
    problems = [
        {"step": 1, "valid": True, "program": "def f(x): return x", "features": {"loc": 1, "n_vars": 1}},
        {"step": 1, "valid": True, "program": "def f(x): return x", "features": {"loc": 3, "n_vars": 1}},
        {"step": 1, "valid": False, "program": None, "features": None},
        {"step": 2, "valid": True, "program": "def f(x): return -x", "features": {"loc": 2, "n_vars": 2}},
        {"step": 2, "valid": True, "program": "def f(x): return x", "features": {"loc": 4, "n_vars": 2}},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics) + '{"step": 3, "cut')
    (run / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    r = run_records(run)
    # every probe entry as logged (a per-level probe too), step 0 included; the timing and counts left out
    assert r["probe"] == [
        {"step": 0, "probe": {"A0": {"code_i": 0.5}}, "probe_levels": {"A0": {"1": 0.75}}},
        {"step": 2, "probe": {"A0": {"code_i": 0.75}}},
    ]
    st = r["steps"]
    assert st["step"] == [1, 2] and st["step_s"] == [3.0, 5.0] and st["probe_s"] == [None, 1.0]
    assert st["self_solve_rate"] == [0.25, 0.5] and st["coverage_cells"] == [2, 3]
    assert st["valid_rate"] == [2 / 3, 1.0]
    assert st["complexity"] == {"loc": [2.0, 3.0], "n_vars": [1.0, 2.0]}
    assert st["distinct_programs"] == [1, 2] and st["distinct_programs_total"] == [1, 2]
    assert st["valid_total"] == [2, 4]  # valid proposals so far (the invalid one of step 1 not counted)
    assert r["games"][1] == {"step": 2, "games": {"A0": {"win": 1, "draw": 0, "loss": 0}}}
    assert r["roles"] == {"A0": "single"} and r["ratings"]["A0"]["mu"] == [None, None]


@pytest.fixture(scope="module")
def quick_ablation(tmp_path_factory):
    """The uninterrupted reference: every default arm, one seed, two steps, in this process."""
    out = tmp_path_factory.mktemp("ablation") / "abl"
    res = CliRunner().invoke(
        app, ["experiment", "ablation", "--quick", "--out", str(out), "--jobs", "1", *SETS]
    )
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.mark.timeout(900)
def test_quick_ablation_runs_every_arm_writes_json_and_html(quick_ablation):
    out, output = quick_ablation
    data = json.loads((out / "experiment.json").read_text())
    assert data["kind"] == "ablation" and data["quick"] and data["seeds"] == [0]
    assert list(data["results"]) == DEFAULT_ARMS
    assert data["settings"]["arms"] == DEFAULT_ARMS and data["settings"]["steps"] == 2
    assert data["resume_command"] == f"populora experiment ablation --resume {out}"
    for arm, entry in data["results"].items():
        (run,) = entry["runs"]
        assert run["steps"] == 2 and run["probe_steps"] == [0, 2]
        roles = {"single"} if arm == "single" else {"teacher", "student"}
        assert set(run["probe"]) == roles
        for role in roles:
            start = run["probe"][role]["all"]["mean"]["start"]
            assert 0.0 <= start <= 1.0
        assert run["step_s"] > 0
        assert f"probe.{sorted(roles)[0]}.all.mean.change" in entry["summary"]
        rec = run["records"]  # the raw per-step data issue 31 §2 reads
        assert [p["step"] for p in rec["probe"]] == [0, 2] and rec["steps"]["step"] == [1, 2]
        assert all(s > 0 for s in rec["steps"]["step_s"])
        solo = rec["steps"]["self_solve_rate"]
        assert all(v is not None for v in solo) if arm == "single" else solo == [None, None]
    # the contrasts: every population arm minus single, 2T+2S minus its shuffled control, best vs best-of-k
    c = data["contrasts"]
    assert set(c["differences"]) == {"1T+1S - single", "2T+2S - single", "4T+4S - single", "2T+2S - shuffled"}
    assert all(d["paired"] and d["n_seeds"] == [1, 1] for d in c["differences"].values())
    assert c["best_vs_single"]["4T+4S"]["k"] == 4
    assert "2T+2S - shuffled" in output and "best of 4 single seeds" in output
    assert "(a) population > single" in output  # the claims table ends the command's output
    assert output.count("runs finished") == len(DEFAULT_ARMS) and "left" in output
    # 4T+4S has four members per role: its rating spread is measured, the single agent has none.
    assert data["results"]["4T+4S"]["runs"][0]["rating_spread"]["teacher"] is not None
    assert data["results"]["single"]["runs"][0]["rating_spread"]["teacher"] is None
    # the paper's claims, each with a verdict; 4T+4S-shuffled is not a default arm, so (b) did not run
    cl = data["claims"]
    assert cl["seeds_used"] == [0] and cl["hardest_level"] == 4  # the quick probe's 4 items: levels 1-4
    assert cl["a_probe"]["verdict_overall"] == "pending (1 of 3 seeds)"  # items alone are not a verdict
    assert cl["b_reward"]["verdict_overall"] == "not run" and "curves" not in cl
    assert set(cl["e_arms_race"]["arms"]) == {"1T+1S", "4T+4S"}
    assert (out / "claims.png").stat().st_size > 0
    page = (out / "experiment.html").read_text()
    assert "Population-size ablation" in page and page.count("data:image/png;base64") >= 4
    # the claims with their verdicts and their figure, at the top of the page
    card = "<h2>The paper's claims</h2>"
    assert card in page and "(e) arms race oscillates" in page and "pending (1 of 3 seeds)" in page
    assert page.index(card) < page.index("Summary (mean")
    assert "4T+4S" in page


def test_a_finished_experiment_is_not_rerun_and_its_settings_hold(quick_ablation):
    out, _ = quick_ablation
    runner = CliRunner()
    before = {p: p.stat().st_mtime for p in out.glob("runs/*/seed0/metrics.jsonl")}
    res = runner.invoke(
        app, ["experiment", "ablation", "--resume", str(out), "--jobs", "1", "--progress-every", "0"]
    )
    assert res.exit_code == 0, res.output
    assert res.output.count("finished before, kept") == len(DEFAULT_ARMS)
    assert {p: p.stat().st_mtime for p in out.glob("runs/*/seed0/metrics.jsonl")} == before
    # a flag that contradicts the experiment is refused in one line, naming both values
    res = runner.invoke(app, ["experiment", "ablation", "--resume", str(out), "--steps", "5"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "--steps 5 (the experiment has 2)" in res.output and "drop those flags" in res.output
    res = runner.invoke(app, ["experiment", "ablation", "--quick", "--out", str(out), "--seeds", "2", *SETS])
    assert res.exit_code == 2 and f"continue it with --resume {out}" in res.output
    # one sitting at a time: a second one on the same folder is refused while the first holds it
    from populora.train.run_folder import lock_run_dir

    fd = lock_run_dir(out)
    try:
        res = runner.invoke(app, ["experiment", "ablation", "--resume", str(out)])
    finally:
        os.close(fd)
    assert res.exit_code == 2 and "in use by another sitting" in res.output


def test_claims_read_a_finished_experiment_and_refuse_one_without_a_whole_seed(quick_ablation, tmp_path):
    import shutil

    out, _ = quick_ablation
    res = CliRunner().invoke(
        app,
        [
            "experiment",
            "claims",
            str(out),
            "--json",
            str(tmp_path / "c.json"),
            "--figure",
            str(tmp_path / "c.png"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "(e) arms race oscillates" in res.output and "not run" in res.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["arms_finished"] == dict.fromkeys(DEFAULT_ARMS, [0]) and set(data["curves"]) == set(
        DEFAULT_ARMS
    )
    assert data["records"]["4T+4S"][0]["seed"] == 0 and data["settings"]["steps"] == 2  # re-readable alone
    # each claim's number seed by seed: (a) is the paired difference of the solvers' probe changes
    from populora.experiment.claims import probe_change

    pop, single = data["curves"]["4T+4S"][0], data["curves"]["single"][0]
    assert data["a_probe"]["per_seed"]["overall"] == [pytest.approx(probe_change(pop) - probe_change(single))]
    assert data["b_reward"]["per_seed"]["overall"] == []  # no shuffled arm
    # what scale a verdict needs: one seed gives no spread to extrapolate from
    assert data["a_probe"]["seeds_needed"] == {
        "effects": [0.02, 0.05],
        "power": 0.8,
        "sd": None,
        "overall": [None, None],
        "hardest": [None, None],
    }
    assert "(a) ... seeds needed" in res.output and "(f) ... ratings vs probe" in res.output
    assert set(data["f_ratings"]["rating_vs_probe"]) == set(DEFAULT_ARMS)
    assert len(data["e_arms_race"]["per_seed"]) == 1 and "per seed" in res.output
    # (d) at an equal budget: the valid proposals every run reached, each arm's cells at that budget
    finals = [recs[0]["steps"]["valid_total"][-1] for recs in data["records"].values()]
    matched = data["d_coverage"]["matched"]
    if min(finals) > 0:
        assert matched["valid_proposals"] == min(finals)
        assert set(matched["cells"]) == set(DEFAULT_ARMS) and "(d) ... at equal proposals" in res.output
    else:  # a run with no valid proposal: no common budget, said as None
        assert matched == {"valid_proposals": None}
    assert (tmp_path / "c.png").stat().st_size > 0
    # part-way: the claims whose arms have not finished say so; with no run finished, nothing to read
    part = tmp_path / "part"
    shutil.copytree(out, part)
    (part / "runs" / "4T+4S" / "seed0" / "metrics.jsonl").unlink()
    res = CliRunner().invoke(app, ["experiment", "claims", str(part)])
    assert res.exit_code == 0 and res.output.count("not finished yet") >= 5, res.output
    for metrics in part.glob("runs/*/seed0/metrics.jsonl"):
        metrics.unlink()
    res = CliRunner().invoke(app, ["experiment", "claims", str(part)])
    assert res.exit_code == 2 and "no run has finished yet" in res.output and f"--resume {part}" in res.output


TIMING = {"path", "step_s", "probe_s"}


def _numbers(data: dict, arm: str, run: int = 0) -> dict:
    """A run's measures and records without wall-clock fields and paths: what a replay must reproduce."""
    run = json.loads(json.dumps(data["results"][arm]["runs"][run]))
    for k in TIMING:
        run.pop(k, None)
        run["records"]["steps"].pop(k, None)
    return run


@pytest.mark.timeout(900)
def test_an_interrupted_experiment_resumes_to_the_same_numbers(quick_ablation, tmp_path, monkeypatch):
    from populora.train.trainer import Trainer

    ref = json.loads((quick_ablation[0] / "experiment.json").read_text())
    out = tmp_path / "abl"
    save = Trainer.save

    def save_then_die(self, step):  # the experiment dies right after its first run's step-1 checkpoint
        path = save(self, step)
        if step == 1:
            raise KeyboardInterrupt
        return path

    monkeypatch.setattr(Trainer, "save", save_then_die)
    args = [
        "experiment",
        "ablation",
        "--quick",
        "--arms",
        "single,1T1S",
        "--out",
        str(out),
        "--jobs",
        "1",
        *SETS,
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    assert (
        f"single seed 0 has a checkpoint at step 1; continue with `populora experiment ablation --resume {out}`"
        in res.output
    )
    monkeypatch.setattr(Trainer, "save", save)
    assert not (out / "experiment.json").exists() and not (out / "runs" / "1T+1S").exists()

    # the second sitting: both runs side by side, each in its own `populora train` process
    res = CliRunner().invoke(
        app, ["experiment", "ablation", "--resume", str(out), "--jobs", "2", "--progress-every", "0"]
    )
    assert res.exit_code == 0, res.output
    assert "single seed 0: resuming from its checkpoint at step 1 of 2" in res.output
    assert "1T+1S seed 0: starting (2 steps)" in res.output
    events = [json.loads(x) for x in (out / "runs/single/seed0/events.jsonl").read_text().splitlines()]
    assert [e["from"] for e in events if e["type"] == "resume"] == ["checkpoints/step_000001"]
    assert (out / "runs/1T+1S/seed0.log").is_file()
    data = json.loads((out / "experiment.json").read_text())
    assert list(data["results"]) == ["single", "1T+1S"] and len(data["sittings"]) == 2
    for arm in ("single", "1T+1S"):
        assert _numbers(data, arm) == _numbers(ref, arm)


@pytest.mark.timeout(900)
def test_a_finished_experiment_extends_by_seeds_and_keeps_its_runs(tmp_path):
    """`--resume OUT --seeds N` adds seeds N-1.. to every arm; the finished seed's runs are not touched, and the
    experiment's files hold every seed. Fewer seeds than saved are refused."""
    out = tmp_path / "abl"
    runner = CliRunner()
    base = ["experiment", "ablation", "--quick", "--arms", "single,1T1S", "--jobs", "1", *SETS]
    res = runner.invoke(app, [*base, "--out", str(out)])
    assert res.exit_code == 0, res.output
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed0/metrics.jsonl")}
    assert len(before) == 2
    extend = [
        "experiment",
        "ablation",
        "--resume",
        str(out),
        "--seeds",
        "2",
        "--jobs",
        "1",
        "--progress-every",
        "0",
    ]
    res = runner.invoke(app, extend)
    assert res.exit_code == 0, res.output
    assert f"extending {out} from 1 to 2 seeds per arm" in res.output
    assert res.output.count("finished before, kept") == 2
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/seed0/metrics.jsonl")} == before
    assert all((out / "runs" / arm / "seed1" / "metrics.jsonl").is_file() for arm in ("single", "1T+1S"))
    saved = json.loads((out / "settings.json").read_text())
    assert saved["seeds"] == 2 and [(a["from"], a["to"]) for a in saved["seeds_added"]] == [(1, 2)]
    data = json.loads((out / "experiment.json").read_text())
    assert data["seeds"] == [0, 1]
    assert all(len(data["results"][arm]["runs"]) == 2 for arm in ("single", "1T+1S"))
    # the seeds of the two sittings differ (a new seed is a new run, not a copy of seed 0)
    assert _numbers(data, "single", 0)["records"]["steps"] != _numbers(data, "single", 1)["records"]["steps"]
    res = runner.invoke(app, ["experiment", "ablation", "--resume", str(out), "--seeds", "1"])
    assert (
        res.exit_code == 2
        and "--seeds 1 (the experiment has 2; seeds can be added, not dropped)" in res.output
    )
    # --out with only more seeds points to the way that adds them
    res = runner.invoke(app, [*base, "--out", str(out), "--seeds", "3"])
    assert res.exit_code == 2 and f"--resume {out} --seeds N adds seeds" in res.output


def _wait_for(paths, proc, deadline_s):
    """Poll until every path exists; the experiment's output if it ended first or the deadline passed."""
    import time

    t0 = time.monotonic()
    while not all(p.exists() for p in paths):
        if proc.poll() is not None or time.monotonic() - t0 > deadline_s:
            proc.kill()
            return proc.communicate()[0]
        time.sleep(0.5)
    return None


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_background_experiment_stops_its_side_by_side_runs_on_a_signal(tmp_path, sig):
    """`nohup populora experiment ablation ... &` then `kill -INT PID` or `kill PID`: the shell started the
    experiment with SIGINT ignored, and its runs live in their own sessions, so the experiment itself must
    answer and forward the signal (SIGINT: each run checkpoints its step in flight; SIGTERM: at once)."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "abl"
    cmd = [sys.executable, "-m", "populora.cli", "experiment", "ablation", "--quick", "--arms", "single,1T1S"]
    cmd += ["--steps", "40", "--out", str(out), "--jobs", "2", *SETS]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `cmd &` starts it
    )
    runs = [out / "runs" / arm / "seed0" for arm in ("single", "1T+1S")]
    failed = _wait_for([r / "checkpoints" / "step_000001" for r in runs], proc, 600)
    assert failed is None, failed
    proc.send_signal(getattr(signal, sig))
    try:
        output = proc.communicate(timeout=300)[0]
    except subprocess.TimeoutExpired:  # the signal was dropped: kill it (its runs die with it) and say so
        proc.kill()
        pytest.fail(f"the experiment ignored {sig}: {proc.communicate()[0][-2000:]}")
    assert proc.returncode == (130 if sig == "SIGINT" else 143), output
    assert f"continue with `populora experiment ablation --resume {out}`" in output
    for run in runs:
        log = run.with_name("seed0.log").read_text()
        if sig == "SIGINT":  # the step in flight finished and was checkpointed
            assert "interrupted: checkpoint checkpoints/step_" in log, log[-2000:]
        else:
            assert "terminated (SIGTERM)" in log, log[-2000:]
    assert not (out / "experiment.json").exists()
