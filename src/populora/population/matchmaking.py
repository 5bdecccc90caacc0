"""PFSP matchmaking: pair each teacher with a student, preferring informative matchups.

For teacher t and candidate student s let x = P(s beats t) from the TrueSkill ratings. PFSP (AlphaStar's
prioritised fictitious self-play, as the paper uses it) picks s with probability f(x) / sum_c f(x_c):

    f_var(x)  = x (1 - x)       near-balanced matchups, where the solve rate (and the teacher's reward
                                1 - rho) carries the most signal; the paper's default
    f_hard(x) = x^p             students that beat this teacher (the teacher's hardest opponents; AlphaStar's
                                f_hard applied to P(teacher beats s) = 1 - x, i.e. (1 - (1 - x))^p)
    mix                         per pick: 60% f_var, 25% f_hard, 15% uniform (exploration, anti-forgetting)

If all weights sum below 1e-10 the pick is uniform. With `balanced` and N_T == N_S, teachers pick in a random
order without replacement, so every student plays exactly one teacher per step (a PFSP-weighted random
permutation). Otherwise teachers pick independently (a student may face several teachers or none).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from populora.population.ratings import Rating, RatingSystem

MIX = (("var", 0.60), ("hard", 0.25), ("uniform", 0.15))


def f_var(x: float) -> float:
    return x * (1.0 - x)


def f_hard(x: float, p: float = 2.0) -> float:
    """Weight of an opponent the learner beats with probability x: (1 - x)^p."""
    return (1.0 - x) ** p


def pfsp_weights(student_win_probs: Sequence[float], weighting: str, p: float = 2.0) -> list[float]:
    """Normalised pick probabilities over candidate students, given x = P(student beats the teacher) for each."""
    if weighting == "var":
        w = [f_var(x) for x in student_win_probs]
    elif weighting == "hard":
        w = [f_hard(1.0 - x, p) for x in student_win_probs]
    elif weighting == "uniform":
        w = [1.0] * len(student_win_probs)
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r}; use var, hard, mix or uniform")
    total = sum(w)
    if total < 1e-10:
        return [1.0 / len(w)] * len(w)
    return [v / total for v in w]


def _pick_weighting(weighting: str, rng: random.Random) -> str:
    if weighting != "mix":
        return weighting
    u, acc = rng.random(), 0.0
    for name, prob in MIX:
        acc += prob
        if u < acc:
            return name
    return MIX[-1][0]


def match(
    teachers: Sequence[str],
    students: Sequence[str],
    ratings: Mapping[str, Rating],
    system: RatingSystem,
    rng: random.Random,
    method: str = "pfsp",
    weighting: str = "var",
    hard_p: float = 2.0,
    balanced: bool = True,
) -> list[tuple[str, str]]:
    """Return one (teacher, student) pair per teacher, in teacher order."""
    if not teachers or not students:
        return []
    one_to_one = balanced and len(teachers) == len(students)
    order = list(teachers)
    if one_to_one:
        rng.shuffle(order)
    free = list(students)
    picks: dict[str, str] = {}
    for t in order:
        pool = free if one_to_one else list(students)
        if method == "uniform":
            probs = [1.0 / len(pool)] * len(pool)
        else:
            xs = [system.win_probability(ratings[s], ratings[t]) for s in pool]
            probs = pfsp_weights(xs, _pick_weighting(weighting, rng), hard_p)
        s = rng.choices(pool, weights=probs, k=1)[0]
        picks[t] = s
        if one_to_one:
            free.remove(s)
    return [(t, picks[t]) for t in teachers]
