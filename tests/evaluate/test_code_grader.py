"""EvalPlus rules in the real sandbox: pass/fail, plus tests, float tolerance, timeouts, MBPP inputs."""

import pytest

from populora.evaluate.code_grader import CodeGrader, CodeLimits
from populora.evaluate.data import Item

FAST = CodeLimits(min_time_limit=0.5, gt_time_limit_factor=2.0, task_timeout=2.0)


def item(entry, canonical, base, plus, atol=0, dataset="humaneval", tid="HumanEval/900"):
    meta = {
        "entry_point": entry,
        "base_input": base,
        "plus_input": plus,
        "atol": atol,
        "dataset": dataset,
        "prompt": "",
    }
    return Item("humaneval+" if dataset == "humaneval" else "mbpp+", tid, "code", "", canonical, meta)


ADD = item("add", "def add(a, b):\n    return a + b\n", [[1, 2], [3, 4]], [[10, -3], [0, 0], [7, 7]])
MEAN = item("mean", "def mean(xs):\n    return sum(xs) / len(xs)\n", [[[1.0, 2.0]]], [[[0.1, 0.2, 0.3]]])


@pytest.fixture(scope="module")
def grader():
    return CodeGrader(workers=2, limits=FAST)


def test_pass_fail_and_plus_tests(grader):
    sols = [
        ADD.gold,  # canonical
        "def add(a, b):\n    print('noise')\n    return b + a\n",  # prints are swallowed
        "def add(a, b):\n    return 3 if a == 1 else a + b\n",  # hard-coded for one base test: still fine
        "def add(a, b):\n    return a + b if a < 5 else 0\n",  # passes base, fails plus -> not pass@1
        "def add(a, b):\n    return a - b\n",
        "def add(a, b):\n    raise ValueError('x')\n",
        "this is not python",
    ]
    res = grader.grade([(ADD, s) for s in sols])
    assert [r.passed for r in res] == [True, True, True, False, False, False, False]
    assert res[3].base_passed is True and res[3].detail.startswith("plus")
    assert "ValueError" in res[5].detail
    assert res[6].status == "fail"


def test_float_tolerance_and_timeout(grader):
    sols = [
        "def mean(xs):\n    return sum(xs) / len(xs) + 1e-9\n",  # within the forced atol 1e-6
        "def mean(xs):\n    return sum(xs) / len(xs) + 1e-3\n",
        "def mean(xs):\n    return str(sum(xs) / len(xs))\n",  # type must match
        "def mean(xs):\n    while True:\n        pass\n",
    ]
    res = grader.grade([(MEAN, s) for s in sols])
    assert [r.passed for r in res] == [True, False, False, False]
    assert res[3].status == "timeout"


def test_mbpp_inputs_become_tuples_and_set_oracle(grader):
    # Mbpp/2 (similar_elements): inputs are tuples and outputs are compared as sets.
    sim = item(
        "similar_elements",
        "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n",
        [[[3, 4, 5, 6], [5, 7, 4, 10]]],
        [[[1, 2], [2, 1]]],
        dataset="mbpp",
        tid="Mbpp/2",
    )
    sols = [
        "def similar_elements(a, b):\n    assert isinstance(a, tuple)\n    return tuple(sorted(set(a) & set(b)))\n",
        "def similar_elements(a, b):\n    return (a[0],)\n",
    ]
    assert [r.passed for r in grader.grade([(sim, s) for s in sols])] == [True, False]


def test_find_zero_special_oracle(grader):
    # HumanEval/32: any x with |poly(x)| <= atol passes (evalplus 0.3.1 wrongly failed every solution).
    canon = (
        "import math\ndef find_zero(xs):\n    lo, hi = -100.0, 100.0\n    f = lambda x: sum(c * x**i for i, c in "
        "enumerate(xs))\n    for _ in range(200):\n        mid = (lo + hi) / 2\n        if f(lo) * f(mid) <= 0:\n"
        "            hi = mid\n        else:\n            lo = mid\n    return (lo + hi) / 2\n"
    )
    fz = item("find_zero", canon, [[[-6, 11, -6, 1]]], [[[-3, 1]]], atol=1e-4, tid="HumanEval/32")
    other_root = canon.replace("lo, hi = -100.0, 100.0", "lo, hi = 2.5, 100.0")  # finds 3, not 1
    res = grader.grade([(fz, canon), (fz, other_root), (fz, "def find_zero(xs):\n    return 0.0\n")])
    assert [r.passed for r in res] == [True, True, False]


def test_broken_canonical_is_reported(grader):
    bad = item("f", "def f(x):\n    return 1 / x\n", [[0]], [])
    res = grader.grade([(bad, "def f(x):\n    return 0\n")])
    assert res[0].status == "gt_error" and "ZeroDivisionError" in res[0].detail
