"""Phase (3), student solve (`Trainer.solve`, `Trainer.solver_problems`): the students' rollouts.

Owns the student requests (n = `rl.rollouts` answers of the matched student to every valid problem, at the
training temperature, all in one mixed-slot `engine.generate`), handing each problem to the overlap lane as
soon as its n answers are in, and the single agent's solver problems (AZR: its rollouts on its own proposals
only estimate their learnability; its solver trains on problems drawn from the buffers). What the answers
earn is scoring's (train/score.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from populora.train.records import ProposalTrace


def solve(tr, traces: list[ProposalTrace], step: int, *, finished=None) -> None:
    """n = `rl.rollouts` answers of the matched student to every valid problem (one mixed batch).
    `finished(trace, answers)` is called as soon as all of a problem's answers are in (`train.overlap`)."""
    cfg, requests, owners = tr.cfg, [], []
    for trace in traces:
        if not trace.valid:
            continue
        prompt = tr.tasks[trace.task].student_prompt(trace.problem, template=cfg.tasks.template)
        slot = tr.pop[trace.student].slot
        for _ in range(cfg.rl.rollouts):
            requests.append(tr._request(slot, prompt, cfg.tasks.student_max_new_tokens))
            owners.append(trace)
    got: dict[int, dict[int, Any]] = defaultdict(dict)  # trace -> its answers in so far, by request

    def on_finish(i: int, gen) -> None:
        mine = got[id(owners[i])]
        mine[i] = gen
        if len(mine) == cfg.rl.rollouts:  # a trace's requests are consecutive: sorted = rollout order
            finished(owners[i], [mine[k] for k in sorted(mine)])

    gens = tr._generate(requests, step, "student", on_finish if finished is not None else None)
    for trace, gen in zip(owners, gens, strict=True):
        trace.answers.append(gen)


def solver_problems(tr, proposals: list[ProposalTrace]) -> list[ProposalTrace]:
    """The single agent's solver problems (AZR's `max_new` mix, per task type): the step's valid proposals
    first, the rest uniformly from that type's buffer (with repeats only when it holds too few), as many
    as it proposed of that type: a student's problems in one matchup whose teacher posed them all validly.
    AZR's solver trains on the previous step's proposals (its loaders are built before the step); here the
    step's own, as the paper's Algorithm 1 reads."""
    out = []
    for name in tr.cfg.tasks.types:
        mine = [t for t in proposals if t.task == name]
        new, seen = [], set()
        for t in mine:
            if t.valid and t.problem.id not in seen:
                seen.add(t.problem.id)
                new.append(t.problem)
        k = len(mine)
        chosen = new[:k]
        rest = [p for p in tr.buffers[name] if p.id not in seen]
        chosen += [rest[i] for i in tr.rng.sample(range(len(rest)), min(k - len(chosen), len(rest)))]
        pool = chosen or list(tr.buffers[name])
        while len(chosen) < k:
            chosen.append(tr.rng.choice(pool))
        out += [ProposalTrace("A0", "A0", name, problem=p, from_buffer=True) for p in chosen]
    return out


__all__ = ["solve", "solver_problems"]
