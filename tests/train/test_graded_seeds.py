"""Synthetic seeds follow the model's own generator: graded levels for a model pretrained on them (issue 30)."""

from __future__ import annotations

import json

import pytest

from populora.paths import TINY_MODEL_DIR
from populora.pretrain.graded import graded_split, top_level_statements
from populora.train.setup import graded_seed_levels, synthetic_seeds


@pytest.fixture(scope="module")
def sandbox():
    from populora.sandbox import Limits, Sandbox

    with Sandbox(workers=2, limits=Limits(timeout_s=5, memory_mb=256)) as sb:
        yield sb


def test_graded_seed_levels_reads_the_models_pretraining_level(tmp_path):
    assert graded_seed_levels(tmp_path) is None  # no pretrain_info.json: not a graded model
    (tmp_path / "pretrain_info.json").write_text(json.dumps({"config": {"level": "easy"}}))
    assert graded_seed_levels(tmp_path) is None
    (tmp_path / "pretrain_info.json").write_text(json.dumps({"config": {"level": "1,1,2,4-5"}}))
    assert graded_seed_levels(tmp_path) == (1, 1, 2, 4, 5)
    (tmp_path / "pretrain_info.json").write_text("{not json")
    assert graded_seed_levels(tmp_path) is None
    # the bundled model: graded levels exactly when its recorded corpus level is graded
    level = json.loads((TINY_MODEL_DIR / "pretrain_info.json").read_text())["config"]["level"]
    assert (graded_seed_levels(TINY_MODEL_DIR) is None) == (level in ("easy", "full"))


def test_graded_synthetic_seeds_come_from_the_levels_train_split(sandbox):
    seeds = synthetic_seeds(4, sandbox, seed=7, levels=(5,))
    assert {p.task for p in seeds} == {"code_i", "code_o", "code_f"} and len(seeds) >= 9
    for p in seeds:
        assert top_level_statements(p.program) >= 6  # level 5: 6-8 statements
        assert graded_split(p.program) == "train"  # never a probe program
    again = synthetic_seeds(4, sandbox, seed=7, levels=(5,))
    assert [p.program for p in again] == [p.program for p in seeds]
    old = synthetic_seeds(4, sandbox, seed=7)  # no levels: the v1 generator, at most two statements
    assert all(top_level_statements(p.program) <= 2 for p in old)
