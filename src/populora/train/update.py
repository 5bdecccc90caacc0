"""Phase (4a), the update (`Trainer.update`, `Trainer.build_rows`, `Trainer.schedule_lr`): one optimiser step
for every member at once.

Owns turning the step's stored rewards into training rows (a teacher's proposal, a student's answers; never a
probe collision's, never the single agent's estimation rollouts), their REINFORCE++-baseline advantages
(rl/advantages.py: the baseline groups, the whitening scope `rl.whiten_scope`, the loss grouping
`rl.loss_norm`), span credit for invalid proposals (`rl.teacher_credit=span`, train/credit.py), the learning
rate of the step (`rl.lr_schedule`), and the ONE mixed batch of every member's rows that goes to
`engine.train_step`, each slot's gradient from its own rows.
"""

from __future__ import annotations

import torch

from populora.engine import TrainBatch, TrainRow
from populora.rl.advantages import reinforce_pp_baseline, scope_key
from populora.rl.loss import loss_group
from populora.rl.schedule import lr_at
from populora.train.credit import blame_spans
from populora.train.records import ProposalTrace


def schedule_lr(tr, step: int) -> float:
    """Set every adapter's learning rate for `step` (`rl.lr_schedule`, `rl.warmup_steps`) and return it.

    A function of the step alone: a resumed run sets the same rates, and a child born at evolution takes
    the run's current rate (its slot's rate is set here every step). A constant schedule without warm-up
    leaves the engine's rates as built (rl.lr)."""
    r = tr.cfg.rl
    lr = lr_at(step, tr.cfg.train.steps, r.lr, r.lr_schedule, r.warmup_steps)
    if r.lr_schedule != "constant" or r.warmup_steps:
        for slot in range(tr.cfg.n_slots):
            tr.engine.set_lr(slot, lr)
    return lr


def update(tr, traces: list[ProposalTrace]) -> dict[str, float]:
    """REINFORCE++-baseline advantages over every row of every member, then ONE `engine.train_step`."""
    rows = tr.build_rows(traces)
    if not rows:
        return {}
    return tr.engine.train_step(TrainBatch(rows), **tr._progress(tr.engine.train_step, "update"))


def build_rows(tr, traces: list[ProposalTrace]) -> list[TrainRow]:
    """Training rows of every member, each with its REINFORCE++-baseline advantage."""
    scope = tr.cfg.effective_whiten_scope
    grouping = tr.cfg.rl.loss_norm  # role: the single agent's proposer rows weigh as a teacher's
    rows, rewards, lengths, groups, scopes, owners = [], [], [], [], [], []

    def add(member: str, role: str, task: str, gen, reward: float, group, owner=None) -> None:
        if not gen.token_ids:
            return  # nothing to train on (an immediate EOS is still one token; an empty budget is not)
        owners.append(owner)
        rows.append(
            TrainRow(
                slot=tr.pop[member].slot,
                prompt_ids=gen.prompt_ids,
                response_ids=gen.token_ids,
                advantages=0.0,
                old_logprobs=gen.logprobs,
                loss_group=loss_group(grouping, role, task),
            )
        )
        rewards.append(reward)
        lengths.append(len(gen.token_ids))
        groups.append(group)
        scopes.append(scope_key(scope, member=member, role=role, task=task))

    group = tr.cfg.rl.teacher_group
    for i, trace in enumerate(traces):
        if trace.probe_collision:
            continue  # out of the game: neither side trains on a probe program
        # The `rl.teacher_group` proposals of one prompt (consecutive traces) share its baseline; at 1, the
        # paper's, a prompt sampled once is a group of one and keeps its reward.
        if trace.proposed:  # a single agent's solver problem from the buffers has no proposal row
            add(trace.teacher, "teacher", trace.task, trace.gen, trace.reward, ("teacher", i // group), trace)
        if trace.estimate:  # AZR: the estimation rollouts set the proposer's reward, never trained on
            continue
        answer_rewards = trace.answer_rewards if trace.train_rewards is None else trace.train_rewards
        for gen, reward in zip(trace.answers, answer_rewards, strict=True):
            # The n rollouts of one student on one problem share the baseline (prompt x slot).
            add(trace.student, "student", trace.task, gen, reward, ("student", i))
    if not rows:
        return []
    adv = reinforce_pp_baseline(
        torch.tensor(rewards), torch.tensor(lengths), groups, scopes, token_weighted=tr.cfg.rl.token_weighted
    )
    for row, a in zip(rows, adv.tolist(), strict=True):
        row.advantages = float(a)
    if tr.cfg.rl.teacher_credit == "span":
        blame_spans(rows, owners, tr.engine.tokenizer)
    return rows


__all__ = ["build_rows", "schedule_lr", "update"]
