"""JSONL sinks: whole lines, cut-line tolerance, repair for resume, MetricLogger and its trackers."""

import math
import multiprocessing as mp
import sys

import pytest

from populora.diagnostics.sinks import (
    MetricLogger,
    TrackerError,
    append_jsonl,
    flatten_scalars,
    read_jsonl,
    repair_jsonl,
)


def test_append_and_read_roundtrip(tmp_path):
    p = tmp_path / "sub" / "m.jsonl"
    append_jsonl(p, {"step": 1, "x": 0.5, "s": "ü"})
    append_jsonl(p, {"step": 2, "x": float("nan"), "y": [1, 2]})
    text = p.read_text()
    assert text.count("\n") == 2 and text.endswith("\n")
    assert "NaN" not in text  # strict JSON for browsers and jq
    assert read_jsonl(p) == [{"step": 1, "x": 0.5, "s": "ü"}, {"step": 2, "x": None, "y": [1, 2]}]


def test_read_skips_cut_last_line(tmp_path):
    p = tmp_path / "m.jsonl"
    append_jsonl(p, {"step": 1})
    append_jsonl(p, {"step": 2})
    with open(p, "a") as fh:
        fh.write('{"step": 3, "x": 1')  # killed mid-write
    assert [r["step"] for r in read_jsonl(p)] == [1, 2]
    # a cut line that happens to be valid JSON is still unterminated, so it is still skipped
    with open(p, "w") as fh:
        fh.write('{"step": 1}\n{"step": 2}')
    assert [r["step"] for r in read_jsonl(p)] == [1]


def test_read_warns_on_corrupt_middle_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2, "x\n{"step": 3}\n')
    with pytest.warns(UserWarning, match=r"m.jsonl:2"):
        recs = read_jsonl(p)
    assert [r["step"] for r in recs] == [1, 3]


def test_read_missing(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")
    assert read_jsonl(tmp_path / "nope.jsonl", missing_ok=True) == []


def test_repair_truncates_cut_line_and_drops_steps(tmp_path):
    p = tmp_path / "m.jsonl"
    for s in range(1, 6):
        append_jsonl(p, {"step": s})
    with open(p, "a") as fh:
        fh.write('{"step": 6, "x"')
    assert repair_jsonl(p) == 1
    assert p.read_text().endswith('{"step": 5}\n')
    assert repair_jsonl(p) == 0  # idempotent
    assert repair_jsonl(p, keep=lambda r: r["step"] <= 3) == 2
    assert [r["step"] for r in read_jsonl(p)] == [1, 2, 3]
    append_jsonl(p, {"step": 4})
    assert [r["step"] for r in read_jsonl(p)] == [1, 2, 3, 4]
    assert repair_jsonl(tmp_path / "missing.jsonl") == 0


def _writer(path, worker, n):
    for i in range(n):
        append_jsonl(path, {"worker": worker, "i": i, "pad": "x" * 2000})


def test_concurrent_writers_never_interleave(tmp_path):
    p = tmp_path / "m.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(p, w, 150)) for w in range(3)]
    for pr in procs:
        pr.start()
    seen = 0
    while any(pr.is_alive() for pr in procs):  # a concurrent reader never sees a torn record
        seen = max(seen, len(read_jsonl(p, missing_ok=True)))
    for pr in procs:
        pr.join()
    recs = read_jsonl(p)
    assert len(recs) == 450
    for w in range(3):
        assert [r["i"] for r in recs if r["worker"] == w] == list(range(150))


def test_flatten_scalars():
    rec = {
        "step": 3,
        "mode": "population",
        "coverage": 0.5,
        "tokens": 10,
        "ok": True,
        "bad": float("inf"),
        "members": {
            "T0": {"reward": -0.2, "solve_rate": {"code_i": 0.5, "code_o": None}, "complexity": None}
        },
        "matchups": [{"teacher": "T0", "student": "S0", "solve_rate": 0.2, "n_problems": 3}],
    }
    flat = flatten_scalars(rec)
    assert flat == {
        "step": 3.0,
        "coverage": 0.5,
        "tokens": 10.0,
        "ok": 1.0,
        "members/T0/reward": -0.2,
        "members/T0/solve_rate/code_i": 0.5,
        "matchups/T0-S0/solve_rate": 0.2,
        "matchups/T0-S0/n_problems": 3.0,
    }


def test_metric_logger_jsonl_only(tmp_path):
    with MetricLogger(tmp_path) as log:
        log.log({"step": 0, "coverage": 0.1})
        log.log({"step": 1, "coverage": 0.2})
        with pytest.raises(ValueError, match="step"):
            log.log({"coverage": 0.3})
    assert [r["coverage"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0.1, 0.2]
    assert not (tmp_path / "tensorboard").exists()


def test_metric_logger_tensorboard_missing_is_clear(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # simulate the package being absent
    with pytest.raises(TrackerError, match="pip install tensorboard") as info:
        MetricLogger(tmp_path, tensorboard=True)
    assert "\n" not in str(info.value) and info.value.__cause__ is None


def test_metric_logger_tensorboard_scalars(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional extra (populora[tracking])")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(tmp_path, tensorboard=True)
    for s in range(3):
        log.log({"step": s, "coverage": 0.1 * s, "members": {"S0": {"role": "student", "reward": 1.0 - s}}})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"run/coverage", "member/student-0/reward", "role/student/reward_mean"} <= set(
        acc.Tags()["scalars"]
    )
    vals = [(e.step, e.value) for e in acc.Scalars("member/student-0/reward")]
    assert vals == [(0, 1.0), (1, 0.0), (2, -1.0)]
    assert math.isclose(acc.Scalars("run/coverage")[2].value, 0.2, rel_tol=1e-6)
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 3
