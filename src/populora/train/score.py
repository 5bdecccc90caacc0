"""Phase (3b), scoring (`Trainer.score`, `Trainer.score_ready`): every reward of the step, computed once.

Owns parsing each answer (`task.parse_answer`), the sandbox's verdicts on them (`tasks.score_many`: one
`run_many` per round across all problems), the step's scoring deadline and its count of answers cut by a
deadline, and the rewards stored on each trace (tasks/rewards.py): a student answer's (+1 right, -0.5 parsed
but wrong, -1 unparsable), a teacher's (1 - rho on a valid problem, 0 when rho = 0, `rl.invalid_reward` on an
invalid one) or the single agent's learnability reward. Everything after (the update, the ratings, the
metrics) reads those rewards and never recomputes them. With `train.overlap` a problem is scored on a lane as
soon as its n rollouts are in (`scoring_lane`, train/overlap.py); the verdicts are the sequential path's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from populora import tasks
from populora.tasks.rewards import learnability_reward, student_reward, teacher_reward
from populora.train.controls import shuffle_student_rewards
from populora.train.overlap import SandboxLane, open_lane
from populora.train.records import ProposalTrace
from populora.train.setup import derive_seed


@dataclass
class Ready:
    """What the overlap lane scored during student generation (`score_ready`): per trace (by id) which
    answers parse and their `Scored`, and the answers its deadlines cut."""

    results: dict[int, tuple[list[bool], Any]] = field(default_factory=dict)
    cut: int = 0


@contextmanager
def scoring_lane(tr, ready: Ready) -> Iterator[SandboxLane | None]:
    """The lane that runs `tr.score_ready` into `ready` on problems whose rollouts are all in (None with
    `train.overlap` off). Its step deadline counts from its own join: `lane` in the lambda is read when a
    batch runs, after the `with` has bound it."""
    with open_lane(lambda batch: tr.score_ready(batch, ready, lane.joined_at), tr.cfg.train.overlap) as lane:
        yield lane


def score(
    tr, traces: list[ProposalTrace], step: int = 0, *, batched: bool = True, ready: Ready | None = None
) -> None:
    """Every reward of the step, computed here once: each answer's and each proposal's. Under
    `rl.student_rewards=shuffled` the update's copy of the answer rewards is permuted (train/controls.py).

    Every valid trace's answers are scored in one `tasks.score_many` (one `run_many` per round across all
    problems: the sandbox's workers are never idle while one problem's jobs finish). `batched=False`
    scores one problem after another (the old path, same verdicts; kept for tests and measurements).
    `ready`: what the overlap lane scored during generation (`score_ready`); only the rest is scored here."""
    proposer_reward = learnability_reward if tr.single else teacher_reward
    # One deadline for the whole step's scoring (besides each problem's own): a program that is instant
    # on its own input and loops on every answer costs at most this much, whatever the number of problems.
    until = time.monotonic() + tr.cfg.sandbox.score_step_deadline_s
    cut_before = cuts(tr)
    done = ready.results if ready is not None else {}
    scoring: list[tuple[ProposalTrace, list[bool], tuple]] = []
    for trace in traces:
        if trace.probe_collision:
            trace.reward = 0.0  # out of the game: no row is built from it (build_rows)
            continue
        if not trace.valid:
            trace.reward = tr.rewards.invalid_proposal
            continue
        if id(trace) not in done:
            scoring.append((trace, *scoring_item(tr, trace, trace.answers)))
    if batched:
        scored = tasks.score_many([item for _, _, item in scoring], tr.sandbox, until=until)
    else:
        scored = [t.score_detailed(p, a, tr.sandbox, until=until) for _, _, (t, p, a) in scoring]
    for (trace, formatted, _), result in zip(scoring, scored, strict=True):
        done[id(trace)] = (formatted, result)
    for trace in traces:
        if trace.probe_collision or not trace.valid:
            continue
        trace.formatted, result = done[id(trace)]
        trace.solves = [bool(x) for x in result.solves]
        trace.answer_rewards = [
            student_reward(fmt, ok, tr.rewards) for fmt, ok in zip(trace.formatted, trace.solves, strict=True)
        ]
        trace.reward = proposer_reward(trace.solve_rate, True, tr.rewards)
    tr.score_past_deadline = cuts(tr) - cut_before + (ready.cut if ready is not None else 0)
    if tr.cfg.rl.student_rewards == "shuffled":
        # its own stream (seed, step): the same permutation on a resume, and the run's rng draws unchanged
        shuffle_student_rewards(traces, random.Random(derive_seed(tr.cfg.train.seed, step, "shuffle")))


def score_ready(tr, batch: list[tuple[ProposalTrace, list]], ready: Ready, joined_at: float | None) -> None:
    """The overlap lane's scoring: `(trace, answers)` of problems whose rollouts are all in, in one
    `tasks.score_many`, into `ready` (read by `score`). The step's scoring deadline counts from the end of
    generation (`joined_at`, as `score` counts from its start) or, before it, from this batch's start: scoring
    never ends later than `sandbox.score_step_deadline_s` after generation, as without overlap."""
    until = (joined_at or time.monotonic()) + tr.cfg.sandbox.score_step_deadline_s
    items = [(trace, *scoring_item(tr, trace, answers)) for trace, answers in batch]
    cut_before = cuts(tr)
    scored = tasks.score_many([item for _, _, item in items], tr.sandbox, until=until)
    ready.cut += cuts(tr) - cut_before
    for (trace, formatted, _), result in zip(items, scored, strict=True):
        ready.results[id(trace)] = (formatted, result)


def scoring_item(tr, trace: ProposalTrace, answers: list) -> tuple[list[bool], tuple]:
    """Which of a trace's answers parse, and its `(task, problem, parsed answers)` for `score_many`."""
    task = tr.tasks[trace.task]
    parsed = [task.parse_answer(g.text, template=tr.cfg.tasks.template) for g in answers]
    return [not isinstance(a, tasks.FormatError) for a in parsed], (task, trace.problem, parsed)


def cuts(tr) -> int:
    """Answers scored False so far because a scoring deadline passed (the tasks' running totals)."""
    return sum(t.past_deadline for t in tr.tasks.values())


__all__ = ["Ready", "cuts", "score", "score_ready", "scoring_item", "scoring_lane"]
