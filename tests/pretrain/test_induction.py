"""`populora bench tiny-model --induction`: the features read from a program, the shown-pairs check in the real
sandbox, one level's row by hand, and one run on the bundled model through the CLI."""

from __future__ import annotations

import json

from populora.pretrain.induction import compare, level_row, miss_kind, program_features, shown_only
from populora.tasks import Problem


def test_program_features_reads_arguments_operations_constants_and_shape():
    gold = program_features("def f(n, m):\n    r = n * 8\n    total = r + 1\n    return total")
    assert gold.reads == {"n"}  # m is a parameter it never reads
    assert gold.operations == {"*", "+"}
    assert gold.constants == {"8", "1"}
    # another constant and other local names: the same shape, the same reads and operations
    other = program_features("def f(n, m):\n    out = n * 3\n    res = out + 1\n    return res")
    assert compare(other, gold) == {"reads": True, "operations": True, "constants": False, "shape": True}
    # the other argument: the shape numbers parameters by position, so it differs too
    swapped = program_features("def f(n, m):\n    r = m * 8\n    total = r + 1\n    return total")
    assert compare(swapped, gold) == {"reads": False, "operations": True, "constants": True, "shape": False}
    assert program_features("def f(s):\n    return ''.join(sorted(s))[:4]").operations == {
        ".join()",
        "sorted()",
        "[:]",
    }
    loop = program_features(
        "def f(xs):\n    t = 0\n    for x in xs:\n        if x > 2:\n            t += x\n    return t"
    )
    assert loop.operations == {"for", "if", ">", "+"} and loop.constants == {"0", "2"}
    # a called builtin keeps its name in the shape: len(s) and sum(s) are not one shape
    assert (
        program_features("def f(s):\n    return len(s)").shape
        != program_features("def f(s):\n    return sum(s)").shape
    )
    assert program_features("def f(n):\n    return n +") is None  # does not parse
    assert program_features("def g(n):\n    return n") is None  # no f


def test_shown_only_checks_the_shown_pairs_with_the_tasks_own_scorer():
    from populora.sandbox import Sandbox
    from populora.tasks import get

    task = get("code_f")
    gold = "def f(n):\n    return n + 1"
    p = Problem(task="code_f", program=gold, inputs=("1", "2", "7", "9"), outputs=("2", "3", "8", "10"))
    shown = shown_only(p)
    assert shown.given == p.given and shown.hidden == p.given
    fits_shown_only = (
        "```python\ndef f(n):\n    return n + 1 if n < 5 else 0\n```"  # right on 1, 2; wrong on 7, 9
    )
    misses_all = "```python\ndef f(n):\n    return n * 2\n```"  # 2 for 1 (right), 4 for 2 (wrong)
    with Sandbox(workers=1) as sb:
        answers = [task.parse_answer(t) for t in (fits_shown_only, misses_all)]
        assert task.score(p, answers, sb) == [False, False]
        assert task.score(shown, answers, sb) == [True, False]


def test_level_row_counts_the_aspects_among_the_wrong_programs_only():
    gold = ["def f(n):\n    r = n * 8\n    return r"] * 4
    answers = [
        "def f(n):\n    r = n * 8\n    return r",  # right
        "def f(n):\n    out = n * 3\n    return out",  # wrong constant, fits the shown pairs (say)
        "def f(n):\n    r = n + 8\n    return r",  # wrong operation
        None,  # no program: counted in the accuracy, not among the wrong programs
    ]
    row = level_row(answers, [True, False, False, False], [True, True, False, False], gold)
    assert row["n"] == 4 and row["accuracy"] == 0.25 and row["program"] == 0.75 and row["fits_shown"] == 0.5
    assert row["wrong_programs"] == 2 and row["wrong_fits_shown"] == 0.5
    assert row["wrong_reads_right"] == 1.0
    assert row["wrong_operations_right"] == 0.5  # the first wrong one uses *, the second +
    assert row["wrong_constants_right"] == 0.5
    assert row["wrong_shape_right"] == 0.5  # the shape keeps the operator: `n * K` is not `n + K`
    assert row["wrong_kinds"] == {
        "fits shown": 0.5,
        "argument": 0.0,
        "operation": 0.5,
        "constant": 0.0,
        "structure": 0.0,
    }


def test_miss_kind_is_the_first_aspect_that_differs():
    right = {"reads": True, "operations": True, "constants": True, "shape": True}
    assert miss_kind(right, fits_shown=True) == "fits shown"
    assert miss_kind({**right, "reads": False, "operations": False}, fits_shown=False) == "argument"
    assert miss_kind({**right, "operations": False, "constants": False}, fits_shown=False) == "operation"
    assert miss_kind({**right, "constants": False, "shape": False}, fits_shown=False) == "constant"
    assert miss_kind({**right, "shape": False}, fits_shown=False) == "structure"


def test_bench_tiny_model_induction_scores_the_bundled_model_per_level(tmp_path):
    from typer.testing import CliRunner

    from populora.cli import app

    out = tmp_path / "induction.json"
    args = [
        "bench",
        "tiny-model",
        "--induction",
        "--level",
        "1,5",
        "--n",
        "3",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "why code_f answers miss" in res.output and "constant" in res.output
    data = json.loads(out.read_text())
    assert data["task"] == "code_f" and set(data["levels"]) == {"1", "5"}
    for row in data["levels"].values():
        assert row["n"] == 3
        # every wrong program is listed at n = 3; an answer without a program is neither right nor fits
        assert row["wrong_programs"] == len(row["wrong_examples"])
        assert max(row["accuracy"], row["fits_shown"]) <= row["program"] <= 1
        if row["wrong_programs"]:
            assert abs(sum(row["wrong_kinds"].values()) - 1) < 0.01
        for ex in row["wrong_examples"]:
            assert program_features(ex["gold"]) is not None


def test_bench_tiny_model_induction_refuses_bad_options():
    from typer.testing import CliRunner

    from populora.cli import app

    res = CliRunner().invoke(app, ["bench", "tiny-model", "--induction", "--skills"])
    assert res.exit_code == 2 and "pick one" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--induction", "--level", "full"])
    assert res.exit_code == 2 and "--induction reads graded levels" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--induction", "--n", "0"])
    assert res.exit_code == 2 and "--n must be >= 1" in res.output
