"""`populora experiment control rl`: RL of one student without teachers, restricted to some task types and
probed on the graded sets, on the problems of the generator the model was pretrained on."""

import json

import pytest

from populora.engine import resolve_model
from populora.experiment.controlled import rl as control_rl
from populora.train.setup import graded_seed_levels


def test_a_code_f_run_trains_and_probes_code_f_alone_on_the_models_generator(model_name, tmp_path):
    out = tmp_path / "rl.json"
    control_rl.main(
        [
            "--quick",
            "--model",
            model_name,
            "--types",
            "code_f",
            "--probe-set",
            "graded",
            "--probe-levels",
            "1",
            "--modes",
            "fresh",
            "--lrs",
            "3e-3",
            "--threads",
            "1",
            "--out",
            str(out),
        ]
    )
    rec = json.loads(out.read_text())
    run = rec["results"][0]
    assert set(rec["headroom"]) == {"code_f"}
    assert [set(s) for s in run["solve_rate_by_type"]] == [{"code_f"}] * run["steps"]
    assert all(set(p) == {"step", "code_f", "all"} for p in run["probe"])
    levels = graded_seed_levels(resolve_model(model_name))
    assert rec["problem_levels"] == (list(levels) if levels else None)
    if model_name == "tiny":  # the bundled asset v2: the trainer's seed levels
        assert rec["problem_levels"] == [1, 1, 2, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--types", "code_x"], "--types: unknown task type(s) code_x"),
        (["--probe-levels", "1"], "--probe-levels needs --probe-set graded"),
        (["--probe-set", "graded", "--probe-levels", "7"], "--probe-levels: bad level '7': levels are 1..5"),
        (["--probe-set", "graded", "--probe-levels", "one"], "--probe-levels: bad level 'one': expected N"),
    ],
)
def test_bad_options_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        control_rl.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
