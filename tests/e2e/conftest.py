"""Shared settings of the end-to-end runs: the bundled tiny model (or a tiny random model while it is absent)
and overrides that keep each run to seconds (few prompts, n=2, short answers)."""

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
def fast(model_name) -> list[str]:
    return [*FAST, f"model.name={model_name}"]
