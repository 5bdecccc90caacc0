"""`report` warns about corrupt or deleted metrics.jsonl lines instead of skipping them silently (issue 13)."""

from typer.testing import CliRunner

from populora.cli import app
from populora.diagnostics.run import load_run
from populora.report import render_report
from populora.report.synthetic import write_synthetic_run


def _lines(run_dir):
    return (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)


def test_intact_run_has_no_warnings(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "ok", mode="single", steps=6, seed=3))
    assert run.warnings == []


def test_corrupt_middle_line_is_reported(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "bad", mode="single", steps=6, seed=3)
    lines = _lines(run_dir)
    lines[2] = '{"step": 3, "solve_ra\n'  # a line garbled in the middle of the file
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    run = load_run(run_dir)
    assert any("metrics.jsonl:3" in w and "corrupt" in w for w in run.warnings), run.warnings
    assert "corrupt line" in render_report(run)
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0
    assert "warning:" in res.stderr and "metrics.jsonl:3" in res.stderr


def test_deleted_middle_line_is_reported(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "gap", mode="single", steps=6, seed=3)
    lines = _lines(run_dir)
    step = load_run(run_dir).metrics[3]["step"]
    del lines[3]
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    run = load_run(run_dir)
    assert any(f"no line for step(s) {step}" in w for w in run.warnings), run.warnings
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0 and f"step(s) {step}" in res.stderr
