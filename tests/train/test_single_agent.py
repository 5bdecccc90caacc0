"""The single-agent baseline per AZR (population.single_solver=buffer): its rollouts on its own proposals only
estimate s for the proposer's reward and are never trained on; its solver trains on problems drawn from the
buffers (the step's valid proposals first, the rest uniformly), as many per task type as it proposed. Real
sandbox, real engine on a tiny random model, hand-written proposals; and one real single-mode step."""

import random

import pytest

from populora import tasks
from populora.config import load_config
from populora.diagnostics.schema import check_metrics_record
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.train.records import ProposalTrace, problem_records
from populora.train.trainer import Trainer


def _gen(engine, text: str) -> Generation:
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    return Generation(ids, text, [-1.0] * len(ids), "stop", prompt_ids=engine.encode("p"), slot=0)


def _trainer(tmp_path, overrides=()) -> Trainer:
    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny",
        [
            "population.mode=single",
            "sandbox.workers=1",
            "rl.rollouts=2",
            "tasks.template=compact",
            "tasks.seed_synthetic=0",
            "tasks.teacher_max_new_tokens=8",
            "tasks.student_max_new_tokens=8",
            *overrides,
        ],
    )
    tr = Trainer(cfg, tmp_path / "run", engine=build(model=model, tokenizer=tok, n_slots=1, rank=4, alpha=8))
    tr.quiet = True
    tr.setup()
    return tr


@pytest.fixture
def single(tmp_path):
    tr = _trainer(tmp_path)
    yield tr
    tr.close()


def _proposals(tr) -> list[ProposalTrace]:
    """Two code_o proposals (one valid, one unparsable) and one valid code_i proposal."""
    code_o, code_i = tasks.get("code_o"), tasks.get("code_i")
    texts = [
        ("code_o", code_o.render_proposal("def f(x):\n    return x * 3", ["4"], template="compact")),
        ("code_o", "no blocks here"),
        ("code_i", code_i.render_proposal("def f(x):\n    return x + 7", ["2"], template="compact")),
    ]
    return [ProposalTrace("A0", "A0", task, gen=_gen(tr.engine, text)) for task, text in texts]


def test_solver_problems_are_the_new_ones_first_then_the_buffer(single):
    tr = single
    props = _proposals(tr)
    tr.validate(props, step=1)
    assert [p.valid for p in props] == [True, False, True]
    tr.rng = random.Random(0)
    drawn = tr.solver_problems(props)
    by_task = {t: [d for d in drawn if d.task == t] for t in ("code_i", "code_o", "code_f")}
    # as many per type as it proposed of that type (2 code_o, 1 code_i, 0 code_f): a student's matchup
    assert [len(by_task[t]) for t in ("code_i", "code_o", "code_f")] == [1, 2, 0]
    assert by_task["code_o"][0].problem.id == props[0].problem.id  # the step's valid proposal first
    assert by_task["code_i"][0].problem.id == props[2].problem.id
    # the second code_o problem comes from the buffer: the identity seed, the only other code_o problem
    assert by_task["code_o"][1].problem.program == "def f(a):\n    return a"
    assert all(d.from_buffer and not d.proposed and d.gen is None for d in drawn)


def test_estimation_rollouts_set_the_reward_and_train_nothing(single):
    tr = single
    props = _proposals(tr)
    tr.validate(props, step=1)
    for p in props:
        p.estimate = True
    tr.rng = random.Random(0)
    traces = props + tr.solver_problems(props)
    tr.solve(traces, step=1)
    # hand-set answers so the rates are known: the estimation of code_o's proposal solves 1 of 2
    code_o = tasks.get("code_o")
    right, wrong = (
        code_o.render_answer("12", template="compact"),
        code_o.render_answer("5", template="compact"),
    )
    props[0].answers = [_gen(tr.engine, right), _gen(tr.engine, wrong)]
    tr.score(traces)
    assert props[0].solve_rate == 0.5 and props[0].reward == pytest.approx(0.5)  # AZR: 1 - s for 0 < s < 1
    assert props[1].reward == -1.0  # invalid
    rows = tr.build_rows(traces)
    proposer_rows = [r for r in rows if r.loss_group == "teacher"]
    solver_rows = [r for r in rows if r.loss_group == "student"]
    assert len(proposer_rows) == 3  # every proposal, valid or not
    # solver rows: 3 buffer problems x 2 rollouts; the 2 x 2 estimation rollouts are not among them
    buf_ids = [tuple(g.token_ids) for t in traces if t.from_buffer for g in t.answers]
    assert len(solver_rows) == len(buf_ids) == 6
    assert [tuple(r.response_ids) for r in solver_rows] == buf_ids
    assert len(rows) == 3 + 6  # trained on its estimation rollouts too it would have 3 + 6 + 2 + 2 rows
    # problems.jsonl logs the proposals only
    assert [r["task"] for r in problem_records(1, traces)] == ["code_o", "code_o", "code_i"]


def test_the_old_baseline_stays_an_option(tmp_path):
    tr = _trainer(tmp_path, ["population.single_solver=estimation"])
    try:
        res = tr.step(1)
        assert not any(t.from_buffer or t.estimate for t in res.traces)
    finally:
        tr.close()


def test_a_real_single_mode_step(single):
    res = single.step(1)
    props = [t for t in res.traces if t.proposed]
    drawn = [t for t in res.traces if t.from_buffer]
    assert len(props) == single.cfg.tasks.prompts and all(t.estimate for t in props)
    assert len(drawn) == len(props)  # one matchup's problems
    assert all(len(t.answers) == single.cfg.rl.rollouts for t in drawn)
    rec = res.record
    assert check_metrics_record(rec) == []
    assert rec["games"] == {} and rec["mode"] == "single"
    valid = [t for t in props if t.valid]
    solves = [s for t in valid for s in t.solves]
    expected = sum(solves) / len(solves) if solves else None
    assert rec["self_solve_rate"] == expected  # the estimation rollouts' mean solve rate
    a0 = rec["members"]["A0"]
    # the solver's solve rate is on the buffer problems it trained on, not on the estimation rollouts
    ds = [s for t in drawn for s in t.solves]
    assert a0["solve_rate"]["all"] == pytest.approx(sum(ds) / len(ds))
