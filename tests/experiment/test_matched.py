"""Coverage at an equal number of valid proposals (experiment/matched.py), on hand-made run records."""

from __future__ import annotations

import json

import numpy as np

from populora.experiment.matched import (
    budget_curve,
    common_budget,
    matched_measures,
    mean_curve_on_grid,
    value_at_budget,
)
from populora.experiment.run_records import run_records


def _rec(valid_total, cells, distinct=None) -> dict:
    return {
        "steps": {
            "valid_total": valid_total,
            "coverage_cells": cells,
            "distinct_programs_total": distinct or valid_total,
        }
    }


def test_valid_total_is_the_running_count_of_valid_proposals(tmp_path):
    steps = [{"step": s, "members": {"A0": {"role": "single"}}} for s in (1, 2, 3, 4)]
    problems = [
        {"step": 1, "valid": True, "program": "a"},
        {"step": 1, "valid": True, "program": "b"},
        {"step": 2, "valid": False, "program": None},  # step 2 made no valid proposal
        {"step": 3, "valid": True, "program": "c"},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    assert run_records(tmp_path)["steps"]["valid_total"] == [2, 2, 3, 3]


def test_value_at_budget_reads_the_first_step_that_reaches_it():
    totals, cells = [3, 7, 12, 20], [2, 5, 6, 9]
    assert value_at_budget(totals, cells, 7) == 5.0  # reached exactly at step 2
    assert value_at_budget(totals, cells, 8) == 6.0  # first reached at step 3
    assert value_at_budget(totals, cells, 1) == 2.0
    assert value_at_budget(totals, cells, 21) is None  # never reached
    assert value_at_budget([None, 4], [1, None], 4) is None  # reached where the value is missing


def test_common_budget_is_the_smallest_final_total():
    runs = [_rec([6, 12, 18], [1, 2, 3]), _rec([24, 48, 72], [4, 6, 7])]
    assert common_budget(runs) == 18
    assert common_budget(runs + [_rec([0, 0], [0, 0])]) is None  # a run with no valid proposal
    assert common_budget([{"steps": {}}]) is None  # an older record without the column


def test_matched_measures_by_hand():
    # a population run: 24 valid proposals per step; a single run: 6 per step
    pop = _rec([24, 48, 72, 96], [10, 14, 16, 17], distinct=[20, 40, 55, 70])
    single = _rec([6, 12, 18, 24], [3, 5, 8, 10], distinct=[6, 11, 16, 20])
    budget = common_budget([pop, single])
    assert budget == 24
    assert matched_measures(pop, budget)["cells"] == 10.0  # pop reached 24 at its first step
    assert matched_measures(single, budget)["cells"] == 10.0  # single only at its last
    assert matched_measures(single, budget)["distinct_programs"] == 20.0


def test_budget_curves_average_on_the_range_every_run_covers():
    a = _rec([2, 4], [1, 3])  # cells 1 at 2 proposals, 3 at 4
    b = _rec([1, 3, 5], [0, 2, 4])  # cells = x - 1
    assert budget_curve(a) == ([2.0, 4.0], [1.0, 3.0])
    grid, mean = mean_curve_on_grid([budget_curve(a), budget_curve(b)], points=3)
    assert grid.tolist() == [2.0, 3.0, 4.0]  # from the largest first x to the smallest last x
    # a: x - 1 on [2, 4]; b: x - 1 everywhere: the mean is x - 1
    assert np.allclose(mean, [1.0, 2.0, 3.0])
    assert mean_curve_on_grid([budget_curve(_rec([5], [1]))])[0].size == 0  # one point: no curve
