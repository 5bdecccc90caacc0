"""Tracker output: per-role aggregates, per-lineage member curves unbroken across evolution (real TensorBoard,
read back from its event file), W&B / MLflow names and tags, and a missing package as one line.

W&B and MLflow are not installed in the project's environment, so their two tests put a recording stand-in
module in `sys.modules`: they check what populora passes to `wandb.init` / `mlflow.start_run`, nothing more."""

import math
import sys
import types

import pytest
from typer.testing import CliRunner

from populora.diagnostics.sinks import MetricLogger, TrackerError, append_jsonl, missing_tracker
from populora.diagnostics.tracker_scalars import Lineages, tracker_scalars


def _member(role, reward, solve=None, valid=None, mu=25.0):
    return {
        "role": role,
        "reward": reward,
        "solve_rate": {"code_i": solve, "all": solve},
        "valid_rate": valid,
        "mu": mu,
        "sigma": 8.0,
        "complexity": None,
    }


def _record(step, members):
    return {
        "step": step,
        "time": 1.0,
        "mode": "population",
        "coverage_cells": 3 + step,
        "phase_s": {"teacher": 0.5},
        "members": members,
        "matchups": [{"teacher": "T0", "student": "S0", "solve_rate": 0.5}],
    }


STEP1 = _record(
    1,
    {
        "T0": _member("teacher", -0.5, valid=0.5, mu=20.0),
        "T1": _member("teacher", 0.25, valid=1.0, mu=30.0),
        "S0": _member("student", 0.5, solve=0.75, mu=26.0),
        "S1": _member("student", -1.0, solve=0.0, mu=24.0),
    },
)
# after step 1's evolution T0 -> T2 and S1 -> S2 (ids change; lineages must not)
STEP2 = _record(
    2,
    {
        "T1": _member("teacher", 0.0, valid=0.5, mu=31.0),
        "T2": _member("teacher", 1.0, valid=1.0, mu=22.0),
        "S0": _member("student", 0.25, solve=0.5, mu=27.0),
        "S2": _member("student", 0.75, solve=1.0, mu=25.0),
    },
)
EVOLUTIONS = [
    {"step": 1, "type": "evolution", "role": "teacher", "child": "T2", "replaced": "T0"},
    {"step": 1, "type": "evolution", "role": "student", "child": "S2", "replaced": "S1"},
]


def test_role_aggregates_and_member_lineages_by_hand():
    lin = Lineages()
    s1 = tracker_scalars(STEP1, lin)
    assert s1["role/teacher/reward_mean"] == pytest.approx(-0.125)  # (-0.5 + 0.25) / 2
    assert s1["role/teacher/reward_best"] == 0.25
    assert s1["role/teacher/valid_rate_mean"] == 0.75 and s1["role/teacher/mu_best"] == 30.0
    assert s1["role/student/solve_rate_mean"] == 0.375 and s1["role/student/solve_rate_best"] == 0.75
    assert "role/teacher/solve_rate_mean" not in s1  # teachers have no solve rate: no curve of nothing
    assert s1["member/teacher-0/reward"] == -0.5 and s1["member/teacher-0/id"] == 0.0
    assert s1["run/coverage_cells"] == 4.0 and s1["run/phase_s/teacher"] == 0.5
    # no per-id, per-pair or per-task noise
    assert not [k for k in s1 if "T0" in k or "matchups" in k or "code_i" in k or k == "run/time"]
    for e in EVOLUTIONS:
        lin.inherit(e["child"], e["replaced"])
    s2 = tracker_scalars(STEP2, lin)
    assert (
        s2["member/teacher-0/reward"] == 1.0 and s2["member/teacher-0/id"] == 2.0
    )  # T2 continues T0's curve
    assert s2["member/student-1/solve_rate"] == 1.0 and s2["member/student-1/id"] == 2.0
    assert s2["member/teacher-1/mu"] == 31.0
    assert {k.split("/")[1] for k in s2 if k.startswith("member/")} == {
        "teacher-0",
        "teacher-1",
        "student-0",
        "student-1",
    }
    assert len(s2) == len(s1)  # the same tags every step: curves, not fragments


def test_tensorboard_curves_survive_evolution_and_resume(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional extra (populora[tracking])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(tmp_path, tensorboard=True)
    log.log(STEP1)
    for e in EVOLUTIONS:  # as RunFolder.event passes them on
        append_jsonl(tmp_path / "events.jsonl", e)
        log.observe(e)
    log.log(STEP2)
    log.close()
    # a resumed process rebuilds the lineages from metrics.jsonl and events.jsonl
    again = MetricLogger(tmp_path, tensorboard=True)
    again.log({**STEP2, "step": 3})
    again.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert "role/student/solve_rate_best" in tags and "member/teacher-0/reward" in tags
    assert not [t for t in tags if "/T0/" in t or "/T2/" in t]
    curve = [(e.step, e.value) for e in acc.Scalars("member/teacher-0/reward")]
    assert curve == [(1, -0.5), (2, 1.0), (3, 1.0)]  # T0 then its replacement T2, one curve
    assert [e.value for e in acc.Scalars("member/teacher-0/id")] == [0.0, 2.0, 2.0]
    best = [(e.step, e.value) for e in acc.Scalars("role/student/solve_rate_best")]
    assert best == [(1, 0.75), (2, 1.0), (3, 1.0)]
    assert math.isclose(acc.Scalars("role/teacher/reward_mean")[1].value, 0.5)


def test_missing_tracker_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    msg = missing_tracker(wandb=True)
    assert msg.startswith("log.wandb=true needs the wandb package, which is not installed: pip install wandb")
    assert "pip install mlflow" in missing_tracker(mlflow=True)
    assert missing_tracker() is None
    with pytest.raises(TrackerError, match="pip install wandb"):
        MetricLogger("unused-never-created", wandb=True)


def test_cli_missing_tracker_is_one_line_before_any_work(tmp_path, monkeypatch):
    from populora.cli import app

    monkeypatch.setitem(sys.modules, "wandb", None)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--run-dir", str(run), "--set", "log.wandb=true"])
    assert res.exit_code == 2
    assert (
        res.output.startswith("error: log.wandb=true needs the wandb package") and res.output.count("\n") == 1
    )
    assert not run.exists()  # refused before the run folder (or a model) was made


def _recorder(name, calls):
    mod = types.ModuleType(name)

    def record(fn):
        def call(*args, **kwargs):
            calls.append((fn, args, kwargs))
            return types.SimpleNamespace(log=record("run.log"), finish=record("run.finish"))

        return call

    for fn in ("init", "set_experiment", "start_run", "log_params", "log_metrics", "end_run"):
        setattr(mod, fn, record(fn))
    return mod


def test_wandb_and_mlflow_get_the_names_and_tags(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _recorder("wandb", calls))
    monkeypatch.setitem(sys.modules, "mlflow", _recorder("mlflow", calls))
    log = MetricLogger(
        tmp_path / "r1",
        wandb=True,
        mlflow=True,
        config={"log": {"project": "p"}},
        project="p",
        entity="team",
        run_name="ablation-a",
        tags=["x4", "seed1"],
    )
    log.log(STEP1)
    log.close()
    by = {fn: kw for fn, _, kw in calls}
    assert {k: by["init"][k] for k in ("project", "entity", "name", "tags")} == {
        "project": "p",
        "entity": "team",
        "name": "ablation-a",
        "tags": ["x4", "seed1"],
    }
    assert [a for fn, a, _ in calls if fn == "set_experiment"] == [("p",)]
    assert by["start_run"] == {"run_name": "ablation-a", "tags": {"x4": "", "seed1": ""}}
    assert by["run.log"]["step"] == 1 and by["log_metrics"]["step"] == 1
    sent = [a[0] for fn, a, _ in calls if fn == "run.log"][0]
    assert sent["role/teacher/reward_best"] == 0.25 and "member/student-1/solve_rate" in sent
    # defaults: the run folder's name, no entity, no tags
    calls.clear()
    MetricLogger(tmp_path / "r2", wandb=True).close()
    assert {k: calls[0][2][k] for k in ("project", "entity", "name", "tags")} == {
        "project": "populora",
        "entity": None,
        "name": "r2",
        "tags": None,
    }
