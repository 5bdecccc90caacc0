"""Crossover retention with gold specialists (experiment/gold_retention.py): the kept share and its interval by
hand, the gold training rows on the bundled model, and `experiment retention --specialists gold --quick` end to
end (real engine, sandbox and operators)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.experiment.gold_retention import gold_rows, gold_rows_table, kept_interval

GOLD = ["experiment", "retention", "--specialists", "gold"]


def test_kept_share_by_hand():
    base = np.array([0, 0, 1, 0])
    parent = np.array([1, 1, 1, 1])  # gain: 1 - 0.25 = 0.75
    child = np.array([[1, 0, 1, 0], [1, 1, 1, 0]])  # mean 0.625: keeps (0.625 - 0.25) / 0.75 = 0.5
    k = kept_interval(child, parent, base)
    assert k["kept"] == pytest.approx(0.5) and k["seeds"] == 2 and k["items"] == 4
    assert k["lo"] <= 0.5 <= k["hi"]
    # a parent no better than the base has no gain to keep
    assert np.isnan(kept_interval(child, base, base)["kept"])


def test_the_table_signs_each_gain_once():
    nan = {"kept": float("nan"), "lo": None, "hi": None}
    result = {
        "operators": ["X1"],
        "kept": {"X1": {"code_o": nan, "code_i": {"kept": 0.5, "lo": -0.25, "hi": 1.0}}},
        "specialist_gain": {"code_o": -0.019, "code_i": 0.104},
        "specialists_specialise": {"code_o": False, "code_i": True},
    }
    _, rows = gold_rows_table(result)
    assert rows[0] == ["X1", "-", "+0.50 [-0.25, +1.00]"]
    assert rows[1][1] == "code_o -1.9 pts, code_i +10.4 pts"
    assert rows[2][1].startswith("no: ")


def test_gold_rows_are_the_gold_answer_then_eos_at_advantage_one():
    from populora.config import load_config
    from populora.sandbox import Sandbox
    from populora.tasks import get
    from populora.train.setup import build_engine, synthetic_seeds

    eng = build_engine(load_config("tiny", []))
    try:
        with Sandbox(workers=1) as sb:
            problems = [p for p in synthetic_seeds(3, sb, 0, (1, 2)) if p.task == "code_o"]
        rows = gold_rows(eng, "code_o", problems, slot=1)
        task = get("code_o")
        for row, p in zip(rows, problems, strict=True):
            assert row.slot == 1 and row.advantages == 1.0
            assert row.response_ids[-1] == eng.tokenizer.eos_token_id
            text = eng.tokenizer.decode(row.response_ids[:-1])
            gold = task.render_answer(task.gold_answer(p), template="compact")
            assert text.startswith("```trace\n") and text.endswith(gold)  # the asset's traced style
        bare = gold_rows(eng, "code_o", problems, slot=0, trace=False)
        assert [eng.tokenizer.decode(r.response_ids[:-1]) for r in bare] == [
            task.render_answer(task.gold_answer(p), template="compact") for p in problems
        ]
    finally:
        eng.close()


@pytest.mark.timeout(900)
def test_quick_gold_retention_end_to_end(tmp_path):
    out = tmp_path / "ret"
    res = CliRunner().invoke(app, [*GOLD, "--quick", "--out", str(out), "--probe-every", "1"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "experiment.json").read_text())
    # the specialists' curve: each scored on its own task after every step, its gain over the base; the last
    # point is the parent the children are made from, scored again with the others at the end
    curve = data["specialist_curve"]
    for t in ("code_o", "code_i"):
        assert [c["step"] for c in curve[t]] == [1, 2]
        for c in curve[t]:
            assert c["gain"] == pytest.approx(c["accuracy"] - data["accuracy"]["base"][t])
        assert curve[t][-1]["accuracy"] == pytest.approx(data["accuracy"][f"{t} specialist"][t])
    assert "code_i specialist at step 2:" in res.output
    assert data["specialists"] == "gold" and data["operators"] == ["X1", "X2"] and data["operator_seeds"] == 2
    assert set(data["accuracy"]) == {"base", "code_o specialist", "code_i specialist"} | {
        f"{op} seed {s}" for op in ("X1", "X2") for s in (0, 1)
    }
    assert set(data["kept"]["X1"]) == {"code_o", "code_i"} and data["probe_items"] == {
        "code_o": 4,
        "code_i": 4,
    }
    assert "kept of the code_o gain" in res.output and "parents >= +10 pts on their task" in res.output
    res = CliRunner().invoke(app, ["experiment", "retention", "--out", str(out), "--seeds", "2"])
    assert res.exit_code == 2 and "--specialists gold" in res.output
    res = CliRunner().invoke(app, ["experiment", "retention", "--out", str(out), "--probe-every", "5"])
    assert res.exit_code == 2 and "--probe-every K (K >= 1) goes with --specialists gold" in res.output


@pytest.mark.timeout(900)
def test_quick_gold_retention_on_another_familys_task(tmp_path):
    """`--tasks arith,code_o`: the arith specialist trains on the family's seed problems and is scored on its
    fixed probe items, next to a code_o specialist on the graded probe; the table and JSON name the pair."""
    out = tmp_path / "ret"
    res = CliRunner().invoke(
        app,
        [*GOLD, "--quick", "--out", str(out), "--tasks", "arith,code_o", "--operators", "X1", "--seeds", "1"],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((out / "experiment.json").read_text())
    assert data["tasks"] == ["arith", "code_o"] and data["probe_items"] == {"arith": 4, "code_o": 4}
    assert set(data["accuracy"]) == {"base", "arith specialist", "code_o specialist", "X1 seed 0"}
    assert set(data["accuracy"]["X1 seed 0"]) == {"arith", "code_o"}
    assert set(data["probe_levels"]) == {"code_o"}  # the family's fixed items have no graded levels
    assert "kept of the arith gain" in res.output and "arith specialist: step 2/2" in res.output


def test_bad_specialist_tasks_are_refused_with_the_installed_types(tmp_path):
    for bad, said in (
        ("arith", "give two different task types"),
        ("code_o,code_o", "give two different task types"),
        ("code_o,nope", "'nope' is not an installed task type; choose from code_i, code_o, code_f, arith"),
    ):
        res = CliRunner().invoke(app, [*GOLD, "--out", str(tmp_path / "r"), "--tasks", bad])
        assert res.exit_code == 2 and said in res.output, res.output
        assert not (tmp_path / "r").exists()
    res = CliRunner().invoke(
        app, ["experiment", "retention", "--out", str(tmp_path / "r"), "--tasks", "arith,code_o"]
    )
    assert res.exit_code == 2 and "--tasks goes with --specialists gold" in res.output
