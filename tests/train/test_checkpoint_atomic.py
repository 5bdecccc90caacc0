"""Atomic checkpoints, newest-complete lookup, pruning, and log repair on resume."""

import json
import random

import pytest

from populora.train.checkpoint import (
    clear_leftovers,
    latest_checkpoint,
    list_checkpoints,
    restore_rng,
    rng_state,
    save_checkpoint,
    write_json,
)
from populora.train.run_folder import RunFolder


def _writer(step):
    def write(d):
        (d / "adapters").mkdir()
        write_json(d / "state.json", {"step": step})

    return write


def test_save_is_atomic_and_latest_is_newest_complete(tmp_path):
    save_checkpoint(tmp_path, 3, _writer(3))
    save_checkpoint(tmp_path, 6, _writer(6))
    # a half-written save (killed) and a folder without state.json are not checkpoints
    (tmp_path / "checkpoints" / ".tmp-step_000009-1").mkdir()
    (tmp_path / "checkpoints" / "step_000012").mkdir()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 6]
    step, path = latest_checkpoint(tmp_path)
    assert step == 6 and json.loads((path / "state.json").read_text()) == {"step": 6}


def test_failed_writer_leaves_no_checkpoint(tmp_path):
    def boom(d):
        write_json(d / "state.json", {"step": 1})
        raise OSError("disk full")

    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 1, boom)
    assert list_checkpoints(tmp_path) == []
    assert list((tmp_path / "checkpoints").iterdir()) == []
    with pytest.raises(RuntimeError, match="state.json"):
        save_checkpoint(tmp_path, 1, lambda d: None)


def test_keep_prunes_old_and_resave_replaces(tmp_path):
    for s in (1, 2, 3, 4):
        save_checkpoint(tmp_path, s, _writer(s), keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    save_checkpoint(tmp_path, 4, lambda d: write_json(d / "state.json", {"step": 4, "again": True}), keep=2)
    assert json.loads((latest_checkpoint(tmp_path)[1] / "state.json").read_text())["again"] is True
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_clear_leftovers_removes_temp_folders_only(tmp_path):
    save_checkpoint(tmp_path, 2, _writer(2))
    root = tmp_path / "checkpoints"
    for name in (".tmp-step_000003-1", ".tmp-prune-step_000001-2", ".tmp-old-step_000002-3"):
        (root / name / "adapters").mkdir(parents=True)
    (root / "damaged-step_000001").mkdir()
    clear_leftovers(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["damaged-step_000001", "step_000002"]


def test_rng_round_trip():
    import torch

    rng = random.Random(5)
    state = rng_state(rng)
    a = (rng.random(), torch.rand(2).tolist())
    restore_rng(state, rng)
    assert (rng.random(), torch.rand(2).tolist()) == a


def test_repair_drops_cut_line_and_later_steps(tmp_path):
    rf = RunFolder(tmp_path)
    for s in (1, 2, 3):
        rf.metric({"step": s, "x": s})
        rf.event({"step": s, "type": "matchup"})
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "x"')  # killed mid-line
    removed = rf.repair(last_step=2)
    assert removed["metrics.jsonl"] == 2 and removed["events.jsonl"] == 1
    assert [r["step"] for r in rf.read("metrics.jsonl")] == [1, 2]
    assert (tmp_path / "metrics.jsonl").read_text().endswith("\n")
    rf.metric({"step": 3, "x": 30})
    assert [r["step"] for r in rf.read("metrics.jsonl")] == [1, 2, 3]
