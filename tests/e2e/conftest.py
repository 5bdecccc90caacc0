"""Shared settings of the end-to-end runs: the bundled tiny model (or a tiny random model while it is absent)
and overrides that keep each run to seconds (few prompts, n=2, short answers)."""

import os
from pathlib import Path

import pytest

FAST = [
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=48",
    "tasks.student_max_new_tokens=24",
    "sandbox.workers=1",
    "train.threads=1",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
]


@pytest.fixture(scope="session")
def model_name(tmp_path_factory) -> str:
    """'tiny' when the bundled model resolves, else a random Qwen2 saved to a temp folder."""
    if os.environ.get("POPULORA_TEST_MODEL"):
        return os.environ["POPULORA_TEST_MODEL"]
    from populora.engine import EngineError, resolve_model

    try:
        resolve_model("tiny")
        return "tiny"
    except EngineError:
        from populora.engine.testing import random_model

        model, tok = random_model(seed=0)
        path = Path(tmp_path_factory.mktemp("model"))
        model.save_pretrained(path)
        tok.save_pretrained(path)
        return str(path)


@pytest.fixture(scope="session")
def fast(model_name) -> list[str]:
    return [*FAST, f"model.name={model_name}"]
