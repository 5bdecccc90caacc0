"""The difficulty-stratified probe sets (pretrain/graded_probe.py): shipped files, even levels, held out by the
masked split, valid in the sandbox, and verdicts read per level."""

from __future__ import annotations

import pytest

from populora.pretrain.graded import LEVELS, TASKS, graded_split, masked_key
from populora.pretrain.graded_probe import (
    GRADED_PROBE_SIZE,
    GradedProbeError,
    interleave,
    level_accuracy,
    load_graded_probe,
    probe_selection,
)
from populora.sandbox import Sandbox
from populora.tasks import get


@pytest.fixture(scope="module")
def sets():
    return {t: load_graded_probe(t) for t in TASKS}


def test_shipped_sets_are_even_across_levels_and_any_prefix_is_spread(sets):
    for t, items in sets.items():
        assert len(items) == GRADED_PROBE_SIZE >= 256
        levels = [lv for lv, _ in items]
        assert all(levels.count(lv) == GRADED_PROBE_SIZE // len(LEVELS) for lv in LEVELS)
        assert levels[:10] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]  # the first k items: as even as k allows
        assert all(p.task == t for _, p in items)


def test_items_are_held_out_on_the_masked_program_and_distinct(sets):
    for items in sets.values():
        assert all(graded_split(p.program) == "probe" for _, p in items)
        assert len({masked_key(p.program) for _, p in items}) == len(items)


def test_gold_answers_score_in_the_sandbox():
    with Sandbox(workers=1) as sb:
        for t in TASKS:
            task = get(t)
            items = [p for _, p in load_graded_probe(t)[:10]]  # two per level
            gold = [
                task.score(p, [task.parse_answer(task.render_answer(task.gold_answer(p)))], sb)[0]
                for p in items
            ]
            assert all(gold)


def test_level_accuracy_by_hand():
    correct = {"S0": {"code_o": [1, 0, 1, 1], "code_i": [0, 0]}, "S1": {"code_o": [0, 0, 0, 1]}}
    levels = {"code_o": [1, 2, 1, 2], "code_i": [5, 5]}
    assert level_accuracy(correct, levels) == {
        "S0": {"code_o": {"1": 1.0, "2": 0.5}, "code_i": {"5": 0.0}},
        "S1": {"code_o": {"1": 0.0, "2": 0.5}},
    }
    with pytest.raises(GradedProbeError, match="verdicts for"):
        level_accuracy({"S0": {"code_o": [1]}}, levels)


def test_interleave_and_selection():
    assert interleave([(1, "a"), (1, "b"), (2, "c"), (3, "d")]) == [(1, "a"), (2, "c"), (3, "d"), (1, "b")]
    problems, levels = probe_selection("graded", 7, ["code_o"])
    assert levels == {"code_o": [1, 2, 3, 4, 5, 1, 2]} and len(problems["code_o"]) == 7
    problems, levels = probe_selection("fixed", 3, ["code_i"])
    assert levels is None and len(problems["code_i"]) == 3
    with pytest.raises(GradedProbeError, match="unknown probe set"):
        probe_selection("hard", 3)


def test_selection_of_some_levels_takes_their_items_in_file_order():
    problems, levels = probe_selection("graded", 10, ["code_f"], levels=(1,))
    level_1 = [p for lv, p in load_graded_probe("code_f") if lv == 1]
    assert [p.id for p in problems["code_f"]] == [p.id for p in level_1[:10]]
    assert levels == {"code_f": [1] * 10}
    _, levels = probe_selection("graded", 4, ["code_o"], levels=(2, 5))
    assert levels == {"code_o": [2, 5, 2, 5]}
    with pytest.raises(GradedProbeError, match="fixed probe sets have no levels"):
        probe_selection("fixed", 3, ["code_i"], levels=(1,))


def test_probe_set_config_key_is_checked():
    from populora.config import ConfigError, load_config

    assert load_config("tiny", ["diagnostics.probe_set=graded", "diagnostics.probe_size=260"])
    with pytest.raises(ConfigError, match="probe_set"):
        load_config("tiny", ["diagnostics.probe_set=hard"])
    with pytest.raises(ConfigError, match=r"\[1, 256\]"):
        load_config("tiny", ["diagnostics.probe_set=fixed", "diagnostics.probe_size=260"])
    with pytest.raises(ConfigError, match=r"\[1, 260\]"):
        load_config("tiny", ["diagnostics.probe_size=261"])


def test_bench_level_targets_by_hand():
    from populora.pretrain.bench import level_targets

    levels = {
        "code_o": {
            "1": {"student_accuracy_greedy": 0.625, "teacher_valid_t1": 0.5},
            "5": {"student_accuracy_greedy": 0.25, "teacher_valid_t1": 0.75},
        },
        "code_f": {
            "1": {"student_accuracy_greedy": 0.5, "teacher_valid_t1": 0.5},
            "5": {"student_accuracy_greedy": 0.375, "teacher_valid_t1": 0.25},
        },
    }
    assert level_targets(levels) == {
        "code_o": {
            "easiest_student_ge_60": True,
            "hardest_student_le_25": True,
            "teacher_valid_t1_mean": 0.625,
            "teacher_valid_ok": True,
        },
        "code_f": {
            "easiest_student_ge_60": False,
            "hardest_student_le_25": False,
            "teacher_valid_t1_mean": 0.375,
            "teacher_valid_ok": False,
        },
    }


def test_graded_probe_guard_drops_constant_variants_of_graded_probe_programs(sets):
    import re

    from populora.train.probe_guard import ProbeGuard

    guard = ProbeGuard.from_probe_sets("graded")
    prog = next(p.program for lv, p in sets["code_o"] if lv == 3 and re.search(r"\b\d\b", p.program))
    variant = re.sub(r"\b(\d)\b", lambda m: str((int(m.group(1)) + 1) % 10), prog)
    assert variant != prog and guard.collides(variant)
    assert not ProbeGuard.from_probe_sets("fixed").collides(variant)  # the old guard never saw level 3
