"""Controlled RL of one teacher on the validity of its proposals alone: no students, no difficulty reward.

The self-play run's teachers keep a flat valid-proposal rate (docs/learning.md). This control asks the
questions that run cannot separate, with the trainer's own pieces (its prompts with buffer references, its
sandbox validation, REINFORCE++-baseline advantages, one `train_step`):

- does the update move validity at all, and in which direction? (`sign=-1` rewards invalid proposals: if
  that does not lower the valid rate, the update is too weak to say anything);
- does a correctly signed update raise it, at which learning rate, against the same loop with no update
  (the prompts still change as the buffers fill with the teacher's own proposals)?

Reward: 0 for a valid proposal, `rl.invalid_reward` (-1) for an invalid one, turned into advantages by the
trainer's own `build_rows` (so `rl.whiten_scope`, `rl.token_weighted` and `rl.teacher_group` act as in the game:
a group of one keeps its reward; with `rl.teacher_group` m, a prompt's m proposals share a baseline). Valid proposals
enter the buffers as in the game. The valid rate is measured before and after on `eval_rounds` extra rounds
of proposals that touch no state. `populora experiment control teacher` runs the arms;
`tests/experiment/test_teacher_controls.py` checks that the update controls validity on the bundled model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from populora.engine import TrainBatch, TrainRow
from populora.train.records import ProposalTrace

EVAL_STEP = 1_000_000  # sampling seeds of the measurement rounds, apart from every training step's


def validity_rewards(valid: Sequence[bool], invalid_reward: float = -1.0) -> list[float]:
    """The control's reward: 0 for a valid proposal, `invalid_reward` for an invalid one."""
    return [0.0 if ok else float(invalid_reward) for ok in valid]


def validity_rows(trainer, traces: Sequence[ProposalTrace], sign: float = 1.0) -> list[TrainRow]:
    """The trainer's own teacher rows (`Trainer.build_rows`: its whitening scope, token weighting and
    `rl.teacher_group` per-prompt groups) for the validity reward, every advantage times `sign`.

    Sets each trace's `reward` to its validity reward. A step whose proposals are all valid (or all invalid) has
    nothing to tell apart: no rows, so no optimiser step (a zero-advantage step would still move the adapter by
    AdamW's momentum)."""
    kept = [t for t in traces if t.gen.token_ids]
    rewards = validity_rewards([t.valid for t in kept], trainer.rewards.invalid_proposal)
    if len(set(rewards)) < 2:
        return []
    for t, r in zip(kept, rewards, strict=True):
        t.reward = r
    rows = trainer.build_rows(list(traces))  # unsolved proposals: teacher rows only
    for row in rows:  # a scalar, or one per token under rl.teacher_credit=span
        row.advantages = (
            row.advantages * sign if isinstance(row.advantages, float) else [a * sign for a in row.advantages]
        )
    return rows


def summarise(traces: Sequence[ProposalTrace]) -> dict:
    """Valid rate (all and per task type) and mean per-token log-probability of the sampled proposals
    (minus an entropy estimate: it falls when sampling spreads over more tokens)."""
    out = {"valid": statistics.fmean(t.valid for t in traces)}
    for task in sorted({t.task for t in traces}):
        out[task] = statistics.fmean(t.valid for t in traces if t.task == task)
    lps = [lp for t in traces for lp in (t.gen.logprobs or [])]
    out["logprob"] = statistics.fmean(lps) if lps else 0.0
    return out


class TeacherControl:
    """One teacher (and its unused student) of a set-up `Trainer`: measure and update validity."""

    def __init__(self, trainer, *, sign: float = 1.0, update: bool = True) -> None:
        self.tr = trainer
        self.teacher = trainer.pop.by_role("teacher")[0].id
        self.student = trainer.pop.by_role("student")[0].id
        self.sign, self.update = float(sign), bool(update)

    def measure(self, rounds: int, k: int = 0) -> dict:
        """Valid rate of `rounds` x `tasks.prompts` fresh proposals (one per prompt); no update, no buffer change."""
        traces = self.tr.propose([(self.teacher, self.student)] * rounds, EVAL_STEP + k, per_prompt=1)
        self.tr.check_proposals(traces, EVAL_STEP + k)
        return summarise(traces) | {"n": len(traces)}

    def step(self, step: int) -> dict:
        """One round of `tasks.prompts` prompts, each sampled `rl.teacher_group` times: propose, validate (valid
        ones enter the buffers), update on validity; its summary."""
        traces = self.tr.propose([(self.teacher, self.student)], step)
        self.tr.validate(traces, step)
        rows = validity_rows(self.tr, traces, self.sign)
        if rows and self.update:
            self.tr.engine.train_step(TrainBatch(rows))
        return summarise(traces) | {"updated": bool(rows and self.update)}


__all__ = ["TeacherControl", "summarise", "validity_rewards", "validity_rows"]
