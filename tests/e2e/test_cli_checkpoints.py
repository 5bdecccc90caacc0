"""A real `populora train --config FILE key=value` run, then the `latest` / `final` checkpoint aliases through
every command that takes a checkpoint (eval TARGET and --checkpoint, evolve --parent) and the named base model
in its adapters (issue 33, item 6)."""

import json
import os
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from populora.checkpoint_ref import CheckpointRefError, resolve_alias_path, resolve_checkpoint
from populora.cli import app
from populora.evaluate.targets import TargetError, load_target
from populora.lora.peft_io import load_peft, portable_base
from populora.paths import TINY_MODEL_DIR


@pytest.fixture
def run(two_step_run):
    """Two steps of the tiny preset from a user YAML file plus a bare override, through the real CLI
    (tests/e2e/conftest.py; shared: read it, copy it before changing it)."""
    return two_step_run


def test_config_file_and_bare_override_reach_the_run(run):
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["steps"] == 2  # the bare override beats the file's 5
    assert saved["train"]["checkpoint_every"] == 1 and saved["evolution"]["every"] == 0  # from the file
    assert saved["lora"]["rank"] == 4  # from its base, the tiny preset


def test_latest_final_and_step_resolve(run, tmp_path):
    ck = run / "checkpoints"
    assert resolve_checkpoint(run, "latest") == ck / "step_000002"
    assert resolve_checkpoint(run, "final") == ck / "step_000002"
    assert resolve_checkpoint(run, "1") == resolve_checkpoint(run, "step_000001") == ck / "step_000001"
    assert resolve_alias_path(ck / "latest" / "adapters" / "T0") == ck / "step_000002" / "adapters" / "T0"
    assert resolve_alias_path(ck / "step_000001") == ck / "step_000001"  # an existing path is kept
    with pytest.raises(
        CheckpointRefError, match=r"no checkpoint of step 9; use latest, final or a saved step \(1, 2"
    ):
        resolve_checkpoint(run, "9")
    with pytest.raises(CheckpointRefError, match="unknown checkpoint 'newest'"):
        resolve_checkpoint(run, "newest")
    # a run that stopped early (config says 5 steps): latest is its step 2, final does not exist yet
    stopped = tmp_path / "stopped"
    shutil.copytree(run, stopped)
    cfg = yaml.safe_load((stopped / "config.yaml").read_text())
    cfg["train"]["steps"] = 5
    (stopped / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert resolve_checkpoint(stopped, "latest").name == "step_000002"
    with pytest.raises(CheckpointRefError, match=r"stopped at step 2 of 5; use `latest`, or finish it"):
        resolve_checkpoint(stopped, "final")
    with pytest.raises(CheckpointRefError, match="no complete checkpoint"):
        resolve_checkpoint(tmp_path, "latest")


def test_eval_targets_take_the_aliases(run):
    assert load_target(run).checkpoint.name == "step_000002"
    assert load_target(run, checkpoint="1").checkpoint.name == "step_000001"
    assert load_target(run, checkpoint="final").checkpoint.name == "step_000002"
    by_path = load_target(run / "checkpoints" / "latest")  # a checkpoint folder as TARGET
    assert by_path.checkpoint.name == "step_000002" and by_path.run_dir == run
    assert sorted(m.id for m in by_path.members) == ["S0", "S1", "T0", "T1"]
    one = load_target(run / "checkpoints" / "final" / "adapters" / "T0")  # a PEFT folder inside it
    assert [m.adapter for m in one.members] == [run / "checkpoints" / "step_000002" / "adapters" / "T0"]
    with pytest.raises(TargetError, match="no checkpoint of step 7"):
        load_target(run, checkpoint="7")
    with pytest.raises(TargetError, match="is not a run folder"):
        load_target(run / "checkpoints" / "latest" / "adapters" / "T0", checkpoint="1")


def test_eval_cli_checkpoint_errors_are_one_line(run):
    res = CliRunner().invoke(app, ["eval", str(run), "--checkpoint", "7", "--limit", "1"])
    assert res.exit_code == 2 and "no checkpoint of step 7" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["eval", "--model", "tiny", "--checkpoint", "latest"])
    assert res.exit_code == 2 and "give the run folder as TARGET" in res.output


def test_evolve_parent_through_latest(run, tmp_path):
    res = CliRunner().invoke(
        app,
        ["evolve", "M1", "--parent", str(run / "checkpoints" / "latest" / "adapters" / "T0"),
         "--out", str(tmp_path / "kid"), "--seed", "1"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    kid, parent = (
        load_peft(tmp_path / "kid"),
        load_peft(run / "checkpoints" / "step_000002" / "adapters" / "T0"),
    )
    assert kid.rank == parent.rank and set(kid.modules) == set(parent.modules)


def test_adapters_name_their_base_and_load_in_plain_peft(run, model_name):
    adapter = run / "checkpoints" / "latest"
    folder = resolve_alias_path(adapter) / "adapters" / "S0"
    base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == model_name  # "tiny", not the install path (a random test model's folder stays a path)
    assert model_name != "tiny" or not os.path.isabs(base)
    # plain PEFT: load the base yourself (populora resolves the name), then the adapter onto it
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from populora.engine import resolve_model

    net = AutoModelForCausalLM.from_pretrained(resolve_model(base), dtype=torch.float32)
    model = PeftModel.from_pretrained(net, folder)
    ours = load_peft(folder)
    name, (a, _) = next(iter(ours.modules.items()))
    loaded = dict(model.named_parameters())[f"base_model.model.{name}.lora_A.default.weight"]
    assert torch.equal(loaded, a)


def test_portable_base_names(tmp_path, monkeypatch):
    assert portable_base(str(TINY_MODEL_DIR)) == ("tiny", None)
    snap = tmp_path / "hub" / "models--Qwen--Qwen2.5-Coder-7B" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    assert portable_base(str(snap)) == ("Qwen/Qwen2.5-Coder-7B", "0123abc")
    monkeypatch.setenv("POPULORA_CACHE", str(tmp_path / "cache"))
    smol = tmp_path / "cache" / "models" / "smol"
    smol.mkdir(parents=True)
    assert portable_base(str(smol)) == ("smol", None)
    mine = tmp_path / "my-model"
    mine.mkdir()
    assert portable_base(str(mine)) == (str(mine), None)  # a folder of the user's: kept
    assert portable_base("some/base") == ("some/base", None) and portable_base(None) == (None, None)
