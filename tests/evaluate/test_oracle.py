"""Oracle on a few real items per benchmark: gold answers pass, deliberately wrong ones fail (CLI + JSON)."""

import json

from typer.testing import CliRunner

from populora.cli import app
from populora.evaluate.data import MATH_BENCHMARKS, load_benchmark, parse_benchmarks
from populora.evaluate.oracle import oracle_response

BENCHES = "humaneval+,mbpp+," + ",".join(MATH_BENCHMARKS)


def test_loaders_read_the_real_files(shared_data):
    he = load_benchmark("humaneval+", shared_data)
    mbpp = load_benchmark("mbpp+", shared_data)
    assert (len(he), len(mbpp)) == (164, 378)
    assert he[0].meta["plus_input"] and he[0].gold.startswith(he[0].question)
    sizes = {b: len(load_benchmark(b, shared_data)) for b in MATH_BENCHMARKS}
    assert sizes == {
        "aime24": 30,
        "aime25": 30,
        "amc23": 40,
        "math500": 500,
        "minerva": 272,
        "gsm8k": 1319,
        "olympiadbench": 675,
    }
    assert parse_benchmarks("code,gsm8k,HumanEval") == ["humaneval+", "mbpp+", "lcb", "gsm8k"]


def test_wrong_math_answers_differ_from_gold(shared_data):
    items = load_benchmark("olympiadbench", shared_data, limit=40)
    for it in items:
        resp = oracle_response(it, "wrong", items)
        assert it.gold not in resp or it.gold.strip() == ""


def test_oracle_cli_gold_and_wrong(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_NO_PROGRESS", "1")
    monkeypatch.delenv("POPULORA_LCB_PATH", raising=False)
    runner = CliRunner()
    results = {}
    for mode in ("gold", "wrong"):
        out = tmp_path / f"{mode}.json"
        r = runner.invoke(
            app,
            [
                "eval",
                "--oracle",
                mode,
                "--benchmarks",
                BENCHES + ",lcb",
                "--limit",
                "3",
                "--data-dir",
                str(shared_data),
                "--json",
                str(out),
            ],
        )
        assert r.exit_code == 0, r.output
        results[mode] = json.loads(out.read_text())
    for mode, want in (("gold", 1.0), ("wrong", 0.0)):
        rows = results[mode]["results"]
        assert {r["benchmark"] for r in rows} == set(BENCHES.split(","))
        for row in rows:
            assert set(row) >= {"benchmark", "member", "n", "pass@1"}
            assert row["member"] == "oracle" and row["n"] == 3
            assert row["pass@1"] == want, (mode, row, results[mode].get("exceptions"))
        assert "lcb" in results[mode]["unavailable"]


def test_cli_user_errors(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["eval", "--oracle", "gold", "--benchmarks", "nope"])
    assert r.exit_code == 2 and "unknown benchmark" in r.output
    r = runner.invoke(
        app, ["eval", "--oracle", "gold", "--benchmarks", "aime24", "--data-dir", str(tmp_path)]
    )
    assert r.exit_code == 2 and "math/aime24/test.jsonl" in r.output
    r = runner.invoke(app, ["eval", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["eval"])
    assert r.exit_code == 2 and "TARGET" in r.output and "--model" in r.output
