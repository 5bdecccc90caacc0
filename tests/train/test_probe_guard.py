"""The probe guard (train/probe_guard.py): a proposal whose program is a probe program, exactly or with other
constants, is out of the game (no reward, row, buffer entry or rating) and counted in metrics.jsonl."""

import json

import pytest
from test_step_phases import _gen, set_up_trainer, trainer  # noqa: F401 - the fixture: a real trainer

from populora import tasks
from populora.engine.testing import random_model
from populora.pretrain.probe import load_probe
from populora.train.probe_guard import ProbeGuard, program_key
from populora.train.records import ProposalTrace, metrics_record, problem_records


def test_masking_keeps_names_and_structure_and_drops_constants():
    a = "def f(s, xs):\n    total = (2 * 3 * 8)\n    return total"
    assert program_key(a) == program_key("def f(s,xs):\n  total = 5*'x'*-1  # another\n  return total")
    assert program_key(a, masked=False) == program_key(
        "def f(s, xs):\n    total = 2 * 3 * 8\n    return total", masked=False
    )
    assert program_key(a, masked=False) != program_key(a.replace("8", "9"), masked=False)
    assert program_key(a) != program_key(a.replace("total", "t"))  # names are kept
    assert program_key(a) != program_key(a.replace("2 * 3", "2 + 3"))  # so are operators
    assert program_key(a) != program_key(a.replace("return total", "return total > 0"))
    assert program_key("def f(:") is None


def test_the_guard_knows_every_probe_program_of_every_task():
    guard = ProbeGuard.from_probe_sets()
    for task in ("code_i", "code_o", "code_f"):
        probe = load_probe(task)
        assert guard.collides(probe[0].program) and guard.collides(probe[-1].program)
    assert not guard.collides("def f(a):\n    return [a, a, a, a, a, a, a]")
    assert not guard.collides(None) and not guard.collides("def f(:")


def _with_new_constants(program: str) -> str:
    import ast

    class Bump(ast.NodeTransformer):
        def visit_Constant(self, node):
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                return ast.Constant(node.value + 11)
            if isinstance(node.value, str):
                return ast.Constant(node.value + "q")
            return node

    return ast.unparse(Bump().visit(ast.parse(program)))


def test_a_probe_program_with_other_constants_is_dropped_before_training(trainer):  # noqa: F811
    tr = trainer
    probe = next(p for p in load_probe("code_o") if any(c.isdigit() for c in p.program))
    program = _with_new_constants(probe.program)
    assert program != probe.program and program_key(program) == program_key(probe.program)
    code_o = tasks.get("code_o")
    text = code_o.render_proposal(program, [probe.inputs[0]], template="compact")
    twin = ProposalTrace("T0", "S0", "code_o", gen=_gen(tr.engine, 0, "p", text))
    own = "def f(a, b):\n    return [a, b, a, b, a]"
    ok = ProposalTrace(
        "T0",
        "S0",
        "code_o",
        gen=_gen(tr.engine, 0, "p", code_o.render_proposal(own, ["1, 2"], template="compact")),
    )
    before = len(tr.buffers["code_o"])
    tr.validate([twin, ok], step=1)
    # the same program is valid to the sandbox: only the guard drops it
    assert twin.probe_collision and not twin.valid and twin.reason == "probe collision"
    assert ok.valid and not ok.probe_collision
    assert len(tr.buffers["code_o"]) == before + 1  # only the new program entered the buffers
    tr.solve([twin, ok], step=1)
    assert twin.answers == [] and len(ok.answers) == 2
    tr.score([twin, ok], step=1)
    assert twin.reward == 0.0 and twin.answer_rewards == []
    rows = tr.build_rows([twin, ok])
    assert len(rows) == 1 + 2  # the valid proposal's teacher row and its two answers
    assert sum(r.response_ids == twin.gen.token_ids for r in rows) == 0  # no row of the colliding proposal
    matchups = tr.rate([("T0", "S0")], [twin, ok], step=1)
    assert matchups[0]["n_problems"] == 1
    rec = metrics_record(
        1,
        [twin, ok],
        {},
        matchups,
        dict.fromkeys(("teacher", "student"), 0.0),
        0.0,
        members=tr.pop.ordered(),
        mode="population",
        coverage=tr.coverage,
    )
    assert rec["probe_collisions"] == {"code_o": 1}
    assert rec["members"]["T0"]["n_proposed"] == 1 and rec["members"]["T0"]["valid_rate"] == 1.0
    lines = problem_records(1, [twin, ok])
    assert lines[0]["reason"] == "probe collision" and lines[0]["program"] == program


def test_check_proposals_alone_does_not_drop_probe_programs(trainer):  # noqa: F811
    # the validity probe shows teachers probe programs on purpose; it measures, it does not train
    probe = load_probe("code_o")[0]
    text = tasks.get("code_o").render_proposal(probe.program, [probe.inputs[0]], template="compact")
    tr_ = ProposalTrace("T0", "T0", "code_o", gen=_gen(trainer.engine, 0, "p", text))
    trainer.check_proposals([tr_], step=-1)
    assert tr_.valid and not tr_.probe_collision


@pytest.fixture
def easy_trainer(tmp_path):
    """A trainer whose model folder says it was pretrained on the level-easy generator (the v1 asset's), probed
    on the fixed sets: that generator's training split has masked twins of the fixed probe, so the guard has
    something to keep out. (The graded generator splits on the masked program: no seed can twin its probe.)"""
    model, tok = random_model(seed=0)
    folder = tmp_path / "easy-model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "pretrain_info.json").write_text(json.dumps({"config": {"level": "easy"}}))
    tr = set_up_trainer(tmp_path, [f"model.name={folder}", "diagnostics.probe_set=fixed"], (model, tok))
    yield tr
    tr.close()


def test_seeds_that_twin_a_probe_program_stay_out_of_the_buffers(easy_trainer):
    from populora.train.setup import synthetic_seeds

    tr = easy_trainer
    guard = tr.probe_guard
    seeds = synthetic_seeds(tr.cfg.tasks.seed_synthetic, tr.sandbox, tr.cfg.train.seed)
    twins = [p for p in seeds if guard.collides(p.program)]
    assert twins, "the generator's training split has masked twins of the probe (4 of 48 at seed 0)"
    for p in twins:
        assert p not in tr.buffers[p.task]
    assert all(p in tr.buffers[p.task] for p in seeds if p not in twins and p.task != "code_f")


def test_graded_seeds_never_twin_the_graded_probe(trainer):  # noqa: F811
    from populora.pretrain.graded import parse_levels
    from populora.train.setup import synthetic_seeds

    assert trainer.cfg.diagnostics.probe_set == "graded"  # the tiny preset on the bundled (graded) model
    seeds = synthetic_seeds(64, trainer.sandbox, 0, parse_levels("1-5"))
    assert len(seeds) > 150 and not any(trainer.probe_guard.collides(p.program) for p in seeds)
