"""The fixed probe during training: every member's greedy accuracy per task type on held-out problems.

Training-time rewards describe problems the population wrote for itself, so they cannot say whether the
members got better; the probe can: the same held-out problems (`populora.pretrain.probe`, never used to
pretrain or to seed buffers) scored greedy at step 0, before any update, and every
`diagnostics.probe_every` steps after that step's update and evolution. The result goes into that step's
metrics.jsonl record under `probe` as `{member_id: {"code_i": acc, "code_o": acc, "code_f": acc}}`
(docs/run-folder.md); step 0 gets a record of its own holding only `step`, `time`, `mode`, `probe`.

Cost is kept small: the first `diagnostics.probe_size` problems of each set, every member's prompts in ONE
mixed-slot `engine.generate` (temperature 0), and one sandbox `score` per problem for all members' answers.
Every task type is probed whatever `tasks.types` trains, so a specialist's loss on the other types shows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from populora.names import TASKS
from populora.pretrain.probe import MAX_NEW_TOKENS, load_probe

PROBE_SEED = 0  # greedy decoding draws nothing; a fixed seed keeps the engine's own generator untouched


def probe_subset(size: int, types: Sequence[str] = TASKS) -> dict[str, list]:
    """The first `size` problems of each fixed probe set: the same subset at every step of every run."""
    return {t: load_probe(t)[:size] for t in types}


def score_members(
    engine,
    slots: Mapping[str, int],
    problems: Mapping[str, Sequence],
    sandbox,
    template: str = "compact",
    max_new_tokens: Mapping[str, int] | None = None,
) -> dict[str, dict[str, float]]:
    """Greedy accuracy of each member (`{member_id: slot}`) per task type: `{member_id: {task: acc}}`.

    One `engine.generate` for every (member, problem) prompt, then one `task.score` per problem holding the
    answers of all members (the sandbox runs them in parallel).
    """
    from populora.engine import GenRequest
    from populora.tasks import get

    budget = dict(MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens)
    flat = [p for t in problems for p in problems[t]]
    members = list(slots)
    if not flat or not members:
        return {m: {} for m in members}
    tasks = {p.task: get(p.task) for p in flat}
    requests = [
        GenRequest(
            slot=slots[m],
            prompt=tasks[p.task].student_prompt(p, template=template),
            max_new_tokens=budget[p.task],
            temperature=0.0,
        )
        for p in flat
        for m in members
    ]
    gens = engine.generate(requests, seed=PROBE_SEED)
    right: dict[str, dict[str, int]] = {m: dict.fromkeys(problems, 0) for m in members}
    k = len(members)
    for i, p in enumerate(flat):
        task = tasks[p.task]
        answers = [task.parse_answer(g.text, template=template) for g in gens[i * k : (i + 1) * k]]
        for m, ok in zip(members, task.score(p, answers, sandbox), strict=True):
            right[m][p.task] += bool(ok)
    return {m: {t: right[m][t] / len(problems[t]) for t in problems if problems[t]} for m in members}


class Prober:
    """The trainer's probe: when it is due, what it scores and how it is logged. Built from the config."""

    def __init__(self, every: int, size: int, template: str, student_max_new_tokens: int) -> None:
        self.every = every
        self.size = size
        self.template = template
        # The tiny model's compact answers fit MAX_NEW_TOKENS; other templates get the training budget.
        self.budget = (
            dict(MAX_NEW_TOKENS) if template == "compact" else dict.fromkeys(TASKS, student_max_new_tokens)
        )
        self._problems: dict[str, list] | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> Prober:
        d = cfg.diagnostics
        return cls(d.probe_every, d.probe_size, cfg.tasks.template, cfg.tasks.student_max_new_tokens)

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def due(self, step: int) -> bool:
        return self.enabled and step % self.every == 0

    @property
    def problems(self) -> dict[str, list]:
        if self._problems is None:
            self._problems = probe_subset(self.size)
        return self._problems

    def score(self, trainer: Any) -> dict[str, dict[str, float]]:
        """`{member_id: {task: acc}}` for the members alive now (after this step's evolution)."""
        slots = {m.id: m.slot for m in trainer.pop.ordered()}
        return score_members(
            trainer.engine, slots, self.problems, trainer.sandbox, self.template, self.budget
        )

    # The two calls the trainer's loop makes ------------------------------------------------------------
    def at_start(self, trainer: Any, start: int) -> None:
        """Before the first update of a fresh run: log the step-0 probe (once, also across restarts)."""
        if start != 0 or not self.enabled:
            return
        if any(r.get("step") == 0 for r in trainer.run.read("metrics.jsonl")):
            return  # a run killed before its first checkpoint restarts at step 0 and keeps that record
        t0 = time.perf_counter()
        probe = self.score(trainer)
        trainer.run.metric(
            {
                "step": 0,
                "time": time.time(),
                "mode": trainer.cfg.population.mode,
                "probe": probe,
                "probe_s": round(time.perf_counter() - t0, 4),
            }
        )

    def after_step(self, trainer: Any, step: int, record: dict) -> None:
        """Add `probe` (and its seconds, `probe_s`) to the record of a step where it is due."""
        if self.due(step):
            t0 = time.perf_counter()
            record["probe"] = self.score(trainer)
            record["probe_s"] = round(time.perf_counter() - t0, 4)


__all__ = ["PROBE_SEED", "Prober", "probe_subset", "score_members"]
