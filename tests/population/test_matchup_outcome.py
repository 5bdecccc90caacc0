"""The matchup game (population/ratings.py): one zero-sum game per matchup, scored problem by problem, which
either side can win; checked on hand-made solve-rate vectors, on TrueSkill's zero-sum identity, and on series
of synthetic matchups (no drift of every mu to 0; degenerate teachers end below a normal one)."""

import random

import pytest

from populora.population.ratings import Rating, RatingSystem, problem_points, score_game

INVALID = None


def test_problem_points_follow_who_earned_more():
    assert problem_points(0.25) == (1.0, 0.0)  # teacher earned 1 - rho = 0.75 > the student's 0.25
    assert problem_points(0.75) == (0.0, 1.0)
    assert problem_points(1.0) == (0.0, 1.0)  # trivial: the teacher earned 0, the student 1
    assert problem_points(0.5) == (0.5, 0.5)
    assert problem_points(0.0) == (1.0, 0.0)  # too hard for this student, in a batch it solved some of
    assert problem_points(0.0, solvable=False) == (
        0.0,
        1.0,
    )  # nothing in the batch solved: the teacher forfeits
    assert problem_points(INVALID) == (0.0, 1.0)  # the teacher posed nothing
    with pytest.raises(ValueError, match="fraction in"):
        problem_points(1.5)


@pytest.mark.parametrize(
    "rhos,t,s,outcome",
    [
        ([0.25, 0.25, 0.75], 2.0, 1.0, "teacher"),  # share 2/3
        ([0.25, 0.25, 1.0, INVALID], 2.0, 2.0, "draw"),  # share 1/2
        ([0.5, 0.25], 1.5, 0.5, "teacher"),  # share 3/4
        ([0.5, 0.75, 0.25], 1.5, 1.5, "draw"),
        ([0.25, 0.25, 0.25, 1.0, 1.0], 3.0, 2.0, "teacher"),  # share 3/5 = 0.5 + m exactly: a win
        ([0.25, 0.25, 1.0, 1.0, 1.0], 2.0, 3.0, "student"),  # share 2/5 = 0.5 - m exactly
        ([0.25, 0.25, 0.25, 0.25, 1.0, 1.0, 1.0], 4.0, 3.0, "draw"),  # share 4/7 = 0.571 < 0.6
        ([1.0, 1.0, 1.0], 0.0, 3.0, "student"),  # a trivial teacher
        ([INVALID, INVALID], 0.0, 2.0, "student"),  # an invalid teacher forfeits
        ([0.0, 0.0, 0.0], 0.0, 3.0, "student"),  # nothing solved: no sign the batch is solvable, a forfeit
        ([0.0, 0.0, 0.25], 3.0, 0.0, "teacher"),  # too hard, in a batch shown solvable by the 0.25
        ([0.0, 0.0, 1.0, 1.0, 1.0], 2.0, 3.0, "student"),  # share 2/5
        ([0.0, 0.0, 0.0, 1.0, 1.0], 3.0, 2.0, "teacher"),  # share 3/5
        ([0.0, INVALID], 0.0, 2.0, "student"),
    ],
)
def test_score_game_by_hand(rhos, t, s, outcome):
    game = score_game(rhos, margin=0.1)
    assert (game.teacher_points, game.student_points, game.outcome) == (t, s, outcome)
    assert {game.result("teacher"), game.result("student")} == (
        {"draw"} if outcome == "draw" else {"win", "loss"}
    )


def test_margin():
    rhos = [0.25, 0.25, 0.25, 1.0, 1.0]  # share 0.6
    assert score_game(rhos, margin=0.2).outcome == "draw"
    assert score_game([0.25, 0.25, 0.25, 0.75, 0.75], margin=0.0).outcome == "teacher"
    assert score_game([0.25, 0.75], margin=0.0).outcome == "draw"  # exactly half stays a draw at m = 0
    assert score_game([0.25, 0.75]).teacher_share == 0.5 and score_game([]).teacher_share is None


@pytest.mark.parametrize("outcome", ["teacher", "student", "draw"])
@pytest.mark.parametrize(
    "t,s",
    [
        (Rating(25, 25 / 3), Rating(25, 25 / 3)),
        (Rating(30, 4), Rating(22, 7)),
        (Rating(12, 2), Rating(35, 6)),
    ],
)
def test_one_game_is_zero_sum_up_to_the_uncertainty_weighting(t, s, outcome):
    """TrueSkill 1-vs-1 moves each mu by its variance (sigma^2 + tau^2) times one shared factor, in opposite
    directions: dmu_t / (sigma_t^2 + tau^2) = -dmu_s / (sigma_s^2 + tau^2). Equal sigmas: the sum is constant."""
    rs = RatingSystem(tau=0.25)
    nt, ns = rs.rate_game(t, s, outcome)
    var_t, var_s = t.sigma**2 + 0.25**2, s.sigma**2 + 0.25**2
    assert (nt.mu - t.mu) / var_t == pytest.approx(-(ns.mu - s.mu) / var_s, abs=1e-9)
    if t.sigma == s.sigma:
        assert nt.mu + ns.mu == pytest.approx(t.mu + s.mu, abs=1e-9)
    if outcome == "teacher":
        assert nt.mu > t.mu and ns.mu < s.mu
    elif outcome == "student":
        assert nt.mu < t.mu and ns.mu > s.mu
    with pytest.raises(ValueError, match="outcome"):
        rs.rate_game(t, s, "neither")


def _series(teachers: dict, n_students: int, rounds: int, seed: int = 0) -> dict[str, Rating]:
    """Every teacher plays a random student each round with its own rho vectors (cycled)."""
    rs, rng = RatingSystem(), random.Random(seed)
    r = {k: rs.prior() for k in teachers} | {f"S{i}": rs.prior() for i in range(n_students)}
    for k in range(rounds):
        for name, vectors in teachers.items():
            s = f"S{rng.randrange(n_students)}"
            game = score_game(vectors[k % len(vectors)], rs.draw_margin)
            r[name], r[s] = rs.rate_game(r[name], r[s], game.outcome)
    return r


def test_no_drift_of_every_mu_to_zero_over_many_mixed_games():
    # a mix of teacher wins, student wins, draws and void games, as a run produces them
    mixed = [[0.25, 0.25, 0.75], [1.0, INVALID, 0.25], [0.5, 0.5], [0.0, 0.0], [0.25, 1.0, 0.0, INVALID]]

    def mean_mu(rounds: int) -> float:
        r = _series({"T0": mixed, "T1": mixed[::-1]}, n_students=2, rounds=rounds)
        return sum(x.mu for x in r.values()) / len(r)

    # The mean moves only while the sigmas differ (the first rounds), then holds: measured 23.32 after 100
    # rounds and 23.35 after 400. The old half-games, where both sides could lose, pulled it down every round.
    early, late = mean_mu(100), mean_mu(400)
    assert late == pytest.approx(early, abs=0.5)
    assert early > 22.0


def test_degenerate_teachers_end_below_a_normal_one():
    normal = [[0.25, 0.25, 0.75, 0.0], [0.75, 1.0, 0.25, INVALID], [0.25, 0.5, 1.0]]  # win, loss, draw
    r = _series(
        {
            "T_normal": normal,
            "T_invalid": [[INVALID] * 4],
            "T_trivial": [[1.0] * 4],
            "T_impossible": [[0.0] * 4],  # never solved: a forfeit, like an invalid batch
        },
        n_students=2,
        rounds=40,
    )
    for degenerate in ("T_invalid", "T_trivial", "T_impossible"):
        assert r["T_normal"].mu > r[degenerate].mu + 5.0


def test_a_teacher_that_mostly_loses_still_ends_above_an_impossible_one():
    """Where teachers are weak (the bundled model: they lose most games), a teacher of only unsolvable
    problems must not rank above them by drawing: its batches are forfeits, so it is culled first."""
    weak = [[1.0, 1.0, 0.25, INVALID], [1.0, 0.75, 0.0, 0.25], [0.0, 0.0, 0.0, 1.0]]  # loss, draw, win
    r = _series({"T_weak": weak, "T_impossible": [[0.0] * 4]}, n_students=2, rounds=60)
    assert r["T_weak"].mu > r["T_impossible"].mu
