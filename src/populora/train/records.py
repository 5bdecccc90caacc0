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

    Single mode with `population.single_solver=buffer` (AZR) has two more kinds: a proposal whose answers are
    the n estimation rollouts (`estimate=True`: they set its reward and are never trained on), and a solver
    problem drawn from the buffers (`from_buffer=True`: no proposal, only the solver's trained answers).

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
    estimate: bool = False  # the answers only estimate rho (single mode, AZR): no training rows
    from_buffer: bool = False  # a solver problem drawn from the buffers (single mode, AZR): no proposal
    train_rewards: list[float] | None = None
    probe_collision: bool = False
    flaws: tuple[str, ...] | None = (
        None  # diagnostics.flaw_coverage: the planted classes a valid problem carries
    )

    @property
    def proposed(self) -> bool:
        """A teacher proposal (False: a solver problem drawn from the buffers, single mode)."""
        return not self.from_buffer

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


def matchup_rhos(traces: Iterable[ProposalTrace]) -> list[float | None]:
    """Each proposal's solve rate for the matchup's game (`population.ratings.score_game`): None for an
    invalid proposal, 0.0 for a valid one no rollout solved."""
    return [(t.solve_rate or 0.0) if t.valid else None for t in traces]


def games_record(members: list, matchups: list[dict]) -> dict[str, dict[str, int]]:
    """metrics.jsonl `games`: each member's wins, draws and losses in this step's matchups (per step; the
    report sums them). Every member that played the step is listed, with zeros when it played no game."""
    out = {m.id: {"win": 0, "draw": 0, "loss": 0} for m in members}
    for mu in matchups:
        outcome = mu.get("outcome")
        if outcome is None:
            continue
        for role in ("teacher", "student"):
            res = "draw" if outcome == "draw" else ("win" if outcome == role else "loss")
            out.setdefault(mu[role], {"win": 0, "draw": 0, "loss": 0})[res] += 1
    return out


def mean(xs: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None (None when there is none)."""
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


_EVENT_ONLY = ("outcome", "teacher_points", "student_points")  # matchup keys kept in events.jsonl only


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
    gen_tokens = sum(len(t.gen.token_ids) for t in traces if t.proposed) + sum(
        len(g.token_ids) for t in traces for g in t.answers
    )
    out = {}
    played = [t for t in traces if not t.probe_collision]  # a probe collision is out of the game
    for m in members:
        slot = m.slot
        as_teacher = [t for t in played if t.teacher == m.id and t.proposed]
        # what it trained on as a solver (single mode's estimation rollouts are the proposer's, not these)
        as_student = [t for t in played if t.student == m.id and t.valid and not t.estimate]
        teacher_like, student_like = m.role in ("teacher", "single"), m.role in ("student", "single")
        rewards, lens = [], []
        if teacher_like:
            rewards += [t.reward for t in as_teacher]
            lens += [len(t.gen.token_ids) for t in as_teacher]
        if student_like:
            rewards += [r for t in as_student for r in t.answer_rewards]
            lens += [len(g.token_ids) for t in as_student for g in t.answers]
        solved = as_teacher if m.role == "teacher" else as_student
        # AZR's types always, then any other family's types the step played (tasks/registry.py)
        names = (*TASKS, *sorted({t.task for t in played} - set(TASKS)))
        solve = {name: solve_rate(t for t in solved if t.task == name) for name in names}
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
            # rl.tis_cap > 0: the mean truncated importance weight of its tokens (1 = sampler and trainer agree)
            "is_weight": tm.get(f"is_weight/{slot}"),
            # rl.kl_coef > 0 only: the mean per-token KL estimate to the frozen base (rl/kl.py)
            **({"kl_ref": tm[f"kl_ref/{slot}"]} if f"kl_ref/{slot}" in tm else {}),
            "complexity": summarize([t.features for t in as_teacher if t.valid]) if teacher_like else None,
            "n_valid": n_valid if teacher_like else None,
            "n_proposed": len(as_teacher) if teacher_like else None,
        }
        read = [t for t in as_teacher if t.flaws is not None]
        if teacher_like and read:  # diagnostics.flaw_coverage: valid proposals carrying each planted class
            from populora.train.flaw_coverage import coverage_counts

            out[m.id]["flaws"] = coverage_counts(read)
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
        # each member's win/draw/loss in this step's games ({} in single mode: no games)
        "games": {} if mode == "single" else games_record(members, matchups),
        # single mode: the mean solve rate of its estimation rollouts on its own valid proposals, the s of
        # AZR's learnability reward (null in population mode, or when no proposal was valid)
        "self_solve_rate": solve_rate(t for t in traces if t.proposed) if mode == "single" else None,
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
        if not t.proposed:
            continue  # a solver problem drawn from the buffers was logged when it was proposed
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
                **({"flaws": list(t.flaws)} if t.flaws is not None else {}),
            }
        )
    return out


__all__ = [
    "ProposalTrace",
    "StepResult",
    "games_record",
    "matchup_rhos",
    "mean",
    "metrics_record",
    "probe_collisions",
    "problem_records",
    "solve_rate",
]
