"""Evolution planning (LCB ranking, bottom-gamma replacement, parents, child ratings) and member ids."""

import random

import pytest

from populora.population.evolution import child_rating, n_replace, plan_role, rank_by_lcb
from populora.population.members import Member, Population
from populora.population.ratings import Rating

PRIOR = Rating(25.0, 25 / 3)


def _teachers():
    # LCB_1: T0 28, T1 20, T2 19, T3 19 (tie broken by mu: T3 ranks above T2)
    spec = [("T0", 30, 2), ("T1", 25, 5), ("T2", 20, 1), ("T3", 27, 8)]
    return [Member(i, "teacher", slot, mu, sigma, games=3) for slot, (i, mu, sigma) in enumerate(spec)]


def test_n_replace():
    assert [n_replace(n, 0.25) for n in (1, 2, 4, 8, 16)] == [0, 1, 1, 2, 4]
    assert n_replace(3, 0.5) == 2 and n_replace(2, 0.9) == 1


def test_rank_by_lcb():
    assert [m.id for m in rank_by_lcb(_teachers(), 1.0)] == ["T0", "T1", "T3", "T2"]
    # with k = 0 the ranking is by mu
    assert [m.id for m in rank_by_lcb(_teachers(), 0.0)] == ["T0", "T3", "T1", "T2"]


def test_child_rating_by_hand():
    assert child_rating([Rating(30, 2)], PRIOR) == Rating(30, 25 / 6)  # 1.5*2 = 3 is below the floor 4.17
    assert child_rating([Rating(30, 2), Rating(25, 5)], PRIOR) == Rating(27.5, 7.5)
    assert child_rating([Rating(20, 7)], PRIOR) == Rating(20, 25 / 3)  # capped at the prior sigma


def test_mutation_replaces_the_worst_with_a_child_of_the_best():
    plan = plan_role(
        _teachers(), gamma=0.25, lcb_k=1.0, operators=["M1"], min_games=1, prior=PRIOR, rng=random.Random(0)
    )
    assert len(plan) == 1
    r = plan[0]
    assert (r.replaced, r.operator, r.parents) == ("T2", "M1", ("T0",))
    assert r.child_rating == Rating(30, 25 / 6)


def test_crossover_takes_two_distinct_top_parents_best_first():
    plan = plan_role(
        _teachers(), gamma=0.25, lcb_k=1.0, operators=["X1"], min_games=1, prior=PRIOR, rng=random.Random(0)
    )
    assert plan[0].parents == ("T0", "T1") and plan[0].child_rating == Rating(27.5, 7.5)


def test_unrated_members_are_protected():
    members = _teachers()
    members[2].games = 0  # T2 is newborn
    plan = plan_role(
        members, gamma=0.25, lcb_k=1.0, operators=["M2"], min_games=1, prior=PRIOR, rng=random.Random(0)
    )
    assert plan[0].replaced == "T3"


def test_two_members_only_mutate_and_one_member_never_evolves():
    two = _teachers()[:2]
    plan = plan_role(
        two,
        gamma=0.25,
        lcb_k=1.0,
        operators=["X1", "X2", "M3"],
        min_games=0,
        prior=PRIOR,
        rng=random.Random(0),
    )
    assert plan[0].replaced == "T1" and plan[0].operator == "M3" and plan[0].parents == ("T0",)
    assert (
        plan_role(
            two, gamma=0.25, lcb_k=1.0, operators=["X1"], min_games=0, prior=PRIOR, rng=random.Random(0)
        )
        == []
    )
    assert (
        plan_role(
            two[:1], gamma=0.25, lcb_k=1.0, operators=["M1"], min_games=0, prior=PRIOR, rng=random.Random(0)
        )
        == []
    )


def test_plan_is_deterministic_for_a_seed():
    kw = dict(gamma=0.5, lcb_k=1.0, operators=["M1", "M2", "X1", "X3"], min_games=0, prior=PRIOR)
    assert plan_role(_teachers(), rng=random.Random(3), **kw) == plan_role(
        _teachers(), rng=random.Random(3), **kw
    )


def test_population_ids_are_never_reused():
    pop = Population.create(2, 2, PRIOR)
    assert [(m.id, m.slot) for m in pop.ordered()] == [("T0", 0), ("T1", 1), ("S0", 2), ("S1", 3)]
    child = pop.replace("T1", Rating(26, 5), ["T0"], step=3, operator="M1")
    assert (child.id, child.slot, child.parents, child.born_step) == ("T2", 1, ["T0"], 3)
    child2 = pop.replace("T2", Rating(26, 5), ["T0"], step=6, operator="M2")
    assert child2.id == "T3"
    again = Population.from_dict(pop.to_dict())
    assert again.to_dict() == pop.to_dict()
    assert again.new_id("teacher") == "T4" and again.new_id("student") == "S2"
    assert [m.id for m in Population.create(0, 0, PRIOR, single=True).ordered()] == ["A0"]
    with pytest.raises(KeyError):
        pop.replace("T1", PRIOR, [], 1, "M1")


def test_crossover_note_names_the_roles_that_cannot_cross():
    from populora.config import load_config
    from populora.population.evolution import crossover_warning

    sets = ["population.teachers=2", "population.students=4", "evolution.gamma=0.25"]
    two = load_config("tiny", [*sets, "evolution.crossover_with_replaced=false"])
    why = crossover_warning(two)
    assert why is not None and "2 teachers" in why and "students" not in why
    assert crossover_warning(load_config("tiny", ["population.teachers=4", "population.students=4"])) is None
    assert crossover_warning(load_config("tiny", ["evolution.every=0"])) is None


def test_m6_is_planned_with_the_rank_range_when_set():
    from populora.config import load_config
    from populora.population.evolution import operator_params, plan_evolution

    cfg = load_config("tiny", ["lora.rank=8,2", "lora.rank_range=1,8", "evolution.operators=M6"])
    assert operator_params(cfg) == {"M6": {"rank_range": [1, 8]}}
    assert operator_params(load_config("tiny")) == {}  # the paper: fixed ranks, M6 within its rank
    pop = Population.create(4, 4, PRIOR)
    for m in pop.members.values():
        m.games = 5
    plan = plan_evolution(pop, cfg, PRIOR, random.Random(0))
    assert plan and all(r.operator == "M6" and r.params == {"rank_range": [1, 8]} for r in plan)
