"""Phase (1), matchmaking (`Trainer._pairs`): who plays whom this step.

Owns the step's (teacher, student) pairs: PFSP over the members' TrueSkill ratings (`population.matchmaking`,
`population.pfsp`, `population.balanced`: every student once), one pair per teacher, drawn from the run's
rng (population/matchmaking.py). The single agent (`population.mode=single`) plays itself: (A0, A0).
"""

from __future__ import annotations

from populora.population.matchmaking import match


def pairs(tr) -> list[tuple[str, str]]:
    """The step's (teacher, student) pairs of trainer `tr`'s population."""
    if tr.single:
        return [("A0", "A0")]
    p = tr.cfg.population
    ratings = {m.id: m.rating for m in tr.pop.members.values()}
    return match(
        [m.id for m in tr.pop.teachers],
        [m.id for m in tr.pop.students],
        ratings,
        tr.ratings,
        tr.rng,
        method=p.matchmaking,
        weighting=p.pfsp,
        hard_p=p.pfsp_hard_p,
        balanced=p.balanced,
    )


__all__ = ["pairs"]
