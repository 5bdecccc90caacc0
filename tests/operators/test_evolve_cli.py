"""`populora evolve` on PEFT folders and `populora evolve --list`, through the real CLI app."""

from __future__ import annotations

import json

import pytest
import torch
from op_fixtures import assert_same_delta, make_adapter
from typer.testing import CliRunner

from populora.cli import app
from populora.lora.peft_io import load_peft, save_peft
from populora.operators import apply

runner = CliRunner()


@pytest.fixture
def folders(tmp_path):
    a, b = make_adapter(1, dtype=torch.float32), make_adapter(2, dtype=torch.float32)
    return (
        save_peft(a, tmp_path / "a", base_model_name_or_path="some/base"),
        save_peft(b, tmp_path / "b"),
        tmp_path,
    )


def test_evolve_crossover_writes_peft_child_and_prints_retention(folders):
    fa, fb, tmp = folders
    res = runner.invoke(
        app,
        [
            "evolve",
            "X5",
            "--parent",
            str(fa),
            "--parent",
            str(fb),
            "--out",
            str(tmp / "kid"),
            "--seed",
            "3",
            "--set",
            "weight=0.7",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "rel.Fro" in res.output and "parent2" in res.output and "midpoint" in res.output
    kid = load_peft(tmp / "kid")
    expected = apply("X5", [load_peft(fa), load_peft(fb)], seed=3, weight=0.7)
    assert_same_delta(kid, expected, 1e-6)
    cfg = json.loads((tmp / "kid" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "some/base" and cfg["r"] == 4


def test_evolve_mutation_is_reproducible(folders):
    fa, _, tmp = folders
    for out in ("m1", "m2"):
        res = runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(tmp / out), "--seed", "9"])
        assert res.exit_code == 0, res.output
    x, y = load_peft(tmp / "m1"), load_peft(tmp / "m2")
    assert all(torch.equal(x.modules[k][0], y.modules[k][0]) for k in x.modules)


def test_evolve_list_shows_all_operators_one_line_each_at_80_columns():
    res = runner.invoke(app, ["evolve", "--list"], terminal_width=80)
    assert res.exit_code == 0
    lines = res.output.splitlines()
    for name in [f"M{i}" for i in range(1, 7)] + [f"X{i}" for i in range(1, 10)] + ["I1", "I2"]:
        assert sum(line.split()[:1] in ([name], [name + "*"]) for line in lines) == 1, name
    assert "fraction=0.33" in res.output
    assert len(lines) <= 24 and max(map(len, lines)) <= 80  # was 151 lines with the maths folded in
    one = runner.invoke(app, ["evolve", "X4", "--list"], terminal_width=80)
    assert one.exit_code == 0 and "cos_gate=0.5" in one.output and "extrapolating" in one.output


@pytest.mark.parametrize(
    "setting, message",
    [
        ("sigma=big", "--set sigma='big': M1's parameter sigma is a number (default 0.1)"),
        ("sigma=true", "parameter sigma is a number"),
    ],
)
def test_evolve_set_of_the_wrong_type_names_the_parameter(folders, setting, message):
    fa, _, tmp = folders
    res = runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(tmp / "o"), "--set", setting])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    res = runner.invoke(app, ["evolve", "M2", "-p", str(fa), "-o", str(tmp / "o"), "--set", "canonicalize=1"])
    assert res.exit_code == 2 and "canonicalize is true or false (default true)" in res.output, res.output
    assert not (tmp / "o").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["Q7", "-p", "{a}", "-o", "{out}"], "unknown operator 'Q7'"),
        (["X5", "-p", "{a}", "-o", "{out}"], "X5 takes 2 parent(s)"),
        (["M1", "-p", "{a}", "-o", "{out}", "--set", "sigma"], "not key=value"),
        (["M1", "-p", "{a}", "-o", "{out}", "--set", "nope=1"], "no parameter 'nope'"),
        (["M1", "-p", "{missing}", "-o", "{out}"], "does not exist"),
        (["M1", "-p", "{ia3}", "-o", "{out}"], "not LORA"),
        (["M1", "-p", "{a}"], "--out"),
    ],
)
def test_evolve_user_errors_exit_2(folders, args, message):
    fa, _, tmp = folders
    ia3 = tmp / "ia3"
    ia3.mkdir()
    (ia3 / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}))
    args = [x.format(a=fa, out=tmp / "o", missing=tmp / "missing", ia3=ia3) for x in args]
    res = runner.invoke(app, ["evolve", *args])
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output


def test_evolve_refuses_to_overwrite_without_force_and_never_a_parent(folders):
    """Issue 13 item 12: -o on an existing folder needs --force; a parent (or a folder holding one) never."""
    fa, fb, tmp = folders
    before = {p: (p / "adapter_model.safetensors").read_bytes() for p in (fa, fb)}
    for out, force in ((fa, False), (fa, True), (fb, True), (tmp, True)):
        args = ["evolve", "X5", "-p", str(fa), "-p", str(fb), "-o", str(out)] + (["--force"] if force else [])
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "would overwrite the parent" in res.output, res.output
    assert all((p / "adapter_model.safetensors").read_bytes() == b for p, b in before.items())

    kid = tmp / "kid"
    assert runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(kid), "--seed", "1"]).exit_code == 0
    first = (kid / "adapter_model.safetensors").read_bytes()
    res = runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(kid), "--seed", "2"])
    assert res.exit_code == 2 and "already exists" in res.output and "--force" in res.output
    assert (kid / "adapter_model.safetensors").read_bytes() == first
    res = runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(kid), "--seed", "2", "--force"])
    assert res.exit_code == 0 and (kid / "adapter_model.safetensors").read_bytes() != first
    (tmp / "empty").mkdir()
    assert runner.invoke(app, ["evolve", "M1", "-p", str(fa), "-o", str(tmp / "empty")]).exit_code == 0


def test_evolve_says_when_x4_declined(folders):
    fa, fb, tmp = folders  # unrelated random parents: cos ~ 0 < 0.5
    res = runner.invoke(app, ["evolve", "X4", "-p", str(fa), "-p", str(fb), "-o", str(tmp / "x4")])
    assert res.exit_code == 0, res.output
    assert "X4 declined" in res.output and "applied X5" in res.output
