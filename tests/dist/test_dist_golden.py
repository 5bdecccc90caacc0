"""The same seed gives the same logs as before on 2 workers (issue 52): a seeded 2-worker tiny-preset run compared
line by line with golden logs written by the code before a refactor (tests/golden_logs.py; how to regenerate
them, and when: tests/train/golden/README.md). The overrides are pinned (golden_logs.PINNED and the lines below), not taken from tests/fast_runs.py."""

from __future__ import annotations

from golden_logs import PINNED as GOLDEN_PINNED
from golden_logs import (  # tests/: pytest puts the rootdir conftest's folder on sys.path
    check_golden,
    require_bundled_model,
)

from populora.train.launch import train

PINNED = [
    *GOLDEN_PINNED,
    "train.threads=2",  # two workers on one thread each
    "dist.workers=2",
    "train.steps=2",
    "train.checkpoint_every=1",
    "evolution.every=1",  # children made after step 1 and copied into both workers
]


def test_two_worker_run_matches_the_golden(tmp_path, ray_address):
    require_bundled_model()
    check_golden("dist", train(run_dir=tmp_path / "run", overrides=PINNED, quiet=True))
