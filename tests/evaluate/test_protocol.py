"""The paper's evaluation protocol: token budgets from the run's config (per kind), printed in the table, and
best / mean / worst per role."""

from __future__ import annotations

from populora.config import load_config
from populora.evaluate.commands import eval_budgets
from populora.evaluate.data import Item
from populora.evaluate.runner import EvalOptions, token_budget
from populora.evaluate.table import best_and_worst, columns, summary, to_markdown


def test_budgets_default_to_azr_and_come_from_the_run_config(tmp_path):
    assert eval_budgets(None, None) == (8096, 16000)
    assert eval_budgets(None, 300) == (300, 300)
    (tmp_path / "config.yaml").write_text("model:\n  name: tiny\neval:\n  max_new_tokens_code: 512\n")
    assert eval_budgets(tmp_path, None) == (512, 16000)
    paper = load_config("paper-7b", check=False).eval
    assert (paper.max_new_tokens_code, paper.max_new_tokens_math) == (8096, 16000)  # AZR's
    cfg = load_config("tiny", ["eval.max_new_tokens_math=300"])
    assert (cfg.eval.max_new_tokens_code, cfg.eval.max_new_tokens_math) == (512, 300)


def test_each_kind_gets_its_budget():
    opts = EvalOptions(max_new_tokens_code=100, max_new_tokens_math=200)
    code = Item("humaneval+", "HumanEval/0", "code", "q", "g")
    lcb = Item("lcb", "lcb/1", "lcb", "q", "")
    math = Item("gsm8k", "gsm8k/0", "math", "q", "1")
    assert [token_budget(i, opts) for i in (code, lcb, math)] == [100, 100, 200]


def test_table_has_best_mean_worst_per_role_and_the_budget():
    rows = [
        {"benchmark": "gsm8k", "member": m, "n": 10, "pass@1": p}
        for m, p in (("base", 0.1), ("T0", 0.2), ("T1", 0.6), ("S0", 0.3), ("S1", 0.5))
    ]
    roles = {"T0": "teacher", "T1": "teacher", "S0": "student", "S1": "student"}
    cols = columns(rows, roles)
    assert cols["Teacher worst"]["gsm8k"] == 0.2 and cols["Teacher best"]["gsm8k"] == 0.6
    assert abs(cols["Student mean"]["gsm8k"] - 0.4) < 1e-12 and cols["Student worst"]["gsm8k"] == 0.3
    md = to_markdown(rows, roles, max_new_tokens={"code": 8096, "math": 16000})
    assert "Teacher worst (T0)" in md and "Teacher best member (T1)" in md and "code 8096, math 16000" in md


def _rows(scores: dict[str, tuple[float, float]]) -> list[dict]:
    return [
        {"benchmark": b, "member": m, "n": 10, "pass@1": p}
        for m, pair in scores.items()
        for b, p in zip(("humaneval+", "gsm8k"), pair, strict=True)
    ]


def test_worst_is_the_adapter_with_the_lowest_aggregate_not_a_per_benchmark_minimum():
    # overall = (code avg + math avg) / 2: T0 (0.5 + 0.1) / 2 = 0.30, T1 0.25, T2 0.40.
    rows = _rows({"T0": (0.5, 0.1), "T1": (0.2, 0.3), "T2": (0.4, 0.4), "S0": (0.2, 0.0), "S1": (0.0, 0.2)})
    roles = {"T0": "teacher", "T1": "teacher", "T2": "teacher", "S0": "student", "S1": "student"}
    s = summary(rows, roles)
    # The per-benchmark minimum (0.2, 0.1) would be no adapter at all; the worst adapter is T1.
    assert s["Teacher worst"] == {
        "humaneval+": 0.2,
        "gsm8k": 0.3,
        "code_avg": 0.2,
        "math_avg": 0.3,
        "overall": 0.25,
    }
    assert s["Teacher best member"]["overall"] == 0.4 and s["Teacher best member"]["gsm8k"] == 0.4
    # Per-benchmark best: 0.5 from T0, 0.4 from T2.
    assert s["Teacher best"]["humaneval+"] == 0.5 and abs(s["Teacher best"]["overall"] - 0.45) < 1e-12
    assert abs(s["Teacher mean"]["humaneval+"] - 1.1 / 3) < 1e-12
    picks = best_and_worst(rows, roles)
    assert picks["teacher"] == {
        "members": ["T0", "T1", "T2"],
        "best_member": "T2",
        "best_overall": 0.4,
        "worst_member": "T1",
        "worst_overall": 0.25,
    }
    # S0 and S1 tie at 0.1 overall: the lower id is both best and worst.
    assert picks["student"]["best_member"] == picks["student"]["worst_member"] == "S0"
    md = to_markdown(rows, roles)
    assert "Teacher worst (T1)" in md and "Teacher best member (T2)" in md
    header = md.splitlines()[0].split(" | ")
    overall = md.splitlines()[[ln.startswith("| **Overall**") for ln in md.splitlines()].index(True)]
    # The markdown's overall row shows the same numbers as the JSON summary, column by column.
    cells = [c.strip(" |") for c in overall.split(" | ")][1:]
    assert cells[header.index("Teacher worst (T1)") - 1] == "25.0"
