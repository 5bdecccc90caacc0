"""Evolution planning for the tiny demo and the mixed-rank example (issue 53, points 3 and 4): a crossover with one
survivor takes the member it replaces as its second parent when `evolution.crossover_with_replaced` is set
(the tiny preset's 2T+2S), and `lora.rank_range` without a rank-moving operator is warned about."""

import random

from populora.config import load_config
from populora.population.evolution import crossover_warning, plan_role, rank_range_warning
from populora.population.members import Member
from populora.population.ratings import Rating

PRIOR = Rating(25.0, 25 / 3)


def _two():
    return [Member("T0", "teacher", 0, 30, 2, games=3), Member("T1", "teacher", 1, 25, 5, games=3)]


def test_one_survivor_crosses_with_the_member_it_replaces():
    kw = dict(gamma=0.25, lcb_k=1.0, operators=["X1"], min_games=1, prior=PRIOR)
    assert plan_role(_two(), rng=random.Random(0), **kw) == []  # the paper's rule: no second parent survives
    (r,) = plan_role(_two(), rng=random.Random(0), crossover_with_replaced=True, **kw)
    assert (r.replaced, r.operator, r.parents) == ("T1", "X1", ("T0", "T1"))  # the survivor first
    assert r.child_rating == Rating(27.5, 7.5)  # the parents' mean mu, 1.5 x the larger sigma


def test_mutations_keep_their_one_parent_and_the_draw_covers_every_operator():
    kw = dict(gamma=0.25, lcb_k=1.0, operators=["M1", "X4"], min_games=1, prior=PRIOR)
    drawn = {}
    for seed in range(20):
        (r,) = plan_role(_two(), rng=random.Random(seed), crossover_with_replaced=True, **kw)
        drawn[r.operator] = r.parents
    assert drawn == {"M1": ("T0",), "X4": ("T0", "T1")}


def test_a_larger_population_plans_as_before():
    four = [Member(f"T{i}", "teacher", i, 30 - i, 2, games=3) for i in range(4)]
    kw = dict(gamma=0.25, lcb_k=1.0, operators=["M1", "X1", "X3"], min_games=1, prior=PRIOR)
    for seed in range(10):
        assert plan_role(four, rng=random.Random(seed), **kw) == plan_role(
            four, rng=random.Random(seed), crossover_with_replaced=True, **kw
        )


def test_the_tiny_preset_can_cross_and_says_nothing():
    cfg = load_config("tiny")
    assert cfg.evolution.crossover_with_replaced is True and crossover_warning(cfg) is None
    assert load_config("paper-7b").evolution.crossover_with_replaced is False  # the paper's rule


def test_rank_range_without_m6_is_warned_about():
    old = ["lora.rank=[8,1]", "lora.rank_range=[1,16]"]  # the README's example before issue 53
    why = rank_range_warning(load_config("tiny", old))
    assert why is not None and "\n" not in why
    assert "lora.rank_range=[1, 16]" in why and "M6" in why and "evolution.operators=[" in why
    fixed = [*old, "evolution.operators=[M1,M2,M3,M4,X1,X2,X3,X4,M6]"]
    assert rank_range_warning(load_config("tiny", fixed)) is None
    assert rank_range_warning(load_config("tiny")) is None  # no range: nothing to move
    off = rank_range_warning(load_config("tiny", [*fixed, "evolution.every=0"]))
    assert off is not None and "evolution.every=0" in off
