"""The probe guard (train/probe_guard.py): a proposal whose program is a probe program, exactly, with other
constants or with its names renamed, is out of the game (no reward, row, buffer entry or rating) and counted in
metrics.jsonl."""

import ast
import json

import pytest
from test_step_phases import _gen, set_up_trainer, trainer  # noqa: F401 - the fixture: a real trainer

from populora import tasks
from populora.engine.testing import random_model
from populora.pretrain.probe import load_probe
from populora.tasks.policy import bound_names, parse_program
from populora.train.probe_guard import ProbeGuard, probe_key, program_key
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
    assert twins, (
        "the generator's training split has twins of the probe (10 of 48 at seed 0; 4 with names kept)"
    )
    for p in twins:
        assert p not in tr.buffers[p.task]
    assert all(p in tr.buffers[p.task] for p in seeds if p not in twins and p.task != "code_f")


def test_graded_seeds_that_twin_the_graded_probe_stay_out_of_the_buffers(trainer):  # noqa: F811
    """The graded generator splits probe from training programs on the masked key (names kept), so with names
    normalised some training programs are the probe's renamed twins (31 of 300 level-1 draws; 1 of the 192 seeds
    here, none with names kept); the guard keeps every one of them out of the buffers."""
    from populora.pretrain.graded import parse_levels
    from populora.train.setup import synthetic_seeds

    assert trainer.cfg.diagnostics.probe_set == "graded"  # the tiny preset on the bundled (graded) model
    seeds = synthetic_seeds(64, trainer.sandbox, 0, parse_levels("1-5"))
    twins = [p for p in seeds if trainer.probe_guard.collides(p.program)]
    assert len(seeds) > 150 and 0 < len(twins) < len(seeds) // 5, len(twins)  # the old guard saw none
    for p in twins:
        assert p not in trainer.buffers[p.task]


# -- issue 50: names normalised, and no program raises out of the guard ---------------------------------------


def _renamed(program: str, prefix: str = "v") -> str:
    """`program` with every name it binds renamed (parameters, locals, loop variables, f and its helpers), and its
    integer and string constants changed: a student's same exercise."""
    tree = ast.parse(program)
    names = {n: f"{prefix}{i}" for i, n in enumerate(sorted(bound_names(tree)))}

    class Rename(ast.NodeTransformer):
        def generic_visit(self, node):
            super().generic_visit(node)
            for field in ("id", "arg", "name"):
                value = getattr(node, field, None)
                if isinstance(value, str) and value in names and not isinstance(node, ast.keyword):
                    setattr(node, field, names[value])
            if isinstance(node, ast.Global | ast.Nonlocal):
                node.names = [names.get(n, n) for n in node.names]
            return node

    return ast.unparse(Rename().visit(_with_new_constants_tree(tree)))


def _with_new_constants_tree(tree):
    return ast.parse(_with_new_constants(ast.unparse(tree)))


def test_probe_key_normalises_bound_names_as_well_as_constants():
    a = "def f(s, xs):\n    total = 0\n    for c in s:\n        total += len(xs) * 2\n    return total"
    b = "def f(word, items):\n    acc = 5\n    for ch in word:\n        acc += len(items) * 9\n    return acc"
    assert probe_key(a) == probe_key(b) and program_key(a) != program_key(b)
    assert probe_key(a) != probe_key(a.replace("len(xs)", "len(s)"))  # which parameter is used still counts
    assert probe_key(a) != probe_key(a.replace("len", "max"))  # builtins are kept
    assert probe_key(a) != probe_key(a.replace("* 2", "+ 2"))  # so are operators
    assert probe_key("def f(a, b):\n    return a - b") != probe_key("def f(a, b):\n    return b - a")
    assert probe_key("def f(s):\n    return s.upper()") != probe_key("def f(s):\n    return s.lower()")
    helper = "def f(x):\n    def g(num=1):\n        return num\n    return g(num=x)"
    assert probe_key(helper) == probe_key(helper.replace("num", "k").replace("g(", "h("))
    assert probe_key("def f(:") is None and probe_key(None) is None


@pytest.mark.parametrize("probe_set", ["fixed", "graded"])
def test_every_probe_program_renamed_collides(probe_set):
    """Issue 50: a probe program with its variables renamed passed the guard (all 120 tried)."""
    from populora.pretrain.graded import TASKS
    from populora.pretrain.graded_probe import load_graded_probe
    from populora.pretrain.probe import load_probes

    guard = ProbeGuard.from_probe_sets(probe_set)
    if probe_set == "fixed":
        programs = {p.program for problems in load_probes().values() for p in problems}
    else:
        programs = {p.program for t in TASKS for _, p in load_graded_probe(t)}
    renamed = [_renamed(p) for p in sorted(programs)]
    assert len(programs) > 600 and sum(r != p for r, p in zip(renamed, sorted(programs), strict=True)) == len(
        programs
    )
    assert [r for r in renamed if not guard.collides(r)] == []


def test_unrelated_programs_still_do_not_collide():
    from pathlib import Path

    import populora

    seed_dir = Path(populora.__file__).parent / "data" / "azr_seed"
    programs = [json.loads(line)["snippet"] for f in sorted(seed_dir.glob("*.jsonl")) for line in f.open()]
    assert len(programs) == 512
    for probe_set in ("fixed", "graded"):
        guard = ProbeGuard.from_probe_sets(probe_set)
        assert [p for p in programs if guard.collides(p)] == []
        assert not guard.collides("def f(a):\n    return [a, a, a, a, a, a, a]")


def _deep_programs() -> dict[str, str]:
    n = 3000
    return {
        "add_chain_1000": "def f(x):\n    return "
        + " + ".join(["x"] * 1000),  # parses; a recursive walk overflows
        "add_chain_3000": "def f(x):\n    return " + " + ".join(["x"] * n),  # the program
        "add_chain_100k": "def f(x):\n    return " + " + ".join(["x"] * 100_000),
        "calls": "def f(x):\n    return x" + "(1)" * n,
        "subscripts": "def f(x):\n    return x" + "[0]" * n,
        "attributes": "def f(x):\n    return x" + ".real" * n,
        "unary": "def f(x):\n    return " + "-" * n + "x",
        "not_chain": "def f(x):\n    return " + "not " * n + "x",
        "if_expressions": "def f(x):\n    return " + "x if x else " * n + "x",
        "lambdas": "def f(x):\n    return " + "lambda: " * n + "x",
        "parens": "def f(x):\n    return " + "(" * 180 + "x" + ")" * 180,
        "lists": "def f(x):\n    return " + "[" * 180 + "x" + "]" * 180,
        "comparisons": "def f(x):\n    return " + " < ".join(["x"] * n),
        "booleans": "def f(x):\n    return " + " and ".join(["x"] * n),
        "strings": "def f(x):\n    return " + " + ".join(["'a'"] * n),
        "powers": "def f(x):\n    return " + " ** ".join(["x"] * n),
        "elifs": "def f(x):\n    if x:\n        return 0\n"
        + "    elif x:\n        return 0\n" * 600
        + "    return 1",
        "nested_defs": "def f(x):\n"
        + "".join("    " * (i + 1) + f"def g{i}():\n" for i in range(90))
        + "    " * 91
        + "return 1\n    return x",
        "annotation": "def f(x: " + "list[" * 150 + "int" + "]" * 150 + "):\n    return x",
        "fstring": "def f(x):\n    return f'" + "{x}" * n + "'",
        "nul": "def f(x):\n    return '\x00'",
        "surrogate": "def f(x):\n    return '\ud800'",
    }


@pytest.fixture(scope="module")
def fixed_guard():
    return ProbeGuard.from_probe_sets("fixed")


@pytest.mark.parametrize("name", sorted(_deep_programs()))
def test_deep_programs_never_raise_out_of_the_guard_or_the_policy(name, fixed_guard):
    """Issue 50: `return x + x + ...` with 3,000 terms raised RecursionError out of the probe guard. Every deep
    or long form gets an answer: the guard says collides or not, the policy refuses with a reason or allows."""
    program = _deep_programs()[name]
    assert fixed_guard.collides(program) is False
    tree, why = parse_program(program)
    assert (tree is None) != (why is None)
    # a probe program inside a deep program is still itself: the key is computed, whatever the depth
    if name == "add_chain_1000":
        assert probe_key(program) is not None
