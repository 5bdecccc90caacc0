"""Phase (2b), validation (`Trainer.validate`, `Trainer.check_proposals`): what each teacher proposal means.

Owns parsing a proposal (`task.parse_proposal`), running it in the sandbox (`task.validate`: every input run
twice), the step's validation deadline, each program's structural features, and what a valid proposal changes
in the run: it enters the buffers and the coverage archive. A proposal whose program is a probe program is
taken out of the game here (train/probe_guard.py). With `train.overlap` the sandbox work runs on a lane while
the teachers still decode (`validation_lane`, train/overlap.py); the verdicts are the sequential path's.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from populora import tasks
from populora.diagnostics.features import program_features
from populora.tasks import registry
from populora.tasks.base import VALIDATION_DEADLINE
from populora.train.overlap import SandboxLane, open_lane
from populora.train.records import ProposalTrace


@contextmanager
def validation_lane(tr, step: int) -> Iterator[SandboxLane | None]:
    """The lane that runs `tr.check_proposals` on proposals as their rows stop (None with `train.overlap` off).
    While the block runs, `check_proposals` measures the step's validation deadline from the lane's join (the
    end of teacher generation) or, before it, from the batch's start: as scoring does."""
    with open_lane(lambda batch: tr.check_proposals(batch, step), tr.cfg.train.overlap) as lane:
        tr._validating = lane
        try:
            yield lane
        finally:
            tr._validating = None


def validate(tr, traces: list[ProposalTrace], step: int, *, checked: bool = False) -> None:
    """Parse and validate every proposal in the sandbox; valid problems enter the buffers and coverage.
    `checked`: `check_proposals` already ran on every trace (on the overlap lane, during generation)."""
    if not checked:
        tr.check_proposals(traces, step)
    tr.drop_probe_collisions(traces)
    if tr.cfg.diagnostics.flaw_coverage:  # the planted classes each valid proposal carries (in the sandbox)
        from populora.train.flaw_coverage import mark_flaws

        mark_flaws(traces, tr.sandbox)
    for trace in traces:
        if trace.valid:
            tr.buffers.add(trace.problem)
    tr.coverage.add([t.features for t in traces if t.valid])


def drop_probe_collisions(tr, traces: list[ProposalTrace]) -> None:
    """Take every proposal whose program is a probe program (train/probe_guard.py) out of the game: it
    becomes invalid with reason "probe collision" and `probe_collision` set, which `score`, `build_rows`,
    `rate` and the metrics read as "not played". Not part of `check_proposals`: the validity probe's
    teachers are shown probe programs on purpose and are measured, not trained."""
    if tr.probe_guard is None:
        return
    for trace in traces:
        if tr.probe_guard.collides(trace.program):
            trace.probe_collision, trace.problem, trace.reason = True, None, "probe collision"


def check_proposals(tr, traces: list[ProposalTrace], step: int, until: float | None = None) -> None:
    """Parse and sandbox-validate proposals, filling `problem`/`reason`/`features`; touches no run state
    (the buffers and coverage are `validate`'s), so a control can measure a teacher without feeding it.
    Each trace's verdict is its own: checking the traces in parts (the overlap lane) gives the same.

    Validation ends by `until` (a `time.monotonic()` value; default: `sandbox.validate_step_deadline_s`
    after this call's start or, on the overlap lane, after the end of teacher generation if that came
    first); proposals it cuts are invalid (`VALIDATION_DEADLINE`), and each proposal has its own budget
    (`sandbox.validate_deadline_s`, `CodeTask.validate`)."""
    if until is None:
        lane = tr._validating
        start = lane.joined_at if lane is not None and lane.joined_at is not None else time.monotonic()
        until = start + tr.cfg.sandbox.validate_step_deadline_s
    by_task: dict[str, list[tuple[ProposalTrace, Any]]] = defaultdict(list)
    for trace in traces:
        task = tr.tasks[trace.task]
        parsed = task.parse_proposal(
            trace.gen.text, program=trace.shown_program, template=tr.cfg.tasks.template
        )
        if isinstance(parsed, tasks.FormatError):
            trace.reason = parsed.reason
            continue
        trace.program, trace.inputs = parsed.program, list(parsed.inputs)
        by_task[trace.task].append((trace, parsed.with_origin(trace.teacher, step)))
    for name, group in by_task.items():
        task, proposals = tr.tasks[name], [p for _, p in group]
        if isinstance(task, tasks.CodeTask):
            results = task.validate(proposals, tr.sandbox, until=until)
        elif time.monotonic() < until:  # another family's validate takes no deadline: checked before it
            results = task.validate(proposals, tr.sandbox)
        else:
            results = [tasks.Invalid(VALIDATION_DEADLINE, p) for p in proposals]
        for (trace, _), res in zip(group, results, strict=True):
            if isinstance(res, tasks.Invalid):
                trace.reason = res.reason
            else:
                trace.problem = res.with_origin(trace.teacher, step)
    for trace in traces:
        if trace.program:
            if trace.task not in tasks.TASK_NAMES:  # another family may measure its own programs
                trace.features = registry.features(trace.task, trace.program)
                if trace.features is not None:
                    continue
            try:
                trace.features = program_features(trace.program)
            except Exception:  # noqa: BLE001 - unparsable programs simply have no features
                trace.features = None


__all__ = ["check_proposals", "drop_probe_collisions", "validate", "validation_lane"]
