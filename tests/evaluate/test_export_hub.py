"""`populora export` (issue 53 §5, §10): an exported adapter loads with ``AutoPeftModelForCausalLM`` offline (its
config names the resolved local base, not the bare name "tiny" that made PEFT ask the hub), ``--base-path``
writes another base, and ``--push-to-hub`` uploads through ``huggingface_hub.HfApi`` (a recording stand-in:
no network here) or, without a token, stops with one error before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from populora.cli import app

MEMBERS = {"T0": "teacher", "S0": "student"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_folder):
    run = tmp_path_factory.mktemp("export_hub") / "myrun"
    run.mkdir()
    return run_folder(run, MEMBERS)


def _invoke(*args):
    return CliRunner().invoke(app, ["export", *map(str, args)])


LOAD = """
import sys, torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer
model = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1])
tok = AutoTokenizer.from_pretrained(model.peft_config["default"].base_model_name_or_path)
ids = tok("def f(x):", return_tensors="pt")
out = model.generate(**ids, max_new_tokens=1, do_sample=False)
assert out.shape[1] == ids["input_ids"].shape[1] + 1
print("generated", out.shape[1] - ids["input_ids"].shape[1])
"""


def test_exported_adapter_loads_with_auto_peft_offline(run_dir, tmp_path):
    from populora.engine import resolve_model

    r = _invoke(run_dir, "--member", "T0", "--out", tmp_path / "hub")
    assert r.exit_code == 0, r.output
    folder = tmp_path / "hub" / "T0"
    cfg = json.loads((folder / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(resolve_model("tiny").resolve())
    card = (folder / "README.md").read_text()
    assert "AutoPeftModelForCausalLM" in card and "--base-path" in card
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "generated 1" in p.stdout


def test_base_path_is_written_as_given(run_dir, tmp_path):
    r = _invoke(run_dir, "--member", "S0", "--out", tmp_path / "o", "--base-path", "someone/some-base")
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "o" / "S0" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "someone/some-base"


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))


def test_push_without_a_token_is_one_error_before_any_work(run_dir, tmp_path, no_token):
    out = tmp_path / "hub"
    r = _invoke(run_dir, "--member", "T0", "--out", out, "--push-to-hub", "me/my-adapter")
    assert r.exit_code == 2, r.output
    assert "HF_TOKEN" in r.output and "hf auth login" in r.output and "Traceback" not in r.output
    assert not out.exists()  # nothing exported


class RecordingApi:
    """Stands in for huggingface_hub.HfApi: records the calls, uploads nothing."""

    calls: list = []

    def __init__(self, token=None, **kwargs):
        RecordingApi.calls.append(("init", token))

    def create_repo(self, repo_id, **kwargs):
        RecordingApi.calls.append(("create_repo", repo_id, kwargs.get("exist_ok")))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, repo_id, folder_path, path_in_repo="", **kwargs):
        RecordingApi.calls.append(
            (
                "upload_folder",
                repo_id,
                sorted(p.name for p in __import__("pathlib").Path(folder_path).iterdir()),
                path_in_repo,
            )
        )


def test_push_uploads_the_exported_folder_with_the_token(run_dir, tmp_path, no_token, monkeypatch):
    import huggingface_hub

    RecordingApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    r = _invoke(run_dir, "--member", "T0", "--out", tmp_path / "hub", "--push-to-hub", "me/my-adapter")
    assert r.exit_code == 0, r.output
    assert RecordingApi.calls == [
        ("init", "hf_test_token"),
        ("create_repo", "me/my-adapter", True),
        (
            "upload_folder",
            "me/my-adapter",
            ["README.md", "adapter_config.json", "adapter_model.safetensors"],
            "",
        ),
    ]
    assert "uploaded to https://huggingface.co/me/my-adapter" in r.output
    # two members: one subfolder each in the same repo
    RecordingApi.calls = []
    r = _invoke(run_dir, "--all", "--out", tmp_path / "hub2", "--push-to-hub", "me/pop")
    assert r.exit_code == 0, r.output
    assert sorted(c[3] for c in RecordingApi.calls if c[0] == "upload_folder") == ["S0", "T0"]
