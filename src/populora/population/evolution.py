"""The PBT replacement step as a plan: who is replaced, by a child of whom, made with which operator.

Per sub-population (teachers, students) of size N, every `evolution.every` steps (docs/architecture.md, evolution):

1. Rank members by the lower confidence bound LCB = mu - k*sigma (k = `ratings.lcb_k`).
2. Replace the bottom n = min(ceil(gamma * N), N - 1) members that have played >= `evolution.min_games` rated
   matches since birth (newborns are protected until rated). N = 1 never evolves (no other parent exists).
3. Each child gets an operator drawn uniformly from `evolution.operators` and parents drawn uniformly from the
   top max(ceil(gamma * N), arity) survivors by LCB (a crossover takes two distinct parents, ordered by LCB).
   A replaced member never parents; if the survivors are too few for a crossover, a mutation is drawn instead,
   unless `evolution.crossover_with_replaced` is set: then a crossover with one survivor takes that survivor and
   the member being replaced (best first), so a role of 2 members (the tiny demo's) still runs crossovers.
4. The child's rating: mu = mean parent mu; sigma = clip(sigma_inflate * max parent sigma,
   sigma_floor * prior sigma, prior sigma): as good as its parents on average, but less certain.

5. Mixed ranks (issue 34): a child has its first (better) parent's rank (`populora.operators.ranks`); with
   `lora.rank_range` set, M6 is planned with `params={"rank_range": [lo, hi]}` and moves the child's rank.

The plan is pure data; the trainer applies it (operators on adapters, optimiser reset, ids, events).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from populora.population.members import Member, Population
from populora.population.ratings import Rating


@dataclass(frozen=True)
class Replacement:
    role: str
    replaced: str
    operator: str
    parents: tuple[str, ...]
    child_rating: Rating
    seed: int
    params: dict = field(
        default_factory=dict
    )  # operator hyperparameters beyond the defaults (M6's rank_range)


def n_replace(n: int, gamma: float) -> int:
    """How many of a sub-population of n are replaced: ceil(gamma * n), at most n - 1."""
    return max(0, min(math.ceil(gamma * n - 1e-9), n - 1))


def default_arity(op: str) -> int:
    """Crossovers (X*) take two parents; mutations (M*) and identity controls take one (I2 is the X-identity)."""
    return 2 if op.startswith("X") or op == "I2" else 1


def child_rating(
    parents: Sequence[Rating], prior: Rating, sigma_inflate: float = 1.5, sigma_floor: float = 0.5
) -> Rating:
    mu = sum(p.mu for p in parents) / len(parents)
    sigma = sigma_inflate * max(p.sigma for p in parents)
    sigma = min(max(sigma, sigma_floor * prior.sigma), prior.sigma)
    return Rating(mu, sigma)


def rank_by_lcb(members: Sequence[Member], k: float) -> list[Member]:
    """Best first; ties broken by mu, then by id for determinism."""
    return sorted(members, key=lambda m: (-m.rating.lcb(k), -m.mu, m.id))


def plan_role(
    members: Sequence[Member],
    *,
    gamma: float,
    lcb_k: float,
    operators: Sequence[str],
    min_games: int,
    prior: Rating,
    rng: random.Random,
    sigma_inflate: float = 1.5,
    sigma_floor: float = 0.5,
    arity: Mapping[str, int] | None = None,
    op_params: Mapping[str, dict] | None = None,
    crossover_with_replaced: bool = False,
) -> list[Replacement]:
    """The replacements for one sub-population (all members share one role); `op_params[op]` goes to the
    operator `op` as keyword arguments (`operator_params(cfg)`). `crossover_with_replaced`: a crossover that
    finds one survivor takes it and the loser as parents (otherwise only mutations are drawn there)."""
    n = n_replace(len(members), gamma)
    if n == 0:
        return []
    ranked = rank_by_lcb(members, lcb_k)
    eligible = [m for m in reversed(ranked) if m.games >= min_games]  # worst first
    losers = eligible[:n]
    if not losers:
        return []
    survivors = [m for m in ranked if m not in losers]
    top = max(1, math.ceil(gamma * len(members) - 1e-9))
    arity_of = (lambda op: arity.get(op, default_arity(op))) if arity else default_arity
    plan = []
    for loser in losers:
        # the loser counts as a parent only where it is the one missing (one survivor, a two-parent crossover)
        with_loser = crossover_with_replaced and len(survivors) == 1
        ops = [op for op in operators if arity_of(op) <= len(survivors) + with_loser]
        if not ops:
            continue
        op = rng.choice(sorted(ops))
        k = arity_of(op)
        if k > len(survivors):
            parents = [*survivors, loser]  # its adapter is read before the child overwrites its slot
        else:
            pool = survivors[: max(top, k)]
            parents = rng.sample(pool, k)
        parents.sort(key=lambda m: ranked.index(m))  # best first: X4 extrapolates towards the better parent
        plan.append(
            Replacement(
                loser.role,
                loser.id,
                op,
                tuple(p.id for p in parents),
                child_rating([p.rating for p in parents], prior, sigma_inflate, sigma_floor),
                rng.randrange(2**31),
                dict((op_params or {}).get(op, {})),
            )
        )
    return plan


def crossover_warning(cfg) -> str | None:
    """A one-line warning when a role evolves but can never run a crossover although `evolution.operators`
    lists some: a crossover needs two surviving parents, N - n_replace(N, gamma) >= 2 (N = 2 leaves one)."""
    ev = cfg.evolution
    crossovers = sorted(op for op in ev.operators if default_arity(op) == 2)
    if not ev.every or not crossovers or getattr(ev, "crossover_with_replaced", False):
        return None
    sizes = {"teachers": cfg.population.teachers, "students": cfg.population.students}
    blocked = [
        f"{n} {role}"
        for role, n in sizes.items()
        if n_replace(n, ev.gamma) and n - n_replace(n, ev.gamma) < 2
    ]
    if not blocked:
        return None
    return (
        f"no crossover ({', '.join(crossovers)}) can run with {' and '.join(blocked)} at "
        f"evolution.gamma={ev.gamma:g}: fewer than 2 parents survive an evolution step, so only mutations are "
        "drawn there (a role needs 3 or more members for crossovers, or set evolution.crossover_with_replaced=true)."
    )


RANK_MOVING_OPERATORS = ("M6",)  # the operators that change a child's rank, within lora.rank_range


def rank_range_warning(cfg) -> str | None:
    """A one-line warning when `lora.rank_range` is set but nothing will ever move a rank: no rank-moving
    operator (M6) in `evolution.operators`, or evolution off. The README's mixed-rank example once did that."""
    rank_range = list(getattr(cfg.lora, "rank_range", []) or [])
    if not rank_range:
        return None
    ops = list(cfg.evolution.operators)
    if not cfg.evolution.every:
        return f"lora.rank_range={rank_range} is set but evolution.every=0: no member's rank will move."
    if any(op in RANK_MOVING_OPERATORS for op in ops):
        return None
    return (
        f"lora.rank_range={rank_range} is set but no operator in evolution.operators moves a rank "
        f"(M6 does), so every rank stays fixed; add it: --set evolution.operators=[{','.join([*ops, 'M6'])}]."
    )


def operator_params(cfg) -> dict[str, dict]:
    """Per-operator keyword arguments the config implies: M6 moves ranks within `lora.rank_range` when it is set."""
    rank_range = list(getattr(cfg.lora, "rank_range", []) or [])
    return {"M6": {"rank_range": rank_range}} if rank_range else {}


def plan_evolution(
    pop: Population, cfg, prior: Rating, rng: random.Random, arity: Mapping[str, int] | None = None
) -> list[Replacement]:
    """Replacements for teachers, then students, from a `populora.config.Config`."""
    plan = []
    for role in ("teacher", "student"):
        plan += plan_role(
            pop.by_role(role),
            gamma=cfg.evolution.gamma,
            lcb_k=cfg.ratings.lcb_k,
            operators=cfg.evolution.operators,
            min_games=cfg.evolution.min_games,
            prior=prior,
            rng=rng,
            sigma_inflate=cfg.evolution.sigma_inflate,
            sigma_floor=cfg.evolution.sigma_floor,
            arity=arity,
            op_params=operator_params(cfg),
            crossover_with_replaced=getattr(cfg.evolution, "crossover_with_replaced", False),
        )
    return plan
