"""Which planted misconception classes the teachers' valid proposals carry (`diagnostics.flaw_coverage`, issue 49 §4).

A code_o or code_i problem carries a class when the misconceived reader's answer differs from the true one on
the problem's input: the program read with that class's misreading (`pretrain/flaws.py`) gives another output.
Whether the students can repair a misconception they meet only through the teachers' problems depends on how
often the teachers propose such problems, so the trainer logs it per step: each valid proposal's classes
(problems.jsonl `flaws`) and per teacher the count of valid proposals carrying each class (metrics.jsonl
`members[T].flaws`).

The program is a teacher's, so it is model output: it runs only in the sandbox. Candidate classes come from
the program's syntax (`flaws.has_feature`: parsed and rewritten, never run); each candidate's misread program
(`flaws.misread_source`, its helpers included) runs on the problem's input in the sandbox, as validation runs
the program itself, and the class is carried when that outcome is a value other than the problem's output.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

FLAW_TASKS = ("code_o", "code_i")


def candidate_classes(program: str) -> tuple[str, ...]:
    """Classes whose misreading rewrites some node of `program` (syntax only; nothing runs)."""
    from populora.pretrain.flaws import CLASSES, has_feature

    return tuple(c for c in CLASSES if has_feature(program, c))


def carried_classes(problems: Sequence[Any], sandbox: Any, deadline_s: float = 10.0) -> list[tuple[str, ...]]:
    """Per problem (a `tasks.Problem`; other task types get `()`): the classes it carries on its input, each
    decided by one sandbox job; a job that fails or is cut by `deadline_s` counts as not carried."""
    from populora.pretrain.flaws import misread_source
    from populora.tasks.jobs import job_call
    from populora.tasks.literals import LiteralError

    jobs: list[tuple[str, str]] = []
    owners: list[tuple[int, str]] = []
    for i, p in enumerate(problems):
        if p is None or p.task not in FLAW_TASKS:
            continue
        try:
            call = job_call(p.inputs[0])
        except LiteralError:
            continue
        for c in candidate_classes(p.program):
            jobs.append((misread_source(p.program, (c,)), call))
            owners.append((i, c))
    out: list[list[str]] = [[] for _ in problems]
    if jobs:
        for (i, c), o in zip(owners, sandbox.run_many(jobs, deadline_s=deadline_s), strict=True):
            if o.ok and o.value_repr != problems[i].outputs[0]:
                out[i].append(c)
    return [tuple(v) for v in out]


def mark_flaws(traces: Iterable[Any], sandbox: Any) -> None:
    """Set `trace.flaws` on every valid code_o / code_i proposal of the step (one `run_many` for all)."""
    chosen = [t for t in traces if t.valid and t.proposed and t.task in FLAW_TASKS]
    for t, classes in zip(chosen, carried_classes([t.problem for t in chosen], sandbox), strict=True):
        t.flaws = classes


def coverage_counts(traces: Iterable[Any]) -> dict[str, int]:
    """`{class: valid proposals carrying it}` over `traces` (those whose classes were read), every class kept."""
    from populora.pretrain.flaws import CLASSES

    out = dict.fromkeys(CLASSES, 0)
    for t in traces:
        for c in t.flaws or ():
            out[c] += 1
    return out


__all__ = ["candidate_classes", "carried_classes", "coverage_counts", "mark_flaws"]
