"""TrueSkill ratings of teachers and students, updated once per matchup; each side is rated on its own reward.

A matchup is one teacher's batch of problems against one student. Ratings must agree with the rewards: a
member that earns more reward in a matchup is never rated down for it. So each side's result comes from a
score that is a function of its own reward only (`train.records.matchup_scores`), banded with
m = `ratings.draw_margin` (default 0.1):

    score >= 0.5 + m   -> win        0.5 - m < score < 0.5 + m -> draw        score <= 0.5 - m -> loss

    teacher score x_T  its mean reward over all its proposals: 1 - rho on a valid problem solved at rate
                       rho > 0, 0 on a valid problem no rollout solved, `rl.invalid_reward` (-1) on an invalid
                       one. Unsolved-by-all and invalid proposals pull x_T down: they are never wins.
    student score x_S  its mean answer reward rescaled so right = 1, parsed-but-wrong = 0: the solve rate s
                       when every answer parses. No valid problem: the student is not rated (None).

When every problem is valid, solved at least once and every answer parses, x_T = 1 - s = 1 - x_S, the two
results are one game (teacher wins <=> student loses) and the update is the usual 1-vs-1 TrueSkill game:
exactly the old solve-rate rule. Otherwise (the teacher posed invalid or unsolvable problems) both sides can
lose: each side's update is its half of a 1-vs-1 game with its own result against the other's pre-match
rating, so a teacher is never credited for problems that earned it nothing and a student is never debited
for a problem it solved. The outcome (x_T >= 0.5 + m implies x_S <= 0.5 - m) is never a double win.

One rated game per matchup, as the n rollouts on one teacher's problems are correlated and counting them as
n games collapses sigma. Teachers and students live in one TrueSkill environment (prior mu 25, sigma 25/3),
but are only ranked within their role.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import trueskill

Outcome = Literal["student", "teacher", "draw", "neither"]
Result = Literal["win", "draw", "loss"]


@dataclass(frozen=True)
class Rating:
    mu: float
    sigma: float

    def lcb(self, k: float) -> float:
        """Lower confidence bound mu - k * sigma (k = 1-2 in the loop, 3 for a conservative leaderboard)."""
        return self.mu - k * self.sigma


def side_result(score: float, margin: float = 0.1) -> Result:
    """One side's result from its score (module docstring): win / draw / loss, monotone in the score."""
    if score >= 0.5 + margin:
        return "win"
    if score <= 0.5 - margin:
        return "loss"
    return "draw"


def joint_outcome(teacher: Result, student: Result | None) -> Outcome:
    """The matchup's label for events.jsonl: who won, 'draw' when both drew, 'neither' when no one won."""
    if teacher == "win":
        return "teacher"
    if student == "win":
        return "student"
    if teacher == "draw" and student in ("draw", None):
        return "draw"
    return "neither"


@dataclass(frozen=True)
class MatchupResult:
    """New ratings after one matchup, each side's result, and the joint label."""

    teacher: Rating
    student: Rating
    teacher_outcome: Result
    student_outcome: Result | None
    outcome: Outcome


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

    def _half(self, me: Rating, other: Rating, result: Result) -> Rating:
        """My new rating after a 1-vs-1 game with `result` against `other` (whose rating is not returned)."""
        a = self.env.create_rating(me.mu, me.sigma)
        b = self.env.create_rating(other.mu, other.sigma)
        if result == "win":
            a, _ = trueskill.rate_1vs1(a, b, env=self.env)
        elif result == "loss":
            _, a = trueskill.rate_1vs1(b, a, env=self.env)
        else:
            a, _ = trueskill.rate_1vs1(a, b, drawn=True, env=self.env)
        return Rating(a.mu, a.sigma)

    def rate_matchup(
        self, teacher: Rating, student: Rating, teacher_score: float, student_score: float | None
    ) -> MatchupResult:
        """Both sides' new ratings from their own scores (module docstring); an unrated student (None) keeps
        its rating. When the results are one game (teacher wins <=> student loses, or both draw), this equals
        `trueskill.rate_1vs1` of that game."""
        t_res = side_result(teacher_score, self.draw_margin)
        s_res = None if student_score is None else side_result(student_score, self.draw_margin)
        new_t = self._half(teacher, student, t_res)
        new_s = student if s_res is None else self._half(student, teacher, s_res)
        return MatchupResult(new_t, new_s, t_res, s_res, joint_outcome(t_res, s_res))

    def update(
        self, teacher: Rating, student: Rating, solve_rate: float | None
    ) -> tuple[Rating, Rating, Outcome]:
        """New (teacher, student) ratings after one game decided by the solve rate alone (the rule before
        `rate_matchup`; it agrees with it when every problem is valid and solved at least once)."""
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
