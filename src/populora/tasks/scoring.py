"""Scoring of answers (`CodeTask.score`, `score_detailed`, `score_many`), a base class of
`populora.tasks.base.CodeTask`.

Each task type says how it scores one problem's answers as a plan (`_plan`: a generator that yields each
round's sandbox jobs and is sent their outcomes); `score_many` runs the plans of a whole batch together, one
`run_many` per round, within the scoring deadlines (`score_deadline_s`, `until`). Answers a deadline cut
score False and are counted (`Scored.past_deadline`, the task's running `past_deadline`).

`AnswerScoring` reads from the task only `name`, `config` (a `TaskConfig`), `past_deadline` and
`_check_answer`; `populora.tasks.base` re-exports `Scored`, `ScoringPlan` and `score_many`.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from populora.tasks.jobs import _run_scoring
from populora.tasks.types import Answer, FormatError, Problem

if TYPE_CHECKING:  # the sandbox is only duck-typed: anything with run_many([(program, call)]) -> [Outcome]
    from populora.sandbox import Sandbox


class AnswerScoring:
    """The scoring half of `CodeTask`: answers to verdicts, many problems at once."""

    # ------------------------------------------------------------------ scoring
    def _coerce(self, a: Any) -> Answer | FormatError:
        if isinstance(a, (Answer, FormatError)):
            return a
        if isinstance(a, str):
            return self._check_answer_safe(a)
        return FormatError("format: not an answer")

    def _check_answer_safe(self, body: str) -> Answer | FormatError:
        try:
            return self._check_answer(body)
        except Exception as e:
            return FormatError(f"format: unparsable ({type(e).__name__})")

    def score(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None,
        *,
        until: float | None = None,
    ) -> list[bool]:
        """One bool per answer: True iff the answer is right. FormatErrors score False. A plain `str` is taken
        as the answer block's text. All sandbox jobs of a round go out in one `run_many`, within the
        `score_deadline_s` of the call and before `until` (a `time.monotonic()` value: the trainer's deadline
        for a whole step's scoring); answers unfinished by then score False (see `score_detailed`).
        `score_many` scores many problems (of any task types) at once, with identical verdicts."""
        return self.score_detailed(problem, answers, sandbox, until=until).solves

    def score_detailed(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None,
        *,
        until: float | None = None,
    ) -> Scored:
        """`score` with the count of answers that scored False because the deadline passed (also added to
        `self.past_deadline`, the running total the trainer can log). `score_many` with one problem."""
        return score_many([(self, problem, answers)], sandbox, until=until)[0]

    def _plan(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> ScoringPlan:
        """How this task scores `answers` to `problem`, as a generator: it yields each round's sandbox jobs
        (deduplicated within the problem), is sent their outcomes in the same order, and returns
        `(solves, past_deadline)`. It never touches the sandbox itself, so `score_many` can put the rounds of
        every problem of a batch into one `run_many`."""
        raise NotImplementedError

    def _deadline(self, start: float, n: int, until: float | None = None) -> float | None:
        """The end of this task's scoring in a batch of `n` problems with jobs begun at `start`: `n *
        score_deadline_s` after it, or `until` if that comes first (both `time.monotonic()` values)."""
        d = self.config.score_deadline_s
        end = None if d is None else start + n * d
        if until is not None:
            end = until if end is None else min(end, until)
        return end


# A task's scoring of one problem (`AnswerScoring._plan`): yields job lists, is sent outcome lists, returns
# (solves, past_deadline).
ScoringPlan = Generator[list[tuple[str, str]], list[Any], tuple[list[bool], int]]


def score_many(
    items: Sequence[tuple[AnswerScoring, Problem, Sequence[Answer | FormatError | str]]],
    sandbox: Sandbox | None,
    *,
    until: float | None = None,
) -> list[Scored]:
    """Score many `(task, problem, answers)` at once; one `Scored` per item, in order, each exactly what
    `task.score_detailed(problem, answers, sandbox)` gives when no deadline passes.

    Round r's jobs of every problem still scoring go out in ONE `sandbox.run_many` (code_i and code_f's first
    round together; code_f's later rounds, one per hidden pair, only for candidates still right; code_o runs
    nothing), so the sandbox's workers are busy with the whole batch instead of one problem at a time. Jobs
    are deduplicated within a problem, as per-problem scoring does, not across problems.

    Deadlines: with n items that run sandbox jobs (code_o items and items with no scorable answer run none),
    every item's scoring ends at `start + n * task.config.score_deadline_s` (start: this call's start), or at
    `until` (a `time.monotonic()` value) if earlier: the batch shares the budget that scoring its problems one
    after another had (for one problem, exactly `score_deadline_s`), but one slow problem can now use what
    fast ones leave. A round's `run_many` is bounded by that end (items whose tasks have different ends go out
    in one `run_many` per distinct end): jobs still running then are killed, jobs not started never start, and
    a round begun after the end runs nothing. Each answer whose job was cut scores False and is counted in its
    item's `past_deadline` and in its task's running `past_deadline`."""
    start = time.monotonic()
    results: list[Scored | None] = [None] * len(items)
    live: dict[int, tuple[ScoringPlan, list[tuple[str, str]], float | None]] = {}

    def advance(k: int, plan: ScoringPlan, sent: list[Any] | None, end: float | None) -> None:
        task = items[k][0]
        try:
            jobs = plan.send(sent)  # type: ignore[arg-type]  # None starts a fresh generator
        except StopIteration as stop:
            solves, cut = stop.value
            task.past_deadline += cut
            results[k] = Scored(solves, cut)
            live.pop(k, None)
            return
        if sandbox is None:
            raise ValueError(f"{task.name} scoring runs programs in the sandbox: pass a Sandbox")
        live[k] = (plan, jobs, end)

    for k, (task, problem, answers) in enumerate(items):
        # A plugin family's task scores itself (registry.GuardedTask); every CodeTask is an AnswerScoring.
        if not isinstance(task, AnswerScoring):
            results[k] = Scored([bool(x) for x in task.score(problem, answers, sandbox)])
            continue
        advance(k, task._plan(problem, answers), None, None)
    # The deadline budget is `score_deadline_s` per problem that runs jobs, as one problem after another had.
    n = len(live)
    live.update(
        {k: (plan, jobs, items[k][0]._deadline(start, n, until)) for k, (plan, jobs, _) in live.items()}
    )
    while live:
        by_end: dict[float | None, list[int]] = {}
        for k, (_, _, end) in live.items():
            by_end.setdefault(end, []).append(k)
        for end, ks in by_end.items():
            jobs = [j for k in ks for j in live[k][1]]
            outs = _run_scoring(sandbox, jobs, end)
            i = 0
            for k in ks:
                plan, mine, _ = live[k]
                advance(k, plan, outs[i : i + len(mine)], end)
                i += len(mine)
    return results  # type: ignore[return-value]  # every item has finished


@dataclass(frozen=True)
class Scored:
    """What `score_detailed` returns: one bool per answer, and how many answers scored False only because
    the problem's scoring deadline passed before their job finished."""

    solves: list[bool]
    past_deadline: int = 0
