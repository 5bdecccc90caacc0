"""`populora eval` on the bundled tiny model: a run folder with real PEFT adapters, merge vs slot agreement."""

import json

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.evaluate.data import load_benchmark
from populora.evaluate.generate import MergedHFGenerator, SlotGenerator
from populora.evaluate.prompts import build_prompt
from populora.evaluate.targets import load_target, select_members


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_folder):
    """A run folder (docs/run-folder.md) whose newest checkpoint holds two PEFT adapters on the tiny model."""
    return run_folder(tmp_path_factory.mktemp("run"), {"T0": "teacher", "S0": "student"})


def test_target_resolution(run_dir):
    tgt = load_target(run_dir)
    assert tgt.checkpoint.name == "step_000002"
    assert tgt.roles() == {"T0": "teacher", "S0": "student"}
    assert [m.id for m in select_members(tgt, ["best"])] == ["base", "S0", "T0"]
    assert [m.id for m in select_members(tgt, ["T0"])] == ["base", "T0"]
    one = load_target(run_dir / "checkpoints" / "step_000002" / "adapters" / "T0")  # a single PEFT folder
    assert [m.id for m in one.members] == ["T0"] and "tiny-coder" in one.base


def test_merge_and_slot_generation_agree(run_dir, shared_data):
    tgt = load_target(run_dir)
    items = load_benchmark("humaneval+", shared_data, limit=2) + load_benchmark("gsm8k", shared_data, limit=2)
    merged = MergedHFGenerator(tgt.base, batch_size=4)
    prompts = [build_prompt(it, "azr", merged.tokenizer) for it in items]
    adapters = {"base": None, **tgt.adapters()}
    a = merged.generate(adapters, prompts, max_new_tokens=20)
    b = SlotGenerator(tgt.base, batch_size=8).generate(adapters, prompts, max_new_tokens=20)
    assert a == b
    assert a["T0"] != a["base"] and a["S0"] != a["T0"]  # the adapters are really applied


def test_eval_cli_limit_3_on_run_folder(run_dir, shared_data, monkeypatch):
    monkeypatch.setenv("POPULORA_NO_PROGRESS", "1")
    monkeypatch.delenv("POPULORA_LCB_PATH", raising=False)
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(run_dir),
            "--limit",
            "3",
            "--benchmarks",
            "humaneval+,mbpp+,lcb,gsm8k",
            "--max-new-tokens",
            "24",
            "--data-dir",
            str(shared_data),
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads((run_dir / "eval" / "results.json").read_text())
    rows = out["results"]
    assert {(x["member"], x["benchmark"]) for x in rows} == {
        (m, b) for m in ("base", "T0", "S0") for b in ("humaneval+", "mbpp+", "gsm8k")
    }
    assert all(x["n"] == 3 and 0.0 <= x["pass@1"] <= 1.0 for x in rows)
    assert set(out["summary"]) == {
        "Base",
        "Teacher mean",
        "Teacher best",
        "Teacher best member",
        "Teacher worst",
        "Student mean",
        "Student best",
        "Student best member",
        "Student worst",
    }
    assert out["meta"]["max_new_tokens"] == {"code": 24, "math": 24}
    assert "lcb" in out["unavailable"] and out["meta"]["apply"] == "merge"
    md = (run_dir / "eval" / "results.md").read_text()
    assert "HumanEval+" in md and "Code avg" in md and "LiveCodeBench: unavailable" in md
    assert "max new tokens): code 24, math 24" in md
    samples = (run_dir / "eval" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 3 * 9
