"""`populora experiment learning` on two short seeds with the shuffled control: per-seed numbers, the paired CI,
the bootstrap intervals and the real-minus-shuffled difference, the JSON and figure."""

import json

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.experiment.measures import mean_ci

SHORT = [
    "train.steps=2",
    "train.checkpoint_every=2",
    "population.teachers=1",
    "population.students=1",
    "tasks.prompts=3",
    "rl.rollouts=2",
    "diagnostics.probe_every=2",
    "diagnostics.probe_size=3",
    "diagnostics.probe_proposals=2",
]


def test_learning_reports_the_paired_change_over_seeds(tmp_path):
    args = ["experiment", "learning", "--out", str(tmp_path / "l"), "--seeds", "2", "--control", "shuffled"]
    args += [x for s in SHORT for x in ("--set", s)] + ["--json", str(tmp_path / "learning.json")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "learning.json").read_text())
    assert data["seeds"] == [0, 1] and data["preset"] == "tiny-learn"
    changes, valid_changes = [], []
    for seed in ("0", "1"):
        d = data["per_seed"][seed]
        sp = d["student_probe"]
        assert d["curves"]["probe_steps"] == [0, 2]
        assert sp["change"] == sp["end"] - sp["start"]
        assert d["curves"]["student_probe_mean"] == [sp["start"], sp["end"]]
        changes.append(sp["change"])
        vp = d["teacher_valid_probe"]  # the teachers' validity probe, at the same steps
        assert d["curves"]["teacher_valid_probe_mean"] == [vp["start"], vp["end"]]
        assert set(vp["per_task"]) == {"code_i", "code_o", "code_f"}
        valid_changes.append(vp["change"])
    assert data["student_probe_change"] == mean_ci(changes)  # the CI is over the per-seed paired changes
    assert data["teacher_valid_probe_change"] == mean_ci(valid_changes)
    assert (tmp_path / "l" / "learning.png").stat().st_size > 1000
    assert "students' mean probe accuracy" in res.output
    assert "teachers' valid-proposal rate on fixed prompts" in res.output
    # the control: the same seeds with the students' rewards shuffled, in runs/shuffled/seed<S>
    assert data["control"] == "shuffled" and set(data["control_per_seed"]) == {"0", "1"}
    cfg = (tmp_path / "l" / "runs" / "shuffled" / "seed1" / "config.yaml").read_text()
    assert "student_rewards: shuffled" in cfg
    assert "student_rewards: real" in (tmp_path / "l" / "runs" / "seed1" / "config.yaml").read_text()
    iv = data["intervals"]
    real = iv["arms"]["real"]["mean_change"]
    assert real["mean"] == pytest.approx(sum(changes) / 2)  # the bootstrap's point is the seeds' mean change
    assert real["n_seeds"] == 2 and real["lo"] <= real["mean"] <= real["hi"]
    shuffled = [d["student_probe"]["change"] for d in data["control_per_seed"].values()]
    diff = iv["differences"]["real - shuffled"]
    assert diff["paired"] and diff["n_seeds"] == [2, 2]
    assert diff["mean"] == pytest.approx(sum(changes) / 2 - sum(shuffled) / 2)
    assert "real - shuffled:" in res.output and "paired by seed" in res.output


def test_an_unknown_control_is_named(tmp_path):
    res = CliRunner().invoke(app, ["experiment", "learning", "--out", str(tmp_path), "--control", "nope"])
    assert res.exit_code == 2 and "--control 'nope'" in res.output
