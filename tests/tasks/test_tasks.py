"""Each task type end to end on hand-made problems, through the real sandbox."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import populora.tasks as T
from populora.tasks import FormatError, Invalid, InvalidProblem, Problem, Proposal
from populora.tasks.buffers import identity_problem

PROG = "def f(s, n):\n    out = []\n    for i in range(n):\n        out.append(s[i % len(s)])\n    return ''.join(out)"


def test_get():
    assert [T.get(n).name for n in T.TASK_NAMES] == ["code_i", "code_o", "code_f"]
    assert T.get("code_o") is T.get("code_o")
    assert T.get("code_f", n_inputs=6).config.n_inputs == 6
    with pytest.raises(ValueError, match="unknown task"):
        T.get("code_x")


def test_problem_from_computes_outputs(sandbox):
    p = T.get("code_o").problem_from(sandbox, program=PROG, inputs=["'ab', 5"], proposer="T0", step=3)
    assert p.outputs == ("'ababa'",) and p.proposer == "T0" and p.step == 3 and p.task == "code_o"


@pytest.mark.parametrize(
    "program,inp,reason",
    [
        ("def f(x):\n    raise ValueError('no')", "1", "raised ValueError"),
        ("def f(x):\n    raise StopIteration", "1", "raised StopIteration"),  # B1: no "Error" in name
        ("class Oops(Exception):\n    pass\ndef f(x):\n    raise Oops()", "1", "raised Oops"),  # B1
        ("def f(x):\n    return list(range(x))", "5000", "output too long"),  # B2: rejected, not cut
        (
            "class A:\n    pass\ndef f(x):\n    return A()",
            "1",
            "output is not plain data",
        ),  # B1: default __eq__
        ("def f(x):\n    return {1, 2}.__len__", "1", "output is not plain data"),
        ("def f(x):\n    return float('nan')", "1", "output is not plain data"),
        ("def f(x):\n    return x", "__import__('os')", "input 0: Call is not allowed"),
        ("def f(x):\n    return x", "1) or (2", "input 0: not a plain argument list"),
        ("import os\ndef f(x):\n    return x", "1", "forbidden import: os"),
        ("def f():\n    return 1", "1", "f takes no parameters"),
        ("def g(x):\n    return x", "1", "no top-level function f"),
    ],
)
def test_invalid_programs(sandbox, program, inp, reason):
    with pytest.raises(InvalidProblem) as e:
        T.get("code_o").problem_from(sandbox, program=program, inputs=[inp])
    assert e.value.reason.startswith(reason) or reason in e.value.reason, e.value.reason


def test_timeout_is_invalid(quick_sandbox):
    with pytest.raises(InvalidProblem, match="input 0: timeout"):
        T.get("code_o").problem_from(
            quick_sandbox, program="def f(x):\n    while True:\n        pass", inputs=["1"]
        )


def test_nondeterminism_is_caught_across_processes(sandbox):
    # os.urandom differs between two fresh jobs; the policy is relaxed so the sandbox check itself is tested
    # (it would otherwise stop `import os` first).
    from populora.tasks.policy import CapabilityPolicy

    t = T.get("code_o", policy=CapabilityPolicy(deny_modules=frozenset(), allow_modules=None))
    with pytest.raises(InvalidProblem, match="nondeterministic"):
        t.problem_from(sandbox, program="import os\ndef f(x):\n    return os.urandom(8)", inputs=["1"])


def test_validate_batches_and_keeps_order(sandbox):
    t = T.get("code_i")
    props = [
        Proposal(PROG, ("'ab', 3",), proposer="T1", step=2),
        FormatError("format: no ```python block"),
        Proposal("def f(x):\n    return 1 / x", ("0",)),
        Proposal("def f(x):\n    return -x", ("3",)),
    ]
    res = t.validate(props, sandbox)
    assert isinstance(res[0], Problem) and res[0].outputs == ("'aba'",) and res[0].proposer == "T1"
    assert isinstance(res[1], Invalid) and "format" in res[1].reason
    assert isinstance(res[2], Invalid) and res[2].reason == "input 0: raised ZeroDivisionError"
    assert res[3].outputs == ("-3",) and res[3].task == "code_i"


def test_code_o_scoring_is_type_aware_and_needs_no_sandbox():
    t = T.get("code_o")
    p = Problem("code_o", "def f(x):\n    return x", ("1",), ("{'a': [1, 2.0], 'b': True}",))
    answers = [
        "{'b': True, 'a': [1, 2.0]}",
        "{'a': [1, 2], 'b': True}",
        "{'a': [1, 2.0], 'b': 1}",
        "{'a': (1, 2.0), 'b': True}",
        FormatError("x"),
        t.parse_answer("```output\nTrue\n```"),
    ]
    assert t.score(p, answers, None) == [True, False, False, False, False, False]


def test_code_i_scoring_runs_the_gold_program(sandbox):
    t = T.get("code_i")
    p = t.problem_from(sandbox, program=PROG, inputs=["'ab', 3"])
    # Any input producing the output is right, including keyword forms; types are strict ('aba' != b'aba').
    answers = [
        "'ab', 3",
        "'aba', 3",
        "s='abc', n=3",
        "'ab', 4",
        "'ab', 3.0",
        "'ab'",
        FormatError("no block"),
        t.parse_answer("```input\n'ba', 3\n```"),
    ]
    assert t.score(p, answers, sandbox) == [True, True, False, False, False, False, False, False]
    q = Problem("code_i", "def f(x):\n    return x > 0", ("5",), ("True",))
    assert t.score(q, ["1", "0", "-1", "1.5"], sandbox) == [True, False, False, True]


def test_code_f_end_to_end(sandbox):
    t = T.get("code_f")
    prog = "def f(x):\n    return sorted(set(x))[::-1]"
    text = t.render_proposal(prog, [repr([i, i % 3, i % 3]) for i in range(10)], "unique, descending")
    prop = t.parse_proposal(text, program=prog)
    (p,) = t.validate([prop.with_origin("T2", 5)], sandbox)
    assert isinstance(p, Problem) and len(p.given) == 5 and len(p.hidden) == 5 and p.proposer == "T2"
    prompt = t.student_prompt(p)
    assert "unique, descending" in prompt and prog not in prompt
    assert all(i in prompt for i, _ in p.given) and not any(f"```input_{k}" in prompt for k in range(5, 10))
    right = "def f(x):\n    return sorted(set(x), reverse=True)"
    wrong = "def f(x):\n    return sorted(x)[::-1]"  # right on inputs without duplicates only
    crash = "def f(x):\n    return x[100]"
    assert t.score(p, [right, wrong, crash, t.gold_answer(p), FormatError("x")], sandbox) == [
        True,
        False,
        False,
        True,
        False,
    ]


def test_code_f_proposal_rules(sandbox):
    t = T.get("code_f")
    prog = "def f(x):\n    return x + 1"
    ins = tuple(str(i) for i in range(10))
    bad = t.validate(
        [
            Proposal(prog, ins[:9], "m"),
            Proposal(prog, ins, ""),
            Proposal(prog, ins, prog),
            Proposal(prog, ins[:9] + ("'a'",), "m"),
            Proposal(prog, ins, "add one"),
        ],
        sandbox,
    )
    assert [getattr(r, "reason", None) for r in bad[:4]] == [
        "code_f needs 10 inputs, got 9",
        "empty message",
        "message contains the code",
        "input 9: raised TypeError",
    ]
    assert isinstance(bad[4], Problem) and bad[4].outputs == tuple(str(i + 1) for i in range(10))
    # problem_from is looser on the count (AZR's identity seed has 6 inputs)
    assert T.get("code_f").problem_from(sandbox, program=prog, inputs=["1", "2"], message="m").hidden == [
        ("2", "3")
    ]


@pytest.mark.parametrize("template", ["azr", "compact"])
def test_prompts_show_references_and_task(template):
    refs = [identity_problem("code_o"), Problem("code_o", PROG, ("'ab', 3",), ("'aba'",))]
    for name in ("code_i", "code_o"):
        tp = T.get(name).teacher_prompt(refs, template=template)
        assert PROG in tp and "'aba'" in tp and "'ab', 3" in tp
        sp = T.get(name).student_prompt(refs[1].retask(name), template=template)
        assert PROG in sp
        assert ("'aba'" in sp) == (name == "code_i") and ("'ab', 3" in sp) == (name == "code_o")
    fp = T.get("code_f").teacher_prompt(refs[1], template=template)
    assert PROG in fp and "10" in fp
    if template == "azr":
        assert tp.endswith("Assistant: <think>") and "<snippet_1>" in tp and "os, sys, subprocess" in tp
    else:
        assert tp.endswith("# new\n") and "<think>" not in tp and len(tp) < 400


def test_stateful_programs_are_nondeterministic(sandbox):
    # the result of the second call depends on the first: a stateless student could never match it
    prog = "def f(x, seen=[]):\n    seen.append(x)\n    return len(seen)"
    with pytest.raises(InvalidProblem, match="nondeterministic"):
        T.get("code_f").problem_from(sandbox, program=prog, inputs=["1", "2"], message="count calls")


def test_bad_options_and_hand_made_gold():
    with pytest.raises(ValueError, match="unknown task option"):
        T.get("code_o", n_input=3)
    p = Problem("code_o", "def f(x):\n    return x", ("1",), ("<object at 0x1>",))
    assert T.get("code_o").score(p, ["1"], None) == [False]


_prog = st.sampled_from(
    [
        "def f(x):\n    return x",
        "def f(x):\n    return x[0]",
        "def f(:",
        "",
        "x = 1",
        "def f(x):\n    return {x}",
        "import os\ndef f(x):\n    return 1",
    ]
) | st.text(max_size=40)
_inp = st.sampled_from(["1", "[1, 2]", "'a'", "", "{}", "x", "1) or (2", "[[]]"]) | st.text(max_size=15)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_prog, st.lists(_inp, min_size=1, max_size=3), st.text(max_size=20)), max_size=4))
def test_validate_never_raises(sandbox, items):
    for name in T.TASK_NAMES:
        props = [Proposal(p, tuple(i), m) for p, i, m in items]
        res = T.get(name, n_inputs=2).validate(props, sandbox)
        assert len(res) == len(props) and all(isinstance(r, (Problem, Invalid)) for r in res)
