"""The run-folder schema checker flags each kind of violation (and accepts a conforming record)."""

from populora.diagnostics.schema import (
    MEMBER_KEYS,
    PHASES,
    check_event_record,
    check_metrics_record,
    check_problem_record,
    check_run,
)
from populora.diagnostics.sinks import append_jsonl


def good_metrics(step=1, mode="population"):
    member = dict.fromkeys(MEMBER_KEYS)
    member.update(
        role="teacher" if mode == "population" else "single",
        solve_rate={"code_i": None, "code_o": None, "code_f": None, "all": None},
    )
    return {
        "step": step,
        "time": 0.0,
        "mode": mode,
        "phase_s": dict.fromkeys(PHASES, 0.0),
        "tokens_per_s": None,
        "tokens": None,
        "coverage": 0.0,
        "coverage_cells": 0,
        "members": {"T0": member},
        "matchups": [],
    }


def test_metrics_record_violations():
    assert check_metrics_record(good_metrics()) == []
    rec = good_metrics()
    del rec["coverage"]
    rec["mode"] = "pop"
    rec["members"]["T0"]["role"] = "boss"
    del rec["members"]["T0"]["solve_rate"]["code_f"]
    rec["members"]["T0"]["complexity"] = {"ast_depth": {"mean": 1.0}}
    rec["matchups"] = [{"teacher": "T0"}]
    errs = "\n".join(check_metrics_record(rec))
    for needle in (
        "missing key 'coverage'",
        "'mode' must be",
        "role must be",
        "solve_rate missing 'code_f'",
        "complexity['ast_depth']",
        "matchup: missing key 'student'",
    ):
        assert needle in errs, needle
    single = good_metrics(mode="single")
    single["members"]["T0"]["mu"] = 25.0
    assert any("null mu/sigma" in e for e in check_metrics_record(single))
    assert any("[0, 1]" in e for e in check_metrics_record({**good_metrics(), "coverage": 1.5}))


def test_problem_and_event_violations():
    ok = {
        "step": 1,
        "proposer": "T0",
        "solver": "S0",
        "task": "code_o",
        "valid": True,
        "reason": None,
        "id": "x",
        "program": "def f(x):\n    return x",
        "inputs": ["1"],
        "outputs": ["1"],
        "message": "",
        "solve_rate": 0.5,
        "features": {"ast_depth": 4, "cyclomatic": 1, "loc": 2, "n_vars": 1},
    }
    assert check_problem_record(ok) == []
    errs = check_problem_record({**ok, "task": "code_x", "valid": False, "features": {"loc": 2}})
    assert len(errs) == 3
    assert check_event_record({"step": 3, "type": "checkpoint", "path": "checkpoints/step_000003"}) == []
    assert check_event_record({"step": 3, "type": "evolution", "role": "teacher"})[0].endswith("'operator'")
    assert "unknown type" in check_event_record({"step": 3, "type": "party"})[0]


def test_check_run_steps_order(tmp_path):
    for s in (1, 3, 2):
        append_jsonl(tmp_path / "metrics.jsonl", good_metrics(step=s))
    errs = check_run(tmp_path)
    assert "config.yaml is missing" in errs and any("strictly increasing" in e for e in errs)


def test_single_mode_matchups_are_not_games_and_skipped_evolution_is_known(tmp_path):
    matchup = {
        "step": 1,
        "type": "matchup",
        "teacher": "A0",
        "student": "A0",
        "solve_rate": 0.5,
        "n_problems": 2,
    }
    assert check_event_record(matchup, single=True) == []
    assert len(check_event_record(matchup)) == 3  # a population matchup is a rated game: outcome and points
    skipped = {"step": 2, "type": "evolution_skipped", "role": "student", "operator": "X5"}
    skipped.update(parents=["S0", "S1"], replaced="S2", reason="parent S1 holds NaN")
    assert check_event_record(skipped) == []
    (tmp_path / "config.yaml").write_text("{}\n")
    append_jsonl(tmp_path / "metrics.jsonl", good_metrics(mode="single"))
    append_jsonl(tmp_path / "events.jsonl", matchup)
    assert not [e for e in check_run(tmp_path) if "event" in e]  # check_run reads the mode from metrics.jsonl


def test_deadline_counters_must_be_counts():
    for key in ("score_past_deadline", "validate_past_deadline"):
        assert check_metrics_record({**good_metrics(), key: 3}) == []
        for bad in (-1, 1.5, True, "2"):
            errs = check_metrics_record({**good_metrics(), key: bad})
            assert errs == [f"metrics step 1: {key!r} must be a count >= 0"], (key, bad, errs)
