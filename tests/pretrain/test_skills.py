"""`populora bench tiny-model --skills`: the skill families, the reading of a trace, and one run on the bundled
model through the CLI."""

from __future__ import annotations

import json

from populora.pretrain.programs import LETTERS, WORDS
from populora.pretrain.skills import SkillItem, classify, read_binary_line, skill_items, written_expression


def _run(program: str, inputs: str) -> str:
    namespace: dict = {}
    exec(program, namespace)  # noqa: S102 - the probe's own one-line programs
    return repr(namespace["f"](*eval(f"({inputs},)")))  # noqa: S307


def test_skill_items_are_seeded_and_their_outputs_are_what_python_computes():
    fams = skill_items(12, seed=3)
    assert fams == skill_items(12, seed=3) and fams != skill_items(12, seed=4)
    assert set(fams) == {
        "binding n + m",
        "binding n - m",
        "binding n * m",
        "binding n // m",
        "binding n % m",
        *(f"one argument n {op} k" for op in ("+", "-", "*", "//", "%")),
        "argument",
        "copy letters: s.upper()",
        "copy letters: s + 'xyz'",
        "copy letters: len(s)",
        "copy word: s.upper()",
    }
    for fam, items in fams.items():
        assert len(items) == 12 and all(i.family == fam for i in items)
        for i in items:
            assert _run(i.program, i.inputs) == i.output, (fam, i)
            if fam.startswith("binding") or fam == "argument":
                a, b = i.args
                assert a != b and 0 <= a <= 9 and 0 <= b <= 9  # a wrong binding shows in the trace
                assert i.inputs == f"{a}, {b}"
            elif fam.startswith("one argument"):
                a, k = i.args
                assert 0 <= a <= 9 and 1 <= k <= 9 and i.inputs == str(a) and f" {k}\n" in i.program
            elif fam.startswith("copy letters"):
                assert 2 <= len(i.string) <= 5 and set(i.string) <= set(LETTERS)
            else:
                assert i.string in WORDS
    assert all(i.args[1] != 0 for fam in ("binding n // m", "binding n % m") for i in fams[fam])


def test_read_binary_line_reads_the_operands_written_or_named_first():
    assert read_binary_line("```trace\nn = 4\nm = 1\nr = 4 + 4 = 8\n```\n```output\n8\n```") == (4, "+", 4, 8)
    assert read_binary_line("n = 7\nm = 2\nr = n // m = 7 // 2 = 3\n") == (7, "//", 2, 3)
    assert read_binary_line("r = n + n = 0 + 9 = 0") == (0, "+", 9, 0)  # the names as the model copied them
    assert read_binary_line("r = n // 7 = 9 // 7 = 1") == (9, "//", 7, 1)
    assert read_binary_line("r = -1 - 3 = -4") == (-1, "-", 3, -4)
    assert read_binary_line("n = 4\nm = 1\nr = 5\n") is None  # no working shown
    assert read_binary_line("r = 4 + 1 = 5 + 0") is None


def test_classify_separates_a_wrong_binding_from_a_wrong_fact():
    item = SkillItem(
        "binding n + m",
        "def f(n, m):\n    r = n + m\n    return r",
        "4, 1",
        "5",
        args=(4, 1),
        expression="n + m",
    )
    assert classify(item, "n = 4\nm = 1\nr = 4 + 4 = 8\n") == {"bound": False, "fact": True, "written": None}
    assert classify(item, "n = 4\nm = 1\nr = 4 + 1 = 6\n") == {"bound": True, "fact": False, "written": None}
    assert classify(item, "r = n + m = 4 + 1 = 5\n") == {"bound": True, "fact": True, "written": True}
    assert classify(item, "r = n + n = 4 + 4 = 8\n") == {"bound": False, "fact": True, "written": False}
    assert classify(item, "r = 5\n") == {"bound": None, "fact": None, "written": None}
    assert (
        written_expression("r = n // 7 = 9 // 7 = 1") == "n // 7"
        and written_expression("r = 9 // 7 = 1") is None
    )
    one = SkillItem(
        "one argument n % k",
        "def f(n):\n    r = n % 3\n    return r",
        "7",
        "1",
        args=(7, 3),
        expression="n % 3",
    )
    assert classify(one, "n = 7\nr = 7 % 3 = 1\n") == {"bound": True, "fact": True, "written": None}
    assert classify(one, "r = n % 3 = 7 % 3 = 2\n") == {"bound": True, "fact": False, "written": True}
    div = SkillItem(
        "binding n // m",
        "def f(n, m):\n    r = n // m\n    return r",
        "7, 2",
        "3",
        args=(7, 2),
        expression="n // m",
    )
    assert classify(div, "r = 7 // 0 = 0\n") == {
        "bound": False,
        "fact": False,
        "written": None,
    }  # no such fact
    copy = SkillItem(
        "copy letters: len(s)", "def f(s):\n    r = len(s)\n    return r", "'abx'", "3", string="abx"
    )
    assert classify(copy, "```trace\ns = 'abx'\nr = len('abx') = 3\n```") == {"copied": True}
    assert classify(copy, "```trace\ns = 'ab'\nr = len('ab') = 2\n```") == {"copied": False}
    arg = SkillItem("argument", "def f(n, m):\n    total = n\n    return total", "3, 8", "3", args=(3, 8))
    assert classify(arg, "total = 3") == {}


def test_bench_tiny_model_skills_scores_the_bundled_model_and_writes_every_family(tmp_path):
    from typer.testing import CliRunner

    from populora.cli import app

    out = tmp_path / "skills.json"
    res = CliRunner().invoke(
        app, ["bench", "tiny-model", "--skills", "--n", "2", "--threads", "1", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "elementary skills" in res.output and "operands bound" in res.output
    data = json.loads(out.read_text())
    assert data["n_per_family"] == 2 and data["task"] == "code_o"
    assert set(data["families"]) == set(skill_items(2))
    for fam, row in data["families"].items():
        # at n = 2 every miss is listed, so the accuracy and the examples must agree
        assert row["accuracy"] == (2 - len(row["wrong_examples"])) / 2, fam
        if fam.startswith(("binding", "one argument")):
            assert 0 <= row["line_read"] <= 1 and {"bound", "fact"} <= set(row)
        if fam.startswith("copy"):
            assert row["copied"] in (0, 0.5, 1)


def test_bench_tiny_model_skills_refuses_options_of_the_other_probes():
    from typer.testing import CliRunner

    from populora.cli import app

    res = CliRunner().invoke(app, ["bench", "tiny-model", "--skills", "--level", "1"])
    assert res.exit_code == 2 and "--skills has its own items" in res.output
    res = CliRunner().invoke(app, ["bench", "tiny-model", "--skills", "--n", "0"])
    assert res.exit_code == 2 and "--n must be >= 1" in res.output


def test_skills_table_puts_each_rate_under_its_own_heading_with_or_without_names():
    from rich.console import Console

    from populora.pretrain.skills import skills_table

    def render(families):
        console = Console(width=200, record=True)
        console.print(skills_table({"n_per_family": 4, "families": families}))
        lines = console.export_text().splitlines()
        return [line.replace("┃", "│").split("│")[1:-1] for line in lines if line[:1] in "│┃"]

    plain = {"binding n + m": {"accuracy": 0.25, "bound": 0.5, "fact": 0.75, "written": None}}
    head, row = render(plain)
    assert [c.strip() for c in head] == ["family", "correct", "operands bound", "fact right", "input copied"]
    assert [c.strip() for c in row] == ["binding n + m", "25%", "50%", "75%", ""]
    named = {
        "binding n + m": {"accuracy": 0.25, "bound": 0.5, "fact": 0.75, "written": 0.0},
        "copy word: s.upper()": {"accuracy": 1.0, "copied": 1.0},
    }
    head, row, copy = render(named)
    assert [c.strip() for c in head][1:3] == ["correct", "names copied"]
    assert [c.strip() for c in row] == ["binding n + m", "25%", "0%", "50%", "75%", ""]
    assert [c.strip() for c in copy] == ["copy word: s.upper()", "100%", "", "", "", "100%"]
