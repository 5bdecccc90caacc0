"""`populora demo`: trains the tiny preset into a run folder and writes the HTML report."""

from typer.testing import CliRunner

from populora.cli import app


def test_demo_writes_run_folder_and_report(tmp_path, fast):
    run = tmp_path / "demo"
    sets = [x for kv in [*fast, "train.steps=1"] for x in ("--set", kv)]
    res = CliRunner().invoke(app, ["demo", "--run-dir", str(run), *sets])
    assert res.exit_code == 0, res.output
    assert f"run folder: {run}" in res.output
    assert (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert (run / "checkpoints" / "step_000001" / "state.json").is_file()
    assert (run / "report.html").is_file() and f"report: {run / 'report.html'}" in res.output
