"""Controlled RL of one teacher on the validity of its proposals alone: no students, no difficulty reward.

The self-play run's teachers keep a flat valid-proposal rate (docs/learning.md). This control asks the
questions that run cannot separate, with the trainer's own pieces (its prompts with buffer references, its
sandbox validation, REINFORCE++-baseline advantages, one `train_step`):

- does the update move validity at all, and in which direction? (`sign=-1` rewards invalid proposals: if
  that does not lower the valid rate, the update is too weak to say anything);
- does a correctly signed update raise it, at which learning rate, against the same loop with no update
  (the prompts still change as the buffers fill with the teacher's own proposals)?

Reward: 0 for a valid proposal, `rl.invalid_reward` (-1) for an invalid one; one group per proposal (a group of
one keeps its reward, as a teacher row in the trainer) or, with `per_prompt` m, one per prompt sampled m times;
whitened over the step's proposals. Valid proposals
enter the buffers as in the game. The valid rate is measured before and after on `eval_rounds` extra rounds
of proposals that touch no state. `bench/learning_teacher_controls.py` runs the arms;
`tests/experiment/test_teacher_controls.py` checks that the update controls validity on the bundled model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from populora.engine import TrainBatch, TrainRow
from populora.rl.advantages import reinforce_pp_baseline
from populora.train.records import ProposalTrace

EVAL_STEP = 1_000_000  # sampling seeds of the measurement rounds, apart from every training step's


def validity_rewards(valid: Sequence[bool], invalid_reward: float = -1.0) -> list[float]:
    """The control's reward: 0 for a valid proposal, `invalid_reward` for an invalid one."""
    return [0.0 if ok else float(invalid_reward) for ok in valid]


def validity_rows(
    traces: Sequence[ProposalTrace],
    slot: int,
    invalid_reward: float,
    sign: float,
    token_weighted: bool = True,
    per_prompt: int = 1,
) -> list[TrainRow]:
    """Training rows of the teacher's proposals with whitened validity advantages (times `sign`); the whitening
    weighs each proposal by its token count (`rl.token_weighted`, as the trainer) or counts each once.
    `per_prompt` consecutive traces share a prompt and its baseline (the mean reward of its proposals); with 1,
    a group of one keeps its reward, as a teacher row in the trainer.

    A step whose proposals are all valid (or all invalid) has nothing to tell apart: no rows."""
    kept_at = [i for i, t in enumerate(traces) if t.gen.token_ids]
    kept = [traces[i] for i in kept_at]
    rewards = validity_rewards([t.valid for t in kept], invalid_reward)
    if len(set(rewards)) < 2:
        return []
    adv = reinforce_pp_baseline(
        torch.tensor(rewards),
        torch.tensor([len(t.gen.token_ids) for t in kept]),
        [i // per_prompt for i in kept_at],  # the proposals of one prompt share its baseline
        ["teacher"] * len(kept),
        token_weighted=token_weighted,
    )
    return [
        TrainRow(
            slot=slot,
            prompt_ids=t.gen.prompt_ids,
            response_ids=t.gen.token_ids,
            advantages=sign * float(a),
            old_logprobs=t.gen.logprobs,
            loss_group="teacher",
        )
        for t, a in zip(kept, adv.tolist(), strict=True)
    ]


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

    def __init__(self, trainer, *, sign: float = 1.0, update: bool = True, per_prompt: int = 1) -> None:
        self.tr = trainer
        self.teacher = next(m for m in trainer.pop.members if trainer.pop[m].role == "teacher")
        self.student = next(m for m in trainer.pop.members if trainer.pop[m].role == "student")
        self.slot = trainer.pop[self.teacher].slot
        self.sign, self.update, self.per_prompt = float(sign), bool(update), int(per_prompt)

    def measure(self, rounds: int, k: int = 0) -> dict:
        """Valid rate of `rounds` x `tasks.prompts` fresh proposals; no update, no buffer change."""
        traces = self.tr.propose([(self.teacher, self.student)] * rounds, EVAL_STEP + k, per_prompt=1)
        self.tr.check_proposals(traces, EVAL_STEP + k)
        return summarise(traces) | {"n": len(traces)}

    def step(self, step: int) -> dict:
        """One round of `tasks.prompts` prompts, each sampled `per_prompt` times: propose, validate (valid ones
        enter the buffers), update on validity; its summary."""
        traces = self.tr.propose([(self.teacher, self.student)], step, self.per_prompt)
        self.tr.validate(traces, step)
        rl = self.tr.cfg.rl
        rows = validity_rows(
            traces, self.slot, self.tr.rewards.invalid_proposal, self.sign, rl.token_weighted, self.per_prompt
        )
        if rows and self.update:
            self.tr.engine.train_step(TrainBatch(rows))
        return summarise(traces) | {"updated": bool(rows and self.update)}


__all__ = ["TeacherControl", "summarise", "validity_rewards", "validity_rows"]
