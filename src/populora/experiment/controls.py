"""Controlled RL without self-play: one student adapter trained on problems it is given, no teachers.

The pieces of the trainer's student update (engine rollouts, verifier rewards +1 / -0.5 / -1, REINFORCE++-
baseline advantages with one group per problem and one whitening set, one `train_step`), stripped of
matchmaking and proposals, so that an experiment can ask two questions the self-play run cannot separate:
does the update fit the problems it trains on (`rl_step` on the same problems every step), and does what it
learns transfer to held-out problems (new problems every step, greedy probe)? `populora experiment control rl`
runs both; `tests/experiment/test_controls.py` checks the first on the bundled model.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence

import torch

from populora import tasks
from populora.engine import GenRequest, TrainBatch, TrainRow
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.rl.advantages import reinforce_pp_baseline
from populora.tasks.rewards import student_reward
from populora.train.probe import score_members

TEMPLATE = "compact"


def rollouts(
    engine, problems: Sequence, n: int, temperature: float, seed: int, budget: Mapping[str, int] | None = None
) -> list[list]:
    """`n` sampled answers of slot 0 to every problem (one mixed batch), grouped per problem."""
    budget = MAX_NEW_TOKENS if budget is None else budget
    reqs = [
        GenRequest(
            slot=0,
            prompt=tasks.get(p.task).student_prompt(p, template=TEMPLATE),
            max_new_tokens=budget[p.task],
            temperature=temperature,
        )
        for p in problems
        for _ in range(n)
    ]
    gens = engine.generate(reqs, seed=seed)
    return [gens[i * n : (i + 1) * n] for i in range(len(problems))]


def score_groups(
    problems: Sequence, groups: Sequence[Sequence], sandbox
) -> list[tuple[list[bool], list[bool]]]:
    """(formatted, solved) flags of every rollout, per problem (the sandbox scores them)."""
    out = []
    for p, gens in zip(problems, groups, strict=True):
        task = tasks.get(p.task)
        answers = [task.parse_answer(g.text, template=TEMPLATE) for g in gens]
        formatted = [not isinstance(a, tasks.FormatError) for a in answers]
        out.append((formatted, [bool(x) for x in task.score(p, answers, sandbox)]))
    return out


def solve_rate(
    engine, problems: Sequence, n: int, temperature: float, seed: int, sandbox, budget=None
) -> float:
    """Fraction of `n` sampled answers per problem that solve it (no update)."""
    flags = score_groups(problems, rollouts(engine, problems, n, temperature, seed, budget), sandbox)
    return statistics.fmean(ok for _, solved in flags for ok in solved)


def rl_step(
    engine,
    problems: Sequence,
    n: int,
    temperature: float,
    seed: int,
    sandbox,
    budget: Mapping[str, int] | None = None,
    sign: float = 1.0,
    by_type: dict[str, list[int]] | None = None,
    rewards_order: random.Random | None = None,
    update: bool = True,
    loss_by_task: bool = False,
) -> float:
    """One update of slot 0 on `n` rollouts of every problem; returns their solve rate (before the update).

    `sign=-1` negates every advantage (a deliberately wrong update, for tests that must be able to fail).
    `by_type`, when given, gets `[solved, rollouts]` added per task type (a mixed step's types apart).
    `rewards_order`: the shuffled control: the rewards are permuted across every rollout of the step with this
    generator before the advantages (as `rl.student_rewards=shuffled` does in self-play); the solve rate
    returned is the real one. `update=False`: the no-update control (rollouts and scores only).
    `loss_by_task`: each task type's rows are a loss group of their own (`rl.loss_norm=role_task`).
    """
    groups = rollouts(engine, problems, n, temperature, seed, budget)
    rows, rewards, lengths, keys, solved = [], [], [], [], 0
    for i, (gens, (fmt, ok)) in enumerate(zip(groups, score_groups(problems, groups, sandbox), strict=True)):
        if by_type is not None:
            counts = by_type.setdefault(problems[i].task, [0, 0])
            counts[0] += sum(ok)
            counts[1] += len(ok)
        for g, f, o in zip(gens, fmt, ok, strict=True):
            solved += o
            if not g.token_ids:
                continue
            rows.append(
                TrainRow(
                    slot=0,
                    prompt_ids=g.prompt_ids,
                    response_ids=g.token_ids,
                    advantages=0.0,
                    loss_group=problems[i].task if loss_by_task else "",
                )
            )
            rewards.append(student_reward(f, o))
            lengths.append(len(g.token_ids))
            keys.append(i)
    if not update or not rows:
        return solved / max(n * len(problems), 1)
    if rewards_order is not None:
        rewards_order.shuffle(rewards)
    adv = reinforce_pp_baseline(torch.tensor(rewards), torch.tensor(lengths), keys, ["batch"] * len(rows))
    for row, a in zip(rows, adv.tolist(), strict=True):
        row.advantages = sign * float(a)
    engine.train_step(TrainBatch(rows))
    return solved / max(n * len(problems), 1)


def headroom(
    engine,
    probe: Mapping[str, Sequence],
    n: int,
    temperature: float,
    sandbox,
    budget: Mapping[str, int] | None = None,
) -> dict:
    """Greedy accuracy, pass@1 and pass@n at `temperature`, per task type, on `probe` problems (answer budgets
    `budget`, default the fixed probe's)."""
    greedy = score_members(engine, {"s": 0}, probe, sandbox, max_new_tokens=budget)["s"]
    out = {}
    for t, problems in probe.items():
        flags = score_groups(problems, rollouts(engine, problems, n, temperature, 1, budget), sandbox)
        out[t] = {
            "greedy": greedy[t],
            "pass@1": statistics.fmean(statistics.fmean(ok) for _, ok in flags),
            f"pass@{n}": statistics.fmean(any(ok) for _, ok in flags),
        }
    return out


__all__ = ["headroom", "rl_step", "rollouts", "score_groups", "solve_rate"]
