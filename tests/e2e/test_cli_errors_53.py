"""Bad inputs and confusing lines from a new user's trial (issue 53, point 8), through the CLI: each gives one
clear line naming the problem and the fix, no traceback and no raw Python data."""

import re

from typer.testing import CliRunner

from populora.cli import app
from populora.config import load_config, resume_config, to_dict
from populora.experiment import settings as exp_settings
from populora.experiment.claims_view import TABLE_WIDTH, render_claims
from populora.train.resume import changed_settings


def test_unknown_lora_target_names_the_modules_that_exist(tmp_path, model_name):
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--quiet",
            "--run-dir",
            str(tmp_path / "r"),
            "--set",
            f"model.name={model_name}",
            "--set",
            "lora.targets=[nonexistent_proj]",
        ],
    )
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert "lora.targets=nonexistent_proj matches no linear module" in out
    for name in ("q_proj", "v_proj", "down_proj"):  # the modules the model has
        assert name in out
    assert "all-linear" in out  # and the named sets


def test_evolve_list_gives_the_names_readers_know():
    res = CliRunner().invoke(app, ["evolve", "--list"], terminal_width=80)
    assert res.exit_code == 0
    rows = {line.split()[0].rstrip("*"): line for line in res.output.splitlines() if line.split()}
    for op, name in {
        "X1": "DARE",
        "X6": "TIES",
        "X7": "DELLA",
        "X8": "SLERP",
        "X9": "Fisher",
        "M6": "rank",
    }.items():
        assert name in rows[op], rows[op]
    one = CliRunner().invoke(app, ["evolve", "X7", "--list"])
    assert "known as DELLA" in one.output


def _unfinished(tmp_path):
    out = tmp_path / "abl"
    st = {k: None for k in exp_settings.KEYS}
    st.update(
        preset="tiny", steps=4, seeds=2, arms=["4T+4S", "single"], probe_every=2, quick=True, overrides=[]
    )
    exp_settings.save(out, st)
    return out


def test_claims_on_an_unfinished_experiment_is_a_sentence(tmp_path):
    out = _unfinished(tmp_path)
    res = CliRunner().invoke(app, ["experiment", "claims", str(out)])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "no run has finished yet" in line and "4T+4S 0 of 2, single 0 of 2" in line
    assert f"--resume {out}" in line
    assert not re.search(r"[{}\[\]]", line.replace(str(out), "")), line  # no dict or list printed raw


def test_the_claims_table_fits_100_columns(tmp_path):
    from populora.experiment.claims import claims

    result = claims(_unfinished(tmp_path))  # every claim "not finished yet": the table's full set of rows
    text = render_claims(result)
    widths = [len(line) for line in text.splitlines()]
    assert widths and max(widths) <= TABLE_WIDTH, max(widths)
    assert "(a) population > single" in text and "(f) ... ratings vs probe" in text


def test_config_show_names_one_rerun_command():
    res = CliRunner().invoke(app, ["config", "show"])
    assert res.exit_code == 0
    head = [line for line in res.output.splitlines() if line.startswith("#")][:3]
    commands = {m for line in head for m in re.findall(r"populora train --\w+", line)}
    assert commands == {"populora train --config"}, head


def test_resume_calls_train_steps_the_runs_length():
    saved = to_dict(load_config("tiny"))
    line = changed_settings(saved, resume_config(saved, ["train.steps=48"]))
    assert line is not None and "\n" not in line
    assert "train.steps 24 -> 48 (the run's length" in line and "memory" not in line
    both = changed_settings(saved, resume_config(saved, ["train.steps=48", "rl.micro_batch_tokens=512"]))
    steps, memory = both.split("; ")[:2]
    assert "train.steps" in steps and "memory" not in steps
    assert "rl.micro_batch_tokens 4096 -> 512" in memory and "memory" in memory
