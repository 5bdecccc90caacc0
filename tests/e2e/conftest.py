"""Shared settings of the end-to-end runs: the bundled tiny model (or a tiny random model while it is absent)
and overrides that keep each run to seconds (few prompts, n=2, short answers); one trained 2-step run folder
shared, read-only, by the tests that inspect, resume or damage a finished run (those copy it first)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fast_runs import FAST


@pytest.fixture(scope="session")
def fast(model_name) -> list[str]:
    return [*FAST, f"model.name={model_name}"]


@pytest.fixture(scope="session")
def two_step_run(tmp_path_factory, fast) -> Path:
    """A finished 2-step run with a checkpoint after each step (both kept), trained by the real entry point in
    a subprocess from a user YAML file plus a bare override (`populora train --config FILE train.steps=2`).

    Shared by every test of this folder that needs a finished run: never write into it; copy it
    (`shutil.copytree`) to resume or damage it."""
    root = tmp_path_factory.mktemp("two")
    mine = root / "mine.yaml"
    sections: dict = {}
    for kv in fast:
        key, value = kv.split("=", 1)
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = yaml.safe_load(value)
    sections["train"].update(checkpoint_every=1, keep_checkpoints=0, steps=5)
    sections["evolution"] = {"every": 0}
    mine.write_text(yaml.safe_dump({"base": "tiny", **sections}))
    out = root / "run"
    res = subprocess.run(
        [sys.executable, "-m", "populora.cli", "train", "--config", str(mine), "train.steps=2", "-q",
         "--run-dir", str(out)],
        capture_output=True, text=True, timeout=900, cwd=root,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return out
