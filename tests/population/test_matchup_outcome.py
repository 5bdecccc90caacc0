"""The matchup rule (population/ratings.py): each side is rated on its own reward, so a member that earns
more reward is never rated down for it; unsolved-by-all and invalid proposals are never teacher wins. Checked
on every hand-made matchup of a small grid and on the cases the rule names."""

import itertools

import pytest

from populora.population.ratings import RatingSystem, side_result
from populora.tasks.rewards import RewardConfig, student_reward, teacher_reward
from populora.train.records import ProposalTrace, matchup_scores

RANK = {"loss": 0, "draw": 1, "win": 2}
REWARDS = RewardConfig()


def _proposal(kind) -> ProposalTrace:
    """'invalid', or (solves, unparsable) of the student's 4 answers."""
    tr = ProposalTrace("T0", "S0", "code_o")
    if kind == "invalid":
        tr.reward = teacher_reward(None, valid=False)
        return tr
    k, bad = kind
    tr.problem = object()
    tr.solves = [True] * k + [False] * (4 - k)
    tr.formatted = [True] * (4 - bad) + [False] * bad
    tr.answer_rewards = [student_reward(f, s) for f, s in zip(tr.formatted, tr.solves, strict=True)]
    tr.reward = teacher_reward(k / 4)
    return tr


KINDS = ["invalid"] + [(k, bad) for k in range(5) for bad in range(5 - k)]
MATCHUPS = [[_proposal(a), _proposal(b)] for a, b in itertools.combinations_with_replacement(KINDS, 2)]


def _outcomes(traces):
    rs = RatingSystem()
    t, s = matchup_scores(traces, REWARDS)
    res = rs.rate_matchup(rs.prior(), rs.prior(), t, s)
    rewards_t = sum(tr.reward for tr in traces) / len(traces)
    answers = [r for tr in traces for r in tr.answer_rewards]
    rewards_s = sum(answers) / len(answers) if answers else None
    return res, rewards_t, rewards_s


def test_side_result_bands():
    assert side_result(0.6) == "win" and side_result(0.59) == "draw" and side_result(0.41) == "draw"
    assert side_result(0.4) == "loss" and side_result(-1.0) == "loss"
    assert side_result(0.5, margin=0.0) == "win"


def test_more_reward_is_never_rated_down_on_every_hand_made_matchup():
    rows = [_outcomes(m) for m in MATCHUPS]
    assert len(rows) > 100
    for (a, ra_t, ra_s), (b, rb_t, rb_s) in itertools.product(rows, repeat=2):
        if (
            ra_t > rb_t
        ):  # the teacher earned more: its result is at least as good, its rating at least as high
            assert RANK[a.teacher_outcome] >= RANK[b.teacher_outcome]
            assert a.teacher.mu >= b.teacher.mu - 1e-9
        if ra_s is not None and rb_s is not None and ra_s > rb_s:
            assert RANK[a.student_outcome] >= RANK[b.student_outcome]
            assert a.student.mu >= b.student.mu - 1e-9
    for res, _, _ in rows:  # never a double win
        assert not (res.teacher_outcome == "win" and res.student_outcome == "win")


@pytest.mark.parametrize(
    "kinds,teacher",
    [
        ([(0, 0), (0, 0)], "loss"),  # unsolved by every rollout: reward 0, no win (the old rule: a win)
        (["invalid", "invalid"], "loss"),
        (["invalid", (1, 0)], "loss"),  # one invalid and one hard one: mean reward (-1 + 3/4) / 2
        ([(1, 0), (1, 0)], "win"),  # hard but solvable: 3/4 each
        ([(2, 0), (2, 0)], "draw"),
    ],
)
def test_named_cases(kinds, teacher):
    res, _, _ = _outcomes([_proposal(k) for k in kinds])
    assert res.teacher_outcome == teacher


def test_one_game_when_every_problem_is_valid_and_solved_equals_the_solve_rate_rule():
    rs = RatingSystem()
    for k in range(1, 5):
        traces = [_proposal((k, 0)), _proposal((k, 0))]
        t, s = matchup_scores(traces, REWARDS)
        assert t == pytest.approx(1 - k / 4) and s == pytest.approx(k / 4)
        res = rs.rate_matchup(rs.prior(), rs.prior(), t, s)
        old_t, old_s, old = rs.update(rs.prior(), rs.prior(), k / 4)
        assert (res.teacher, res.student, res.outcome) == (old_t, old_s, old)
