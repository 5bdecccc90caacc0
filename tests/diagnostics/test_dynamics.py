"""Derived diagnostics on hand-built run folders with hand-computed answers."""

import math

import numpy as np
import pytest

from populora.diagnostics.dynamics import (
    child_recovery,
    complexity_curves,
    coverage_curve,
    matchup_matrix,
    operator_usage,
    oscillation,
    rating_history,
    smooth,
    solve_rates_by_type,
)
from populora.diagnostics.run import NotARunError, load_run
from populora.diagnostics.sinks import append_jsonl

NULL_SR = {"code_i": None, "code_o": None, "code_f": None, "all": None}


def member(role, reward=None, sr=None, mu=None, sigma=None, complexity=None, n_valid=None):
    return {
        "role": role,
        "reward": reward,
        "valid_rate": None,
        "solve_rate": sr or dict(NULL_SR),
        "response_len": None,
        "entropy": None,
        "mu": mu,
        "sigma": sigma,
        "loss": None,
        "grad_norm": None,
        "complexity": complexity,
        "n_valid": n_valid,
        "n_proposed": None,
    }


def write_metrics(run_dir, records):
    for r in records:
        base = {
            "time": 0.0,
            "mode": "population",
            "phase_s": {},
            "tokens_per_s": None,
            "tokens": None,
            "coverage": None,
            "coverage_cells": None,
            "matchups": [],
        }
        append_jsonl(run_dir / "metrics.jsonl", {**base, **r})


def test_smooth_ignores_nan_and_truncates_edges():
    assert np.allclose(smooth(np.array([1.0, np.nan, 3.0, 5.0]), 3), [1, 2, 4, 4])
    assert np.allclose(smooth(np.array([1.0, 2.0]), 1), [1, 2])
    out = smooth(np.array([np.nan, np.nan, 1.0]), 3)
    assert np.isnan(out[0]) and out[1] == 1.0 and out[2] == 1.0


def test_oscillation_zigzag_counts():
    o = oscillation([0, 1, 0, 1, 0], window=1, threshold=0.5)
    assert o.direction_changes == 3 and o.mean_swing == 1.0 and o.n_points == 5
    mono = oscillation([0, 0.2, 0.4, 0.6], window=1)
    assert mono.direction_changes == 0 and mono.mean_swing is None and mono.detrended_std < 1e-12
    # the dip 0.5 -> 0.46 is below the threshold, so the first leg starts at 0.46; then 0.6 -> 0.3 is a turn
    o = oscillation([0.5, 0.48, 0.46, 0.6, 0.3], window=1, threshold=0.1)
    assert o.direction_changes == 1 and math.isclose(o.mean_swing, (0.14 + 0.3) / 2)
    # noise below the threshold is not oscillation
    assert oscillation([0.5, 0.52, 0.5, 0.52, 0.5], window=1, threshold=0.05).direction_changes == 0
    assert oscillation([np.nan, 0.3], window=1).n_points == 1


def test_not_a_run(tmp_path):
    with pytest.raises(NotARunError, match="not a run folder"):
        load_run(tmp_path)
    with pytest.raises(NotARunError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(NotARunError, match="not a folder"):
        load_run(tmp_path / "f.txt")
    (tmp_path / "config.yaml").write_text("a: [1,\n")
    with pytest.raises(NotARunError, match="not valid YAML"):
        load_run(tmp_path)


def test_load_dedupes_resumed_steps_and_skips_cut_line(tmp_path):
    write_metrics(
        tmp_path,
        [
            {"step": 1, "members": {"S0": member("student", reward=0.1)}},
            {"step": 2, "members": {"S0": member("student", reward=0.2)}},
            {"step": 2, "members": {"S0": member("student", reward=0.25)}},
        ],
    )
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "mem')
    run = load_run(tmp_path)
    assert run.steps.tolist() == [1, 2]
    assert run.member_series("S0", "reward").tolist() == [0.1, 0.25]
    assert run.mode == "population" and run.members == ["S0"]


def test_solve_rates_matrix_ratings_and_usage(tmp_path):
    sr = lambda a: {"code_i": a, "code_o": None, "code_f": 1.0, "all": a}  # noqa: E731
    write_metrics(
        tmp_path,
        [
            {
                "step": 1,
                "members": {
                    "T0": member("teacher", mu=25.0, sigma=8.0),
                    "S0": member("student", sr=sr(0.2)),
                    "S1": member("student", sr=sr(0.6), mu=26.0, sigma=7.0),
                },
                "matchups": [
                    {"teacher": "T0", "student": "S0", "solve_rate": 0.2, "n_problems": 3},
                    {"teacher": "T0", "student": "S1", "solve_rate": 0.6, "n_problems": 1},
                ],
            },
            {
                "step": 2,
                "members": {"T0": member("teacher", mu=27.0, sigma=7.5), "S0": member("student", sr=sr(0.4))},
                "matchups": [{"teacher": "T0", "student": "S0", "solve_rate": 0.6, "n_problems": 1}],
            },
        ],
    )
    for ev in (
        {
            "step": 2,
            "type": "evolution",
            "role": "student",
            "operator": "M1",
            "parents": ["S0"],
            "child": "S2",
            "replaced": "S1",
        },
        {
            "step": 2,
            "type": "evolution",
            "role": "teacher",
            "operator": "M1",
            "parents": ["T0"],
            "child": "T1",
            "replaced": "T0",
        },
        {
            "step": 2,
            "type": "evolution",
            "role": "teacher",
            "operator": "X2",
            "parents": ["T0", "T1"],
            "child": "T2",
            "replaced": "T1",
        },
    ):
        append_jsonl(tmp_path / "events.jsonl", ev)
    run = load_run(tmp_path)
    rates = solve_rates_by_type(run)
    assert rates["code_i"].tolist() == [0.4, 0.4]  # mean of students present: (0.2+0.6)/2, then 0.4
    assert np.isnan(rates["code_o"]).all()
    students, teachers, mat, cnt = matchup_matrix(run)
    assert students == ["S0", "S1"] and teachers == ["T0"]
    assert math.isclose(mat[0, 0], (0.2 * 3 + 0.6 * 1) / 4) and cnt[0, 0] == 4 and mat[1, 0] == 0.6
    late = matchup_matrix(run, since_step=2)
    assert late[0] == ["S0"] and late[2][0, 0] == 0.6
    hist = rating_history(run)
    assert set(hist) == {"T0", "S1"}  # S0 never had a rating
    assert hist["T0"][0].tolist() == [25.0, 27.0] and np.isnan(hist["S1"][0][1])
    assert operator_usage(run) == {"M1": 2, "X2": 1}
    assert run.members == ["T0", "T1", "T2", "S0", "S1", "S2"]


def test_child_recovery_hand_computed(tmp_path):
    # parent P rewards 0.4, 0.5, 0.6 up to birth at step 3 -> level 0.5 (window 3)
    # child C rewards 0.2, 0.5, 0.9 at steps 4, 5, 6 -> trailing means 0.2, 0.35, 0.533 -> recovered at 6
    recs = []
    parent = [0.4, 0.5, 0.6, 0.6, 0.6, 0.6]
    child = [None, None, None, 0.2, 0.5, 0.9]
    late = [None, None, None, None, None, 0.0]
    for i in range(6):
        members = {"S0": member("student", reward=parent[i])}
        if child[i] is not None:
            members["S1"] = member("student", reward=child[i])
        if late[i] is not None:
            members["S2"] = member("student", reward=late[i])
        recs.append({"step": i + 1, "members": members})
    write_metrics(tmp_path, recs)
    append_jsonl(
        tmp_path / "events.jsonl",
        {
            "step": 3,
            "type": "evolution",
            "role": "student",
            "operator": "M2",
            "parents": ["S0"],
            "child": "S1",
            "replaced": "S9",
        },
    )
    append_jsonl(
        tmp_path / "events.jsonl",
        {
            "step": 5,
            "type": "evolution",
            "role": "student",
            "operator": "X1",
            "parents": ["S0", "S1"],
            "child": "S2",
            "replaced": "S1",
        },
    )
    append_jsonl(
        tmp_path / "events.jsonl",
        {
            "step": 5,
            "type": "evolution",
            "role": "student",
            "operator": "M1",
            "parents": ["S7"],
            "child": "S3",
            "replaced": "S0",
        },
    )
    c1, c2, c3 = child_recovery(load_run(tmp_path), window=3)
    assert c1.child == "S1" and math.isclose(c1.parent_level, 0.5) and c1.steps == 3 and c1.observed == 3
    # S2: parents' levels: S0 mean(0.6,0.6,0.6)=0.6 and S1 mean(0.2,0.5)=0.35 -> 0.475; child 0.0 -> not yet
    assert math.isclose(c2.parent_level, 0.475) and c2.steps is None and c2.observed == 1
    assert c3.parent_level is None and c3.steps is None and c3.operator == "M1"


def test_complexity_from_problems_and_pooled_from_metrics(tmp_path):
    f = lambda d, c: {"ast_depth": d, "cyclomatic": c, "loc": 2, "n_vars": 1}  # noqa: E731
    cx = lambda m, s: {k: {"mean": m, "std": s} for k in ("ast_depth", "cyclomatic", "loc", "n_vars")}  # noqa: E731
    write_metrics(
        tmp_path,
        [
            {
                "step": 1,
                "members": {
                    "T0": member("teacher", complexity=cx(4.0, 1.0), n_valid=1),
                    "T1": member("teacher", complexity=cx(8.0, 0.0), n_valid=3),
                    "S0": member("student"),
                },
            }
        ],
    )
    run = load_run(tmp_path)
    st, mean, std = complexity_curves(run)["ast_depth"]
    # pooled: mean (4*1 + 8*3)/4 = 7; var = (1*(1 + 9) + 3*(0 + 1))/4 = 13/4
    assert st.tolist() == [1] and mean[0] == 7.0 and math.isclose(std[0], math.sqrt(13 / 4))
    for i, feats in enumerate([f(4, 1), f(6, 3), None]):
        append_jsonl(
            tmp_path / "problems.jsonl",
            {"step": 1, "valid": feats is not None, "features": feats, "id": str(i)},
        )
    run = load_run(tmp_path)
    st, mean, std = complexity_curves(run)["cyclomatic"]
    assert mean.tolist() == [2.0] and std.tolist() == [1.0]
    # no logged coverage -> recomputed from problems: the two programs fall in distinct cells
    steps, cov, cells = coverage_curve(run)
    assert cells.tolist() == [2.0] and math.isclose(cov[0], 2 / 4096)


def test_noise_threshold_hand_computed_and_separates_noise_from_cycles():
    from populora.diagnostics.dynamics import noise_threshold

    # smooth([0,1,0,1,0,1], 3) = [.5, 1/3, 2/3, 1/3, 2/3, .5]; residual variance = (2*.25 + 4*(4/9)) / 6
    var = (2 * 0.25 + 4 * (4 / 9)) / 6
    assert math.isclose(noise_threshold(np.array([0, 1, 0, 1, 0, 1.0]), 3), 3 * math.sqrt(var) / math.sqrt(3))
    assert noise_threshold(np.array([0.2, 0.4, 0.6, 0.8]), 1) == 0.05  # no smoothing, no estimate: the floor
    rng = np.random.default_rng(0)
    steps = np.arange(120)
    # binomial noise (8 rollouts) around a saturating climb: the baseline's curve, no real oscillation
    plateau = rng.binomial(8, 0.95 - 0.5 * np.exp(-steps / 10)) / 8
    cycles = rng.binomial(8, 0.5 + 0.3 * np.sin(2 * np.pi * steps / 20)) / 8
    # noise alone still makes a few large excursions in 120 steps, but far fewer than a fixed 0.05 retrace
    assert oscillation(plateau, window=5).direction_changes <= 4
    assert oscillation(plateau, window=5, threshold=0.05).direction_changes >= 10
    assert 10 <= oscillation(cycles, window=5).direction_changes <= 13  # 6 periods -> about 11 turns
