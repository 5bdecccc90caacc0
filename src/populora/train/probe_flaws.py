"""The misconception probe's reading during training (`diagnostics.probe_flaws`, issue 49 §2).

The trainer's probe (`train/probe.py`) asks every member, greedy, the first `probe_flaws` items of each planted
class of the bundled misconception sets (`pretrain/flaw_probe_sets.py`); this module turns those verdicts and
answer texts into the metrics.jsonl record `probe_flaws`, `{member: {task: {class: {"right": rate,
"misconceived": rate}}}}` (right: the task's verifier in the sandbox; misconceived: the answer is, as a literal,
the misconceived reader's, never run), and the probe_items.jsonl entry `flaws` with every item's class and each
member's 0/1 verdicts, so intervals can resample items. A class counts as repaired by a member when its greedy
right rate passes `REPAIRED` (docs/learning.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

REPAIRED = 0.5  # a class is repaired when a member's greedy right rate on it passes this (issue 49 §4)


def flaw_readings(
    scores: Any, classes: Mapping[str, Sequence[str]], wrong: Mapping[str, Sequence[str]]
) -> tuple[dict, dict]:
    """(`probe_flaws`, the items entry) from a `ProbeScores` of the misconception items, each item's class and
    misconceived answer."""
    from populora.pretrain.flaw_probe import answers_wrong
    from populora.tasks import get

    right = scores.correct.get("free", {})
    readings: dict = {}
    misread: dict = {}
    for m in scores.members:
        for task, tags in classes.items():
            verdicts = right.get(m, {}).get(task, [])
            parse = get(task).parse_answer
            mis = [
                int(answers_wrong(parse(scores.texts.get(("free", task, i, m), "")), wrong[task][i]))
                for i in range(len(tags))
            ]
            misread.setdefault(m, {})[task] = mis
            groups: dict[str, list[tuple[int, int]]] = {}
            for tag, ok, bad in zip(tags, verdicts, mis, strict=True):
                groups.setdefault(tag, []).append((int(ok), bad))
            readings.setdefault(m, {})[task] = {
                c: {
                    "right": sum(ok for ok, _ in v) / len(v),
                    "misconceived": sum(bad for _, bad in v) / len(v),
                }
                for c, v in groups.items()
            }
    items = {
        "class": {t: list(v) for t, v in classes.items()},
        "answers": {m: dict(right.get(m, {})) for m in scores.members},
        "misconceived": misread,
    }
    return readings, items


def repaired_classes(reading: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """`task/class` names whose greedy right rate passes `REPAIRED` in one member's `probe_flaws` entry."""
    return [
        f"{task}/{c}"
        for task, by_class in reading.items()
        for c, row in by_class.items()
        if row["right"] > REPAIRED
    ]


__all__ = ["REPAIRED", "flaw_readings", "repaired_classes"]
