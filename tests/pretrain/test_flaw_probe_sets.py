"""The bundled misconception probe sets: held out, 64 items a class, interleaved, every item carrying exactly its
class with the answers the sandbox and the misreading give; the per-class reading of verdicts."""

import pytest

from populora.pretrain.flaw_probe_sets import (
    FLAW_PROBE_PER_CLASS,
    UNFLAWED,
    FlawProbeError,
    build_flaw_probe,
    flaw_probe_selection,
    load_flaw_probe,
    masked_programs,
    unflawed_tags,
    write_flaw_probe,
)
from populora.pretrain.flaws import CLASSES, CODE_I_CLASSES, changed_by, run_misread
from populora.tasks import Problem


@pytest.mark.parametrize("kind", ["atoms", "graded"])
@pytest.mark.parametrize("task,classes", [("code_o", CLASSES), ("code_i", CODE_I_CLASSES)])
def test_the_bundled_sets_hold_64_held_out_items_a_class_interleaved(task, classes, kind):
    from populora.pretrain.graded import graded_split

    items = load_flaw_probe(task, kind=kind)
    assert len(items) == FLAW_PROBE_PER_CLASS * len(classes)
    assert [i.flaw for i in items[: len(classes)]] == list(classes)  # any prefix spreads over the classes
    assert all(graded_split(i.problem.program) == "probe" for i in items)
    assert len({(i.problem.program, i.problem.inputs[0]) for i in items}) == len(items)
    masked = masked_programs(items)  # rare classes repeat a masked program with other constants or inputs
    assert set(masked) == set(classes) and all(8 <= n <= FLAW_PROBE_PER_CLASS for n in masked.values())
    if kind == "atoms":  # one statement between the signature and the return
        assert all(i.problem.program.count("\n") == 2 for i in items)
    for i in items:
        p = i.problem
        given = p.inputs[0]
        if task == "code_o":  # exactly one class changes this answer, and its misreading gives the wrong one
            assert changed_by(p.program, given, p.outputs[0]) == (i.flaw,)
            assert run_misread(p.program, given, (i.flaw,)) == i.wrong != p.outputs[0]
        else:  # code_i: the wrong input gives the shown output only when misread
            assert run_misread(p.program, i.wrong, (i.flaw,)) == p.outputs[0]
            assert run_misread(p.program, i.wrong, ()) != p.outputs[0]


def test_a_rebuild_draws_the_same_items_validated_in_the_real_sandbox(tmp_path):
    from populora.sandbox import Sandbox

    with Sandbox(workers=1) as sb:
        items = build_flaw_probe("code_i", sb, per_class=2)
        assert (
            build_flaw_probe("code_o", sb, per_class=1, kind="graded")
            == load_flaw_probe("code_o", kind="graded")[: len(CLASSES)]
        )
    assert items == load_flaw_probe("code_i")[: 2 * len(CODE_I_CLASSES)]  # a prefix of the bundled set
    write_flaw_probe(items, tmp_path / "atoms_code_i.jsonl.gz")
    again = tmp_path / "again" / "atoms_code_i.jsonl.gz"
    write_flaw_probe(load_flaw_probe("code_i", tmp_path), again)
    assert again.read_bytes() == (tmp_path / "atoms_code_i.jsonl.gz").read_bytes()  # same items, same bytes
    with pytest.raises(FlawProbeError, match="unknown misconception set 'easy'; the sets are atoms, graded"):
        load_flaw_probe("code_i", kind="easy")


def test_selection_takes_a_prefix_per_class_and_refuses_what_the_sets_lack(tmp_path):
    problems, tags, wrong = flaw_probe_selection(3, ["code_o", "code_i", "code_f"])
    assert set(problems) == {"code_o", "code_i"}  # code_f has no planted classes
    assert len(problems["code_o"]) == 3 * len(CLASSES) and len(problems["code_i"]) == 3 * len(CODE_I_CLASSES)
    assert {c: tags["code_o"].count(c) for c in CLASSES} == dict.fromkeys(CLASSES, 3)
    assert len(wrong["code_i"]) == len(problems["code_i"])
    with pytest.raises(FlawProbeError, match=r"per_class must be in \[1, 64\]"):
        flaw_probe_selection(65)
    with pytest.raises(FlawProbeError, match="rebuild it with `python -m populora.pretrain.flaw_probe_sets"):
        load_flaw_probe("code_o", tmp_path)
    import gzip

    with gzip.open(tmp_path / "atoms_code_o.jsonl.gz", "wt") as fh:
        fh.write('{"flaw": "no_such_class", "problem": {"task": "code_o"}}\n')
    with pytest.raises(FlawProbeError, match="line 1: not a class-tagged code_o item; rebuild"):
        load_flaw_probe("code_o", tmp_path)


def test_graded_items_are_tagged_by_the_class_their_input_carries():
    def problem(program, given, out):
        return Problem(task="code_o", program=program, inputs=(given,), outputs=(out,))

    plain = problem("def f(x):\n    return x + 1", "3", "4")
    ranged = problem("def f(n):\n    return list(range(n))", "2", "[0, 1]")
    empty_range = problem("def f(n):\n    return list(range(n))", "0", "[]")  # inclusive: [0], so it carries
    tags = unflawed_tags({"code_o": [plain, ranged, empty_range], "code_f": [plain]})
    assert tags == {"code_o": [UNFLAWED, "range_end_inclusive", "range_end_inclusive"]}
