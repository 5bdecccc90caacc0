"""A candidate cannot game HumanEval+/MBPP+ grading (issue 13 item 9, issue 14 item 2).

Expected outputs are computed apart from any candidate and never enter its job; the comparison runs in the
grading process on plain data. Each cheat below passed the old grader, which compared inside the candidate's
process and recomputed the expected outputs there after the candidate ran.
"""

import pytest

from populora.evaluate import ground_truth as gtm
from populora.evaluate.code_grader import CodeGrader, CodeLimits
from populora.evaluate.data import Item

FAST = CodeLimits(min_time_limit=0.5, gt_time_limit_factor=2.0, task_timeout=5.0, gt_cache=False)


def item(entry, canonical, base, plus, tid="HumanEval/901", dataset="humaneval"):
    meta = {"entry_point": entry, "base_input": base, "plus_input": plus, "atol": 0, "dataset": dataset}
    return Item("humaneval+", tid, "code", "", canonical, meta)


SORT = item(
    "sort_it",
    "def sort_it(xs):\n    return sorted(xs)\n",
    [[[1, 2, 3]], [[0, 5]]],  # already sorted: the identity is right on the base tests
    [[[3, 1, 2]], [[9, 8, 7, 1]]],
)


@pytest.fixture(scope="module")
def grader():
    return CodeGrader(workers=2, limits=FAST)


def test_output_whose_eq_is_always_true_fails(grader):
    cheat = (
        "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "def sort_it(xs):\n    return Yes()\n"
    )
    res = grader.grade([(SORT, cheat), (SORT, SORT.gold)])
    assert [r.passed for r in res] == [False, True]
    assert "wrong output" in res[0].detail


def test_patching_a_builtin_cannot_change_the_expected_outputs(grader):
    # Old grader: the plus phase's expected outputs were computed in this process after this exec.
    cheat = (
        "import builtins\nbuiltins.sorted = lambda xs, **k: list(xs)\ndef sort_it(xs):\n    return list(xs)\n"
    )
    res = grader.grade([(SORT, cheat)])
    assert res[0].base_passed is True and res[0].passed is False


def test_the_job_holds_neither_the_canonical_solution_nor_expected_outputs(grader):
    secret = item(
        "answer",
        "def answer(x):\n    return x * 7919 + 104729\n",
        [[1], [2]],
        [[3]],
        tid="HumanEval/902",
    )
    # Walk up the stack and look for anything holding the reference program or its outputs.
    cheat = (
        "import sys\n"
        "def answer(x):\n"
        "    f = sys._getframe(1)\n"
        "    while f is not None:\n"
        "        for v in list(f.f_locals.values()) + list(f.f_globals.values()):\n"
        "            src = None\n"
        "            if isinstance(v, dict) and isinstance(v.get('canonical'), str):\n"
        "                src = v['canonical']\n"
        "            elif isinstance(v, str) and ('79' + '19') in v and '_getframe' not in v:\n"
        "                src = v\n"
        "            if src is not None:\n"
        "                g = {}\n"
        "                exec(src, g)\n"
        "                return g['answer'](x)\n"
        "        f = f.f_back\n"
        "    return None\n"
    )
    res = grader.grade([(secret, cheat), (secret, secret.gold)])
    assert [r.passed for r in res] == [False, True]
    program, _call = gtm.job(secret, "def answer(x):\n    return 0\n", [[1]], [1.0], 3.0, False)
    assert "7919" not in program and "104729" not in program


def test_evalplus_reliability_guard_applies(grader):
    uses_open = "def sort_it(xs):\n    open('f.txt', 'w').write('x')\n    return sorted(xs)\n"
    uses_cwd = "import os\ndef sort_it(xs):\n    os.getcwd()\n    return sorted(xs)\n"
    res = grader.grade([(SORT, uses_open), (SORT, uses_cwd)])
    assert [r.passed for r in res] == [False, False]
    assert "NoneType" in res[0].detail


def test_dict_subclasses_and_huge_outputs_compare_by_value(grader):
    counter = item(
        "count",
        "from collections import Counter\ndef count(xs):\n    return Counter(xs)\n",
        [[[1, 1, 2]]],
        [[[3]]],
        tid="HumanEval/903",
    )
    plain = "def count(xs):\n    d = {}\n    for x in xs:\n        d[x] = d.get(x, 0) + 1\n    return d\n"
    big = item("big", "def big(n):\n    return 'ab' * n\n", [[3]], [[3_000_000]], tid="HumanEval/904")
    off = "def big(n):\n    s = 'ab' * n\n    return s[:-1] + 'c' if n > 10 else s\n"
    res = grader.grade([(counter, counter.gold), (counter, plain), (big, big.gold), (big, off)])
    assert [r.passed for r in res] == [True, True, True, False]


def test_expected_outputs_are_computed_once_per_task():
    grader = CodeGrader(workers=1, limits=FAST)
    fresh = item("inc", "def inc(x):\n    return x + 1\n", [[1]], [[2]], tid="HumanEval/905")
    before = gtm.computed
    grader.grade([(fresh, fresh.gold), (fresh, "def inc(x):\n    return x\n")])
    assert gtm.computed - before == 2  # base and plus, once each for two candidates
    grader.grade([(fresh, fresh.gold)])
    assert gtm.computed - before == 2


# Issue 50: a candidate's job writes the run the grader reads, and the candidate can rewrite it. Each of these
# raised out of `CodeGrader.grade` (TypeError, ValueError, ...), so no candidate of the batch got a result.
_FORGE = (
    "import json\n_d = json.dumps\n"
    "json.dumps = lambda o, *a, **k: _d(o) if isinstance(o, dict) and 'status' in o else {chunk!r}\n"
    "def sort_it(xs):\n    return sorted(xs)\n"
)


@pytest.mark.parametrize(
    "cheat",
    [
        # a dict keyed by a hashable list subclass: its key travels as a list, which no dict can hold
        "class L(list):\n    __hash__ = lambda self: 1\ndef sort_it(xs):\n    return {L([1]): 2}\n",
        "class L(list):\n    __hash__ = lambda self: 1\ndef sort_it(xs):\n    return {L(xs)}\n",
        # the harness's JSON encoder patched in the candidate's own process
        _FORGE.format(chunk='{"i": 5}'),  # a tag whose value is no hex text
        _FORGE.format(chunk='{"a": 1, "b": 2}'),  # two tags
        _FORGE.format(chunk='{"t": 5}'),  # a tuple of a number
        _FORGE.format(chunk='{"b": "zz"}'),  # bytes that are no hex
        _FORGE.format(chunk="[" * 3000 + "]" * 3000),  # nesting past the recursion limit
        "import json\njson.dumps = lambda *a, **k: '[1'\ndef sort_it(xs):\n    return sorted(xs)\n",
        "import json\njson.dumps = lambda *a, **k: '{\"status\": 1}'\ndef sort_it(xs):\n    return xs\n",
    ],
)
def test_a_malformed_run_fails_its_candidate_and_no_other(grader, cheat):
    res = grader.grade([(SORT, cheat), (SORT, SORT.gold)])
    assert [r.passed for r in res] == [False, True]
    assert res[0].status == "fail" and "no readable run" in res[0].detail
