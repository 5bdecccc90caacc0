"""Fixtures of the distributed-engine tests: one local Ray instance (2 CPUs) for the whole session, and the
model and fast overrides of the 2-worker training runs."""

from __future__ import annotations

import pytest

FAST = [
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=32",
    "tasks.student_max_new_tokens=16",
    "sandbox.workers=1",
    "train.threads=2",  # two workers on one thread each
    "tasks.references=1",
    "tasks.seed_synthetic=2",
]


@pytest.fixture(scope="session")
def ray_address():
    """A local Ray instance shared by every test here; its GCS address lets a subprocess join it."""
    ray = pytest.importorskip("ray", reason="the dist tests need ray (the `dev` extra)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def fast(model_name) -> list[str]:
    return [*FAST, f"model.name={model_name}"]
