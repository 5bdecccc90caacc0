"""The paper's evaluation protocol: token budgets from the run's config (per kind), printed in the table, and
best / mean / worst per role."""

from __future__ import annotations

from populora.config import load_config
from populora.evaluate.commands import eval_budgets
from populora.evaluate.data import Item
from populora.evaluate.runner import EvalOptions, token_budget
from populora.evaluate.table import columns, to_markdown


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
    assert "Teacher worst" in md and "code 8096, math 16000" in md
