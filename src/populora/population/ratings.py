"""TrueSkill ratings of teachers and students: ONE zero-sum game per matchup, which either side can win.

A matchup is one teacher's batch of problems against one student. Its game is scored problem by problem
(`problem_points`). On a valid problem that the student's n rollouts solve at rate rho, the teacher earns
1 - rho and the student rho, so the side that earned more takes the point:

    0 < rho < 0.5   teacher point          rho > 0.5   student point          rho = 0.5   half a point each
    rho = 0         teacher point: too hard for this student (the paper's "teachers dominate -- their problems
                    are too hard for the matched students") -- but only when the student solved some other
                    valid problem of the batch at least once. When it solved none, nothing shows that the
                    batch is solvable at all (impossible, broken, or out of reach), the teacher earned 0 on
                    every problem, and its unsolved problems are student points: the teacher forfeits.
    invalid         student point: the teacher posed nothing (its reward is `rl.invalid_reward`, -1)

The teacher's share is s = teacher points / (teacher + student points); with m = `ratings.draw_margin`:

    s >= 0.5 + m -> teacher wins        s <= 0.5 - m -> student wins        else draw

and the ratings move by `trueskill.rate_1vs1(winner, loser)` (drawn=True for a draw). Why this rule, the
alternatives and the outcome shares measured on tiny-learn: docs/paper-choices.md. A teacher wins with
problems its student fails, provided the batch shows they are solvable by it; a student wins by solving most of
what it is posed; an invalid, trivial or impossible-only batch is a loss for the teacher, so such teachers end
below one that poses hard, solvable problems (they are the first culled). The two sides' results are one game:
one wins exactly when the other loses, the sum of the two mu moves only by TrueSkill's uncertainty weighting
(by exactly 0 when both sigmas are equal) and no role drifts down as a whole.

One rated game per matchup, as the n rollouts on one teacher's problems are correlated and counting them as
n games collapses sigma. Teachers and students live in one TrueSkill environment (prior mu 25, sigma 25/3),
but are only ranked within their role.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import trueskill

Outcome = Literal["teacher", "student", "draw"]
Result = Literal["win", "draw", "loss"]


@dataclass(frozen=True)
class Rating:
    mu: float
    sigma: float

    def lcb(self, k: float) -> float:
        """Lower confidence bound mu - k * sigma (k = 1-2 in the loop, 3 for a conservative leaderboard)."""
        return self.mu - k * self.sigma


def problem_points(rho: float | None, solvable: bool = True) -> tuple[float, float]:
    """(teacher, student) points of one proposal from its solve rate; `rho=None` is an invalid proposal.
    `solvable`: the student solved some valid problem of the same batch at least once (module docstring);
    without it an unsolved problem (rho == 0) is the student's point, with it the teacher's."""
    if rho is None:
        return 0.0, 1.0
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"a solve rate is a fraction in [0, 1], got {rho!r}")
    if rho == 0.0:
        return (1.0, 0.0) if solvable else (0.0, 1.0)
    if rho < 0.5:
        return 1.0, 0.0
    if rho > 0.5:
        return 0.0, 1.0
    return 0.5, 0.5


@dataclass(frozen=True)
class Game:
    """The points of one matchup's game and its outcome."""

    teacher_points: float
    student_points: float
    outcome: Outcome

    @property
    def teacher_share(self) -> float | None:
        """Teacher points / all points; None for a game without proposals."""
        total = self.teacher_points + self.student_points
        return self.teacher_points / total if total else None

    def result(self, role: str) -> Result:
        """'win' / 'draw' / 'loss' of the side `role` ('teacher' or 'student')."""
        if self.outcome == "draw":
            return "draw"
        return "win" if self.outcome == role else "loss"


def score_game(rhos: Iterable[float | None], margin: float = 0.1) -> Game:
    """The game of one matchup from its proposals' solve rates (None: an invalid proposal); module docstring."""
    rhos = list(rhos)
    solvable = any(rho is not None and rho > 0.0 for rho in rhos)
    t = s = 0.0
    for rho in rhos:
        dt, ds = problem_points(rho, solvable)
        t, s = t + dt, s + ds
    if t + s == 0:
        return Game(t, s, "draw")
    share = t / (t + s)
    # A hair of tolerance so that share 3/5 at m = 0.1 is a win, whatever the float rounding of 0.5 + 0.1.
    if share >= 0.5 + margin - 1e-9 and share > 0.5:
        return Game(t, s, "teacher")
    if share <= 0.5 - margin + 1e-9 and share < 0.5:
        return Game(t, s, "student")
    return Game(t, s, "draw")


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

    def rate_game(self, teacher: Rating, student: Rating, outcome: Outcome) -> tuple[Rating, Rating]:
        """New (teacher, student) ratings after one game: `trueskill.rate_1vs1` of the winner against the
        loser, or drawn."""
        t = self.env.create_rating(teacher.mu, teacher.sigma)
        s = self.env.create_rating(student.mu, student.sigma)
        if outcome == "teacher":
            t, s = trueskill.rate_1vs1(t, s, env=self.env)
        elif outcome == "student":
            s, t = trueskill.rate_1vs1(s, t, env=self.env)
        elif outcome == "draw":
            t, s = trueskill.rate_1vs1(t, s, drawn=True, env=self.env)
        else:
            raise ValueError(f"a game's outcome is 'teacher', 'student' or 'draw', not {outcome!r}")
        return Rating(t.mu, t.sigma), Rating(s.mu, s.sigma)

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2)) (draw margin ignored)."""
        c = math.sqrt(2 * self.beta**2 + a.sigma**2 + b.sigma**2)
        return 0.5 * (1.0 + math.erf((a.mu - b.mu) / (c * math.sqrt(2.0))))
