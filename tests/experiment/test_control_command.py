"""`populora experiment control NAME`: the former bench/learning_*.py scripts behind one command."""

import importlib

from typer.testing import CliRunner

from populora.cli import app
from populora.experiment.controlled import CONTROLS


def test_every_control_is_a_module_with_main_and_its_own_help():
    for name, module in CONTROLS.items():
        assert callable(importlib.import_module(module).main), name
        res = CliRunner().invoke(app, ["experiment", "control", name, "--help"])
        assert res.exit_code == 0, res.output
        assert f"populora experiment control {name}" in res.output and "--out" in res.output


def test_an_unknown_control_is_named_with_the_choices():
    res = CliRunner().invoke(app, ["experiment", "control", "learning_controls"])
    assert res.exit_code == 2
    assert "control 'learning_controls': unknown; use one of gold, rl, teacher, trace-share" in res.output
