"""bench/loss_settings_compare.py on hand-made control files: changes over the base and the paired difference to
the reference setting, by hand."""

import json

import pytest


def _exp(overrides, ends):
    """One control file: 2 code_i items, 2 samples each; the base solves item 0 once and item 1 never;
    `ends[seed]` are the real arm's sampled counts at the end."""
    settings = {"types": ["code_i"], "eval_samples": 2, "eval_temperatures": [1.0], "overrides": overrides}
    base = {"greedy": {"code_i": [1, 0]}, "sampled": {"1": {"code_i": [1, 0]}}}
    runs = {
        f"fresh/0.003/real/{s}": {
            "arm": "real",
            "seed": s,
            "end": {"greedy": {"code_i": [1, 0]}, "sampled": {"1": {"code_i": list(c)}}},
        }
        for s, c in ends.items()
    }
    return {"settings": settings, "base": base, "runs": runs}


def test_the_difference_to_the_reference_by_hand(bench_script, tmp_path, capsys):
    ref, other = tmp_path / "ref.json", tmp_path / "other.json"
    ref.write_text(json.dumps(_exp([], {0: [1, 1], 1: [1, 0]})))  # changes: seed 0 (0, +0.5), seed 1 (0, 0)
    other.write_text(
        json.dumps(_exp(["rl.loss_norm=role_task"], {0: [2, 1], 1: [2, 2]}))
    )  # (+.5,+.5), (+.5,+1)
    res = bench_script("loss_settings_compare").compare([ref, other])
    row = res["1"]["all"]
    assert row["ref"]["change"]["mean"] == pytest.approx(12.5)  # (0 + 0.5 + 0 + 0) / 4, in points
    assert row["other"]["change"]["mean"] == pytest.approx(62.5)  # (0.5 + 0.5 + 0.5 + 1) / 4
    assert row["other"]["minus_reference"]["mean"] == pytest.approx(50.0)
    assert row["other"]["minus_reference"]["paired"] is True and "minus_reference" not in row["ref"]
    assert res["greedy"]["all"]["other"]["change"]["mean"] == 0
    bench_script("loss_settings_compare").main([str(ref), str(other), "--out", str(tmp_path / "c.json")])
    assert (
        "pass@1 T=1" in capsys.readouterr().out
        and json.loads((tmp_path / "c.json").read_text())["reference"] == "ref"
    )
