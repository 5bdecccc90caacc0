"""experiment/probe_data.py: a run's probe change as `[member, item]`, per item from probe_items.jsonl when
logged, else per task from metrics.jsonl; read from hand-written run folders."""

import json

import numpy as np
import pytest

from populora.experiment.probe_data import ITEMS_FILE, arm_changes, probe_change


def _run(path, items: bool, end: dict[str, dict[str, float]], start_acc: float = 0.5, levels=None):
    path.mkdir(parents=True)
    members = {m: {"role": "teacher" if m.startswith("T") else "student"} for m in ("T0", "S0", "S1")}
    recs = [
        {
            "step": 0,
            "time": 0,
            "mode": "population",
            "probe": {m: dict.fromkeys(("code_i", "code_o", "code_f"), start_acc) for m in members},
        },
        {"step": 1, "members": members},
        {"step": 2, "members": members, "probe": end},
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if items:
        # the trainer's format: one line per probe (train/probe.py items_record), two code_o items;
        # at step 0 every member right on item 0 and wrong on item 1; at step 2 S0 right on both, S1 wrong on
        # both, T0 as at the start
        def line(step, verdicts):
            return {
                "step": step,
                "items": {
                    "code_o": {"index": [0, 1], "id": ["p0", "p1"], **({"level": levels} if levels else {})}
                },
                "answers": {"free": {m: {"code_o": ok} for m, ok in verdicts.items()}},
                "style": {},
            }

        lines = [
            line(0, dict.fromkeys(members, [True, False])),
            line(2, {"S0": [True, True], "S1": [False, False], "T0": [True, False]}),
        ]
        (path / ITEMS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 2, "answ')
    return path


END = {m: {"code_i": a, "code_o": a, "code_f": a} for m, a in (("T0", 0.5), ("S0", 0.8), ("S1", 0.4))}


def test_per_item_changes_by_hand(tmp_path):
    c = probe_change(_run(tmp_path / "r", True, END))
    assert c.source == "items" and c.members == ["S0", "S1"] and c.items == ["code_o/0", "code_o/1"]
    # base: item 0 right (1), item 1 wrong (0); S0 ends 1, 1; S1 ends 0, 0 (the cut last line is skipped)
    assert c.values.tolist() == [[0.0, 1.0], [-1.0, 0.0]]


def test_one_level_of_the_graded_probe_by_hand(tmp_path):
    run = _run(tmp_path / "r", True, END, levels=[1, 5])
    c = probe_change(run, level=5)  # item 1 only: both students' change there
    assert c.items == ["code_o/1"] and c.values.tolist() == [[1.0], [0.0]]
    assert probe_change(run, level=3) is None  # no item of that level: no per-task fallback either
    assert probe_change(_run(tmp_path / "fixed", True, END), level=5) is None  # the fixed probe has no levels


def test_per_task_fallback_by_hand(tmp_path):
    c = probe_change(_run(tmp_path / "r", False, END))
    assert c.source == "tasks" and c.items == ["tasks"]
    assert c.values[:, 0] == pytest.approx([0.3, -0.1])


def test_an_arm_mixing_item_and_task_logs_falls_back_to_tasks(tmp_path):
    a = _run(tmp_path / "a", True, END)
    b = _run(tmp_path / "b", False, END)
    arr, source = arm_changes([a, b])
    assert source == "tasks" and arr.shape == (2, 2, 1)
    arr, source = arm_changes([a, _run(tmp_path / "c", True, END)])
    assert source == "items" and arr.shape == (2, 2, 2)
    assert np.allclose(arr[0], arr[1])


def test_one_task_types_items(tmp_path):
    c = probe_change(_run(tmp_path / "r", True, END), task="code_o")
    assert c.items == ["code_o/0", "code_o/1"]
    assert probe_change(_run(tmp_path / "q", True, END), task="code_i") is not None  # per-task fallback
    fallback = probe_change(_run(tmp_path / "p", False, END), task="code_i")
    assert fallback.source == "tasks" and fallback.items == ["code_i"]
    assert fallback.values[:, 0] == pytest.approx([0.3, -0.1])
