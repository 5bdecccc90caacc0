"""Issue 53, point 1: commands over 10 minutes say so before they start, with their estimate.

The estimate is checked on hand-computed numbers (the profiles are replaced by round ones, so a new
measurement does not break the test); no test asserts a measured time."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from populora import estimate
from populora.config import load_config
from populora.estimate import Profile
from populora.experiment.progress import experiment_seconds, upfront_line
from populora.train.progress import upfront_line as train_upfront_line


@pytest.fixture
def round_profiles(monkeypatch):
    """tiny: 10 s a step, 5 s start-up, no probe; tiny-learn: 10 s a step, 20 s a probe of 4 members."""
    monkeypatch.setitem(estimate.PROFILES, "tiny", Profile("tiny", 10.0, 4, 0.0, 260, 5.0, 1.0))
    monkeypatch.setitem(estimate.PROFILES, "tiny-learn", Profile("tiny-learn", 10.0, 4, 20.0, 260, 5.0, 1.0))


def test_population_factor_and_probes_by_hand():
    # (3.25 + 1.35 * 8) / (3.25 + 1.35 * 4) = 14.05 / 8.65
    assert estimate.population_factor(8, 4) == pytest.approx(14.05 / 8.65)
    assert estimate.population_factor(4, 4) == 1.0
    cfg = load_config("tiny-learn")  # 30 steps, a probe every 10
    assert estimate.probes_in(cfg, 0, 30) == 4  # steps 0, 10, 20, 30
    assert estimate.probes_in(cfg, 10, 30) == 2  # 20, 30
    assert estimate.probes_in(cfg, 12, 30) == 2
    assert estimate.probes_in(load_config("tiny"), 0, 24) == 0  # no probe in the tiny preset


def test_run_seconds_by_hand(round_profiles):
    # tiny-learn, 2T+2S: 5 s + 30 steps x 10 s + the probe at step 0 (one member's answers: 20 / 4 s) + 3 x 20 s
    assert estimate.run_seconds(load_config("tiny-learn")) == pytest.approx(5 + 300 + 5 + 60)
    # 4T+4S: steps at the population factor, probes at 8 / 4 members
    cfg = load_config("tiny-learn", ["population.teachers=4", "population.students=4"])
    assert estimate.run_seconds(cfg) == pytest.approx(5 + 30 * 10 * 14.05 / 8.65 + 5 + 3 * 40)
    # the single agent: 1.66 members' step, one member's probe
    cfg = load_config("tiny-learn", ["population.mode=single"])
    single = (3.25 + 1.35 * 1.66) / 8.65
    assert estimate.run_seconds(cfg) == pytest.approx(5 + 300 * single + 4 * 5)
    # a resume from step 20: 10 steps, the probes at 20 (done) ... only 30 left
    assert estimate.run_seconds(load_config("tiny-learn"), start=20) == pytest.approx(5 + 100 + 20)
    assert estimate.run_seconds(load_config("tiny", ["model.name=some/other-model"])) is None


def test_gpu_model_by_hand():
    parts = estimate.gpu_step_parts(1)
    # 4 x 72 = 288 proposals of 700 tokens at 3,000 tokens/s; 288 x 0.5 x 8 = 1,152 answers of 500 tokens
    assert parts["teacher_generation"] == pytest.approx(288 * 700 / 3000)
    assert parts["student_generation"] == pytest.approx(1152 * 500 / 3000)
    flops = 989e12 * 0.35
    assert parts["prefill"] == pytest.approx((288 * 1600 + 144 * 600) * 2 * 7.62e9 / flops)
    assert parts["update"] == pytest.approx((288 * 2300 + 1152 * 1100) * 6 * 7.62e9 / flops)
    assert sum(parts.values()) == pytest.approx(558.2, abs=0.5)
    # 8 GPUs: generation is bounded by one 4,096-token row (4,096 x 12 ms)
    parts8 = estimate.gpu_step_parts(8)
    assert parts8["teacher_generation"] == pytest.approx(4096 * 0.012)
    assert parts8["update"] == pytest.approx(parts["update"] / 8)
    cfg = load_config("paper-7b")
    assert estimate.gpu_step_seconds(cfg) == pytest.approx(sum(parts.values()))
    assert estimate.step_seconds(load_config("paper-7b", ["dist.workers=8"])) == pytest.approx(
        sum(parts8.values())
    )


def test_fmt_span():
    assert estimate.fmt_span(45) == "45 s"
    assert estimate.fmt_span(12 * 60) == "12 min"
    assert estimate.fmt_span(9 * 3600 + 40 * 60) == "9 h 40 min"


def _specs(tmp_path, steps: int, seeds: int, arms: list[list[str]]):
    return [
        SimpleNamespace(
            preset="tiny-learn",
            overrides=[*arm, f"train.steps={steps}", "diagnostics.probe_every=25" if steps % 25 == 0 else "diagnostics.probe_every=0", f"train.seed={s}"],
            path=tmp_path / f"a{i}" / f"seed{s}",
        )
        for i, arm in enumerate(arms)
        for s in range(seeds)
    ]  # fmt: skip


ARMS = [
    ["population.mode=single"],
    ["population.teachers=1", "population.students=1"],
    [],
    ["population.teachers=4", "population.students=4"],
    ["rl.student_rewards=shuffled"],
]


def test_long_experiment_says_so_and_a_short_one_does_not(round_profiles, tmp_path):
    long = _specs(tmp_path, 100, 5, ARMS)  # the README's ablation: 100 steps, 5 seeds, probes every 25
    line = upfront_line(long, 1, "continue with `populora experiment ablation --resume runs/abl`")
    assert line is not None and line.startswith("this will take about ")
    assert "25 runs, 2,500 steps" in line and "estimated from" in line
    assert line.endswith("Ctrl-C stops; continue with `populora experiment ablation --resume runs/abl`")
    # by hand: per seed, 5 start-ups, 100 steps of each arm, probes at 0 (one member's answers, 5 s) and at
    # 25, 50, 75, 100 (5 s per member)
    a, b = 3.25, 1.35
    steps = sum((a + b * m) / (a + b * 4) for m in (1.66, 2, 4, 8, 4)) * 100 * 10
    probes = 5 * 5 + 4 * 5 * (1 + 2 + 4 + 8 + 4)
    by_hand = 5 * (5 * 5 + steps + probes)
    cfgs = [(load_config(s.preset, s.overrides), s.path) for s in long]
    assert experiment_seconds(cfgs, 1) == pytest.approx(by_hand)
    assert experiment_seconds(cfgs, 2) == pytest.approx(by_hand / 2)
    short = _specs(tmp_path, 2, 1, ARMS)  # --quick: 2 steps, one seed
    assert upfront_line(short, 1, "again") is None


def test_runs_with_steps_done_are_priced_at_their_own_rate(round_profiles, tmp_path):
    spec = _specs(tmp_path, 100, 1, [[]])[0]
    spec.path.mkdir(parents=True)
    rows = [{"step": i, "step_s": 30.0} for i in range(1, 51)]
    (spec.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(spec.preset, spec.overrides)
    assert experiment_seconds([(cfg, spec.path)], 1) == pytest.approx(50 * 30.0)
    line = train_upfront_line(cfg, spec.path)
    assert line is not None and "this run's own 50 steps, 50 to go" in line
    assert f"`populora train --resume {spec.path}` continues" in line


def test_train_line_for_a_long_run_and_not_for_a_short_one(round_profiles, tmp_path):
    long = load_config("tiny", ["train.steps=200"])  # 5 + 200 x 10 s
    line = train_upfront_line(long, tmp_path / "new")
    assert line is not None and line.startswith(
        "this will take about 33 min on this machine (estimated from 200 steps"
    )
    assert train_upfront_line(load_config("tiny", ["train.steps=8"]), tmp_path / "new") is None


@pytest.mark.parametrize("steps", [400, 8])
def test_a_start_that_fails_prints_only_its_error(tmp_path, steps):
    bad = tmp_path / "file"
    bad.write_text("")
    res = subprocess.run(
        [sys.executable, "-m", "populora.cli", "train", "--set", f"train.steps={steps}", "--run-dir", str(bad)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"OMP_WAIT_POLICY": "PASSIVE", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")


def test_a_long_train_says_so_before_its_first_step(tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "populora.cli", "train", "--set", "train.steps=400", "--set", "sandbox.workers=1", "--run-dir", str(run)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={"OMP_WAIT_POLICY": "PASSIVE", "PATH": "/usr/bin:/bin", "POPULORA_NO_PROGRESS": "1"},
    )  # fmt: skip
    try:
        seen = ""
        while True:
            line = proc.stderr.readline()
            seen += line
            if not line or line.startswith("this will take about "):
                break
        assert line.startswith("this will take about ") and "populora train --resume" in line, seen[-2000:]
        assert not (run / "metrics.jsonl").exists()  # before the first step
    finally:
        proc.terminate()
        proc.communicate(timeout=120)


def test_paper_7b_line_names_the_gpus(tmp_path):
    line = train_upfront_line(load_config("paper-7b"), tmp_path / "pop")
    assert line.startswith(
        "this will take about 31 h 01 min on 1 H100 GPU (estimated from 200 steps; paper-7b's"
    )
    line = train_upfront_line(load_config("paper-7b", ["dist.workers=8"]), tmp_path / "pop8")
    assert line.startswith("this will take about 8 h 31 min on 8 H100 GPUs")


def test_progress_leaves_the_step_0_probe_out_of_the_per_step_rate(tmp_path):
    import json

    from populora.estimate import read_progress

    lines = [
        {"step": 0, "probe": {}, "probe_s": 90.0},  # once, before any step
        {"step": 1, "step_s": 16.0},
        {"step": 2, "step_s": 14.0, "probe_s": 30.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert read_progress(tmp_path) == (2, 60.0)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(lines[0]) + "\n")
    assert read_progress(tmp_path) == (0, 0.0)
