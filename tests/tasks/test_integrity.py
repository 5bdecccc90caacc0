"""Issue 29, the task side of reward integrity, on the real sandbox:

- validation and scoring send byte-identical jobs for the same input (one call builder, `job_call`), so a
  teacher program that reads its own call cannot tell them apart and set its student's solve rate;
- the determinism check rejects one-bit randomness with high probability (repeated identical passes and
  heap-shifted rounds on the second workers);
- scoring one problem has a deadline after which the remaining answers score False and are counted.
"""

from __future__ import annotations

import pytest

from populora import tasks as T
from populora.tasks.base import TaskConfig, job_call
from populora.tasks.policy import CapabilityPolicy
from populora.tasks.types import Invalid, InvalidProblem, Proposal

# The policy with its lists switched off (the reflection rules stay): what a program gets past a policy bug.
LAX = CapabilityPolicy(
    deny_modules=frozenset(),
    deny_names=frozenset(),
    deny_attrs=frozenset(),
    allow_modules=None,
    allow_names=None,
)

# The attack: the teacher program finds its own call text in the frames above it, tells validation
# (whose calls had a newline) from scoring, and answers right only in validation.
SNOOPING_TEACHER = """import sys
def calls_seen():
    out = []
    fr = sys._getframe(2)
    while fr is not None:
        for v in list(fr.f_locals.values()):
            if isinstance(v, dict) and isinstance(v.get('call'), str):
                out.append(v['call'])
            elif isinstance(v, str) and v.startswith('f('):
                out.append(v)
        fr = fr.f_back
    return out
def f(x):
    validating = any(chr(10) in c for c in calls_seen())
    return x * 2 if validating else -x
"""


class Recording:
    """The real sandbox, remembering every `run_many` call (jobs, limits, variant)."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.limits = sandbox.limits
        self.supports_variants = sandbox.supports_variants
        self.calls: list[tuple[list, object, dict]] = []

    def run_many(self, jobs, limits=None, **kw):
        self.calls.append((list(jobs), limits, kw))
        return self.sandbox.run_many(jobs, limits=limits, **kw)


def test_one_call_builder_canonical_text():
    assert job_call("1,[2,  3] , k = 'a'  # note") == "f(1, [2, 3], k='a')"
    assert job_call(job_call("1,[2,3]")[2:-1]) == job_call("1,[2,3]")


@pytest.mark.parametrize("task", ["code_i", "code_f"])
def test_validation_and_scoring_send_identical_jobs(sandbox, task):
    t = T.get(task)
    rec = Recording(sandbox)
    prog = "def f(a, b=0):\n    return [a, b]"
    inputs = ["1,  2 # c", "[3,4]", "5, b=6", "'x'"]
    p = t.problem_from(rec, program=prog, inputs=inputs if task == "code_f" else inputs[:1], message="m")
    validation = [(jobs, lim, kw) for jobs, lim, kw in rec.calls]
    rec.calls.clear()
    assert t.score(p, [t.gold_answer(p)], rec) == [True]
    # The job sees its program, call and limits; the deadline stays in this process (`deadline_s`).
    assert all(set(kw) <= {"deadline_s"} for _, _, kw in rec.calls)
    scoring_jobs = {(job, lim) for jobs, lim, kw in rec.calls for job in jobs}
    assert scoring_jobs, "scoring ran no job"
    # Every job validation runs in the scoring form (variant 0, default limits) is a scoring job, byte for
    # byte, and each scoring job was run by validation in exactly that form.
    plain = {(job, lim) for jobs, lim, kw in validation for job in jobs if not kw and lim is None}
    if task == "code_i":
        assert scoring_jobs <= plain and len(plain) == 1
    else:  # scoring runs the gold program on the hidden inputs: the same jobs as validation's pass 1
        assert scoring_jobs <= plain


def test_a_teacher_reading_its_call_cannot_set_its_solve_rate(sandbox):
    """The policy now refuses every way tried to read the call (sys, frames, format walks, see
    tests/sandbox/test_attacks_policy.py), so the check runs with the lists switched off: the program does
    read its call here, and still cannot behave differently in scoring."""
    t = T.get("code_i", policy=LAX)
    p = t.problem_from(sandbox, program=SNOOPING_TEACHER, inputs=["3"])
    solves = t.score(p, [t.gold_answer(p)] * 5 + ["4"], sandbox)
    assert solves == [True] * 5 + [False], (p.outputs, solves)


# Sources of one random bit the issue found accepted about half the time by the two-run check.
ONE_BIT = {
    "normal_dist_samples": "import statistics\ndef f(x):\n    return statistics.NormalDist().samples(1)[0] > 0",
    "hash_of_nan": "def f(x):\n    return hash(float('nan')) >> 1 & 1",
    "set_of_objects": "def f(x):\n    class A:\n        pass\n    a, b = A(), A()\n    return next(iter({a, b})) is a",
}


@pytest.mark.parametrize("name", sorted(ONE_BIT))
def test_one_bit_randomness_is_rejected_with_high_probability(sandbox, name):
    # A fair bit survives the default 5 identical repeats with probability 1/32 (and the 5 heap-shifted
    # rounds with about as much again); the old two-run check let it through about half the time. 10
    # proposals: the old check accepts <= 2 of them with probability 5.5%, the new one > 2 with < 0.4%.
    t = T.get("code_o")
    results = [t.validate([Proposal(ONE_BIT[name], ("3",))], sandbox)[0] for _ in range(10)]
    accepted = sum(not isinstance(r, Invalid) for r in results)
    assert accepted <= 2, f"{name}: {accepted}/10 accepted"
    assert all("nondeterministic" in r.reason for r in results if isinstance(r, Invalid))


def test_repeats_catch_randomness_that_the_variant_pass_misses(sandbox):
    """With the heap-shifted rounds alone (repeats=0 gives one round), a fair bit is often accepted; the
    identical repeats are what make it rare."""
    lone = T.get("code_o", determinism_repeats=0)
    many = T.get("code_o")
    prog = ONE_BIT["normal_dist_samples"]
    acc0 = sum(
        not isinstance(lone.validate([Proposal(prog, ("1",))], sandbox)[0], Invalid) for _ in range(12)
    )
    acc5 = sum(
        not isinstance(many.validate([Proposal(prog, ("1",))], sandbox)[0], Invalid) for _ in range(12)
    )
    assert acc5 <= 2 and acc0 >= acc5, (acc0, acc5)


def test_deterministic_programs_pass_every_repeat(sandbox):
    t = T.get("code_f")
    p = t.problem_from(
        sandbox,
        program="def f(x):\n    return sorted({str(x), 'a', 'b'}), {'k': [x]}, 1.5 * x",
        inputs=[str(i) for i in range(6)],
        message="m",
    )
    assert len(p.outputs) == 6


def test_scoring_deadline_cuts_a_looping_program(sandbox):
    """A code_i program instant on its own input and looping on any other: without a deadline 30 answers
    cost 30 timeouts; with it the call ends and every cut answer is False and counted."""
    prog = "def f(x):\n    if x != 3:\n        while True:\n            pass\n    return x"
    t = T.get("code_i", score_deadline_s=1.0)
    p = t.problem_from(sandbox, program=prog, inputs=["3"])
    loopers = [str(i) for i in range(10, 40)]
    before = t.past_deadline
    scored = t.score_detailed(p, ["3", *loopers], sandbox)
    assert scored.solves[1:] == [False] * len(loopers)
    # the gold answer is right unless its own job was still queued when the deadline passed (then counted)
    assert scored.past_deadline == len(loopers) + (not scored.solves[0])
    assert t.past_deadline - before == scored.past_deadline
    assert t.score(p, ["3"], sandbox) == [True]  # the deadline is per call: the next problem starts afresh


def test_scoring_deadline_for_code_f_students(sandbox):
    t = T.get("code_f", score_deadline_s=1.0)
    p = t.problem_from(
        sandbox, program="def f(x):\n    return x + 1", inputs=["1", "2", "3", "4"], message="m"
    )
    looper = "def f(x):\n    while True:\n        pass"
    variants = [looper + f"\n# {k}" for k in range(8)]  # distinct programs: one job each
    scored = t.score_detailed(p, variants, sandbox)
    assert scored.solves == [False] * 8 and scored.past_deadline == 8


def test_step_deadline_bounds_every_later_problem(sandbox):
    """The trainer's deadline for a whole step's scoring (`until`): once it has passed, a later problem runs no
    job at all; its answers, right or wrong, score False and are counted, while the problem's own deadline
    (`score_deadline_s`) would still have allowed them."""
    import time

    t = T.get("code_i", score_deadline_s=60.0)
    p = t.problem_from(sandbox, program="def f(x):\n    return x * 2", inputs=["3"])
    assert t.score(p, ["3", "4"], sandbox, until=time.monotonic() + 60) == [True, False]
    scored = t.score_detailed(p, ["3", "4"], sandbox, until=time.monotonic() - 1.0)
    assert scored.solves == [False, False] and scored.past_deadline == 2


@pytest.mark.parametrize(
    "kw",
    [
        {"determinism_repeats": -1},
        {"determinism_repeats": 1.5},
        {"score_deadline_s": 0},
        {"score_deadline_s": "5"},
    ],
)
def test_task_config_bounds(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        TaskConfig(**kw)


def test_invalid_problem_message_names_nondeterminism(sandbox):
    t = T.get("code_o")
    with pytest.raises(InvalidProblem, match="nondeterministic"):
        for _ in range(3):  # a fair bit survives three tries of the check with odds below 1 in 30,000
            t.problem_from(sandbox, program=ONE_BIT["normal_dist_samples"], inputs=["1"])
