"""`populora experiment retention --quick` end to end: specialists, crossover children, probes at birth and
after recovery, and the kept-skill table."""

import json

import pytest
from typer.testing import CliRunner

from populora.cli import app


@pytest.mark.timeout(900)
def test_quick_retention_probes_parents_and_children(tmp_path):
    out = tmp_path / "ret"
    res = CliRunner().invoke(app, ["experiment", "retention", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "experiment.json").read_text())
    assert data["kind"] == "retention" and data["operators"] == ["X1", "X2"]
    assert list(data["rows"]) == [
        "base model",
        "code_o specialist",
        "code_i specialist",
        "X1 child",
        "X2 child",
    ]
    for name, row in data["rows"].items():
        assert set(row["birth"]) == {"code_i", "code_o", "code_f"}
        if name != "base model":
            assert set(row["after"]) == {"code_i", "code_o", "code_f"}
    # The specialists were trained on one task type each (their configs say so) ...
    for task in ("code_o", "code_i"):
        cfg = (out / "specialists" / task / "config.yaml").read_text()
        assert f"types: [{task}]" in cfg
    # ... and every child's recovery run starts from the child: its step-0 probe is the child at birth.
    rec = [json.loads(x) for x in (out / "recovery" / "X1_child" / "metrics.jsonl").read_text().splitlines()]
    assert rec[0]["step"] == 0 and rec[0]["probe"]["A0"] == data["rows"]["X1 child"]["birth"]
    page = (out / "experiment.html").read_text()
    assert "Crossover retention" in page and "X2 child" in page


def test_retention_rejects_a_mutation_as_crossover(tmp_path):
    res = CliRunner().invoke(app, ["experiment", "retention", "--operators", "M1", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "crossover" in res.output
