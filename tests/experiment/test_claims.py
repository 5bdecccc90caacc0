"""The claims' per-run measures (experiment/claims.py) on hand-computed records: the teachers' margin and its
lead changes, complexity slopes, new programs, the single agent's self-solve plateau, coverage growth and the
rating spread. The claims of a real (quick) experiment are checked in test_ablation.py."""

import math

import numpy as np
import pytest

from populora.experiment.claims import (
    collapsed_solvers,
    lead_changes,
    new_program_share,
    probe_change,
    rating_skill_agreement,
    run_claim_measures,
    smooth,
    teacher_margin,
)


def test_lead_changes_count_sign_switches_skipping_ties_and_gaps():
    assert lead_changes(np.array([0.2, 0.1, 0.0, -0.3, np.nan, 0.4])) == 2
    assert lead_changes(np.array([-0.5, -0.1, -0.2])) == 0
    assert lead_changes(np.array([np.nan, 0.0])) == 0


def test_smooth_is_a_trailing_mean_over_finite_values():
    y = np.array([np.nan, 1.0, 3.0, np.nan, 5.0])
    out = smooth(y, window=2)
    assert math.isnan(out[0])
    assert out[1:].tolist() == [1.0, 2.0, 3.0, 5.0]  # [1], [1,3], [3,nan], [nan,5]


def test_new_program_share_is_new_programs_over_valid_proposals_per_step():
    out = new_program_share(np.array([2.0, 3.0, 3.0, 5.0]), np.array([2.0, 4.0, 4.0, 9.0]))
    assert out[:2].tolist() == [1.0, 0.5] and math.isnan(out[2])  # step 3 made no valid proposal
    assert out[3] == pytest.approx(2 / 5)
    assert new_program_share(np.array([1.0]), np.array([])).size == 0  # records before valid_total


def test_collapsed_solvers_end_below_half_the_solvers_start():
    roles = {"T0": "teacher", "S0": "student", "S1": "student", "S2": "student"}
    first = {
        "T0": {"code_i": 0.0},
        "S0": {"code_i": 0.2, "code_o": 0.2},
        "S1": {"code_i": 0.3, "code_o": 0.1},
    }
    # start: the students' mean 0.2, so below 0.1 is a collapse; S2 (born later) counts, the teacher does not
    last = {
        "T0": {"code_i": 0.0},
        "S0": {"code_i": 0.05, "code_o": 0.1},
        "S2": {"code_i": 0.1, "code_o": 0.12},
    }
    probes = [{"step": 0, "probe": first}, {"step": 100, "probe": last}]
    assert collapsed_solvers(probes, roles) == 1  # S0 at 0.075; S2 at 0.11 is not
    assert collapsed_solvers(probes, roles, frac=0.6) == 2
    assert collapsed_solvers(probes[:1], roles) is None
    single = [{"step": 0, "probe": {"A0": {"code_i": 0.4}}}, {"step": 9, "probe": {"A0": {"code_i": 0.1}}}]
    assert collapsed_solvers(single, {"A0": "single"}) == 1


def _record(steps: int = 8) -> dict:
    """A 2T+2S run: teachers win the first half of the games and lose the second; T1 ends rated higher."""
    games = []
    for s in range(1, steps + 1):
        t_wins = s <= steps // 2
        g = {
            "T0": {"win": int(t_wins), "draw": 1, "loss": int(not t_wins)},
            "T1": {"win": int(t_wins), "draw": 0, "loss": int(not t_wins)},
            "S0": {"win": int(not t_wins), "draw": 1, "loss": int(t_wins)},
        }
        games.append({"step": s, "games": g})
    return {
        "roles": {"T0": "teacher", "T1": "teacher", "S0": "student", "S1": "student"},
        "steps": {
            "step": list(range(1, steps + 1)),
            "complexity": {"ast_depth": [10.0 - 0.5 * s for s in range(1, steps + 1)]},
            "distinct_programs_total": [4, 8, 12, 16, 17, 18, 19, 20][:steps],
            "valid_total": [4, 8, 12, 16, 20, 24, 28, 32][:steps],
            "self_solve_rate": [None] * steps,
            "coverage_cells": [2, 4, 5, 6, 6, 7, 9, 10][:steps],
        },
        "games": games,
        "ratings": {
            "T0": {"mu": [25.0, 20.0], "sigma": [8.0, 2.0]},
            "T1": {"mu": [25.0, 30.0], "sigma": [8.0, 2.0]},
            "S0": {"mu": [25.0, 24.0], "sigma": [8.0, 4.0]},
            "S1": {"mu": [25.0, 26.0], "sigma": [8.0, 4.0]},
        },
    }


def test_teacher_margin_counts_the_teachers_games_only():
    m = teacher_margin(_record())
    # steps 1-4: teachers 2 wins, 1 draw in 3 games; steps 5-8: 2 losses, 1 draw (S0's results not counted)
    assert m.tolist() == pytest.approx([2 / 3] * 4 + [-2 / 3] * 4)


def test_run_claim_measures_on_a_hand_record():
    m = run_claim_measures(_record())
    assert m["complexity_slope"]["ast_depth"] == pytest.approx(-50.0)  # -0.5 per step = -50 per 100 steps
    # new distinct programs per step: 4,4,4,4 then 1,1,1,1; the first and last quarter are 2 steps each
    assert m["new_programs"] == {"start": 4.0, "end": 1.0, "change": -3.0}
    # 4 valid proposals every step: every one new at first, one in four at the end
    assert m["new_program_share"] == {"start": 1.0, "end": 0.25, "change": -0.75}
    assert "self_solve" not in m  # a population has no self-solve rate
    assert (
        m["coverage_growth_second_half"] == 10 - 6
    )  # cells at the last step minus at the middle one (index 4)
    assert m["coverage_cells_end"] == 10
    # smoothed over 10 steps the margin falls from +2/3 but stays >= 0 up to step 8 (mean of 4 x +, 4 x -)
    race = m["arms_race"]
    assert race["lead_changes"] == 0 and race["student_lead_share"] == 0.0
    assert race["teacher_lead_share"] == pytest.approx(7 / 8)  # step 8's mean is exactly 0: nobody leads
    assert m["ratings"]["teacher"] == pytest.approx(
        {"mu_spread": 5.0, "mean_sigma": 2.0, "spread_over_sigma": 2.5}
    )
    assert m["ratings"]["student"] == pytest.approx(
        {"mu_spread": 1.0, "mean_sigma": 4.0, "spread_over_sigma": 0.25}
    )


def test_the_single_agents_self_solve_rate_rises_to_a_plateau():
    rec = _record()
    rec["roles"] = {"A0": "single"}
    rec["games"] = [{"step": g["step"], "games": {}} for g in rec["games"]]
    rec["ratings"] = {"A0": {"mu": [None], "sigma": [None]}}
    rec["steps"]["self_solve_rate"] = [0.1, 0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6]
    m = run_claim_measures(rec)
    assert m["self_solve"]["start"] == pytest.approx(0.2) and m["self_solve"]["end"] == pytest.approx(0.6)
    assert m["self_solve"]["slope_second_half"] == pytest.approx(0.0, abs=1e-12)  # the plateau
    assert "arms_race" not in m and m["ratings"] == {}


def test_probe_change_is_the_last_probe_minus_the_first():
    assert probe_change({"probe": [0.20, 0.25, None, 0.23]}) == pytest.approx(0.03)
    assert probe_change({"probe_hardest": [0.1, 0.4]}, "probe_hardest") == pytest.approx(0.3)
    assert probe_change({"probe": [0.2]}) is None and probe_change({"probe": []}) is None


def test_claims_say_how_many_seeds_a_2_or_5_point_effect_needs():
    from populora.experiment.claims import _add_per_seed

    # 4T+4S - single per seed: +1, +3, +5 points (sd 2 points): 10 seeds for 2 points (test_stats by hand)
    pop = [{"probe": [0.20, 0.21 + d], "probe_hardest": [0.1, 0.1]} for d in (0.0, 0.02, 0.04)]
    single = [{"probe": [0.20, 0.20], "probe_hardest": [0.1, 0.1]}] * 3
    result = {"curves": {"4T+4S": pop, "single": single}, **{k: {} for k in ("a_probe", "b_reward")}}
    result.update({k: {} for k in ("c_collapse", "d_coverage", "e_arms_race", "f_ratings")})
    _add_per_seed(result, {})
    assert result["a_probe"]["per_seed"]["overall"] == pytest.approx([0.01, 0.03, 0.05])
    need = result["a_probe"]["seeds_needed"]
    assert need["effects"] == [0.02, 0.05] and need["overall"][0] == 10 and need["overall"][1] < 10
    assert need["sd"] == pytest.approx(0.02)
    assert need["hardest"] == [None, None]  # no spread on the hardest level: nothing to extrapolate from
    assert result["b_reward"]["seeds_needed"]["overall"] == [None, None]  # no shuffled arm


def test_rating_skill_agreement_ranks_the_students_mu_against_their_probe():
    roles = {"T0": "teacher", "S0": "student", "S1": "student", "S2": "student", "S3": "student"}
    acc = {"S0": 0.1, "S1": 0.2, "S2": 0.4, "S3": 0.3, "T0": 0.9}  # the teacher is not ranked
    rec = {
        "roles": roles,
        "steps": {"step": [1, 2]},
        "probe": [{"step": 0, "probe": {}}, {"step": 2, "probe": {m: {"code_i": a} for m, a in acc.items()}}],
        "ratings": {m: {"mu": [None, mu]} for m, mu in zip(roles, [5.0, 1.0, 2.0, 3.0, 4.0], strict=True)},
    }
    # ranks of mu 1, 2, 3, 4 against accuracy 0.1, 0.2, 0.4, 0.3: sum of d^2 = 2, 1 - 6 * 2 / (4 * 15) = 0.8
    assert rating_skill_agreement(rec) == pytest.approx(0.8)
    rec["ratings"]["S3"]["mu"] = [None, None]  # S3 not rated at that step: three students left, ranked alike
    assert rating_skill_agreement(rec) == pytest.approx(1.0)
    rec["ratings"]["S2"]["mu"] = [None, None]  # two students: no correlation
    assert rating_skill_agreement(rec) is None
