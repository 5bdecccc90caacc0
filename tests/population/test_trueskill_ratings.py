"""TrueSkill match updates, checked against the closed-form 1v1 update computed by hand."""

import math
from statistics import NormalDist

import pytest

from populora.population.ratings import Rating, RatingSystem

N = NormalDist()


def _closed_form_win(winner: Rating, loser: Rating, beta: float, tau: float, p_draw: float):
    """Herbrich et al. 2006 two-player update (no draw), with the dynamics noise tau added first."""
    s2w, s2l = winner.sigma**2 + tau**2, loser.sigma**2 + tau**2
    c = math.sqrt(2 * beta**2 + s2w + s2l)
    eps = N.inv_cdf((p_draw + 1) / 2) * math.sqrt(2) * beta
    t = (winner.mu - loser.mu) / c
    v = N.pdf(t - eps / c) / N.cdf(t - eps / c)
    w = v * (v + t - eps / c)
    win = Rating(winner.mu + s2w / c * v, math.sqrt(s2w * (1 - s2w / c**2 * w)))
    lose = Rating(loser.mu - s2l / c * v, math.sqrt(s2l * (1 - s2l / c**2 * w)))
    return win, lose


def test_teacher_win_from_prior_matches_closed_form():
    rs = RatingSystem(mu=25, sigma=25 / 3, beta=25 / 6, tau=0.25, draw_probability=0.1)
    t, s = rs.rate_game(rs.prior(), rs.prior(), "teacher")
    win, lose = _closed_form_win(rs.prior(), rs.prior(), 25 / 6, 0.25, 0.1)
    assert (t.mu, t.sigma) == pytest.approx((win.mu, win.sigma), abs=1e-3)
    assert (s.mu, s.sigma) == pytest.approx((lose.mu, lose.sigma), abs=1e-3)
    assert t.mu == pytest.approx(29.398, abs=1e-3) and t.sigma == pytest.approx(7.174, abs=1e-3)


def test_student_win_unequal_ratings():
    rs = RatingSystem(tau=0.25)
    teacher, student = Rating(28.0, 5.0), Rating(22.0, 7.0)
    t, s = rs.rate_game(teacher, student, "student")
    win, lose = _closed_form_win(student, teacher, 25 / 6, 0.25, 0.1)
    assert (s.mu, s.sigma) == pytest.approx((win.mu, win.sigma), abs=1e-3)
    assert (t.mu, t.sigma) == pytest.approx((lose.mu, lose.sigma), abs=1e-3)
    assert s.mu - student.mu > teacher.mu - t.mu  # the less certain player moves more


def test_draw_keeps_equal_means_and_shrinks_sigma():
    rs = RatingSystem()
    t, s = rs.rate_game(rs.prior(), rs.prior(), "draw")
    assert t.mu == pytest.approx(25.0) and s.mu == pytest.approx(25.0)
    assert t.sigma < 25 / 3


def test_win_probability_and_lcb():
    rs = RatingSystem()
    a, b = Rating(30, 4), Rating(25, 3)
    c = math.sqrt(2 * (25 / 6) ** 2 + 16 + 9)
    assert rs.win_probability(a, b) == pytest.approx(N.cdf(5 / c))
    assert rs.win_probability(a, b) + rs.win_probability(b, a) == pytest.approx(1.0)
    assert Rating(25, 8).lcb(1.0) == 17 and Rating(25, 8).lcb(2.0) == 9
