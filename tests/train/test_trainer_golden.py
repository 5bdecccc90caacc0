"""The same seed gives the same logs as before (issue 52): seeded tiny-preset runs compared line by line with
golden metrics.jsonl, problems.jsonl and events.jsonl written by the code before a refactor, wall-clock fields
removed (tests/golden_logs.py). A change that is meant to change behaviour regenerates them
(tests/train/golden/README.md); a refactor never does.

The overrides are pinned in tests/golden_logs.py, not taken from tests/fast_runs.py."""

from __future__ import annotations

import pytest
from golden_logs import PINNED as GOLDEN_PINNED
from golden_logs import (  # tests/: pytest puts the rootdir conftest's folder on sys.path
    check_golden,
    require_bundled_model,
)

from populora.train.launch import train

PINNED = [*GOLDEN_PINNED, "train.threads=1"]


@pytest.fixture(autouse=True, scope="module")
def _bundled_model():
    require_bundled_model()


def test_population_run_matches_the_golden(tmp_path):
    """The paper's path with train.overlap on: 3 steps, an evolution after step 2, checkpoints at 2 and 3, the
    probe (step 0 and 2) and a hall-of-fame round at step 2."""
    sets = [
        *PINNED,
        "train.steps=3",
        "train.checkpoint_every=2",
        "evolution.every=2",
        "hof.every=2",
        "diagnostics.probe_every=2",
        "diagnostics.probe_size=4",
        "diagnostics.probe_proposals=2",
    ]
    check_golden("population", train("tiny", tmp_path / "run", sets, quiet=True))


def test_single_agent_run_matches_the_golden(tmp_path):
    """The AZR baseline with the other branches of the step: the sequential (no overlap) path, span credit,
    grouped teacher prompts, the shuffled-reward control and a warmed-up linear lr schedule."""
    sets = [
        *PINNED,
        "population.mode=single",
        "train.steps=2",
        "train.checkpoint_every=1",
        "train.overlap=false",
        "rl.teacher_credit=span",
        "rl.teacher_group=2",
        "rl.student_rewards=shuffled",
        "rl.lr_schedule=linear",
        "rl.warmup_steps=1",
    ]
    check_golden("single", train("tiny", tmp_path / "run", sets, quiet=True))


def test_resumed_run_matches_the_golden(tmp_path):
    """2 steps whose final step skips its evolution, then `--resume` to 3: the restore, the deferred
    evolution and its checkpoint, and the step after it."""
    sets = [*PINNED, "train.checkpoint_every=1", "evolution.every=2"]
    run = train("tiny", tmp_path / "run", [*sets, "train.steps=2"], quiet=True)
    train(resume=run, overrides=["train.steps=3"], quiet=True)
    check_golden("resumed", run)
