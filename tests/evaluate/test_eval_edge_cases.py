"""`populora eval` edge cases (issue 33 §7): an empty or negative ``--limit`` and a run left with no benchmark
are one-line errors with exit code 2 (not an empty table and exit 0), and ``--members best`` ranks by the one
LCB rule evolution uses, ``mu - k sigma`` with the run's ``ratings.lcb_k``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.evaluate.data import DataError
from populora.evaluate.runner import EvalOptions, load_items
from populora.evaluate.targets import lcb_k, load_target, select_members


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("POPULORA_NO_PROGRESS", "1")
    monkeypatch.delenv("POPULORA_LCB_PATH", raising=False)


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_limit_below_one_is_an_error(limit, tmp_path):
    r = CliRunner().invoke(
        app, ["eval", "--oracle", "gold", "-b", "humaneval+", "--limit", limit, "--out-dir", str(tmp_path)]
    )
    assert r.exit_code == 2, r.output
    assert "--limit must be at least 1" in r.output and f"got {limit}" in r.output
    assert not (tmp_path / "results.md").exists()
    with pytest.raises(DataError, match="--limit must be at least 1"):
        load_items(EvalOptions(benchmarks=["humaneval+"], limit=int(limit)))


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--min-time-limit", "nan"),
        ("--min-time-limit", "0"),
        ("--min-time-limit", "-5"),
        ("--min-time-limit", "inf"),
        ("--gt-time-limit-factor", "0"),
        ("--gt-time-limit-factor", "nan"),
    ],
)
def test_time_limits_must_be_finite_and_positive(flag, value, tmp_path):
    # Issue 50: these were accepted, and every input of every candidate then timed out: all answers failed.
    r = CliRunner().invoke(
        app,
        ["eval", "--oracle", "gold", "-b", "humaneval+", "-n", "1", flag, value, "--out-dir", str(tmp_path)],
    )
    assert r.exit_code == 2, r.output
    assert f"{flag} must be a finite number above 0" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "results.md").exists()
    from populora.evaluate.items import CodeLimits

    name = "min_time_limit" if flag == "--min-time-limit" else "gt_time_limit_factor"
    with pytest.raises(ValueError, match=f"CodeLimits\\({name}=\\) must be a finite number above 0"):
        CodeLimits(**{name: float(value)})


def test_lcb_only_without_data_is_an_error_naming_the_fix(tmp_path):
    r = CliRunner().invoke(app, ["eval", "--oracle", "gold", "-b", "lcb", "--out-dir", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "LiveCodeBench unavailable" in r.output and "--lcb-path" in r.output
    assert "|" not in r.output  # no table
    assert not (tmp_path / "results.md").exists()


def test_lcb_beside_other_benchmarks_stays_an_unavailable_row(shared_data):
    items, unavailable = load_items(
        EvalOptions(benchmarks=["humaneval+", "lcb"], limit=1, data_dir=shared_data)
    )
    assert list(items) == ["humaneval+"] and "lcb" in unavailable


def _run(tmp_path, config: str):
    """A run folder with two teachers whose order flips between k = 1 and k = 3; the adapters are PEFT
    folders by layout (load_target reads only adapter_config.json here)."""
    tmp_path.mkdir(parents=True)
    (tmp_path / "config.yaml").write_text(config)
    ckpt = tmp_path / "checkpoints" / "step_000004"
    for mid in ("T0", "T1", "S0"):
        (ckpt / "adapters" / mid).mkdir(parents=True)
        (ckpt / "adapters" / mid / "adapter_config.json").write_text("{}")
    members = [
        {"id": "T0", "role": "teacher", "slot": 0, "mu": 30.0, "sigma": 2.0},  # LCB k=1: 28.0, k=3: 24.0
        {"id": "T1", "role": "teacher", "slot": 1, "mu": 27.0, "sigma": 0.5},  # LCB k=1: 26.5, k=3: 25.5
        {"id": "S0", "role": "student", "slot": 2, "mu": 25.0, "sigma": 8.0},
    ]
    (ckpt / "state.json").write_text(json.dumps({"step": 4, "population": {"members": members}}))
    return tmp_path


def test_best_uses_the_runs_lcb_rule(tmp_path):
    # default ratings.lcb_k = 1 (as evolution): T0 (28.0 > 26.5); the old mu - 3 sigma picked T1
    run = _run(tmp_path / "a", "model:\n  name: tiny\n")
    assert lcb_k(run) == 1.0
    tgt = load_target(run)
    t0 = next(m for m in tgt.members if m.id == "T0")
    assert t0.rating == pytest.approx(28.0) and (t0.mu, t0.sigma) == (30.0, 2.0)
    assert [m.id for m in select_members(tgt, ["best"])] == ["base", "S0", "T0"]
    # a run trained with ratings.lcb_k = 3 ranks by mu - 3 sigma: T1 (25.5 > 24.0)
    run3 = _run(tmp_path / "b", "model:\n  name: tiny\nratings:\n  lcb_k: 3\n")
    assert lcb_k(run3) == 3.0
    assert [m.id for m in select_members(load_target(run3), ["best"])] == ["base", "S0", "T1"]
