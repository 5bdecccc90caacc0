"""experiment/stats.py on hand numbers: the crossed seeds x items bootstrap, arm differences, best of k."""

import numpy as np
import pytest

from populora.experiment.stats import (
    best_stat,
    best_vs_single,
    bootstrap,
    difference,
    excludes_zero,
    expected_max,
    mean_stat,
    seeds_needed,
)


def test_expected_max_by_hand():
    # two values: the max of two draws is 1 unless both draws are 0 (probability 1/4)
    assert expected_max([0.0, 1.0], 2) == pytest.approx(0.75)
    assert expected_max([0.0, 1.0], 1) == pytest.approx(0.5)  # k = 1 is the mean
    # 1, 2, 4 with k = 2: P(max=1) = 1/9, P(max=2) = 3/9, P(max=4) = 5/9 -> (1 + 6 + 20) / 9 = 3
    assert expected_max([4.0, 1.0, 2.0], 2) == pytest.approx(3.0)
    assert expected_max([4.0, 1.0, 2.0], 50) == pytest.approx(4.0, abs=1e-6)
    with pytest.raises(ValueError):
        expected_max([], 2)


def test_statistics_by_hand():
    x = np.array([[[1, 0], [0, 0]], [[1, 1], [0, 1]]], float)  # 2 seeds, 2 members, 2 items
    assert mean_stat(x) == pytest.approx(4 / 8)
    assert best_stat(x) == pytest.approx((0.5 + 1.0) / 2)


def test_item_noise_widens_the_interval_where_seeds_agree():
    # two seeds that agree exactly, on a probe of two items that disagree: a bootstrap over seeds alone says
    # 0.5 with no doubt; resampling the items too says anything from 0 (both draws item 2) to 1 (both item 1)
    x = np.array([[1.0, 0.0], [1.0, 0.0]])
    both = bootstrap(x, b=4000)
    assert both["mean"] == 0.5 and both["resampled"] == "seeds and items"
    assert both["lo"] == 0.0 and both["hi"] == 1.0
    seeds_only = bootstrap(x.mean(axis=1), b=4000)
    assert seeds_only["lo"] == seeds_only["hi"] == 0.5 and seeds_only["resampled"] == "seeds"


def test_seed_noise_by_hand():
    # one item per seed: values 0 and 1. Replicates are 0 (1/4), 0.5 (1/2), 1 (1/4): the 95% interval is [0, 1]
    # and the 50% interval [0.5, 0.5]
    ci = bootstrap([0.0, 1.0], b=4000)
    assert (ci["mean"], ci["lo"], ci["hi"]) == (0.5, 0.0, 1.0)
    narrow = bootstrap([0.0, 1.0], b=4000, level=0.4)
    assert narrow["lo"] == narrow["hi"] == 0.5
    assert bootstrap([0.3])["lo"] is None  # one seed, one item: nothing to resample


def test_a_paired_difference_removes_what_the_seeds_share():
    # each seed moves both arms alike (+0, +10, +20) and the population is +1 above the control in every seed
    control = np.array([0.0, 10.0, 20.0])
    pop = control + 1.0
    paired = difference(pop, control, paired=True)
    assert (paired["mean"], paired["lo"], paired["hi"]) == pytest.approx((1.0, 1.0, 1.0))
    unpaired = difference(pop, control, paired=False)
    assert unpaired["mean"] == pytest.approx(1.0)
    assert unpaired["lo"] < -5 and unpaired["hi"] > 5  # seed-to-seed spread swamps it
    assert excludes_zero(paired) and not excludes_zero(unpaired)
    with pytest.raises(ValueError, match="same seeds"):
        difference(pop, control[:2], paired=True)


def test_the_item_draw_is_shared_between_arms():
    # the same hard and easy item in both arms; the population is +0.5 on both: whatever items are drawn, the
    # difference is 0.5 (a separate draw per arm would mix an easy item of one arm with a hard one of the other)
    single = np.array([[0.0, 1.0 - 0.5], [0.0, 0.5]])  # [seed, item]
    pop = single + 0.5
    d = difference(pop, single, paired=False, b=2000)
    assert (d["lo"], d["hi"]) == pytest.approx((0.5, 0.5))


def test_best_member_against_the_best_of_k_single_seeds():
    # population: 2 seeds x 4 members, no member better than a single seed in distribution: values 0..3
    pop = np.array([[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]])[:, :, None]
    single = np.array([0.0, 1.0, 2.0, 3.0])
    r = best_vs_single(pop, single, b=2000)
    assert r["best_member"] == 3.0 and r["k"] == 4
    # E[max of 4 draws from {0,1,2,3}] = sum_j v_j ((j/4)^4 - ((j-1)/4)^4) = (15 + 2*65 + 3*175) / 256
    assert r["best_of_k_single"] == pytest.approx((15 + 130 + 525) / 256)
    assert r["mean"] == pytest.approx(3.0 - 670 / 256)  # +0.38, where best minus the single MEAN says +1.5
    naive = 3.0 - single.mean()
    assert r["mean"] < naive / 3  # the single mean would read the order statistic as an effect


def test_seeds_needed_by_hand():
    # sd of [1, 3, 5] is 2. Effect 2 (sd/effect 1): n = 9 has (t_.975,8 + t_.8,8)^2 = (2.306 + 0.889)^2 = 10.21
    # > 9, n = 10 has (2.262 + 0.883)^2 = 9.90 <= 10. Effect 4: n = 4 has ((3.182 + 0.978) / 2)^2 = 4.33 > 4,
    # n = 5 has ((2.776 + 0.941) / 2)^2 = 3.45 <= 5
    assert seeds_needed([1.0, 3.0, 5.0], 2.0) == 10
    assert seeds_needed([1.0, 3.0, None, 5.0], 4.0) == 5  # a seed without a value is left out
    assert seeds_needed([1.0, 3.0, 5.0], 2.0, power=0.5) < 10  # less power, fewer seeds
    assert seeds_needed([2.0], 1.0) is None and seeds_needed([2.0, 2.0], 1.0) is None  # nothing to go on
