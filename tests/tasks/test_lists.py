"""The shipped `lists` family: proposals are checked on the parse (the value's size included, before anything
runs), re-rendered, and the sandbox computes each answer; its probe and seed items agree with the sandbox."""

import pytest

from populora import tasks
from populora.sandbox import Sandbox
from populora.tasks import FormatError, Invalid, Problem, Proposal, registry
from populora.tasks.lists import GENERATED_ITEMS, MAX_ITEMS, probe_set


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(workers=1)
    yield sb
    sb.close()


def test_proposals_are_parsed_into_a_canonical_expression_and_their_size_is_bounded_before_running():
    t = tasks.get("lists")
    assert t.parse_proposal("```expression\n([1,2]+[3])*2\n```").program == "([1, 2] + [3]) * 2"
    assert t.parse_proposal("```expression\n3*[0]\n```").program == "3 * [0]"
    for text, why in [
        ("```expression\n[1] * 5\n```", "integers 0..4"),
        ("```expression\n[[1] * 4] * 4\n```", "integers 0..99"),  # nested lists are not elements
        ("```expression\n([1, 2, 3, 4] * 4) * 2\n```", "32 elements"),
        ("```expression\n([1, 2, 3, 4] * 4) + [5]\n```", f"17 elements (at most {MAX_ITEMS})"),
        ("```expression\n2 * 3 * [1]\n```", "Constant not allowed"),
        ("```expression\n[1] - [1]\n```", "BinOp not allowed"),
        ("```expression\nlist(range(9))\n```", "operator"),
        ("```expression\n[1, 2]\n```", "operator"),
        ("```expression\n[100] + [1]\n```", "integers 0..99"),
        ("```expression\n[] + [1]\n```", "1..6 integers"),
        ("no block", "no ```expression"),
    ]:
        got = t.parse_proposal(text)
        assert isinstance(got, FormatError) and why in got.reason, (text, got)


def test_the_sandbox_computes_the_list_and_scoring_is_type_strict(sandbox):
    t = tasks.get("lists")
    (ok,) = t.validate([Proposal("([1, 2] + [3]) * 2", ("",))], sandbox)
    assert isinstance(ok, Problem) and ok.outputs == ("[1, 2, 3, 1, 2, 3]",) and ok.task == "lists"
    answers = [
        t.parse_answer(f"```output\n{a}\n```")
        for a in ("[1, 2, 3, 1, 2, 3]", "[1, 2, 3]", "(1, 2, 3, 1, 2, 3)")
    ]
    assert isinstance(answers[2], FormatError) and "not a list" in answers[2].reason
    assert t.score(ok, answers, sandbox) == [True, False, False]
    assert tasks.score_many([(t, ok, answers)], sandbox)[0].solves == [True, False, False]
    gold = t.parse_answer(t.render_answer(t.gold_answer(ok)))
    assert t.gold_answer(ok) == "[1, 2, 3, 1, 2, 3]" and t.score(ok, [gold]) == [True]
    (empty,) = t.validate([Proposal("[4, 5] * 0", ("",))], sandbox)
    assert empty.outputs == ("[]",) and not isinstance(empty, Invalid)


def test_probe_items_agree_with_the_sandbox_and_seeds_avoid_them(sandbox):
    items = probe_set()
    assert len(items) == 64 and len({p.id for p in items}) == 64
    outs = sandbox.run_many([(p.program, "f()") for p in items])
    assert [o.value_repr for o in outs] == [p.output for p in items]
    assert all(
        len(eval(p.output)) <= GENERATED_ITEMS for p in items
    )  # a plain list literal, from the sandbox
    seeds = registry.seed_problems("lists", 8, sandbox, seed=0)
    assert len(seeds) == 8 and not {p.program for p in seeds} & {p.program for p in items}
    assert registry.seed_problems("lists", 8, sandbox, seed=0) == seeds  # the run's seed fixes them


def test_a_value_the_answer_format_cannot_hold_is_invalid(sandbox):
    """Issue 50: validation refuses a value that no answer can give back (an answer must be a list literal).
    The parse check already keeps the family's proposals to lists; a proposal made by hand, or by a plugin
    subclass with a looser check, that yields a tuple was valid and unsolvable."""
    t = tasks.get("lists")
    tup, ok, empty = t.validate(
        [Proposal("(1, 2) * 2", ("",)), Proposal("[1, 2] * 2", ("",)), Proposal("[7] * 0", ("",))], sandbox
    )
    assert isinstance(tup, Invalid) and tup.reason == "the value cannot be written as an answer (not a list)"
    assert isinstance(ok, Problem) and isinstance(empty, Problem) and empty.output == "[]"
