"""`tasks.score_many`: many problems scored in one sandbox `run_many` per round, on the real sandbox.

The verdicts must be exactly those of scoring one problem after another (`task.score_detailed`), the deadline
must cut (and count) only the answers whose jobs were still unfinished, and a trainer step must give the same
solves and rewards batched as problem by problem."""

import copy
import time

import pytest

from populora import tasks
from populora.tasks import score_many

DOUBLE = "def f(x):\n    return x * 2"
# instant on its own input, loops on every other one (the case the scoring deadline exists for)
TRAP = "def f(x):\n    if x == 3:\n        return 1\n    while True:\n        pass"
PLUS = "def f(a):\n    return a + 1"
LOOP_F = "def f(a):\n    while True:\n        pass"


class Counting:
    """The real sandbox, with its `run_many` calls counted (the batch contract is one call per round)."""

    def __init__(self, sandbox):
        self.sandbox, self.calls = sandbox, []

    def run_many(self, jobs, **kw):
        self.calls.append(len(jobs))
        return self.sandbox.run_many(jobs, **kw)


def _mixed(sandbox):
    """(task, problem, answers) covering right, wrong, unparsable and looping answers of each task type."""
    ci, co, cf = tasks.get("code_i"), tasks.get("code_o"), tasks.get("code_f")
    p_double = ci.problem_from(sandbox, program=DOUBLE, inputs=["3"])
    p_trap = ci.problem_from(sandbox, program=TRAP, inputs=["3"])
    p_o = co.problem_from(sandbox, program=DOUBLE, inputs=["3"])
    p_f = cf.problem_from(sandbox, program=PLUS, inputs=["1", "2", "3", "4"], message="adds something")
    assert [i for i, _ in p_f.hidden] == ["3", "4"]  # two rounds for a candidate right on the first
    items = [
        (ci, p_double, ["3", "4", "3", "not a literal(", "y=3"]),
        (ci, p_trap, ["3", "5"]),
        (co, p_o, ["6", "7", "[", "6.0"]),
        (
            cf,
            p_f,
            [
                PLUS,
                "def f(a):\n    return a",
                "def f(a):\n    return a + 1 if a < 4 else 0",  # right on the first hidden pair only
                LOOP_F,
                "def g(",
                "def f(a):\n    import os\n    return a + 1",  # refused by the capability policy
            ],
        ),
    ]
    want = [
        [True, False, True, False, False],
        [True, False],
        [True, False, False, False],
        [True, False, False, False, False, False],
    ]
    return items, want


def test_batched_verdicts_equal_per_problem(quick_sandbox):
    items, want = _mixed(quick_sandbox)
    single = Counting(quick_sandbox)
    one_by_one = [t.score_detailed(p, a, single) for t, p, a in items]
    batch = Counting(quick_sandbox)
    batched = score_many(items, batch)
    assert [s.solves for s in one_by_one] == want
    assert batched == one_by_one  # solves and past_deadline (0: no deadline hit), item by item
    # per problem: code_i 1 + 1 rounds, code_f 2 rounds (the only candidate right on hidden pair 1 goes on)
    assert single.calls == [3, 2, 4, 2]
    # batched: round 1 holds every problem's first jobs (3 + 2 + 4), round 2 code_f's survivors (2)
    assert batch.calls == [9, 2]


def test_score_detailed_is_score_many_of_one(quick_sandbox):
    items, want = _mixed(quick_sandbox)
    for (t, p, a), w in zip(items, want, strict=True):
        assert t.score(p, a, quick_sandbox) == w
        assert score_many([(t, p, a)], quick_sandbox)[0].solves == w


def test_code_o_only_needs_no_sandbox(quick_sandbox):
    items, _ = _mixed(quick_sandbox)
    assert score_many([items[2]], None)[0].solves == [True, False, False, False]
    with pytest.raises(ValueError, match="code_i scoring runs programs in the sandbox: pass a Sandbox"):
        score_many(items[:1], None)


def test_past_step_deadline_cuts_every_sandbox_answer_and_counts_it(quick_sandbox):
    items, _ = _mixed(quick_sandbox)
    before = {t.name: t.past_deadline for t, _, _ in items}
    out = score_many(items, quick_sandbox, until=time.monotonic() - 1.0)
    # every answer with a job (a repeated one each time) scores False and is counted; unparsable or
    # policy-refused answers and code_o are not cut
    assert [s.past_deadline for s in out] == [4, 2, 0, 4]
    assert out[2].solves == [True, False, False, False]
    assert not any(out[0].solves + out[1].solves + out[3].solves)
    assert {t.name: t.past_deadline - before[t.name] for t, _, _ in items} == {
        "code_i": 6,
        "code_o": 0,
        "code_f": 4,
    }


def test_deadline_cuts_only_the_unfinished_jobs(sandbox):
    # a 5 s job limit: the loopers end only by the deadline, 2 problems with jobs x 1 s after the start
    ci = tasks.get("code_i", score_deadline_s=1.0)
    cf = tasks.get("code_f", score_deadline_s=1.0)
    co = tasks.get("code_o", score_deadline_s=1.0)
    p_trap = ci.problem_from(sandbox, program=TRAP, inputs=["3"])
    p_f = cf.problem_from(sandbox, program=PLUS, inputs=["1", "2", "3", "4"], message="adds something")
    p_o = co.problem_from(sandbox, program=DOUBLE, inputs=["3"])
    items = [(ci, p_trap, ["3", "5", "3"]), (co, p_o, ["6"]), (cf, p_f, ["def g(", LOOP_F])]
    out = score_many(items, sandbox)
    assert [s.solves for s in out] == [[True, False, True], [True], [False, False]]
    assert [s.past_deadline for s in out] == [1, 0, 1]  # the looping answers, and only them
    assert (ci.past_deadline, co.past_deadline, cf.past_deadline) == (1, 0, 1)


def test_trainer_step_scores_the_same_batched(tmp_path):
    from populora.config import load_config
    from populora.engine import Generation, build
    from populora.engine.testing import random_model
    from populora.train.records import ProposalTrace
    from populora.train.trainer import Trainer

    model, tok = random_model(seed=0)
    cfg = load_config("tiny", ["rl.rollouts=2", "sandbox.workers=2", "tasks.template=compact"])
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.setup()
    try:
        items, _ = _mixed(tr.sandbox)

        def gen(prompt, text):
            ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
            return Generation(ids, text, [-1.0] * len(ids), "stop", engine.encode(prompt), 2)

        traces = []
        for t, p, answers in items:
            trace = ProposalTrace("T0", "S0", t.name, problem=p)
            prompt = t.student_prompt(p, template="compact")
            trace.answers = [gen(prompt, t.render_answer(a, template="compact")) for a in answers]
            traces.append(trace)
        bad = ProposalTrace("T0", "S0", "code_i")
        bad.reason = "format: no blocks"
        traces.append(bad)
        old, new = copy.deepcopy(traces), copy.deepcopy(traces)
        tr.score(old, batched=False)
        cut_old = tr.score_past_deadline
        tr.score(new)
        fields = ("solves", "formatted", "answer_rewards", "reward")
        assert [[getattr(x, f) for f in fields] for x in new] == [
            [getattr(x, f) for f in fields] for x in old
        ]
        assert tr.score_past_deadline == cut_old == 0
        assert [x.solves for x in new[:4]] == [
            [True, False, True, False, False],
            [True, False],
            [True, False, False, False],
            [True, False, False, False, False, False],
        ]
    finally:
        tr.close()


def test_the_overlap_lane_scores_in_parts_the_same_and_keeps_the_step_deadline(tmp_path):
    """`Trainer.score_ready` (train.overlap: problems scored as their rollouts come in, in any parts) then
    `score(ready=)` gives what `score` alone gives; a step deadline already past when generation ended cuts
    every sandbox answer, counted in `score_past_deadline` as without overlap."""
    from populora.config import load_config
    from populora.engine import Generation, build
    from populora.engine.testing import random_model
    from populora.train.records import ProposalTrace
    from populora.train.trainer import Ready, Trainer

    model, tok = random_model(seed=0)
    cfg = load_config("tiny", ["rl.rollouts=2", "sandbox.workers=2", "tasks.template=compact"])
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.setup()
    try:
        items, _ = _mixed(tr.sandbox)
        traces = []
        for t, p, answers in items:
            trace = ProposalTrace("T0", "S0", t.name, problem=p)
            prompt = t.student_prompt(p, template="compact")
            texts = [t.render_answer(a, template="compact") for a in answers]
            trace.answers = [
                Generation(ids, x, [-1.0] * len(ids), "stop", engine.encode(prompt), 2)
                for x in texts
                for ids in [engine.tokenizer(x, add_special_tokens=False)["input_ids"]]
            ]
            traces.append(trace)
        fields = ("solves", "formatted", "answer_rewards", "reward")
        alone, parts, late = (copy.deepcopy(traces) for _ in range(3))
        tr.score(alone)
        ready = Ready()
        tr.score_ready([(t, t.answers) for t in parts[2:3]], ready, None)  # before generation ended
        tr.score_ready([(t, t.answers) for t in (parts[0], parts[3], parts[1])], ready, time.monotonic())
        tr.score(parts, ready=ready)
        assert [[getattr(x, f) for f in fields] for x in parts] == [
            [getattr(x, f) for f in fields] for x in alone
        ]
        assert tr.score_past_deadline == 0
        ended = time.monotonic() - cfg.sandbox.score_step_deadline_s - 1.0  # generation ended too long ago
        ready = Ready()
        tr.score_ready([(t, t.answers) for t in late], ready, ended)
        tr.score(late, ready=ready)
        assert (
            ready.cut == tr.score_past_deadline == 10
        )  # as test_past_step_deadline_cuts_every_sandbox_answer
        assert late[2].solves == alone[2].solves and not any(late[0].solves + late[1].solves + late[3].solves)
    finally:
        tr.close()
