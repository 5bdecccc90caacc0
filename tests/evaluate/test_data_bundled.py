"""The benchmark and seed data ship inside the package: every loader works with no data folder configured."""

from __future__ import annotations

import pytest

from populora.data import BUNDLED_ROOT, DataDirError, find_file, resolve_data_dir
from populora.evaluate.data import MATH_BENCHMARKS, DataError, load_benchmark

SIZES = {
    "humaneval+": 164,
    "mbpp+": 378,
    "aime24": 30,
    "aime25": 30,
    "amc23": 40,
    "math500": 500,
    "minerva": 272,
    "gsm8k": 1319,
    "olympiadbench": 675,
}


def test_default_root_is_the_bundled_copy(monkeypatch):
    monkeypatch.delenv("POPULORA_DATA_DIR", raising=False)
    assert resolve_data_dir() == BUNDLED_ROOT
    for bench, n in SIZES.items():
        assert len(load_benchmark(bench)) == n, bench


def test_every_shipped_file_has_its_licence():
    for folder in ("evalplus", "math", "azr_seed"):
        assert list((BUNDLED_ROOT / folder).glob("LICENSE*")), folder
    assert (BUNDLED_ROOT / "NOTICE.md").is_file()
    for name in ("7b_coder_seed_io.jsonl", "7b_coder_code_f_seed_io.jsonl"):
        assert find_file(BUNDLED_ROOT / "azr_seed" / name) is not None
    for bench in MATH_BENCHMARKS:
        name = "minerva_math" if bench == "minerva" else bench
        assert find_file(BUNDLED_ROOT / "math" / name / "test.jsonl") is not None, bench


def test_override_wins_and_a_missing_one_is_named(monkeypatch, tmp_path):
    (tmp_path / "math" / "amc23").mkdir(parents=True)
    (tmp_path / "math" / "amc23" / "test.jsonl").write_text('{"id": 0, "question": "1+1?", "answer": 2.0}\n')
    monkeypatch.setenv("POPULORA_DATA_DIR", str(tmp_path))
    items = load_benchmark("amc23")
    assert [(i.question, i.gold) for i in items] == [("1+1?", "2")]
    monkeypatch.setenv("POPULORA_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(DataError, match="nope.*POPULORA_DATA_DIR"):
        load_benchmark("amc23")
    with pytest.raises(DataDirError, match="--data-dir"):
        resolve_data_dir(tmp_path / "also-nope")


def test_seed_command_reads_the_bundled_seeds(monkeypatch):
    from populora.tasks.seeds import read_azr_seed

    monkeypatch.delenv("POPULORA_DATA_DIR", raising=False)
    rows = read_azr_seed(resolve_data_dir() / "azr_seed" / "7b_coder_seed_io.jsonl", "code_o")
    assert len(rows) > 100


def test_seed_command_names_a_missing_data_dir(tmp_path):
    from typer.testing import CliRunner

    from populora.cli import app

    r = CliRunner().invoke(app, ["tasks", "seeds", "--data-dir", str(tmp_path / "gone")])
    assert r.exit_code == 2 and "gone" in r.output and "POPULORA_DATA_DIR" in r.output
