"""A failed worker's own account reaches the driver's log (issue 51). Ray keeps the workers' output off the
driver's console (`log_to_driver=False`: vLLM logs every start-up step there), so a dead worker's last words, or
vLLM's root cause of a failed start ("See root cause above"), stayed in Ray's session folder. The driver now
copies the last lines of a failed worker's stdout and stderr into its log, one warning per file."""

from __future__ import annotations

import logging

import pytest

from populora.engine.dist import log_tail


def test_a_dead_workers_last_output_reaches_the_driver(ray_address, caplog):  # noqa: ARG001 - the Ray session
    import os
    import sys

    from populora.engine import EngineError, build

    engine = build("tiny", n_slots=2, rank=4, workers=2, train_threads=2)
    try:

        def crash(worker) -> None:  # what a worker whose vLLM hit a CUDA error leaves in its log
            print("EngineCore: CUDA error: an illegal memory access (simulated)", file=sys.stderr, flush=True)
            os._exit(1)

        engine._actors[1].__ray_call__.remote(crash)
        with caplog.at_level(logging.WARNING, logger="populora.engine.dist"):
            with pytest.raises(EngineError, match="worker 1 of 2 died during get_lr"):
                engine.per_worker("get_lr", 0)  # queued behind the crash on worker 1
    finally:
        engine.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "populora.engine.dist"]
    told = [w for w in warnings if w.startswith("dist worker 1 of 2 (node ")]
    assert told and any("an illegal memory access (simulated)" in w for w in told), warnings
    assert not any(w.startswith("dist worker 0 of 2") for w in warnings)  # only the worker that failed


def test_log_tail_reads_the_end_of_big_files(tmp_path):
    f = tmp_path / "worker.err"
    f.write_text("".join(f"line {i}\n\n" for i in range(20000)))
    assert log_tail(str(f), 3) == ["line 19997", "line 19998", "line 19999"]
    assert log_tail(str(tmp_path / "missing")) == []
