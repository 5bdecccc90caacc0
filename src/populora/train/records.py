"""What one training step produces: a `ProposalTrace` per teacher proposal, and the records written from
them to the run folder (metrics.jsonl and problems.jsonl, schema in docs/run-folder.md).

Each fact is computed once: the trainer's `score` phase stores every reward on the trace, and everything
here only reads it. The solve rate of any group of traces is `solve_rate(traces)` (answers pooled).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from populora.diagnostics.features import summarize
from populora.names import TASKS


@dataclass
class ProposalTrace:
    """One teacher proposal and everything that happened to it in a step, filled phase by phase:

    - (2) teacher generation: `teacher`, `student`, `task`, `shown_program` (code_f: the program the teacher
      writes inputs for) and `gen`, the teacher's Generation;
    - (2) validation: `program` and `inputs` as parsed, then `problem` (valid) or `reason` (invalid), and the
      program's structural `features`;
    - (3) student solve: `answers`, the student's n Generations of a valid problem;
    - (4) score: per answer `formatted` (did it parse), `solves` (did the sandbox accept it) and
      `answer_rewards` (the student's reward, the format penalty included); `reward`, the proposer's reward;
      `train_rewards`, what the update uses for the answers when it is not `answer_rewards` (the shuffled
      control, train/controls.py).

    `probe_collision` (set in validation, train/probe_guard.py): the program is a probe program, exactly or
    with its constants masked; such a proposal counts as invalid with reason "probe collision" but earns no
    reward and gives no training row, no buffer entry and no rating (it is out of the game).
    """

    teacher: str
    student: str
    task: str
    shown_program: str | None = None
    gen: Any = None  # engine Generation of the teacher
    program: str | None = None  # the parsed program, valid or not
    inputs: list[str] | None = None
    problem: Any = None  # tasks.Problem when valid
    reason: str | None = None  # why it is invalid
    features: dict | None = None
    answers: list[Any] = field(default_factory=list)  # engine Generations of the student
    formatted: list[bool] = field(default_factory=list)
    solves: list[bool] = field(default_factory=list)
    answer_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    train_rewards: list[float] | None = None
    probe_collision: bool = False

    @property
    def valid(self) -> bool:
        return self.problem is not None

    @property
    def solve_rate(self) -> float | None:
        return solve_rate([self])


@dataclass
class StepResult:
    """One step's outcome: its metrics.jsonl line, its proposal traces and its events."""

    step: int
    record: dict
    traces: list[ProposalTrace]
    events: list[dict]


def solve_rate(traces: Iterable[ProposalTrace]) -> float | None:
    """The fraction of accepted answers over every answer of `traces` (None when there is none)."""
    solves = [s for t in traces for s in t.solves]
    return sum(solves) / len(solves) if solves else None


def matchup_scores(traces: list[ProposalTrace], rewards: Any) -> tuple[float, float | None]:
    """The two sides' scores of one matchup, each a function of that side's own reward only
    (`population.ratings.rate_matchup` turns them into outcomes; the rule is documented there):

    - teacher: its mean reward over every proposal of the matchup (invalid ones at `rl.invalid_reward`,
      valid ones no rollout solved at 0, the others 1 - rho), which is 1 - solve rate when every problem is
      valid and solved at least once;
    - student: its mean answer reward mapped so that right = 1 and parsed-but-wrong = 0,
      (R - wrong) / (correct - wrong): the solve rate when every answer parses, lower for unparsable ones;
      None when the teacher posed no valid problem (nothing to rate the student on).
    `rewards` is the run's `tasks.rewards.RewardConfig`.
    """
    teacher = sum(t.reward for t in traces) / len(traces) if traces else rewards.invalid_proposal
    answers = [r for t in traces for r in t.answer_rewards]
    if not answers:
        return teacher, None
    student = (sum(answers) / len(answers) - rewards.wrong) / (rewards.correct - rewards.wrong)
    return teacher, student


def mean(xs: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None (None when there is none)."""
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


_EVENT_ONLY = ("outcome", "teacher_outcome", "student_outcome")  # matchup keys kept in events.jsonl only


def metrics_record(
    step: int,
    traces: list[ProposalTrace],
    train_metrics: dict,
    matchups: list[dict],
    timings: dict,
    step_s: float,
    *,
    members: list,
    mode: str,
    coverage: Any,
    dist: dict | None = None,
) -> dict:
    """The metrics.jsonl line of a step (docs/run-folder.md) for `members` (the ones that played it)."""
    tm = train_metrics
    gen_tokens = sum(len(t.gen.token_ids) for t in traces) + sum(
        len(g.token_ids) for t in traces for g in t.answers
    )
    out = {}
    played = [t for t in traces if not t.probe_collision]  # a probe collision is out of the game
    for m in members:
        slot = m.slot
        as_teacher = [t for t in played if t.teacher == m.id]
        as_student = [t for t in played if t.student == m.id and t.valid]
        teacher_like, student_like = m.role in ("teacher", "single"), m.role in ("student", "single")
        rewards, lens = [], []
        if teacher_like:
            rewards += [t.reward for t in as_teacher]
            lens += [len(t.gen.token_ids) for t in as_teacher]
        if student_like:
            rewards += [r for t in as_student for r in t.answer_rewards]
            lens += [len(g.token_ids) for t in as_student for g in t.answers]
        solved = as_teacher if m.role == "teacher" else as_student
        solve = {name: solve_rate(t for t in solved if t.task == name) for name in TASKS}
        solve["all"] = solve_rate(solved)
        n_valid = sum(t.valid for t in as_teacher)
        out[m.id] = {
            "role": m.role,
            "reward": mean(rewards),
            "valid_rate": n_valid / len(as_teacher) if teacher_like and as_teacher else None,
            "solve_rate": solve,
            "response_len": mean(lens),
            "entropy": tm.get(f"entropy/{slot}"),
            "mu": None if mode == "single" else m.mu,
            "sigma": None if mode == "single" else m.sigma,
            "loss": tm.get(f"loss/{slot}"),
            "grad_norm": tm.get(f"grad_norm/{slot}"),
            "complexity": summarize([t.features for t in as_teacher if t.valid]) if teacher_like else None,
            "n_valid": n_valid if teacher_like else None,
            "n_proposed": len(as_teacher) if teacher_like else None,
        }
    gen_s = timings["teacher"] + timings["student"]
    return {
        "step": step,
        "time": time.time(),
        "mode": mode,
        "phase_s": {k: round(v, 4) for k, v in timings.items()},
        "step_s": round(step_s, 4),
        "tokens_per_s": gen_tokens / gen_s if gen_s > 0 else None,
        "tokens": gen_tokens,
        "train_tokens": tm.get("tokens"),
        "coverage": coverage.coverage,
        "coverage_cells": coverage.cells_filled,
        "probe_collisions": probe_collisions(traces),
        "members": out,
        "matchups": [{k: v for k, v in m.items() if k not in _EVENT_ONLY} for m in matchups],
        # rows and seconds per worker with dist.workers > 1 (populora.engine.dist); null in one process
        "dist": dist,
    }


def probe_collisions(traces: Iterable[ProposalTrace]) -> dict[str, int]:
    """Proposals of the step dropped as probe collisions, per task type proposed (`{task: n}`, zeros kept)."""
    traces = list(traces)
    out = dict.fromkeys(dict.fromkeys(t.task for t in traces), 0)
    for t in traces:
        out[t.task] += t.probe_collision
    return out


def problem_records(step: int, traces: list[ProposalTrace]) -> list[dict]:
    """The problems.jsonl lines of a step: one per proposal, valid or not."""
    out = []
    for t in traces:
        p = t.problem
        out.append(
            {
                "step": step,
                "proposer": t.teacher,
                "solver": t.student,
                "task": t.task,
                "valid": t.valid,
                "reason": t.reason,
                "id": p.id if p is not None else None,
                "program": p.program if p is not None else t.program,
                "inputs": list(p.inputs) if p is not None else t.inputs,
                "outputs": list(p.outputs) if p is not None else None,
                "message": p.message if p is not None else "",
                "solve_rate": t.solve_rate,
                "reward": t.reward,
                "features": t.features,
            }
        )
    return out


__all__ = [
    "ProposalTrace",
    "StepResult",
    "matchup_scores",
    "mean",
    "metrics_record",
    "probe_collisions",
    "problem_records",
    "solve_rate",
]
