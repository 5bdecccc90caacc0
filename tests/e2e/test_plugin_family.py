"""The example out-of-tree plugin (examples/task-plugin, pip-installed by `make test`) trains for 2 steps."""

import importlib.util

import pytest
from typer.testing import CliRunner

from populora.diagnostics.schema import check_run
from populora.diagnostics.sinks import read_jsonl
from populora.train.launch import train

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("populora_reverse") is None,
    reason="the example plugin is not installed: pip install --no-deps -e examples/task-plugin (make test does)",
)


def test_the_installed_plugin_is_listed_and_trains(tmp_path, fast):
    from populora.cli import app

    r = CliRunner().invoke(app, ["tasks", "list"])
    assert r.exit_code == 0 and ["reverse", "reverse", "populora-reverse"] in [
        line.split()[:3] for line in r.output.splitlines()
    ]
    run = train(
        "tiny",
        tmp_path / "run",
        [
            *fast,
            "train.steps=2",
            "tasks.families=reverse",
            "tasks.types=reverse",
            "diagnostics.probe_every=2",
            "diagnostics.probe_size=1",
            "tasks.prompts=1",
            "tasks.teacher_max_new_tokens=24",
            "diagnostics.probe_proposals=0",
        ],
        quiet=True,
    )
    assert check_run(run) == []
    metrics = [m for m in read_jsonl(run / "metrics.jsonl") if "members" in m]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        for mem in m["members"].values():
            assert "reverse" in mem["solve_rate"]
    assert {p["task"] for p in read_jsonl(run / "problems.jsonl")} == {"reverse"}
    # the plugin's own probe items were scored, at step 0 and after step 2
    probes = [m["probe"] for m in read_jsonl(run / "metrics.jsonl") if "probe" in m]
    assert len(probes) == 2 and all(set(acc) == {"reverse"} for p in probes for acc in p.values())
