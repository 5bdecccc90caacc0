"""Phase (4b), rating (`Trainer.rate`): one zero-sum TrueSkill game per matchup.

Owns each matchup's entry (its solve rate and problem count, read from the traces' stored rewards, probe
collisions left out) and, in population mode, its game: scored problem by problem (`score_game`: the side
that took more of its problems' points wins; the n rollouts on one problem are one problem, not n games, so
sigma does not collapse) and rated once (`RatingSystem.rate_game`), both members' ratings and game counts
updated (population/ratings.py). The single agent has no opponent and no rating.
"""

from __future__ import annotations

from populora.population.ratings import score_game
from populora.train.records import ProposalTrace, matchup_rhos, solve_rate


def rate(tr, pairs: list[tuple[str, str]], traces: list[ProposalTrace], step: int) -> list[dict]:
    """One zero-sum TrueSkill game per matchup, scored problem by problem (population/ratings.py)."""
    out = []
    for teacher, student in pairs:
        mine = [
            t
            for t in traces
            if t.teacher == teacher and t.student == student and t.proposed and not t.probe_collision
        ]
        rho = solve_rate(mine)
        n_valid = sum(t.valid for t in mine)
        entry = {"teacher": teacher, "student": student, "solve_rate": rho, "n_problems": n_valid}
        if not tr.single:
            t, s = tr.pop[teacher], tr.pop[student]
            game = score_game(matchup_rhos(mine), tr.ratings.draw_margin)
            new_t, new_s = tr.ratings.rate_game(t.rating, s.rating, game.outcome)
            t.set_rating(new_t)
            s.set_rating(new_s)
            t.games += 1
            s.games += 1
            entry.update(
                outcome=game.outcome, teacher_points=game.teacher_points, student_points=game.student_points
            )
        out.append(entry)
    return out


__all__ = ["rate"]
