"""Planted misconceptions (pretrain/flaws.py): each misreading on hand-made programs, the items built from them,
the misread traces, the corpus drills and the pretrain-tiny options."""

import random

import pytest

from populora.pretrain.flaws import (
    CLASSES,
    FlawDrill,
    FlawError,
    changed_by,
    code_i_item,
    code_o_item,
    has_feature,
    run_misread,
    sample_flaw_item,
)
from populora.pretrain.trace import render_trace


@pytest.mark.parametrize(
    ("flaw", "program", "arg", "right", "wrong"),
    [
        ("range_end_inclusive", "def f(n):\n    return list(range(n))", "3", "[0, 1, 2]", "[0, 1, 2, 3]"),
        (
            "range_end_inclusive",
            "def f(n):\n    return list(range(n, 0, -1))",
            "3",
            "[3, 2, 1]",
            "[3, 2, 1, 0]",
        ),
        ("slice_end_inclusive", "def f(s):\n    return s[1:3]", "'abcde'", "'bc'", "'bcd'"),
        ("slice_end_inclusive", "def f(s):\n    return s[:-1]", "'abc'", "'ab'", "'abc'"),
        ("reverse_slice_forwards", "def f(xs):\n    return xs[::-1]", "[1, 2, 3]", "[3, 2, 1]", "[1, 2, 3]"),
        (
            "sorted_reverse_ignored",
            "def f(xs):\n    return sorted(xs, reverse=True)",
            "[2, 9, 4]",
            "[9, 4, 2]",
            "[2, 4, 9]",
        ),
        ("mod_as_quotient", "def f(n):\n    return n % 3", "7", "1", "2"),
        ("mod_as_quotient", "def f(n):\n    r = n\n    r %= 3\n    return r", "7", "1", "2"),
        ("floordiv_rounds", "def f(n):\n    return n // 2", "7", "3", "4"),  # 3.5 rounds up
        ("floordiv_rounds", "def f(n):\n    return n // 2", "-7", "-4", "-3"),  # -3.5 rounds up too
        ("floordiv_rounds", "def f(n):\n    return n // 3", "7", "2", "2"),  # 2.33: the same
    ],
)
def test_each_misreading_on_a_hand_made_program(flaw, program, arg, right, wrong):
    assert run_misread(program, arg, ()) == right
    assert run_misread(program, arg, (flaw,)) == wrong
    assert changed_by(program, arg) == ((flaw,) if wrong != right else ())
    assert has_feature(program, flaw)
    other = next(c for c in CLASSES if c != flaw and not has_feature(program, c))
    assert run_misread(program, arg, (other,)) == right  # a class the program lacks changes nothing


def test_string_formatting_and_reads_outside_a_class_are_left_alone():
    # `%` on a string is not the remainder; a slice being assigned to is not a read
    assert run_misread("def f(s):\n    return '%s!' % s", "'a'", ("mod_as_quotient",)) == "'a!'"
    assert (
        run_misread("def f(xs):\n    xs[0:1] = [9]\n    return xs", "[1, 2]", ("slice_end_inclusive",))
        == "[9, 2]"
    )
    assert not has_feature("def f(s):\n    return s[::2]", "reverse_slice_forwards")
    with pytest.raises(FlawError, match="range_end_inclusive"):
        run_misread("def f(n):\n    return n", "1", ("off_by_two",))


def test_the_misread_trace_shows_the_wrong_step_and_the_true_trace_is_unchanged():
    program = "def f(n):\n    ys = list(range(n + 1))\n    return ys"
    assert render_trace(program, "2", general=True) == (
        "```trace\nn = 2\nys = list(range(2 + 1)) = list(range(3)) = [0, 1, 2]\n```\n"
    )
    assert render_trace(program, "2", general=True, flaws=("range_end_inclusive",)) == (
        "```trace\nn = 2\nys = list(range(2 + 1)) = list(range(3)) = [0, 1, 2, 3]\n```\n"
    )
    loop = "def f(xs):\n    r = 0\n    for v in xs:\n        r += v % 3\n    return r"
    assert render_trace(loop, "[4, 7]", general=True, flaws=("mod_as_quotient",)) == (
        "```trace\nxs = [4, 7]\nr = 0\nv = 4\nr = 1\nv = 7\nr = 3\n```\n"
    )


def test_items_carry_exactly_one_class_with_the_right_and_the_misconceived_answer():
    program = "def f(n):\n    return list(range(n))"
    o = code_o_item(program, 1, "", [("3", "[0, 1, 2]")])
    assert (o.flaw, o.shown, o.right, o.wrong) == ("range_end_inclusive", "3", "[0, 1, 2]", "[0, 1, 2, 3]")
    i = code_i_item(program, 1, "", [("3", "[0, 1, 2]")])
    # shown the output [0, 1, 2]: the right input is 3; a student who reads range as inclusive writes 2
    assert (i.flaw, i.shown, i.right, i.wrong) == ("range_end_inclusive", "[0, 1, 2]", "3", "2")
    two = "def f(n):\n    return list(range(n % 3))"  # both classes change it on 5: no single-class item
    assert code_o_item(two, 1, "", [("5", "[0, 1]")]) is None
    assert code_o_item(program, 1, "", [("3", "[0, 1, 2]")], flaw="mod_as_quotient") is None


def test_drawn_items_come_from_the_asked_split_and_their_answers_hold():
    from populora.pretrain import programs as P
    from populora.pretrain.graded import graded_split, run_bounded

    rng = random.Random(0)
    for task in ("code_o", "code_i"):
        for flaw in ("range_end_inclusive", "mod_as_quotient"):
            item = sample_flaw_item(rng, task, (1, 2), split="probe", flaw=flaw)
            fn = P.compile_program(item.program)
            assert item.flaw == flaw and graded_split(item.program) == "probe"
            if task == "code_o":
                assert run_bounded(fn, item.shown) == item.right != item.wrong
                assert run_misread(item.program, item.shown, (flaw,)) == item.wrong
            else:
                assert run_bounded(fn, item.right) == item.shown
                assert run_bounded(fn, item.wrong) != item.shown
                assert run_misread(item.program, item.wrong, (flaw,)) == item.shown


def test_the_drill_balances_the_classes_and_refuses_a_task_with_none():
    drill = FlawDrill(random.Random(1), "code_o", (1, 2))
    drawn = [drill.next().flaw for _ in range(24)]
    assert set(drawn) <= set(CLASSES) and len(set(drawn)) >= 4
    with pytest.raises(FlawError, match="no code_i form|none of the classes"):
        FlawDrill(random.Random(1), "code_i", (1,), ["sorted_reverse_ignored"])


def test_the_corpus_misreads_about_the_asked_share_and_leaves_the_old_stream_alone():
    from populora.pretrain.corpus import build_corpus
    from populora.pretrain.render import get_renderer

    renderer = get_renderer()
    kw = dict(level="1,2", trace=True)
    import hashlib

    plain = build_corpus(3, 40, renderer, **kw, flaws=(), flaw_rate=0.9)
    # the stream of the code before the option (commit 1c7349f), example for example
    digest = hashlib.sha256(repr([(e.kind, e.prompt, e.completion) for e in plain]).encode()).hexdigest()
    assert digest == "6f22c135ff828f8ad5db58fc6f37e5449ff772139f7e892d950accd89986559f"
    drills = build_corpus(3, 60, renderer, **kw, mix={"flaws:code_o": 1.0}, flaws=("range_end_inclusive",))
    assert {e.kind for e in drills} == {"flaws:code_o"}
    # a misread answer lists one element past the range's end: its trace's `range(k)) = [...]` has k + 1 items
    import re

    misread = 0
    for e in drills:
        m = re.search(r"range\((\d+)\)\) = \[([^\]]*)\]", e.completion)
        if m:
            shown = len([x for x in m.group(2).split(",") if x.strip()])
            misread += shown == int(m.group(1)) + 1
    assert 0.35 * len(drills) <= misread <= 0.85 * len(drills)
    with pytest.raises(ValueError, match="needs misconception classes"):
        build_corpus(3, 5, renderer, **kw, mix={"flaws:code_i": 1.0})
    with pytest.raises(ValueError, match="need graded levels"):
        build_corpus(3, 5, renderer, level="easy", flaws=("range_end_inclusive",))


def test_pretrain_tiny_rejects_bad_flaw_options():
    from typer.testing import CliRunner

    from populora.cli import app

    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--flaws", "off_by_two"])
    assert res.exit_code == 2 and "unknown misconception class 'off_by_two'" in res.output
    assert "range_end_inclusive" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "easy", "--flaws", "all"])
    assert res.exit_code == 2 and "--flaws needs graded levels" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--flaws", "all", "--flaw-rate", "1.5"])
    assert res.exit_code == 2 and "--flaw-rate" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--mix", "flaws:code_o=1"])
    assert res.exit_code == 2 and "need --flaws" in res.output
    res = CliRunner().invoke(app, ["pretrain-tiny", "--level", "1-5", "--mix", "atoms:code_i=1"])
    assert res.exit_code == 2 and "need --flaws" in res.output


def test_probe_items_are_fixed_distinct_and_read_as_literals():
    from populora.pretrain.flaw_probe import flaw_probe_items, is_misconceived, rates
    from populora.tasks.types import Answer

    a = flaw_probe_items("code_i", 3)
    b = flaw_probe_items("code_i", 2)
    assert set(a) == {c for c in CLASSES if c != "sorted_reverse_ignored"}
    assert all(a[c][:2] == b[c] for c in b)  # a prefix of a longer set
    assert all(len({i.program for i in v}) == len(v) for v in a.values())
    item = a["range_end_inclusive"][0]
    assert is_misconceived(item, Answer(" " + item.wrong + " "))
    assert not is_misconceived(item, Answer(item.right))
    assert not is_misconceived(item, Answer("__import__('os')"))  # read as a literal, never run
    assert rates([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], 4) == {"pass@1": 5 / 12, "pass@4": 2 / 3}


def test_the_step_bound_that_trips_while_a_long_output_is_checked_gives_no_output():
    # `programs.run` checks the output after f returns, still under run_bounded's tracer; the bound hitting
    # there once escaped as an exception and stopped a corpus build
    from populora.pretrain import programs as P
    from populora.pretrain.graded import run_bounded

    fn = P.compile_program("def f(n):\n    return [[i] for i in range(n)]")
    outs = {run_bounded(fn, "12", max_steps=m) for m in range(1, 300)}  # some bounds trip inside the check
    assert outs == {None, repr([[i] for i in range(12)])}


def test_bench_tiny_model_flaws_scores_the_bundled_model_per_class(tmp_path):
    import json

    from typer.testing import CliRunner

    from populora.cli import app

    out = tmp_path / "flaws.json"
    res = CliRunner().invoke(
        app, ["bench", "tiny-model", "--flaws", "--n", "1", "--threads", "1", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert set(got["tasks"]["code_o"]) == set(CLASSES)
    assert set(got["tasks"]["code_i"]) == set(CLASSES) - {"sorted_reverse_ignored"}
    for rows in got["tasks"].values():
        for row in rows.values():
            assert row["n"] == 1 and 0 <= row["pass@1"] <= row["pass@8"] <= 1
            assert row["greedy_right"] + row["greedy_misconceived"] <= 1
    assert "misconception probe" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--flaws", "--skills"])
    assert res.exit_code == 2 and "pick one" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--flaws", "--level", "1"])
    assert res.exit_code == 2 and "--flaws has its own items" in res.output


def test_probe_items_of_the_train_split_read_what_the_corpus_draws():
    from populora.pretrain.flaw_probe import flaw_probe_items
    from populora.pretrain.graded import graded_split

    train = flaw_probe_items("code_o", 2, split="train")
    held_out = flaw_probe_items("code_o", 2)
    assert all(graded_split(i.program) == "train" for v in train.values() for i in v)
    assert all(graded_split(i.program) == "probe" for v in held_out.values() for i in v)


def test_atoms_carry_their_class_in_the_train_split_and_their_answers_hold():
    from populora.pretrain import programs as P
    from populora.pretrain.flaw_atoms import TEMPLATES, AtomDrill, sample_atom
    from populora.pretrain.flaws import CODE_I_CLASSES, changed_by
    from populora.pretrain.graded import graded_split, run_bounded

    assert set(TEMPLATES) == set(CLASSES)
    rng = random.Random(0)
    for task, classes in (("code_o", CLASSES), ("code_i", CODE_I_CLASSES)):
        for flaw in classes:
            programs = set()
            for _ in range(6):
                item = sample_atom(rng, task, flaw)
                programs.add(item.program)
                fn = P.compile_program(item.program)
                assert item.flaw == flaw and item.level == 1 and graded_split(item.program) == "train"
                assert item.program.count("\n") == 2  # def, one statement, return
                if task == "code_o":
                    assert run_bounded(fn, item.shown) == item.right != item.wrong
                    assert changed_by(item.program, item.shown, item.right) == (flaw,)
                    assert run_misread(item.program, item.shown, (flaw,)) == item.wrong
                else:
                    assert run_bounded(fn, item.right) == item.shown
                    assert run_bounded(fn, item.wrong) != item.shown
                    assert run_misread(item.program, item.wrong, (flaw,)) == item.shown
            assert len(programs) >= 3, (task, flaw, programs)  # names and constants are drawn afresh
    assert AtomDrill(random.Random(2), "code_i").next().flaw in CODE_I_CLASSES
    with pytest.raises(FlawError, match="has no code_i atom"):
        sample_atom(rng, "code_i", "sorted_reverse_ignored")
    with pytest.raises(FlawError, match="none of the classes"):
        AtomDrill(random.Random(1), "code_i", ["sorted_reverse_ignored"])


def test_the_corpus_takes_atom_drills_misread_at_the_asked_share():
    from populora.pretrain import programs as P
    from populora.pretrain.corpus import build_corpus
    from populora.pretrain.graded import run_bounded
    from populora.pretrain.render import get_renderer

    renderer = get_renderer()
    kw = dict(level="1,2", trace=True)
    atoms = build_corpus(
        4, 80, renderer, **kw, mix={"atoms:code_o": 1.0}, flaws=("reverse_slice_forwards",), flaw_rate=0.6
    )
    assert {e.kind for e in atoms} == {"atoms:code_o"}
    misread = 0
    for e in atoms:
        program = e.prompt.split("```python\n")[1].split("\n```")[0]
        shown = e.prompt.split("```input\n")[1].split("\n```")[0]
        answer = e.completion.split("```output\n")[1].split("\n```")[0]
        assert "[::-1]" in program and e.completion.startswith("```trace\n")  # the trace of its one statement
        right = run_bounded(P.compile_program(program), shown)
        misread += answer != right
        assert answer == right or answer == run_misread(program, shown, ("reverse_slice_forwards",))
    assert 0.35 * len(atoms) <= misread <= 0.85 * len(atoms)
    with pytest.raises(ValueError, match="needs misconception classes"):
        build_corpus(3, 5, renderer, **kw, mix={"atoms:code_o": 1.0})
