"""The graded program generator (issue 30 §1): levels, validity, rising complexity, size, the masked split."""

from __future__ import annotations

import random
import statistics

import pytest

from populora.diagnostics.features import program_features
from populora.pretrain import programs
from populora.pretrain.graded import (
    LEVELS,
    STATEMENT_RANGE,
    GradedError,
    graded_split,
    masked_key,
    probe_items,
    run_bounded,
    sample_graded,
    top_level_statements,
)
from populora.tasks.policy import parse_program


@pytest.fixture(scope="module")
def per_level():
    rng = random.Random(7)
    return {lv: [sample_graded(rng, lv) for _ in range(150)] for lv in LEVELS}


def test_programs_are_valid_tagged_and_run(per_level):
    for lv, progs in per_level.items():
        lo, hi = STATEMENT_RANGE[lv]
        for p in progs:
            assert p.level == lv
            assert parse_program(p.code, require_params=True)[1] is None, p.code
            assert lo <= top_level_statements(p.code) <= hi
            assert p.features == program_features(p.code)
            assert graded_split(p.code) == "train"
            ((inp, out),) = p.pairs
            assert run_bounded(programs.compile_program(p.code), inp) == out
    assert min(top_level_statements(p.code) for p in per_level[5]) >= 6


def test_complexity_rises_with_level(per_level):
    for feat in ("ast_depth", "cyclomatic", "loc"):
        means = [statistics.mean(p.features[feat] for p in per_level[lv]) for lv in LEVELS]
        assert all(a < b for a, b in zip(means, means[1:], strict=False)), (feat, means)


def test_higher_levels_use_their_constructs(per_level):
    top = "\n".join(p.code for p in per_level[4] + per_level[5])
    for construct in ("    def ", "elif ", "for ", ".get(", ".join("):
        assert construct in top


def test_deterministic_from_seed():
    a = [sample_graded(random.Random(3)).code for _ in range(1)] + [
        p.code for p in (sample_graded(random.Random(4), lv) for lv in LEVELS)
    ]
    b = [sample_graded(random.Random(3)).code for _ in range(1)] + [
        p.code for p in (sample_graded(random.Random(4), lv) for lv in LEVELS)
    ]
    assert a == b


def test_many_distinct_masked_programs(per_level):
    # The 10^6 claim is measured on large samples in docs/tiny-model.md; this is a fast bound: above level 1,
    # masked programs almost never repeat (a generator of ~10^4 programs would repeat within 150 draws).
    for lv in LEVELS[1:]:
        assert len({masked_key(p.code) for p in per_level[lv]}) >= 145, lv


def test_split_is_on_the_masked_program(per_level):
    # Constant-variants of one program share a masked key, so they share a split (the text hash did not).
    a = "def f(n):\n    r = n * 3 + 1\n    return r"
    variants = [a.replace("3", str(k)).replace("1", str(j)) for k in range(2, 9) for j in range(2, 9)]
    assert len({masked_key(v) for v in variants}) == 1
    assert len({graded_split(v) for v in variants}) == 1
    assert len({programs.program_split(v) for v in variants}) == 2  # the old split put twins on both sides
    train = {masked_key(p.code) for progs in per_level.values() for p in progs}
    rng = random.Random(5)
    probe = {masked_key(sample_graded(rng, lv, split="probe").code) for lv in LEVELS for _ in range(12)}
    assert not train & probe


def test_probe_items_are_stratified_and_held_out():
    items = probe_items("code_f", 12, n_inputs=4)
    levels = [lv for lv, _ in items]
    assert levels == [1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 5]
    assert all(graded_split(p.code) == "probe" and len(p.pairs) == 4 for _, p in items)
    assert len({masked_key(p.code) for _, p in items}) == 12
    assert probe_items("code_o", 5)[4][1].level == 5


def test_step_bound_stops_runaway_code():
    fn = programs.compile_program("def f(n):\n    while n > 0:\n        n += 1\n    return n")
    assert run_bounded(fn, "1") is None
    assert run_bounded(programs.compile_program("def f(n):\n    return n + 1"), "1") == "2"


def test_bad_arguments_name_the_problem():
    with pytest.raises(GradedError, match="level must be one of"):
        sample_graded(random.Random(0), level=6)
    with pytest.raises(GradedError, match="split must be one of"):
        sample_graded(random.Random(0), split="heldout")
    with pytest.raises(GradedError, match="task must be one of"):
        probe_items("code_x", 5)


def test_parse_levels_accepts_ranges_and_lists_and_names_bad_parts():
    from populora.pretrain.graded import is_graded_level, parse_levels

    assert parse_levels("1-5") == (1, 2, 3, 4, 5)
    assert parse_levels("1,1,3") == (1, 1, 3) and parse_levels("4") == (4,)
    for bad in ("0-2", "3-1", "x", "1-9", "2,"):
        with pytest.raises(GradedError, match="bad level"):
            parse_levels(bad)
    assert is_graded_level("1-5") and not is_graded_level("easy") and not is_graded_level("full")


def test_graded_corpus_traces_every_code_o_answer_and_draws_from_train():
    from populora.pretrain.corpus import build_corpus
    from populora.pretrain.tasks_render import TasksRenderer
    from populora.tasks import get

    mix = {"student:code_o": 3.0, "teacher:code_i": 1.0, "student:code_f": 1.0}
    exs = build_corpus(3, 30, TasksRenderer(), level="4-5", trace=True, mix=mix, k_refs=(1, 2))
    code_o = [e for e in exs if e.kind == "student:code_o"]
    assert code_o and all(e.completion.startswith("```trace\n") for e in code_o)
    t = get("code_o")
    for e in code_o:  # the answer block after the trace is still the true output
        prog = e.prompt.split("```python\n", 1)[1].split("\n```", 1)[0]
        inp = e.prompt.split("```input\n", 1)[1].split("\n```", 1)[0]
        assert graded_split(prog) == "train" and top_level_statements(prog) >= 4
        out = e.completion.rsplit("```output\n", 1)[1].split("\n```", 1)[0]
        assert out == run_bounded(programs.compile_program(prog), inp)
        assert t.parse_answer(e.completion) is not None
    with pytest.raises(ValueError, match="one answer style"):
        build_corpus(3, 2, TasksRenderer(), level="1-5", trace=True, trace_fraction=0.5)


def test_student_level_draws_student_examples_from_its_own_levels():
    from populora.pretrain.corpus import build_corpus
    from populora.pretrain.tasks_render import TasksRenderer

    mix = {"student:code_o": 1.0, "teacher:code_o": 1.0}
    exs = build_corpus(
        5, 40, TasksRenderer(), level="5", student_level="1", trace=True, mix=mix, k_refs=(1, 1)
    )
    students = [e for e in exs if e.kind == "student:code_o"]
    teachers = [e for e in exs if e.kind == "teacher:code_o"]
    assert students and teachers

    def program(text: str) -> str:
        return text.split("```python\n", 1)[1].split("\n```", 1)[0]

    assert all(top_level_statements(program(e.prompt)) <= 2 for e in students)  # level 1: 1-2 statements
    assert all(top_level_statements(program(e.completion)) >= 6 for e in teachers)  # level 5: 6-8
    with pytest.raises(ValueError, match="student_level needs graded levels"):
        build_corpus(3, 2, TasksRenderer(), level="easy", student_level="1")
