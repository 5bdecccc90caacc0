"""The probe's plain progress lines (train/probe.py `line_progress`): consoles without the live bar see a
long probe advance instead of nothing for minutes."""

from __future__ import annotations

from populora.train.probe import line_progress


def test_lines_at_start_each_eighth_and_end():
    lines: list[str] = []
    update = line_progress("probe", emit=lines.append)
    update(0, 16, {"tokens": 0})
    for done in range(1, 17):
        update(done, 16, {"tokens": 10 * done})
        update(done, 16, {"tokens": 10 * done})  # the engine may report the same count twice
    assert len(lines) == 9  # 0, 2, 4, ..., 16
    assert lines[0].startswith("probe, free answers: 0/16 answers")
    assert lines[-1].startswith("probe, free answers: 16/16 answers")
    assert [int(x.split(": ")[1].split("/")[0]) for x in lines] == list(range(0, 17, 2))


def test_small_totals_and_unknown_parts():
    lines: list[str] = []
    update = line_progress("probe_valid", emit=lines.append, every=0.5)
    for done in (0, 1, 2, 3):
        update(done, 3)
    assert [x.split(": ")[1].split(" ")[0] for x in lines] == ["0/3", "1/3", "2/3", "3/3"]
    assert lines[0].startswith("probe, teachers' proposals")
    other: list[str] = []
    line_progress("something", emit=other.append)(0, 0)  # nothing to count: no line
    assert other == []
