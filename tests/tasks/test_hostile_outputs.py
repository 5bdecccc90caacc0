"""Nothing a model writes raises out of a phase (issue 50, item 3): generated hostile proposals and answers go
through parsing, validation and scoring of every task type (code_i, code_o, code_f, arith, lists, with the
real sandbox) and through the evaluation's extraction and code grader, and every result is a value with a
reason, never an exception.

Hostile pieces: huge integer literals in every base (past Python's int-to-str limit), deep nesting, long
operator chains, odd Unicode (lone surrogates, bidi and zero-width marks, combining and mathematical letters),
NUL bytes, and random text. The explicit `@example`s are the cases that raised on the old code.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import populora.tasks as T
from populora.tasks import Answer, FormatError, Invalid, Problem, Proposal
from populora.tasks.masking import program_key
from populora.train.probe_guard import ProbeGuard

AZR = ("code_i", "code_o", "code_f")
FAMILIES = ("arith", "lists")
# Sized for a loaded 2-core machine (the file runs in 30-45 s there); derandomized, so CI sees the same cases.
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
GRADER_SETTINGS = settings(SETTINGS, max_examples=4)  # each example starts a grading pool

# ------------------------------------------------------------------------------------------ hostile pieces
BIG = st.builds(
    lambda sign, prefix, digit, n: f"{sign}{prefix}{digit * n}",
    st.sampled_from(["", "-", "+"]),
    st.sampled_from(["0b", "0B", "0o", "0x", "0X", ""]),
    st.sampled_from(["1", "7", "f"]),
    st.sampled_from([4_400, 15_000, 100_000]),
).filter(lambda s: not (s.lstrip("+-")[:1].isdigit() and "f" in s and "0x" not in s.lower()))
NESTED = st.builds(
    lambda o, n: o * n + {"[": "]", "(": ")", "{": "}"}[o] * n, st.sampled_from("[({"), st.integers(50, 5_000)
)
CHAIN = st.builds(
    lambda part, n: "1" + part * n,
    st.sampled_from([" + 1", "+x", " * 2", "-", " if 1 else 1", ".real", ", 1"]),
    st.integers(100, 8_000),
)
ODD = st.sampled_from(
    [
        "\ud800",
        "\udfff",
        "\ud83d",
        "\x00",
        "\u202e",
        "\u200b",
        "\ufeff",
        "\u0301",
        "𝔣",
        "é",
        "\r",
        "\x0c",
        "\\",
    ]
)
SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=60)
PIECE = st.one_of(BIG, NESTED, CHAIN, ODD, SURROGATE, TEXT, st.lists(ODD | TEXT, max_size=6).map("".join))
# What a hostile model writes in a block: a piece, alone or around a plain value.
BLOCK = st.one_of(PIECE, st.tuples(PIECE, st.sampled_from(["1", "'a'", "[1, 2]"]), PIECE).map("".join))
# A program around a hostile piece: it must get past `def f(` to reach the deeper checks.
PROGRAM = st.one_of(
    BLOCK.map(lambda b: f"def f(a):\n    return {b}"),
    BLOCK.map(lambda b: f"def f(a):\n    x = {b}\n    return a"),
    BLOCK,
)

HUGE_INPUT = "0b" + "1" * 15_000  # issue 50: raised LiteralError out of validate and Trainer.check_proposals


def _reason(r: object) -> None:
    assert isinstance(r.reason, str) and r.reason.strip(), r


def _writable(*texts: object) -> None:
    """What problems.jsonl would hold of these pieces can be written as UTF-8 JSON (a lone surrogate could not)."""
    json.dumps(texts, ensure_ascii=False).encode("utf-8")


def _completion(name: str, program: str, inputs: list[str], message: str) -> str:
    if name == "code_f":
        return "".join(f"```input\n{i}\n```\n" for i in inputs) + f"```message\n{message}\n```"
    return f"```python\n{program}\n```\n```input\n{inputs[0]}\n```"


@pytest.fixture(scope="module")
def gold() -> dict[str, Problem]:
    """One valid problem per AZR type, made without the sandbox (its outputs are what `f` returns)."""
    program = "def f(a):\n    return [a, 'gold']"
    inputs = ("7", "8", "9", "10")
    outputs = tuple(repr([int(i), "gold"]) for i in inputs)
    return {
        "code_i": Problem("code_i", program, inputs[:1], outputs[:1]),
        "code_o": Problem("code_o", program, inputs[:1], outputs[:1]),
        "code_f": Problem("code_f", program, inputs, outputs, message="pairs a with a word"),
    }


# --------------------------------------------------------------------------------------------- AZR tasks
@pytest.mark.parametrize("name", AZR)
@SETTINGS
@given(program=PROGRAM, inputs=st.lists(BLOCK, min_size=1, max_size=3), message=BLOCK)
@example(program="def f(a):\n    return 1", inputs=[HUGE_INPUT], message="m")
@example(program="def f(a):\n    return 1", inputs=["0x" + "f" * 5_000, "0o" + "7" * 6_000], message="m")
@example(program="def f(a):\n    return a" + " + a" * 3_000, inputs=["1"], message="m")
@example(program="def f(a):\n    return '\ud800'", inputs=["'\udc00'"], message="\ud800")
@example(program="def f(a):\n    return 1\x00", inputs=["1\x00"], message="\x00")
def test_hostile_proposals_are_invalid_with_a_reason(sandbox, name, program, inputs, message):
    task = T.get(name)
    n = task.config.n_inputs if name == "code_f" else 1
    inputs = (inputs * n)[:n]
    proposals = [Proposal(program, tuple(inputs), message)]  # straight to validation, no parser in between
    for template in (None, "azr"):
        text = _completion(name, program, inputs, message)
        shown = "def f(a):\n    return a"  # code_f: the program comes from the buffers, not from the model
        parsed = task.parse_proposal(text, program=shown, template=template)
        if isinstance(parsed, FormatError):
            _reason(parsed)
        else:
            assert isinstance(parsed, Proposal)
            _writable(parsed.program, parsed.inputs, parsed.message)
            proposals.append(parsed)
    results = task.validate(proposals, sandbox)
    assert len(results) == len(proposals)
    for result in results:
        assert isinstance(result, Invalid | Problem), result
        if isinstance(result, Invalid):
            _reason(result)
        else:
            _writable(result.to_json())
    key = program_key(program)  # the graded generator's split key, and the probe guard's check below
    assert key is None or isinstance(key, str)
    assert ProbeGuard(["def f(a):\n    return a"]).collides(program) in (True, False)


@pytest.mark.parametrize("name", AZR)
@SETTINGS
@given(answers=st.lists(st.one_of(BLOCK, PROGRAM), min_size=1, max_size=4))
@example(answers=[HUGE_INPUT, "0x" + "f" * 5_000, "[" * 3_000 + "]" * 3_000])
@example(answers=["\ud800", "1\x00", "def f(a):\n    return a" + " + a" * 3_000])
def test_hostile_answers_score_false_with_a_reason(sandbox, gold, name, answers):
    task = T.get(name)
    problem = gold[name]
    parsed = []
    for text in answers:
        for template in (None, "azr"):
            a = task.parse_answer(f"```{task.answer_lang}\n{text}\n```", template=template)
            assert isinstance(a, Answer | FormatError), a
            if isinstance(a, FormatError):
                _reason(a)
            parsed.append(a)
        raw = task.parse_answer(text)
        assert isinstance(raw, Answer | FormatError)
        parsed.append(raw)
    verdicts = task.score(problem, [*parsed, *answers], sandbox)
    assert len(verdicts) == len(parsed) + len(answers) and all(type(v) is bool for v in verdicts)
    for a, v in zip(parsed, verdicts, strict=False):
        if isinstance(a, FormatError):
            assert v is False


# ----------------------------------------------------------------------------------------- arith, lists
@pytest.mark.parametrize("name", FAMILIES)
@SETTINGS
@given(texts=st.lists(BLOCK, min_size=1, max_size=4))
@example(texts=[HUGE_INPUT, "(" * 3_000 + "1" + ")" * 3_000, "1" + " + 1" * 5_000, "\ud800 + 1"])
def test_hostile_family_proposals_and_answers(sandbox, name, texts):
    task = T.get(name)
    proposals = [Proposal(t, ("",)) for t in texts]  # raw text as a proposal, past the parser
    for t in texts:
        parsed = task.parse_proposal(f"```expression\n{t}\n```")
        if isinstance(parsed, FormatError):
            _reason(parsed)
        else:
            proposals.append(parsed)
    results = task.validate(proposals, sandbox)
    assert len(results) == len(proposals)
    for r in results:
        assert isinstance(r, Invalid | Problem), r
        if isinstance(r, Invalid):
            _reason(r)
    problem = task.problem_from(sandbox, "[1, 2] + [3]" if name == "lists" else "6 * 7")
    answers = [task.parse_answer(f"```output\n{t}\n```") for t in texts]
    for a in answers:
        assert isinstance(a, Answer | FormatError)
        if isinstance(a, FormatError):
            _reason(a)
    verdicts = task.score(problem, [*answers, *texts], sandbox)
    right = problem.outputs[0]  # only a text that is the value itself may score True
    assert verdicts == [t.strip() == right for t in texts] * 2


# -------------------------------------------------------------------------------------------- evaluation
SORT_ENTRY = "sort_it"


@pytest.fixture(scope="module")
def sort_item():
    from populora.evaluate.data import Item

    meta = {
        "entry_point": SORT_ENTRY,
        "base_input": [[[3, 1, 2]], [[0, 5]]],
        "plus_input": [[[9, 8, 7, 1]]],
        "atol": 0,
        "dataset": "humaneval",
    }
    return Item("humaneval+", "HumanEval/950", "code", "", "def sort_it(xs):\n    return sorted(xs)\n", meta)


@pytest.fixture(scope="module")
def grader():
    from populora.evaluate.code_grader import CodeGrader, CodeLimits

    return CodeGrader(
        workers=2, limits=CodeLimits(min_time_limit=0.5, gt_time_limit_factor=2.0, task_timeout=5.0)
    )


# What a hostile candidate returns (the expression after `return`) or does before (a statement).
RETURNS = st.one_of(
    BLOCK,
    st.sampled_from(
        [
            "{L([1]): 2}",  # a dict keyed by a hashable list subclass: issue 50
            "{L(xs)}",
            "10 ** 5000",
            "eval('[' * 150 + ']' * 150)",
            "'\\ud800' * 3",
            "'\\x00'",
            "Weird()",
            "float('nan')",
        ]
    ),
)
STATEMENTS = st.one_of(
    st.just(""),
    st.sampled_from(
        [
            "import json\njson.dumps = lambda *a, **k: '[1'\n",
            "import json\n_d = json.dumps\njson.dumps = lambda o, *a, **k: _d(o) if isinstance(o, dict) "
            "and 'status' in o else '{\"i\": 5}'\n",
            'import json\njson.dumps = lambda *a, **k: \'{"status": "pass", "outputs": [{"d": [[[1], 2]]}]}\'\n',
        ]
    ),
    BLOCK.map(lambda b: f"import json\njson.dumps = lambda *a, **k: {b!r}\n"),
)
PRELUDE = (
    "class L(list):\n    __hash__ = lambda self: 1\n"
    "class Weird:\n    def __repr__(self):\n        raise ValueError\n    def __eq__(self, o):\n        return True\n"
)


@GRADER_SETTINGS
@given(
    bodies=st.lists(st.tuples(STATEMENTS, RETURNS), min_size=1, max_size=4), junk=st.lists(BLOCK, max_size=2)
)
@example(bodies=[("", "{L([1]): 2}"), ("", "{L(xs)}")], junk=[])
@example(
    bodies=[("import json\njson.dumps = lambda *a, **k: '[1'\n", "xs")],
    junk=["\\[" * 30_000, "x = (\n" * 400],
)
def test_hostile_candidates_fail_with_a_reason_and_the_rest_are_graded(grader, sort_item, bodies, junk):
    from populora.evaluate.extract import extract_azr_answer, extract_code_block, sanitize

    programs = [f"{PRELUDE}{stmt}def {SORT_ENTRY}(xs):\n    return {ret}\n" for stmt, ret in bodies]
    for text in junk:  # raw model text through the runner's extraction, as `populora eval` does
        programs.append(sanitize(extract_code_block(text), SORT_ENTRY))
        assert isinstance(extract_azr_answer(text), str)
    results = grader.grade([(sort_item, p) for p in programs] + [(sort_item, sort_item.gold)])
    assert len(results) == len(programs) + 1
    assert results[-1].passed is True  # the fair candidate beside them is graded as usual
    for r in results[:-1]:
        assert r.passed is False and r.status != "pass" and r.detail.strip(), r
