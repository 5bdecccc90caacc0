"""`populora config show`, `train --help-config` under a preset, `--config FILE`, bare `key=value` overrides,
and config errors reported before torch is imported (issue 33, items 2, 4 and 6)."""

import subprocess
import sys
import textwrap

import pytest
import yaml
from typer.testing import CliRunner

from populora.cli import app
from populora.config import from_dict, load_config, to_dict, to_yaml
from populora.config_sources import resolve


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _show(*args: str) -> dict:
    res = _cli("config", "show", *args)
    assert res.exit_code == 0, res.output
    return yaml.safe_load(res.output)


def _one_line_error(res, needle: str) -> None:
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert needle in out, out
    assert len(out.splitlines()) == 1 and "Traceback" not in out, out


def test_config_show_prints_the_resolved_preset():
    shown = _show("--preset", "paper-7b")
    assert shown == to_dict(load_config("paper-7b"))
    assert shown["train"]["steps"] == 200 and shown["lora"]["rank"] == 32  # not the defaults 10 and 8
    assert from_dict(shown) == load_config("paper-7b")  # the output is a loadable config


def test_config_show_default_is_tiny_and_takes_set_and_bare_overrides():
    assert _show() == to_dict(load_config("tiny"))
    shown = _show("--preset", "smol", "--set", "rl.lr=1e-3", "train.steps=7", "lora.rank=2")
    assert shown == to_dict(load_config("smol", ["rl.lr=1e-3", "train.steps=7", "lora.rank=2"]))


def test_config_show_errors_are_one_line():
    _one_line_error(_cli("config", "show", "--preset", "paper7b"), "did you mean 'paper-7b'")
    _one_line_error(_cli("config", "show", "train.stepz=3"), "did you mean 'train.steps'")
    _one_line_error(_cli("config", "show", "lora.rank=0"), "lora.rank: must be >= 1")
    _one_line_error(_cli("config", "show", "not-a-folder"), "unexpected argument 'not-a-folder'")


def test_help_config_resolves_the_preset_and_marks_sources():
    res = _cli("train", "--preset", "paper-7b", "--help-config", "--set", "rl.rollouts=4")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "preset paper-7b" in lines[0]
    assert "train.steps = 200  [preset paper-7b]" in lines
    assert "lora.rank = 32  [preset paper-7b]" in lines
    assert "rl.rollouts = 4  [--set]" in lines
    assert "ratings.lcb_k = 1.0  [default]" in lines  # no preset sets it
    res = _cli("train", "--help-config")  # the default preset is tiny, not the models' defaults
    assert "train.steps = 24  [preset tiny]" in res.output.splitlines()


def test_help_config_shows_the_base_chain_of_a_derived_preset():
    out = _cli("train", "--preset", "smol", "--help-config").output.splitlines()
    assert "preset tiny + preset smol" in out[0]
    assert "model.name = 'smol'  [preset smol]" in out
    assert "lora.targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj']  [preset tiny]" in out


def test_config_show_of_a_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config("tiny", ["train.steps=7", "rl.lr=3e-4"])))
    shown = _show(str(run))
    assert shown["train"]["steps"] == 7 and shown["rl"]["lr"] == 3e-4
    assert _show(str(run), "train.steps=9")["train"]["steps"] == 9  # what `--resume RUN --set` would use
    _one_line_error(_cli("config", "show", str(run), "lora.rank=8"), "cannot change on --resume")
    _one_line_error(_cli("config", "show", str(run), "--preset", "smol"), "drop --preset/--config")
    _one_line_error(_cli("config", "show", str(tmp_path)), "no config.yaml there")
    res = _cli("train", "--resume", str(run), "--help-config", "train.steps=11")
    assert res.exit_code == 0 and f"config keys resolved from run {run} + --set" in res.output
    assert "train.steps = 11  [--set]" in res.output.splitlines()
    assert f"rl.lr = 0.0003  [run {run}]" in res.output.splitlines()


def _write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


def test_config_file_layers_over_its_base(tmp_path):
    mine = _write(tmp_path / "mine.yaml", "base: smol\ntrain:\n  steps: 3\nrl:\n  lr: 0.002\n")
    res = resolve(config_file=mine)
    assert to_dict(res.cfg) == to_dict(load_config("smol", ["train.steps=3", "rl.lr=0.002"]))
    assert res.origin["train.steps"] == f"config {mine}" and res.origin["model.name"] == "preset smol"
    assert _show("--config", str(mine), "train.steps=5") == to_dict(
        load_config("smol", ["train.steps=5", "rl.lr=0.002"])
    )
    # no `base:`: the file goes over --preset (default tiny)
    plain = _write(tmp_path / "plain.yaml", "train:\n  steps: 4\n")
    assert _show("--config", str(plain))["train"]["steps"] == 4
    assert _show("--config", str(plain))["lora"]["rank"] == load_config("tiny").lora.rank
    assert _show("--config", str(plain), "--preset", "paper-7b")["lora"]["rank"] == 32
    # `base:` may be a YAML file next to it
    _write(tmp_path / "team.yaml", "base: paper-7b\nrl:\n  rollouts: 4\n")
    child = _write(tmp_path / "child.yaml", "base: team.yaml\ntrain:\n  steps: 2\n")
    shown = _show("--config", str(child))
    assert (shown["train"]["steps"], shown["rl"]["rollouts"], shown["lora"]["rank"]) == (2, 4, 32)


def test_config_file_show_round_trip(tmp_path):
    """What `config show` prints trains as `--config FILE` to the same config."""
    res = _cli("config", "show", "--preset", "paper-7b", "train.steps=3")
    saved = _write(tmp_path / "saved.yaml", res.output)
    assert resolve(config_file=saved).cfg == load_config("paper-7b", ["train.steps=3"])


@pytest.mark.parametrize(
    "text,args,needle",
    [
        ("base: smol\n", ["--preset", "paper-7b"], "names `base: smol` but --preset paper-7b was given"),
        ("train:\n  stepz: 3\n", [], "did you mean 'train.steps'"),
        ("train: [1, 2\n", [], "not valid YAML"),
        ("- a\n", [], "expected a mapping of sections"),
        ("base: nope\n", [], "unknown preset 'nope'"),
    ],
)
def test_config_file_errors_are_one_line(tmp_path, text, args, needle):
    bad = _write(tmp_path / "bad.yaml", text)
    for cmd in (["config", "show"], ["train", "--run-dir", str(tmp_path / "r")]):
        _one_line_error(_cli(*cmd, "--config", str(bad), *args), needle)
    assert not (tmp_path / "r").exists()  # nothing started


def test_config_file_missing_and_resume_conflict(tmp_path):
    _one_line_error(_cli("train", "--config", str(tmp_path / "no.yaml")), "--config")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config("tiny")))
    mine = _write(tmp_path / "mine.yaml", "train:\n  steps: 3\n")
    _one_line_error(
        _cli("train", "--resume", str(run), "--config", str(mine)), "a run keeps its config; drop --config"
    )


def test_bare_overrides_are_accepted_as_set(tmp_path):
    # A bad value given bare is reported exactly as with --set: it was parsed as an override.
    res = _cli("train", "--preset", "tiny", "--run-dir", str(tmp_path / "r"), "train.steps=0")
    _one_line_error(res, "train.steps: must be >= 1, got 0")
    res = _cli("train", "--run-dir", str(tmp_path / "r"), "rl.lrr=1")
    _one_line_error(res, "did you mean 'rl.lr'")
    res = _cli("train", "--help-config", "train.steps=5", "--set", "rl.rollouts=3")
    assert "train.steps = 5  [--set]" in res.output.splitlines()
    assert "rl.rollouts = 3  [--set]" in res.output.splitlines()


def test_a_bare_word_gets_a_hint_naming_set(tmp_path):
    res = _cli("train", "--run-dir", str(tmp_path / "r"), "steps")
    _one_line_error(res, "unexpected argument 'steps'; config overrides are KEY=VALUE")
    assert "--set" in res.output


CHECK = """
import sys
from populora.cli import app
code = None
try:
    app(sys.argv[1:])
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "transformers", "matplotlib") if m in sys.modules)
print("RESULT", code, ",".join(heavy) or "-")
"""


@pytest.mark.parametrize(
    "args,code",
    [
        (["train", "--set", "train.steps=-1"], 2),
        (["train", "train.steps=-1"], 2),
        (["train", "--preset", "paper7b"], 2),
        (["train", "--config", "/no/such.yaml"], 2),
        (["train", "--resume", "RUN", "--set", "lora.rank=8"], 2),
        (["train", "--preset", "paper-7b", "--help-config"], 0),
        (["config", "show", "--preset", "paper-7b"], 0),
    ],
)
def test_config_errors_come_before_heavy_imports(args, code, tmp_path):
    """A config error (or a config listing) in a fresh interpreter leaves torch, transformers and
    matplotlib unimported: the 3-second import no longer precedes the one-line error."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config("tiny")))
    args = [str(run) if a == "RUN" else a for a in args]
    res = subprocess.run(
        [sys.executable, "-c", CHECK, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    last = res.stdout.strip().splitlines()[-1]
    assert last == f"RESULT {code} -", (res.stdout[-500:], res.stderr[-500:])
    if code:
        assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
