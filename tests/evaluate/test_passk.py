"""The unbiased pass@k estimator (Chen et al. 2021) on numbers computed by hand (issue 53 §10)."""

from __future__ import annotations

import pytest

from populora.evaluate.passk import default_ks, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 0, 1, 0.0),  # nothing passes
        (10, 10, 5, 1.0),  # everything passes
        (10, 3, 1, 0.3),  # pass@1 is the fraction correct: 1 - 7/10
        (10, 3, 2, 1 - 21 / 45),  # 1 - C(7,2)/C(10,2) = 1 - 21/45 = 0.5333...
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3) = 0.9
        (5, 2, 4, 1.0),  # n - c = 3 < k = 4: every draw of 4 holds a correct one
        (4, 1, 4, 1.0),
        (20, 1, 10, 0.5),  # 1 - C(19,10)/C(20,10) = 1 - 10/20
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(4) == [1, 4]
    assert default_ks(10) == [1, 5, 10]
    assert default_ks(25) == [1, 5, 10, 20, 25]
