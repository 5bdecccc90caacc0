"""PFSP weights (f_var, f_hard) on hand numbers, and the balanced one-to-one assignment."""

import random
from collections import Counter

import pytest

from populora.population.matchmaking import f_hard, f_var, match, pfsp_weights
from populora.population.ratings import Rating, RatingSystem


def test_weight_functions():
    assert f_var(0.5) == 0.25 and f_var(0.9) == pytest.approx(0.09) and f_var(1.0) == 0.0
    assert f_hard(0.25) == pytest.approx(0.5625) and f_hard(0.25, p=1) == 0.75


def test_pfsp_weights_by_hand():
    assert pfsp_weights([0.5, 0.9], "var") == pytest.approx([0.25 / 0.34, 0.09 / 0.34])
    # hard: the teacher prefers students that beat it, weight x^p
    assert pfsp_weights([0.5, 0.9], "hard") == pytest.approx([0.25 / 1.06, 0.81 / 1.06])
    assert pfsp_weights([0.5, 0.9], "hard", p=1) == pytest.approx([0.5 / 1.4, 0.9 / 1.4])
    assert pfsp_weights([0.0, 1.0], "var") == [0.5, 0.5]  # all weights ~0: uniform
    assert pfsp_weights([0.2, 0.3, 0.4], "uniform") == pytest.approx([1 / 3] * 3)
    with pytest.raises(ValueError):
        pfsp_weights([0.5], "nope")


def test_balanced_assignment_is_a_permutation():
    rs = RatingSystem()
    ratings = {m: rs.prior() for m in ["T0", "T1", "T2", "T3", "S0", "S1", "S2", "S3"]}
    rng = random.Random(0)
    for _ in range(50):
        pairs = match(["T0", "T1", "T2", "T3"], ["S0", "S1", "S2", "S3"], ratings, rs, rng)
        assert [t for t, _ in pairs] == ["T0", "T1", "T2", "T3"]
        assert sorted(s for _, s in pairs) == ["S0", "S1", "S2", "S3"]


def test_pfsp_var_prefers_the_balanced_student_at_the_computed_rate():
    rs = RatingSystem()
    ratings = {"T0": Rating(25, 1), "S0": Rating(25, 1), "S1": Rating(45, 1)}
    xs = [rs.win_probability(ratings[s], ratings["T0"]) for s in ("S0", "S1")]
    expected = pfsp_weights(xs, "var")[0]
    rng = random.Random(1)
    counts = Counter(match(["T0"], ["S0", "S1"], ratings, rs, rng, balanced=False)[0][1] for _ in range(3000))
    assert counts["S0"] / 3000 == pytest.approx(expected, abs=0.03)
    assert expected > 0.8


def test_unbalanced_sizes_and_uniform_method():
    rs = RatingSystem()
    ratings = {m: rs.prior() for m in ["T0", "T1", "T2", "S0"]}
    pairs = match(["T0", "T1", "T2"], ["S0"], ratings, rs, random.Random(0))
    assert pairs == [("T0", "S0"), ("T1", "S0"), ("T2", "S0")]
    pairs = match(["T0"], ["S0"], ratings, rs, random.Random(0), method="uniform", weighting="mix")
    assert pairs == [("T0", "S0")]


def test_same_seed_same_matchups():
    rs = RatingSystem()
    ratings = {m: Rating(20 + i, 3) for i, m in enumerate(["T0", "T1", "S0", "S1"])}
    a = [match(["T0", "T1"], ["S0", "S1"], ratings, rs, random.Random(7), weighting="mix") for _ in range(3)]
    assert a[0] == a[1] == a[2]
