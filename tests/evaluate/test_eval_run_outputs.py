"""`populora eval RUN_DIR` on a run folder with two adapters per role (bundled tiny model, real PEFT): the JSON
names each role's best and worst adapter by aggregate (issue 28 §5), and the samples are on disk before
grading starts, so a grading failure loses no generation (issue 29 §3)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from populora.cli import app
from populora.evaluate import runner
from populora.evaluate.table import averages

MEMBERS = {"T0": "teacher", "T1": "teacher", "S0": "student", "S1": "student"}
ARGS = ["--limit", "2", "--benchmarks", "humaneval+,gsm8k", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_folder):
    return run_folder(tmp_path_factory.mktemp("run4"), MEMBERS)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("POPULORA_NO_PROGRESS", "1")


def test_eval_json_has_best_mean_and_worst_per_role(run_dir, shared_data, tmp_path):
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(
        app, ["eval", str(run_dir), *ARGS, "--data-dir", str(shared_data), "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    per_member: dict[str, dict] = {}
    for row in res["results"]:
        per_member.setdefault(row["member"], {})[row["benchmark"]] = row["pass@1"]
    assert set(per_member) == {"base", *MEMBERS}
    overall = {m: averages(v)["overall"] for m, v in per_member.items()}
    md = (run_dir / "eval" / "results.md").read_text()
    for role, name in (("teacher", "Teacher"), ("student", "Student")):
        pick = res["by_role"][role]
        group = [m for m, r_ in MEMBERS.items() if r_ == role]
        assert pick["members"] == sorted(group)
        worst, best = pick["worst_member"], pick["best_member"]
        assert overall[worst] == min(overall[m] for m in group) == pick["worst_overall"]
        assert overall[best] == max(overall[m] for m in group) == pick["best_overall"]
        # The worst column is that adapter's own numbers, the best member's likewise.
        assert res["summary"][f"{name} worst"] == {**per_member[worst], **averages(per_member[worst])}
        assert res["summary"][f"{name} best member"] == {**per_member[best], **averages(per_member[best])}
        for b in ("humaneval+", "gsm8k"):
            vals = [per_member[m][b] for m in group]
            assert res["summary"][f"{name} best"][b] == max(vals)
            assert res["summary"][f"{name} mean"][b] == pytest.approx(sum(vals) / len(vals))
        assert f"{name} worst ({worst})" in md and f"{name} best member ({best})" in md
    # The run folder's results.json is the same document as --json; the graded samples replace the partial file.
    assert json.loads((run_dir / "eval" / "results.json").read_text())["by_role"] == res["by_role"]
    graded = [json.loads(x) for x in (run_dir / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(graded) == 5 * 4 and all("correct" in s for s in graded)
    assert not (run_dir / "eval" / "samples.partial.jsonl").exists()


def test_a_grading_failure_keeps_every_generation(run_dir, shared_data, tmp_path, monkeypatch):
    def broken_grade(*args, **kwargs):
        raise RuntimeError("grader exploded")

    monkeypatch.setattr(runner, "grade", broken_grade)
    out_dir = tmp_path / "out"
    r = CliRunner().invoke(
        app, ["eval", str(run_dir), *ARGS, "--data-dir", str(shared_data), "--out-dir", str(out_dir)]
    )
    assert r.exit_code == 2, r.output
    assert "grader exploded" in r.output and "samples.partial.jsonl" in r.output
    lines = [json.loads(x) for x in (out_dir / "samples.partial.jsonl").read_text().splitlines()]
    # Every member (the base model included) answered every problem, and every answer is on disk.
    assert {(s["member"], s["benchmark"], s["id"]) for s in lines} == {
        (m, b, i)
        for m in ("base", *MEMBERS)
        for b, i in (
            ("humaneval+", "HumanEval/0"),
            ("humaneval+", "HumanEval/1"),
            ("gsm8k", "gsm8k/0"),
            ("gsm8k", "gsm8k/1"),
        )
    }
    assert len(lines) == 5 * 4 and all(isinstance(s["response"], str) for s in lines)
    assert not (out_dir / "results.json").exists() and not (out_dir / "samples.jsonl").exists()
