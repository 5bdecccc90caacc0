"""The shipped `arith` family: proposals are checked and re-rendered, the sandbox computes each answer."""

import pytest

from populora import tasks
from populora.diagnostics.features import FEATURES, program_features
from populora.sandbox import Sandbox
from populora.tasks import FormatError, Invalid, Problem, Proposal, registry
from populora.tasks.arith import probe_set


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(workers=1)
    yield sb
    sb.close()


def test_proposals_are_parsed_into_a_canonical_expression():
    t = tasks.get("arith")
    assert t.parse_proposal("```expression\n(3+4)*2\n```").program == "(3 + 4) * 2"
    for text, why in [
        ("```expression\n2**10\n```", "Pow"),
        ("```expression\n__import__('os')\n```", "operator"),
        ("```expression\n(7)\n```", "operator"),
        ("```expression\n1.5 + 2\n```", "integer"),
        ("```expression\n9999999 + 1\n```", "larger"),
        ("no block", "no ```expression"),
    ]:
        got = t.parse_proposal(text)
        assert isinstance(got, FormatError) and why in got.reason, (text, got)


def test_the_sandbox_computes_the_answer_and_scoring_is_type_strict(sandbox):
    t = tasks.get("arith")
    ok, div0 = t.validate([Proposal("(3 + 4) * 2", ("",)), Proposal("1 // 0", ("",))], sandbox)
    assert isinstance(ok, Problem) and ok.outputs == ("14",) and ok.task == "arith"
    assert isinstance(div0, Invalid) and "ZeroDivisionError" in div0.reason
    answers = [t.parse_answer(f"```output\n{a}\n```") for a in ("14", "15", "14.0", "'14'")]
    assert t.score(ok, answers, sandbox) == [True, False, False, False]
    assert tasks.score_many([(t, ok, answers)], sandbox)[0].solves == [True, False, False, False]
    assert t.parse_answer(t.render_answer("14")) == answers[0]
    # the gold answer (what gold-trained specialists learn from) is the sandbox's value, and it scores
    assert t.gold_answer(ok) == "14" and t.score(
        ok, [t.parse_answer(t.render_answer(t.gold_answer(ok)))]
    ) == [True]
    assert t.parse_proposal(t.render_proposal("(3 + 4) * 2")).program == "(3 + 4) * 2"


def test_probe_items_agree_with_the_sandbox_and_seeds_avoid_them(sandbox):
    items = probe_set()
    assert len(items) == 64 and len({p.id for p in items}) == 64
    outs = sandbox.run_many([(p.program, "f()") for p in items])
    assert [o.value_repr for o in outs] == [p.output for p in items]
    seeds = registry.seed_problems("arith", 8, sandbox, seed=0)
    assert len(seeds) == 8 and not {p.program for p in seeds} & {p.program for p in items}
    # arith programs are Python: the trainer measures them with the paper's four features (the default)
    assert registry.features("arith", seeds[0].program) is None
    assert set(FEATURES) <= set(program_features(seeds[0].program))


def test_a_value_the_answer_format_cannot_hold_is_invalid(sandbox):
    """Issue 50: `999999*...` with 8 factors passes the proposal check (literals <= 10**6, 55 characters) but
    its 48-digit value is longer than any answer (at most 40 digits): it was valid and unsolvable, and its
    teacher won games with it. Validation now refuses it with the reason; 40 digits (either sign) still play."""
    t = tasks.get("arith")
    huge = t.parse_proposal("```expression\n" + "*".join(["999999"] * 8) + "\n```")
    assert isinstance(huge, Proposal)
    edge = "1000000 * 1000000 * 1000000 * 1000000 * 1000000 * 1000000 * 9999"  # 40 digits
    cut, ok, neg, over, real = t.validate(
        [huge, Proposal(edge, ("",)), Proposal(f"-{edge}", ("",)), Proposal(f"{edge} * 10", ("",))]
        + [Proposal("3 * 2 // 4 + 1.5", ("",))],  # made by hand: the parse check refuses floats
        sandbox,
    )
    assert isinstance(cut, Invalid) and cut.reason == "the value has 48 digits; an answer holds at most 40"
    assert isinstance(over, Invalid) and "41 digits" in over.reason
    assert isinstance(real, Invalid) and real.reason == "the value 2.5 is not an integer an answer can give"
    for p in (ok, neg):
        assert isinstance(p, Problem) and len(p.output.lstrip("-")) == 40
        assert t.score(p, [t.parse_answer(t.render_answer(t.gold_answer(p)))]) == [True]
    with pytest.raises(tasks.InvalidProblem, match="48 digits"):  # seeds and hand-made problems alike
        t.problem_from(sandbox, "*".join(["999999"] * 8))
