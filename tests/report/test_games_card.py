"""The report's games card and operator counts (report/games.py): hand-written records with known totals,
and the synthetic run's report."""

import json

from populora.diagnostics.run import load_run
from populora.report.games import member_games, operator_counts, role_games
from populora.report.html import render_report


def _write(path, metrics, events):
    path.mkdir()
    (path / "config.yaml").write_text("population:\n  mode: population\n")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _rec(step, games):
    roles = {"T0": "teacher", "T1": "teacher", "S0": "student", "S1": "student"}
    return {
        "step": step,
        "mode": "population",
        "members": {m: {"role": roles[m]} for m in games},
        "games": games,
    }


W, D, L, Z = (
    {"win": 1, "draw": 0, "loss": 0},
    {"win": 0, "draw": 1, "loss": 0},
    {"win": 0, "draw": 0, "loss": 1},
    {"win": 0, "draw": 0, "loss": 0},
)


def test_role_and_member_totals_by_hand(tmp_path):
    metrics = [
        _rec(1, {"T0": W, "T1": L, "S0": L, "S1": W}),  # T0 beat S0, S1 beat T1
        _rec(2, {"T0": D, "T1": L, "S0": {"win": 1, "draw": 1, "loss": 0}, "S1": Z}),  # S0 played both
    ]
    events = [
        {"step": 2, "type": "evolution", "role": "teacher", "operator": "X4", "planned": "X4", "cos": 0.8},
        {
            "step": 2,
            "type": "evolution",
            "role": "student",
            "operator": "X5",
            "planned": "X4",
            "cos": 0.1,
            "declined": "cos(D1, D2) = 0.100 < cos_gate = 0.5: averaged (X5) instead",
        },
        {"step": 2, "type": "evolution", "role": "student", "operator": "M1", "planned": "M1", "cos": None},
    ]
    run = load_run(_write(tmp_path / "r", metrics, events))
    steps, by_role = role_games(run)
    assert steps.tolist() == [1, 2]
    assert {k: v.tolist() for k, v in by_role["teacher"].items()} == {
        "win": [1, 1],
        "draw": [0, 1],
        "loss": [1, 2],
    }
    assert {k: v.tolist() for k, v in by_role["student"].items()} == {
        "win": [1, 2],
        "draw": [0, 1],
        "loss": [1, 1],
    }
    assert member_games(run) == {
        "T0": {"win": 1, "draw": 1, "loss": 0},
        "T1": {"win": 0, "draw": 0, "loss": 2},
        "S0": {"win": 1, "draw": 1, "loss": 1},
        "S1": {"win": 1, "draw": 0, "loss": 0},
    }
    ops = operator_counts(run)
    assert dict(ops.applied) == {"X4": 1, "X5": 1, "M1": 1}
    assert (ops.x4_planned, ops.x4_extrapolated, ops.x4_fell_back, ops.x4_cos) == (2, 1, 1, (0.8, 0.1))
    page = render_report(run)
    assert 'id="games"' in page
    assert "teachers won 1 (25%), drew 1 (25%) and lost 2 (50%) of their 4 games" in page
    assert "students won 2 (50%), drew 1 (25%) and lost 1 (25%) of their 4 games" in page
    assert "X4 was drawn 2 times: it extrapolated 1 times and fell back to averaging" in page


def test_synthetic_run_report_has_games(pop_report, pop_run):
    page = pop_report.read_text()
    run = load_run(pop_run)
    _, by_role = role_games(run)
    n_t = sum(int(v[-1]) for v in by_role["teacher"].values())
    n_s = sum(int(v[-1]) for v in by_role["student"].values())
    assert n_t == n_s > 0  # one game per matchup, counted once for each side
    assert by_role["teacher"]["win"][-1] == by_role["student"]["loss"][-1]  # zero-sum
    assert 'id="games"' in page and "of their" in page


def test_single_report_says_no_games(single_report):
    assert "A single-agent run plays no rated games." in single_report.read_text()
