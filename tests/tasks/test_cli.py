from typer.testing import CliRunner

from populora.cli import app


def test_demo_prints_prompts_and_scores():
    r = CliRunner().invoke(app, ["tasks", "demo", "code_i", "--template", "compact"])
    assert r.exit_code == 0, r.output
    assert "code_i teacher prompt" in r.output and "code_i student prompt" in r.output
    assert "+1.0" in r.output and "-1.0" in r.output  # the injection is a format error


def test_demo_rejects_unknown_task_and_template():
    r = CliRunner().invoke(app, ["tasks", "demo", "code_x"])
    assert r.exit_code == 2 and "unknown task" in r.output
    r = CliRunner().invoke(app, ["tasks", "demo", "code_o", "--template", "nope"])
    assert r.exit_code == 2 and "unknown template" in r.output
