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

The teachers get a probe of their own at the same steps, `probe_valid` (`{teacher_id: {task: valid rate}}`):
the valid-proposal rate logged every step reads proposals to prompts built from the run's own buffers, which
fill with the teachers' proposals, so it moves when the prompts change even if the teachers do not (the
validity control measures that drift: populora experiment control teacher). This probe holds everything but the
adapters fixed: `diagnostics.probe_proposals` prompts per trained task type (a teacher proposes only those)
whose references are probe-set problems (taken from the end of each set, the same in every run), one proposal
per prompt per teacher at `rl.teacher_temperature`, all drawn from one fixed seed, validated by the run's own
tasks and sandbox (`Trainer.check_proposals`, which touches no buffer). The same seed at every probe makes two probes of an
unchanged teacher identical, so the change between probes is the adapters' and not the sampler's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from populora.names import TASKS
from populora.pretrain.probe import MAX_NEW_TOKENS, load_probe

PROBE_SEED = 0  # greedy decoding draws nothing; a fixed seed keeps the engine's own generator untouched
VALID_PROBE_SEED = 7_919  # the teachers' probe samples: one seed for every probe of every run


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


def teacher_probe_prompts(
    tasks: Mapping[str, Any], n: int, references: int, template: str
) -> list[tuple[str, str, str | None]]:
    """`n` fixed teacher prompts per task type of `tasks` (the run's trained types, in the order of TASKS):
    `(task, prompt, shown_program)`, the same in every run.

    code_i/code_o prompts show `references` probe problems of their own type, code_f prompts one code_f probe
    program, read from the END of each probe set (the student probe reads from the start), wrapping round when
    `n * references` exceeds the set."""
    out: list[tuple[str, str, str | None]] = []
    for name in (t for t in TASKS if t in tasks):
        task, probe = tasks[name], load_probe(name)
        for j in range(n):
            if name == "code_f":
                shown = probe[-1 - j % len(probe)].program
                out.append((name, task.teacher_prompt(shown, template=template), shown))
            else:
                refs = [probe[-1 - (j * references + r) % len(probe)] for r in range(references)]
                out.append((name, task.teacher_prompt(refs, template=template), None))
    return out


def score_teachers(trainer: Any, teachers: Sequence[str], prompts: Sequence[tuple[str, str, str | None]]):
    """Valid-proposal rate of each teacher per task type on the fixed prompts: `{teacher_id: {task: rate}}`.

    One mixed-slot `engine.generate` (every teacher, every prompt) at `rl.teacher_temperature` from
    `VALID_PROBE_SEED`, then the trainer's own parsing and sandbox validation (no buffer or coverage change)."""
    from populora.train.records import ProposalTrace

    traces = [ProposalTrace(t, t, name, shown_program=shown) for name, _, shown in prompts for t in teachers]
    requests = [
        trainer.teacher_request(trainer.pop[t].slot, prompt) for _, prompt, _ in prompts for t in teachers
    ]
    if not requests:
        return {}
    for trace, gen in zip(traces, trainer.engine.generate(requests, seed=VALID_PROBE_SEED), strict=True):
        trace.gen = gen
    trainer.check_proposals(traces, step=-1)
    out: dict[str, dict[str, float]] = {}
    for t in teachers:
        for name in TASKS:
            mine = [x.valid for x in traces if x.teacher == t and x.task == name]
            if mine:
                out.setdefault(t, {})[name] = sum(mine) / len(mine)
    return out


class Prober:
    """The trainer's probe: when it is due, what it scores and how it is logged. Built from the config."""

    def __init__(
        self,
        every: int,
        size: int,
        template: str,
        student_max_new_tokens: int,
        proposals: int = 0,
        references: int = 2,
    ) -> None:
        self.every = every
        self.size = size
        self.template = template
        self.proposals = proposals  # fixed teacher prompts per task type; 0 = no `probe_valid`
        self.references = references
        self._teacher_prompts: list | None = None
        # The tiny model's compact answers fit MAX_NEW_TOKENS; other templates get the training budget.
        self.budget = (
            dict(MAX_NEW_TOKENS) if template == "compact" else dict.fromkeys(TASKS, student_max_new_tokens)
        )
        self._problems: dict[str, list] | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> Prober:
        d = cfg.diagnostics
        return cls(
            d.probe_every,
            d.probe_size,
            cfg.tasks.template,
            cfg.tasks.student_max_new_tokens,
            d.probe_proposals,
            cfg.tasks.references,
        )

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

    def score_valid(self, trainer: Any) -> dict[str, dict[str, float]] | None:
        """`{teacher_id: {task: valid rate}}` on the fixed teacher prompts; None when that probe is off.

        The proposers are the teachers (every member in single mode, where one agent is both)."""
        if self.proposals <= 0:
            return None
        if self._teacher_prompts is None:
            self._teacher_prompts = teacher_probe_prompts(
                trainer.tasks, self.proposals, self.references, self.template
            )
        proposers = trainer.pop.by_role("teacher") or trainer.pop.ordered()
        return score_teachers(trainer, [m.id for m in proposers], self._teacher_prompts)

    def _measure(self, trainer: Any) -> dict:
        """The probe's keys for a metrics record: `probe`, `probe_valid` (when on) and their seconds."""
        t0 = time.perf_counter()
        out: dict = {"probe": self.score(trainer)}
        valid = self.score_valid(trainer)
        if valid is not None:
            out["probe_valid"] = valid
        out["probe_s"] = round(time.perf_counter() - t0, 4)
        return out

    # The two calls the trainer's loop makes ------------------------------------------------------------
    def at_start(self, trainer: Any, start: int) -> None:
        """Before the first update of a fresh run: log the step-0 probe (once, also across restarts)."""
        if start != 0 or not self.enabled:
            return
        if any(r.get("step") == 0 for r in trainer.run.read("metrics.jsonl")):
            return  # a run killed before its first checkpoint restarts at step 0 and keeps that record
        trainer.run.metric(
            {"step": 0, "time": time.time(), "mode": trainer.cfg.population.mode, **self._measure(trainer)}
        )

    def after_step(self, trainer: Any, step: int, record: dict) -> None:
        """Add `probe`, `probe_valid` and their seconds, `probe_s`, to the record of a step where it is due."""
        if self.due(step):
            record.update(self._measure(trainer))


__all__ = [
    "PROBE_SEED",
    "VALID_PROBE_SEED",
    "Prober",
    "probe_subset",
    "score_members",
    "score_teachers",
    "teacher_probe_prompts",
]
