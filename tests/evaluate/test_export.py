"""`populora export RUN --out DIR` (issue 33 §6): Hub-ready PEFT folders with a model card, chosen by the LCB
rule, that load in plain PEFT and give the checkpoint's own model; bad requests are one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from populora.cli import app

MEMBERS = {"T0": "teacher", "T1": "teacher", "S0": "student", "S1": "student"}
CONFIG = """model:
  name: tiny
population:
  teachers: 2
  students: 2
train:
  steps: 8
lora:
  rank: 4
  alpha: 8
ratings:
  lcb_k: 1.0
"""
# LCB (k = 1): T0 24.0, T1 26.0 -> T1; S0 20.0, S1 19.5 -> S0. With mu alone T0 and S1 would win.
POPULATION = [
    {"id": "T0", "role": "teacher", "slot": 0, "mu": 30.0, "sigma": 6.0, "games": 8, "born_step": 0},
    {
        "id": "T1",
        "role": "teacher",
        "slot": 1,
        "mu": 27.0,
        "sigma": 1.0,
        "parents": ["T0"],
        "born_step": 4,
        "operator": "M1",
        "games": 4,
    },
    {"id": "S0", "role": "student", "slot": 2, "mu": 21.0, "sigma": 1.0, "games": 8},
    {"id": "S1", "role": "student", "slot": 3, "mu": 25.5, "sigma": 6.0, "games": 8},
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_folder):
    run = tmp_path_factory.mktemp("export") / "myrun"
    run.mkdir()
    run_folder(run, MEMBERS)
    (run / "config.yaml").write_text(CONFIG)
    state = {"step": 2, "population": {"members": POPULATION, "next_index": {"T": 2, "S": 2}}}
    (run / "checkpoints" / "step_000002" / "state.json").write_text(json.dumps(state))
    return run


def _invoke(*args):
    return CliRunner().invoke(app, ["export", *map(str, args)])


def test_best_export_is_a_hub_ready_peft_folder_that_loads(run_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from populora.engine import resolve_model

    r = _invoke(run_dir, "--best", "--out", tmp_path / "hub")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == ["S0", "T1"]  # by LCB, not by mu
    folder = tmp_path / "hub" / "T1"
    ckpt = run_dir / "checkpoints" / "step_000002" / "adapters" / "T1"
    assert (folder / "adapter_model.safetensors").read_bytes() == (
        ckpt / "adapter_model.safetensors"
    ).read_bytes()
    card = (folder / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: peft" in front and "license: apache-2.0" in front and "- teacher" in front
    for text in (
        "| rank / alpha | 4 / 8 |",
        "q_proj",
        "| TrueSkill mu / sigma | 27.00 / 1.00 |",
        "| LCB mu - 1 sigma (ratings.lcb_k) | 26.00 |",
        "| made by operator | M1 |",
        "| parents | T0 |",
        "| born at step | 4 |",
        "checkpoint step 2",
        "| `train.steps` | `8` |",
        "PeftModel.from_pretrained",
        'resolve_model("tiny")',
    ):
        assert text in card, text

    torch.manual_seed(0)
    base_dir = resolve_model("tiny")
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])

    def logits(adapter):
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        model = base if adapter is None else PeftModel.from_pretrained(base, str(adapter))
        with torch.no_grad():
            return model(ids).logits

    exported, original, plain = logits(folder), logits(ckpt), logits(None)
    assert torch.equal(exported, original)  # the same model as the checkpoint's adapter
    assert not torch.allclose(exported, plain)  # and the adapter is really applied


def test_member_and_all_and_hub_base(run_dir, tmp_path):
    r = _invoke(run_dir, "--member", "S1,T0", "--out", tmp_path / "m")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["S1", "T0"]
    assert (
        "| made by operator | none (an initial member) |" in (tmp_path / "m" / "T0" / "README.md").read_text()
    )
    # a run on a hub model: the exported config and the card name the hub id (nothing is downloaded)
    hub_run = tmp_path / "hubrun"
    shutil.copytree(run_dir, hub_run)
    (hub_run / "config.yaml").write_text(CONFIG.replace("name: tiny", "name: Qwen/Qwen2.5-Coder-7B"))
    r = _invoke(hub_run, "--all", "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(MEMBERS)
    cfg = json.loads((tmp_path / "a" / "S0" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "Qwen/Qwen2.5-Coder-7B"
    card = (tmp_path / "a" / "S0" / "README.md").read_text()
    assert "base_model: Qwen/Qwen2.5-Coder-7B" in card.split("---")[1]
    assert 'from_pretrained("Qwen/Qwen2.5-Coder-7B")' in card


@pytest.mark.parametrize(
    "args, message",
    [
        (["--member", "T9"], "unknown member(s) T9"),
        (["--best", "--all"], "give one of --best, --member ID or --all"),
        (["--out-inside"], "inside the run folder"),
        (["--not-a-run"], "is not a run folder"),
    ],
)
def test_bad_requests_are_one_line_errors(run_dir, tmp_path, args, message):
    out = tmp_path / "o"
    if args == ["--out-inside"]:
        args, out = [], run_dir / "exported"
    target = tmp_path if args == ["--not-a-run"] else run_dir
    args = [] if args == ["--not-a-run"] else args
    r = _invoke(target, *args, "--out", out)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert not (run_dir / "exported").exists()


def test_existing_folder_needs_force(run_dir, tmp_path):
    out = tmp_path / "o"
    assert _invoke(run_dir, "--member", "T0", "--out", out).exit_code == 0
    r = _invoke(run_dir, "--member", "T0", "--out", out)
    assert r.exit_code == 2 and "--force" in r.output
    r = _invoke(run_dir, "--member", "T0", "--out", out, "--force")
    assert r.exit_code == 0 and sorted(p.name for p in out.iterdir()) == ["T0"]  # no temp folder left


def test_checkpoint_choice(run_dir, tmp_path):
    r = _invoke(run_dir, "--checkpoint", "latest", "--member", "T0", "--out", tmp_path / "l")
    assert r.exit_code == 0, r.output
    assert "checkpoint step 2" in (tmp_path / "l" / "T0" / "README.md").read_text()
    r = _invoke(run_dir, "--checkpoint", "1", "--out", tmp_path / "one")  # step 1 holds no adapters
    assert r.exit_code == 2 and "step_000001 has no adapters" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "one").exists()


def test_export_copies_only_the_peft_files_and_never_follows_a_link(run_dir, tmp_path):
    """A run folder is data (issue 50): a link in an adapter folder (to a private key, say) never reaches the
    Hub-ready folder, and neither does any file but the PEFT weights, its config and the card."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    adapter = run / "checkpoints" / "step_000002" / "adapters" / "T0"
    (adapter / "id_ed25519").symlink_to(key)
    (adapter / "training_args.bin").write_bytes(b"\x80\x04pickle")
    r = _invoke(run, "--member", "T0", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "o" / "T0").iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert not (tmp_path / "o" / "T0" / "adapter_model.safetensors").is_symlink()
    # the weights themselves as a link: refused in one line, nothing written
    weights = adapter / "adapter_model.safetensors"
    weights.rename(tmp_path / "w.safetensors")
    weights.symlink_to(key)
    r = _invoke(run, "--member", "T0", "--out", tmp_path / "p")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "adapter_model.safetensors is a symbolic link, not a regular file" in r.output
    assert not (tmp_path / "p" / "T0").exists()
