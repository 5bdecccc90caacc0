"""Execution traces for code_o answers: hand-checked reductions, agreement with the real run, and answers that
still parse and score the same with the trace in front."""

from __future__ import annotations

import random

import pytest

from populora.pretrain.corpus import build_corpus
from populora.pretrain.programs import compile_program, run, sample_triplet
from populora.pretrain.tasks_render import TasksRenderer
from populora.pretrain.trace import render_trace, trace_lines
from populora.sandbox import Sandbox
from populora.tasks import get
from populora.tasks.extract import find_blocks


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


def test_parameters_then_one_reduction_per_step():
    prog = "def f(n, xs):\n    r = sum(xs)\n    out = str(r * 2 + n)\n    return out"
    assert trace_lines(prog, "3, [0, 1]") == [
        "n = 3",
        "xs = [0, 1]",
        "r = sum([0, 1]) = 1",
        "out = str(1 * 2 + 3) = str(2 + 3) = str(5) = '5'",
    ]


def test_strings_slices_methods_and_range_reduce_as_python_does():
    assert trace_lines("def f(s):\n    out = s[::-1] + 'x'\n    return out", "'abc'") == [
        "s = 'abc'",
        "out = 'abc'[::-1] + 'x' = 'cba' + 'x' = 'cbax'",
    ]
    assert trace_lines("def f(s):\n    out = s.replace('a', 'y')\n    return out", "'aba'") == [
        "s = 'aba'",
        "out = 'aba'.replace('a', 'y') = 'yby'",
    ]
    # range(...) is consumed by list(...) in the same step: no `range(0, 3)` object is ever shown.
    assert trace_lines("def f(n):\n    ys = list(range(n % 6 + 1))\n    return ys", "8") == [
        "n = 8",
        "ys = list(range(8 % 6 + 1)) = list(range(2 + 1)) = list(range(3)) = [0, 1, 2]",
    ]


def test_comprehension_variables_are_not_substituted_and_a_return_expression_is_traced():
    prog = "def f(xs, x):\n    ys = [x * 2 for x in xs]\n    return len(ys) + x"
    assert trace_lines(prog, "[1, 2], 5") == [
        "xs = [1, 2]",
        "x = 5",
        "ys = [x * 2 for x in [1, 2]] = [2, 4]",
        "return len([2, 4]) + 5 = 2 + 5 = 7",
    ]


def test_statements_it_cannot_show_give_no_trace_rather_than_a_wrong_one():
    loop = "def f(xs):\n    total = 0\n    for v in xs:\n        total += v\n    return total"
    assert trace_lines(loop, "[1, 2]") is None
    assert render_trace(loop, "[1, 2]") == ""
    assert trace_lines("def f(n):\n    r = n // 0\n    return r", "1") is None  # raises: no trace
    assert trace_lines("def f(n):\n    r = n\n    return r", "1, 2") is None  # wrong arity


def test_every_generated_trace_ends_in_the_programs_real_output():
    rng = random.Random(0)
    for _ in range(400):
        tr = sample_triplet(rng, level="easy")
        lines = trace_lines(tr.program, tr.input)
        assert lines is not None, tr.program  # the easy level is straight-line code: always traceable
        # The easy level returns its last variable, so the last step's value is the output.
        assert lines[-1].rsplit(" = ", 1)[-1] == tr.output == run(compile_program(tr.program), tr.input)


def test_traced_corpus_answers_parse_and_score_like_untraced_ones(sandbox):
    task = get("code_o")
    plain = build_corpus(5, 60, TasksRenderer(), mix={"student:code_o": 1.0}, level="easy")
    traced = build_corpus(5, 60, TasksRenderer(), mix={"student:code_o": 1.0}, level="easy", trace=True)
    for a, b in zip(plain, traced, strict=True):
        assert a.prompt == b.prompt  # the prompt does not change: only what the student writes
        assert b.completion.startswith("```trace\n") and b.completion.endswith(a.completion)
        assert len(find_blocks(b.completion, "trace")) == 1
        assert task.parse_answer(b.completion) == task.parse_answer(a.completion)
    # And the sandbox scores a traced gold answer correct.
    tr = sample_triplet(random.Random(1), level="easy")
    problem = TasksRenderer().problem_io("code_o", tr)
    completion = render_trace(tr.program, tr.input) + task.render_answer(
        task.gold_answer(problem), template="compact"
    )
    assert task.score(problem, [task.parse_answer(completion)], sandbox) == [True]


def test_trace_fraction_mixes_traced_and_bare_answers():
    kw = dict(mix={"student:code_o": 1.0}, level="easy", trace=True)
    full = build_corpus(5, 60, TasksRenderer(), **kw)
    # 1.0 draws nothing extra: the corpus of the runs before the knob, example for example.
    assert build_corpus(5, 60, TasksRenderer(), trace_fraction=1.0, **kw) == full
    half = build_corpus(5, 400, TasksRenderer(), trace_fraction=0.5, **kw)
    traced = [ex for ex in half if ex.completion.startswith("```trace\n")]
    bare = [ex for ex in half if not ex.completion.startswith("```trace\n")]
    assert 0.4 < len(traced) / len(half) < 0.6  # binomial(400, 0.5): 0.4-0.6 is over 4 sigma either side
    assert all("```trace" not in ex.completion and ex.completion.startswith("```output") for ex in bare)


LOOP = "def f(xs):\n    t = 0\n    for v in xs:\n        if v > 1:\n            t += v\n    return t"


def test_state_trace_shows_each_change_of_a_loop_in_order():
    from populora.pretrain.trace import state_trace_lines

    # hand-run: t = 0; v = 2 -> t = 2; v = 1 (no change to t); v = 3 -> t = 5
    assert state_trace_lines(LOOP, "[2, 1, 3]") == [
        "xs = [2, 1, 3]",
        "t = 0",
        "v = 2",
        "t = 2",
        "v = 1",
        "v = 3",
        "t = 5",
    ]
    assert trace_lines(LOOP, "[2, 1, 3]") is None  # the reduction trace does not cover loops
    assert render_trace(LOOP, "[2, 1, 3]") == ""  # and without `general` nothing changes for old corpora
    assert render_trace(LOOP, "[2, 1, 3]", general=True).startswith("```trace\nxs = [2, 1, 3]\nt = 0\n")


def test_state_trace_is_cut_after_its_line_budget_and_fails_closed():
    from populora.pretrain.trace import MAX_STATE_LINES, state_trace_lines

    lines = state_trace_lines(LOOP, str(list(range(2, 40))))
    assert len(lines) == 1 + MAX_STATE_LINES + 1 and lines[-1] == "..."
    assert state_trace_lines(LOOP, "[None]") is None  # the run raises: no trace rather than a wrong one
    # straight-line programs keep the reduction trace under `general`
    prog = "def f(n):\n    r = n * 2\n    return r"
    assert render_trace(prog, "3", general=True) == render_trace(prog, "3")


def test_named_trace_writes_each_expression_as_written_before_its_values():
    prog = "def f(n, m):\n    r = n + m\n    k = 6 * 8\n    out = str(r * 8)\n    return out"
    assert trace_lines(prog, "4, 1", names=True) == [
        "n = 4",
        "m = 1",
        "r = n + m = 4 + 1 = 5",
        "k = 6 * 8 = 48",  # no names to write: as without the option
        "out = str(r * 8) = str(5 * 8) = str(40) = '40'",
    ]
    assert trace_lines(prog, "4, 1") == [
        "n = 4",
        "m = 1",
        "r = 4 + 1 = 5",
        "k = 6 * 8 = 48",
        "out = str(5 * 8) = str(40) = '40'",
    ]
    # a return expression too; a line past MAX_LINE still falls back to `name = value`
    assert trace_lines("def f(s):\n    return s.upper()", "'ab'", names=True) == [
        "s = 'ab'",
        "return s.upper() = 'ab'.upper() = 'AB'",
    ]
    long = "def f(xs):\n    ys = xs[1:] + xs[:1]\n    r = (len(ys) + 4 - len(xs) - len(ys))\n    return r"
    assert trace_lines(long, "[9, 2]", names=True)[-1] == "r = 2"


@pytest.mark.parametrize("level", ["easy", "1,1,2"])
def test_trace_names_changes_only_the_trace_lines_of_the_same_corpus(level):
    kw = dict(mix={"student:code_o": 1.0, "student:code_i": 1.0}, level=level, trace=True)
    plain = build_corpus(9, 80, TasksRenderer(), **kw)
    named = build_corpus(9, 80, TasksRenderer(), trace_names=True, **kw)
    changed = 0
    for a, b in zip(plain, named, strict=True):
        assert (a.kind, a.prompt) == (b.kind, b.prompt)
        if not a.completion.startswith("```trace"):
            assert a.completion == b.completion  # code_i answers, and code_o programs without a trace
            continue
        # the same answer block after the trace, and the same trace once each line's written expression is dropped
        assert a.completion.split("\n```\n", 1)[1] == b.completion.split("\n```\n", 1)[1]
        a_lines, b_lines = a.completion.split("\n"), b.completion.split("\n")
        assert len(a_lines) == len(b_lines)
        for x, y in zip(a_lines, b_lines, strict=True):
            if x != y:
                head, steps = (
                    ("return ", y[7:])
                    if y.startswith("return ")
                    else (y.split(" = ", 1)[0] + " = ", y.split(" = ", 1)[1])
                )
                if " = " in steps:  # the written expression, then the plain line's working
                    assert x == head + steps.split(" = ", 1)[1], (x, y)
                    changed += 1
                else:  # the longer named line passed MAX_LINE and fell back to `name = value`
                    assert x.startswith(head) and x.endswith(" = " + steps), (x, y)
    assert changed >= 10


def test_facts_drill_kind_is_only_in_a_mix_that_asks_for_it_and_every_fact_is_right():
    from populora.pretrain.corpus import MIX, facts_text, parse_mix

    assert "facts" not in MIX and parse_mix("facts=1,program=1") == {"facts": 1.0, "program": 1.0}
    lines = [line for seed in range(40) for line in facts_text(random.Random(seed)).splitlines()]
    assert len(lines) >= 40 * 8
    for line in lines:
        expr, value = line.split(" = ")
        assert eval(expr) == int(value), line  # noqa: S307 - our own digits
    ops = {line.split()[1] for line in lines}
    assert ops == {"+", "-", "*", "//", "%"}
    for level in ("easy", "1,2"):
        corpus = build_corpus(
            3, 200, TasksRenderer(), mix={"facts": 1.0, "student:code_o": 1.0}, level=level, trace=True
        )
        drills = [ex for ex in corpus if ex.kind == "facts"]
        assert 60 < len(drills) < 140 and all(ex.prompt == "" and " = " in ex.completion for ex in drills)


def test_code_f_trace_adds_the_first_shown_pairs_trace_to_code_f_answers_only():
    kw = dict(
        mix={"student:code_f": 2.0, "teacher:code_f": 1.0, "student:code_o": 1.0}, level="1,1,2", trace=True
    )
    plain = build_corpus(11, 60, TasksRenderer(), **kw)
    traced = build_corpus(11, 60, TasksRenderer(), code_f_trace=True, **kw)
    students = 0
    for a, b in zip(plain, traced, strict=True):
        assert (a.kind, a.prompt) == (b.kind, b.prompt)
        if a.kind != "student:code_f":
            assert a.completion == b.completion  # teachers and code_o as before
            continue
        students += 1
        trace, rest = b.completion.split("\n```\n", 1)
        assert trace.startswith("```trace\n") and rest == a.completion
        program = a.completion.split("```python\n", 1)[1].split("\n```", 1)[0]
        first_in = a.prompt.split("```input\n", 1)[1].split("\n```", 1)[0]
        assert trace + "\n```\n" == render_trace(program, first_in, general=True)
        # the trace binds the parameters to the first shown input, in order
        params = program.split("(", 1)[1].split(")", 1)[0].split(", ")
        assert [line.split(" = ", 1)[0] for line in trace.splitlines()[1 : 1 + len(params)]] == params
    assert students >= 20
    with pytest.raises(ValueError, match="graded levels"):
        build_corpus(11, 2, TasksRenderer(), code_f_trace=True, mix={"student:code_f": 1.0}, level="easy")
