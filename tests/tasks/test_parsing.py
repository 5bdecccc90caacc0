"""Parsers never raise and accept exactly what the renderers write (both template sets)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import populora.tasks as T
from populora.tasks import Answer, FormatError, Proposal

TEMPLATES = ["azr", "compact"]
PIECES = [
    "```",
    "```python\n",
    "```input\n",
    "```output\n",
    "```message\n",
    "\n",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "def f(a):\n    return a\n",
    "1, 2",
    "'x'",
    "\x00",
    "é",
    "```input_1\n",
    " ",
]
junk = st.lists(st.sampled_from(PIECES) | st.text(max_size=20), max_size=40).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk | st.text(max_size=300), st.sampled_from([None, "azr", "compact"]))
def test_parsers_never_raise(text, template):
    for name in T.TASK_NAMES:
        t = T.get(name)
        a = t.parse_answer(text, template=template)
        p = t.parse_proposal(text, template=template, program="def f(a):\n    return a")
        assert isinstance(a, (Answer, FormatError)) and isinstance(p, (Proposal, FormatError))


@pytest.mark.parametrize(
    "text",
    [
        "x" * 1_000_000,
        "```" * 300_000,
        "```python\n" * 100_000,
        "<answer>" * 100_000,
        "(" * 50_000,
        "```python\n" + "(" * 100_000 + "\n```",
        "```input\n" + "[" * 10_000 + "\n```",
        "\ud800" * 1000,
        None,
        12,
    ],
)
def test_pathological_text(text):
    for name in T.TASK_NAMES:
        t = T.get(name)
        assert isinstance(t.parse_answer(text), FormatError | Answer)
        assert isinstance(t.parse_proposal(text), FormatError | Proposal)


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize(
    "name,answer",
    [
        ("code_i", "'John', {'age': 20}"),
        ("code_o", "[1, (2, 'b')]"),
        ("code_f", "def f(a):\n    if a:\n        return a\n    return 0"),
    ],
)
def test_render_parse_answer_round_trip(template, name, answer):
    t = T.get(name)
    text = t.render_answer(answer, template=template)
    assert t.parse_answer(text, template=template) == Answer(answer)
    assert t.parse_answer(text) == Answer(answer)  # lenient parsing accepts both formats


@pytest.mark.parametrize("template", TEMPLATES)
def test_render_parse_proposal_round_trip(template):
    prog = "def f(s, n):\n    return s * n"
    for name in ("code_i", "code_o"):
        t = T.get(name)
        assert t.parse_proposal(
            t.render_proposal(prog, ["'ab', 3"], template=template), template=template
        ) == Proposal(prog, ("'ab', 3",))
    t = T.get("code_f")
    ins = [f"'x', {i}" for i in range(10)]
    got = t.parse_proposal(
        t.render_proposal(prog, ins, "repeat a string", template=template), program=prog, template=template
    )
    assert got == Proposal(prog, tuple(ins), "repeat a string")


def test_strict_r1_frame():
    t = T.get("code_o")
    assert t.parse_answer("ok </think>\n<answer>```output\n1\n```</answer>", template="azr") == Answer("1")
    assert t.parse_answer("<think>ok</think> <answer>```output\n1\n```</answer>", template="azr") == Answer(
        "1"
    )
    for bad, why in [
        ("```output\n1\n```", "no </think>"),
        ("x</think> so <answer>```output\n1\n```</answer>", "no <answer> right after"),
        ("x</think><answer>```output\n1\n```", "unclosed <answer>"),
    ]:
        r = t.parse_answer(bad, template="azr")
        assert isinstance(r, FormatError) and why in r.reason


def test_answer_selection_rules():
    t = T.get("code_o")
    # the last block of the answer region wins; draft blocks in the thinking are ignored
    txt = "```output\n1\n```</think><answer>```output\n2\n```\n```output\n3\n```</answer>"
    assert t.parse_answer(txt) == Answer("3")
    assert isinstance(t.parse_answer("```output\n1\n"), FormatError)  # unclosed fence
    assert isinstance(t.parse_answer("```input\n1\n```"), FormatError)  # wrong block
    assert isinstance(t.parse_answer("<answer>```output\n1\n```"), FormatError)  # cut off
    assert t.parse_answer("``` Output \n 'a' \n```") == Answer("'a'")  # lang case/space-insensitive


def test_answer_content_checks():
    assert isinstance(T.get("code_o").parse_answer("```output\nprint(1)\n```"), FormatError)
    assert isinstance(T.get("code_i").parse_answer("```input\n0) or (True\n```"), FormatError)
    assert isinstance(T.get("code_f").parse_answer("```python\ndef g(x):\n    return x\n```"), FormatError)
    assert isinstance(T.get("code_f").parse_answer("```python\ndef f(x:\n```"), FormatError)
    assert T.get("code_f").parse_answer("```python\n    def f(x):\n        return x\n```") == Answer(
        "def f(x):\n    return x"
    )


def test_proposal_format_errors():
    t = T.get("code_f")
    five = "\n".join(f"```input\n{i}\n```" for i in range(5)) + "\n```message\nm\n```"
    assert "need 10" in t.parse_proposal(five).reason
    twelve = "\n".join(f"```input\n{i}\n```" for i in range(12)) + "\n```message\nm\n```"
    assert t.parse_proposal(twelve, program="p").inputs == tuple(str(i) for i in range(2, 12))  # the last 10
    assert "message" in t.parse_proposal("\n".join(f"```input\n{i}\n```" for i in range(10))).reason
    assert "python" in T.get("code_o").parse_proposal("```input\n1\n```").reason
    assert T.get("code_f", n_inputs=4).parse_proposal(five, program="p").inputs == ("1", "2", "3", "4")


def test_azr_fallbacks():
    o, f = T.get("code_o"), T.get("code_f")
    assert o.parse_answer("x</think><answer> [1, 2] </answer>", template="azr") == Answer("[1, 2]")
    assert T.get("code_i").parse_answer("<answer>'a', 2</answer>") == Answer("'a', 2")
    assert isinstance(o.parse_answer("[1, 2]"), FormatError)  # no tags, no block: not an answer
    assert isinstance(
        o.parse_answer("<answer>```\n1\n```</answer>"), FormatError
    )  # a fence, but not ```output
    assert f.parse_answer("```\ndef f(a):\n    return a\n```") == Answer("def f(a):\n    return a")
    assert f.parse_answer("```py\ndef f(a):\n    return 1\n```") == Answer("def f(a):\n    return 1")


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8),
        lambda x: st.lists(x, max_size=3) | st.tuples(x, x),
        max_leaves=8,
    ),
    st.sampled_from(TEMPLATES),
)
def test_code_o_gold_round_trip(value, template):
    # whatever the value, the rendered gold answer parses and scores True; a type-changed one does not
    t = T.get("code_o")
    p = T.Problem("code_o", "def f(x):\n    return x", ("1",), (repr(value),))
    a = t.parse_answer(t.render_answer(t.gold_answer(p), template=template), template=template)
    assert t.score(p, [a], None) == [True]
    if isinstance(value, list):
        assert t.score(p, [repr(tuple(value))], None) == [False]


@pytest.mark.parametrize("template", [None, *TEMPLATES])
def test_text_with_a_lone_surrogate_is_a_format_error(template):
    # Issue 50: such a proposal's pieces reached problems.jsonl, whose UTF-8 write raised out of the step.
    for name in T.TASK_NAMES:
        t = T.get(name)
        n = t.config.n_inputs if name == "code_f" else 1
        good = t.render_proposal("def f(a):\n    return a", ["1"] * n, "add nothing", template=template)
        assert isinstance(
            t.parse_proposal(good, template=template, program="def f(a):\n    return a"), Proposal
        )
        for bad in (
            good.replace("add nothing", "add \udc80"),
            good.replace("1", "'\ud800'"),
            good + "\ud800",
        ):
            if bad == good:  # code_i/code_o proposals have no message
                continue
            p = t.parse_proposal(bad, template=template, program="def f(a):\n    return a")
            assert isinstance(p, FormatError) and "surrogate" in p.reason, (name, p)
        answer = t.render_answer("'\ud83d'", template=template)
        a = t.parse_answer(answer, template=template)
        assert isinstance(a, FormatError) and "surrogate" in a.reason, (name, a)
    for family in ("arith", "lists"):
        t = T.get(family)
        assert "surrogate" in t.parse_proposal("```expression\n1 + \ud800\n```").reason
        assert "surrogate" in t.parse_answer("```output\n\udfff\n```").reason
