"""The operators bench runs end to end at the tiny shape (structure only: no timing asserts)."""

from __future__ import annotations

import json

import torch

from populora.operators import REGISTRY
from populora.operators.bench import markdown, run


def test_bench_tiny_shape_writes_report(tmp_path):
    out = tmp_path / "ops.json"
    before = torch.get_num_threads()
    rep = run(quick=True, out=out, shape_name="tiny", threads=before + 1)
    assert torch.get_num_threads() == before  # process-wide setting restored for the rest of the suite
    saved = json.loads(out.read_text())
    assert list(saved["operators"]) == list(REGISTRY)
    for name, r in saved["operators"].items():
        assert r["seconds_per_child"] >= 0 and -1 <= r["retention"]["cos_p1"] <= 1 + 1e-9, name
    assert saved["operators"]["I1"]["retention"]["rel_fro_p1"] == 0
    peft = saved["peft_svd"]
    # PEFT's svd merge and our X5 are the same maths: their deltas must agree
    assert peft["merged_delta_rel_diff_vs_x5"] < 1e-4 and peft["ratio_peft_over_x5"] > 0
    assert (
        peft["peft_linear_factor_space_rel_error"] > 0.1
    )  # the factor-space pitfall is real on these parents
    for name in ("X1", "X6", "X7", "X9"):  # the old implementation is timed next to the new, same run
        r = saved["operators"][name]
        assert r["seconds_per_child_old"] > 0 and r["speedup_vs_old"] > 0, name
    assert saved["operators"]["M1"]["seconds_per_child_old"] is None
    ops_md, ret_md = markdown(rep)
    assert ops_md.count("\n| ") >= 17 and "| X9 |" in ret_md
