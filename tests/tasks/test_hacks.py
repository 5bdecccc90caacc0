"""The AZR reward hacks (reference/azr.md §6.3, B1-B5), reproduced against our verifier and defeated."""

import os

import pytest

import populora.tasks as T
from populora.tasks import FormatError, InvalidProblem, Problem

ID_INT = "def f(x):\n    return x * 2"


# ---------------------------------------------------------------- B4: abduction answers spliced into code
@pytest.mark.parametrize(
    "answer",
    [
        "0) or (True",  # AZR: `gold == f(0) or (True)` is always True
        "0) == 0 or (1",
        "1); __import__('os').system('true'); (1",
        "*[21]",
        "x := 21",
        "21, **{}",
        "__import__('builtins').True",
        "(lambda: 21)()",
    ],
)
def test_abduction_injection_is_a_format_error(sandbox, answer):
    t = T.get("code_i")
    p = Problem("code_i", ID_INT, ("21",), ("42",))
    assert isinstance(t.parse_answer(f"```input\n{answer}\n```"), FormatError)
    assert t.score(p, [answer, "21"], sandbox) == [False, True]


def test_abduction_values_are_type_strict(sandbox):
    # AZR compares `gold == f(i)` in Python: 1 == True and 2 == 2.0 would pass.
    t = T.get("code_i")
    p = Problem("code_i", "def f(x):\n    return x", ("True",), ("True",))
    assert t.score(p, ["True", "1", "1.0"], sandbox) == [True, False, False]
    q = Problem("code_i", "def f(x):\n    return x / 1", ("2",), ("2.0",))
    assert t.score(q, ["2", "2.0", "True"], sandbox) == [True, True, False]


# ---------------------------------------------------------------- B4: induction with attacker-controlled objects
HIDDEN = Problem(
    "code_f",
    "def f(x):\n    return x * 2",
    tuple(str(i) for i in range(10)),
    tuple(str(2 * i) for i in range(10)),
    message="double it",
)


@pytest.mark.parametrize(
    "program",
    [
        # an object equal to everything (AZR ran `gold == f(x)` inside the sandbox)
        "class Any:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\ndef f(x):\n    return Any()",
        # ... that also prints like the right type
        "class Any(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def f(x):\n    return Any(0)",
        "class L(list):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return L()",
        # patching the comparison machinery inside the job
        "import builtins\nbuiltins.repr = lambda v: '0'\ndef f(x):\n    return 'zero'",
        # type confusion: the right numbers as floats / bools
        "def f(x):\n    return x * 2.0",
        "def f(x):\n    return bool(x)",
        # capabilities
        "import os\ndef f(x):\n    return x * 2",
        "def f(x):\n    return eval('x*2')",
        # crashes and exceptions without 'Error' in the name (B1)
        "def f(x):\n    raise StopIteration",
    ],
)
def test_induction_hacks_score_false(sandbox, program):
    t = T.get("code_f")
    right = "def f(x):\n    return x + x"
    assert t.score(HIDDEN, [program, right], sandbox) == [False, True]


def test_induction_timeout_scores_false(quick_sandbox):
    loop = "def f(x):\n    while True:\n        pass"
    assert T.get("code_f").score(HIDDEN, [loop, "def f(x):\n    return x + x"], quick_sandbox) == [
        False,
        True,
    ]


# ---------------------------------------------------------------- B4: deduction answers eval'd in the trainer
MARK = "/tmp/populora_tasks_hack_marker"


@pytest.mark.parametrize(
    "answer",
    [
        f"__import__('os').system('touch {MARK}')",
        f"open('{MARK}', 'w').write('x')",
        f"[__import__('os').system('touch {MARK}')]",
        f"exec(\"open('{MARK}', 'w')\")",
        "42 if True else 0",
        "40 + 2",
        "(lambda: 42)()",
    ],
)
def test_deduction_answer_is_never_executed(answer):
    if os.path.exists(MARK):
        os.remove(MARK)
    t = T.get("code_o")
    p = Problem("code_o", ID_INT, ("21",), ("42",))
    parsed = t.parse_answer(f"```output\n{answer}\n```")
    assert isinstance(parsed, FormatError)
    assert t.score(p, [parsed, answer, "42"], None) == [False, False, True]
    assert not os.path.exists(MARK)


def test_deduction_is_type_strict():
    p = Problem("code_o", "def f(x):\n    return x > 0", ("1",), ("True",))
    assert T.get("code_o").score(p, ["True", "1", "1.0", "'True'"], None) == [True, False, False, False]


# ---------------------------------------------------------------- B1: invalid proposals AZR accepted
@pytest.mark.parametrize(
    "program",
    [
        "def f(x):\n    raise Exception('Non-deterministic code')",
        "class Foo(Exception):\n    pass\ndef f(x):\n    raise Foo()",
        "def f(x):\n    raise KeyboardInterrupt",
        "def f(x):\n    raise SystemExit(0)",
        "class A:\n    pass\ndef f(x):\n    return A()",
        "class A:\n    def __eq__(self, o):\n        return True\n    def __repr__(self):\n        return '1'\n"
        "def f(x):\n    return A()",
    ],
)
def test_any_exception_or_object_output_is_invalid(sandbox, program):
    with pytest.raises(InvalidProblem):
        T.get("code_o").problem_from(sandbox, program=program, inputs=["1"])


# ---------------------------------------------------------------- B2: long outputs are rejected, never truncated
def test_long_outputs_rejected_not_truncated(sandbox):
    t = T.get("code_o")
    with pytest.raises(InvalidProblem, match="output too long"):
        t.problem_from(sandbox, program="def f(n):\n    return list(range(n))", inputs=["400"])
    p = t.problem_from(sandbox, program="def f(n):\n    return list(range(n))", inputs=["100"])
    assert "..." not in p.outputs[0] and t.score(p, [repr(list(range(100)))], None) == [True]


# ---------------------------------------------------------------- B3: import checks that were bypassable
@pytest.mark.parametrize(
    "program",
    [
        "import os\ndef f(x):\n    return x",
        "import os.path\ndef f(x):\n    return x",
        "import sys\ndef f(x):\n    return x",
        "import shutil\ndef f(x):\n    return x",
        "def f(x):\n    return __import__('subprocess').getoutput('id')",
        "def f(x):\n    return [c for c in ().__class__.__base__.__subclasses__()][0]",
    ],
)
def test_banned_capabilities_rejected_before_running(sandbox, program):
    with pytest.raises(InvalidProblem, match="forbidden"):
        T.get("code_i").problem_from(sandbox, program=program, inputs=["1"])


# ---------------------------------------------------------------- B5: helpers and classes are fine
def test_classes_and_helpers_are_valid(sandbox):
    prog = (
        "class Counter2:\n    def __init__(self):\n        self.n = 0\n    def bump(self, k):\n"
        "        self.n += k\n        return self\n"
        "def helper(v):\n    def inner(w):\n        return w * 3\n    return inner(v) + 1\n"
        "def f(xs):\n    c = Counter2()\n    for x in xs:\n        c.bump(helper(x))\n    return c.n"
    )
    p = T.get("code_o").problem_from(sandbox, program=prog, inputs=["[1, 2]"])
    assert p.outputs == ("11",)
