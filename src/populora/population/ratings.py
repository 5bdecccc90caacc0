"""TrueSkill ratings of teachers and students, updated once per matchup from the student's solve rate.

A matchup is one teacher's batch of problems against one student. With s the fraction of the student's rollouts
that solve the teacher's valid problems and m = `ratings.draw_margin` (default 0.1):

    s >= 0.5 + m           -> the student wins
    s <= 0.5 - m           -> the teacher wins (including s = 0 on valid problems: hard counts for the teacher)
    otherwise              -> a draw
    no valid problem       -> the teacher forfeits (student wins)

This is the paper's banded win/draw/loss scoring (docs/architecture.md): one rated game per matchup, as the
n rollouts on one teacher's problems are correlated and counting them as n games collapses sigma. Teachers and
students live in one TrueSkill environment (prior mu 25, sigma 25/3), but are only ranked within their role.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import trueskill

Outcome = Literal["student", "teacher", "draw"]


@dataclass(frozen=True)
class Rating:
    mu: float
    sigma: float

    def lcb(self, k: float) -> float:
        """Lower confidence bound mu - k * sigma (k = 1-2 in the loop, 3 for a conservative leaderboard)."""
        return self.mu - k * self.sigma


def match_outcome(solve_rate: float | None, margin: float = 0.1) -> Outcome:
    """Who won a matchup, from the student's solve rate on the teacher's valid problems (None: none valid)."""
    if solve_rate is None:
        return "student"
    if solve_rate >= 0.5 + margin:
        return "student"
    if solve_rate <= 0.5 - margin:
        return "teacher"
    return "draw"


class RatingSystem:
    """A TrueSkill environment with the run's prior; pure functions of ratings (no member bookkeeping)."""

    def __init__(
        self,
        mu: float = 25.0,
        sigma: float = 25.0 / 3.0,
        beta: float = 25.0 / 6.0,
        tau: float = 0.25,
        draw_probability: float = 0.1,
        draw_margin: float = 0.1,
    ) -> None:
        self.mu, self.sigma, self.beta, self.draw_margin = mu, sigma, beta, draw_margin
        self.env = trueskill.TrueSkill(
            mu=mu, sigma=sigma, beta=beta, tau=tau, draw_probability=draw_probability
        )

    @classmethod
    def from_config(cls, cfg) -> RatingSystem:
        """From a `populora.config.RatingsConfig`."""
        return cls(cfg.mu, cfg.sigma, cfg.beta, cfg.tau, cfg.draw_probability, cfg.draw_margin)

    def prior(self) -> Rating:
        return Rating(self.mu, self.sigma)

    def update(
        self, teacher: Rating, student: Rating, solve_rate: float | None
    ) -> tuple[Rating, Rating, Outcome]:
        """New (teacher, student) ratings after one matchup, and its outcome."""
        outcome = match_outcome(solve_rate, self.draw_margin)
        t = self.env.create_rating(teacher.mu, teacher.sigma)
        s = self.env.create_rating(student.mu, student.sigma)
        if outcome == "teacher":
            t, s = trueskill.rate_1vs1(t, s, env=self.env)
        elif outcome == "student":
            s, t = trueskill.rate_1vs1(s, t, env=self.env)
        else:
            t, s = trueskill.rate_1vs1(t, s, drawn=True, env=self.env)
        return Rating(t.mu, t.sigma), Rating(s.mu, s.sigma), outcome

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)) (draw margin ignored)."""
        c = math.sqrt(2 * self.beta**2 + a.sigma**2 + b.sigma**2)
        return 0.5 * (1.0 + math.erf((a.mu - b.mu) / (c * math.sqrt(2.0))))
