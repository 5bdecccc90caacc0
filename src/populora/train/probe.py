"""The fixed probe during training: every member's greedy accuracy per task type on held-out problems.

Training-time rewards describe problems the population wrote for itself, so they cannot say whether the
members got better; the probe can: the same held-out problems (`populora.pretrain.probe`, never used to
pretrain or to seed buffers) scored greedy at step 0, before any update, and every
`diagnostics.probe_every` steps after that step's update and evolution. The result goes into that step's
metrics.jsonl record under `probe` as `{member_id: {"code_i": acc, "code_o": acc, "code_f": acc}}`
(docs/run-folder.md); step 0 gets a record of its own holding only `step`, `time`, `mode` and the probe's keys.

**Per item.** Every answer's verdict also goes to `probe_items.jsonl`, one JSON line per probe (one append,
so a probe's items are there whole or not at all): the probe-set index and id of each problem, and per member
and task a 0/1 per item, so intervals can resample items as well as seeds (`Run.probe_items()` reads it).

**Per level.** With `diagnostics.probe_set: graded` the items are the difficulty-stratified sets of
`pretrain/graded_probe.py` (which owns the selection and the per-level reading): the record also gets
`probe_levels`, `{member: {task: {level: acc}}}`, and each probe_items.jsonl line every item's `level`.

**Answer style held fixed.** The bundled model answers code_o in two styles, a ```trace block of execution
steps before the ```output block or the ```output block alone (pretrain/trace.py), and RL can move the greedy
answer from one style to the other without the model computing any better. With `diagnostics.probe_styles`
(on templates whose tasks have two styles: `ANSWER_STYLES`) every code_o item is also answered with its
opening forced to each style: the prompt ends with the style's opening line (a forced answer prefix is just a
longer prompt) and the answer is that line plus the model's continuation. metrics.jsonl `probe_style` holds
`{member: {"code_o": {"free": acc, "trace": acc, "bare": acc, "trace_share": share}}}`, so style (the
share) and skill (the forced accuracies) are read apart. The free greedy answer already opens with one of the
two lines, and its tokens are the tokens of that line (the compact template ends the prompt with a newline,
so the opening tokenises the same after it), so it IS the forced answer of its own style: only the other
style is generated, one extra answer per code_o item instead of two.

**Cost.** The first `diagnostics.probe_size` problems of each set; every member's prompts in ONE mixed-slot
`engine.generate` (temperature 0; the engine sorts by prompt length and chunks), then one for the forced
styles; one sandbox `score` per problem for all answers to it. Members whose adapters are equal answer alike,
so only one of them is asked (`same_adapters`; at step 0 every member is the base model, so that probe costs
one member's answers). `diagnostics.probe_roles: solvers` scores the students only (the single agent is its own
solver): half a population's answers. Token budgets are `MAX_NEW_TOKENS` (greedy answers end with EOS well
inside them).
Every task type is probed whatever `tasks.types` trains, so a specialist's loss on the other types shows.
The live console line counts the answers ("probe 120/1536 answers"), and a line after each probe gives the
mean accuracies and its seconds.

The teachers get a probe of their own at the same steps, `probe_valid` (`{teacher_id: {task: valid rate}}`):
the valid-proposal rate logged every step reads proposals to prompts built from the run's own buffers, which
fill with the teachers' proposals, so it moves when the prompts change even if the teachers do not (the
validity control measures that drift: populora experiment control teacher). This probe holds everything but the
adapters fixed: `diagnostics.probe_proposals` prompts per trained task type (a teacher proposes only those)
whose references are probe-set problems (taken from the end of each set, the same in every run), one proposal
per prompt per teacher at `rl.teacher_temperature`, all drawn from one fixed seed, validated by the run's own
tasks and sandbox (`Trainer.check_proposals`, which touches no buffer). The same seed at every probe makes two probes of an
unchanged teacher identical, so the change between probes is the adapters' and not the sampler's.
Those references overlap the students' items once probe_size reaches them (code_i/code_o: the last
2 x probe_proposals problems, code_f: the last probe_proposals); that is no leak, because nothing the validity
probe generates reaches a buffer or an update: it only means both probes read some of the same problems.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from populora.names import TASKS
from populora.pretrain.probe import MAX_NEW_TOKENS, load_probe
from populora.pretrain.trace import TRACE_LANG
from populora.train.progress import accepts_progress, note

PROBE_SEED = 0  # greedy decoding draws nothing; a fixed seed keeps the engine's own generator untouched
VALID_PROBE_SEED = 7_919  # the teachers' probe samples: one seed for every probe of every run
ITEMS_FILE = "probe_items.jsonl"  # per-item verdicts, one line per probe (docs/run-folder.md)
PROBE_ROLES = ("all", "solvers")  # diagnostics.probe_roles: whose answers the probe scores
SOLVER_ROLES = ("student", "single")  # the members "solvers" keeps
# The answer styles a template's tasks can open with, as the opening line forced after the prompt. Only the
# compact template (the bundled model) has two: its code_o answers were pretrained half traced, half bare.
ANSWER_STYLES: dict[str, dict[str, dict[str, str]]] = {
    "compact": {"code_o": {"trace": f"```{TRACE_LANG}\n", "bare": "```output\n"}},
}

# phase -> extra keyword arguments for that phase's engine.generate (the trainer's live progress)
PhaseFn = Callable[[str], Mapping[str, Any]]
# Without a live bar (a log, a pipe) a probe part prints a line each time this share of its answers is done.
LINE_EVERY = 0.125
PART_NAMES = {
    "probe": "probe, free answers",
    "probe_style": "probe, answers with the code_o style forced",
    "probe_valid": "probe, teachers' proposals to the fixed prompts",
    "probe_sampled": "probe, sampled answers (diagnostics.probe_samples)",
}


def line_progress(
    part: str, quiet: bool = False, every: float = LINE_EVERY, emit: Callable[[str], None] | None = None
) -> Callable[[int, int, dict], None]:
    """A `progress(done, total, info)` for an engine call that prints plain lines (stderr, via `note`): one
    when it starts, one each time another `every` of the answers is done, one at the end, with the seconds and
    tokens/s so far. For consoles without the trainer's live bar, where a probe would print nothing for minutes."""
    emit = emit or (lambda text: note(text, quiet))
    label = PART_NAMES.get(part, part)
    t0 = time.perf_counter()
    last = [-1]

    def update(done: int, total: int, info: dict | None = None) -> None:
        if total <= 0:
            return
        step = max(1, int(total * every))
        if done == last[0] or (0 < done < total and done < last[0] + step):
            return
        last[0] = done
        seconds = time.perf_counter() - t0
        tokens = (info or {}).get("tokens") or 0
        rate = f", {tokens / seconds:.0f} tok/s" if tokens and seconds > 0 else ""
        emit(f"{label}: {done}/{total} answers, {seconds:.0f} s{rate}")

    return update


def probe_set(task: str) -> list:
    """The fixed probe set of a task type: AZR's shipped sets, another family's `probe_items`."""
    if task in TASKS:
        return load_probe(task)
    from populora.tasks import registry

    return registry.probe_items(task)


def probe_subset(size: int, types: Sequence[str] = TASKS) -> dict[str, list]:
    """The first `size` problems of each fixed probe set: the same subset at every step of every run."""
    return {t: probe_set(t)[:size] for t in types}


def adapter_key(engine, slot: int) -> str:
    """A key equal for two slots exactly when their adapters give the same model: "base" for an adapter whose
    B factors are all zero (its update is exactly zero: every fresh member), else a hash of its factors."""
    ad = engine.get_adapter(slot)
    if not any(bool(b.any()) for _, b in ad.modules.values()):
        return "base"
    h = hashlib.sha256(repr(float(ad.alpha)).encode())
    for name in sorted(ad.modules):
        h.update(name.encode())
        for t in ad.modules[name]:
            h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def same_adapters(engine, slots: Mapping[str, int]) -> dict[str, str]:
    """`{member: the first member (in `slots` order) with the same adapter}`: greedy answers of members with
    equal adapters are equal, so only the first is asked (at step 0 every member is the base model)."""
    first: dict[str, str] = {}
    return {m: first.setdefault(adapter_key(engine, slot), m) for m, slot in slots.items()}


def answer_style(text: str, styles: Mapping[str, str]) -> str | None:
    """The style whose opening line starts `text` (`styles`: {style: opening}), or None (neither)."""
    return next((name for name, opening in styles.items() if text.startswith(opening)), None)


@dataclass
class ProbeScores:
    """Every verdict of one probe. `correct[answers][member][task]` is one 0/1 per item, where `answers` is
    "free" (the greedy answer) or a forced style ("trace", "bare"; tasks with two styles only);
    `style[member][task]` is the style each free answer opened with (tasks with two styles only)."""

    members: list[str]
    problems: Mapping[str, Sequence]
    correct: dict[str, dict[str, dict[str, list[int]]]] = field(default_factory=dict)
    style: dict[str, dict[str, list[str | None]]] = field(default_factory=dict)
    # (answers, task, item index, member) -> the answer text scored (a forced answer starts with its opening)
    texts: dict[tuple[str, str, int, str], str] = field(default_factory=dict, repr=False)

    def copied(self, aliases: Mapping[str, str]) -> ProbeScores:
        """These scores with every member of `aliases` (`{member: member it answers like}`) given the
        verdicts, styles and texts of the member it maps to, in the order of `aliases`."""
        out = ProbeScores(list(aliases), self.problems, style={})
        for which, by_member in self.correct.items():
            out.correct[which] = {m: by_member[src] for m, src in aliases.items() if src in by_member}
        out.style = {m: self.style[src] for m, src in aliases.items() if src in self.style}
        for (which, t, i, src), text in self.texts.items():
            for m in (m for m, s in aliases.items() if s == src):
                out.texts[which, t, i, m] = text
        return out

    def accuracy(self, answers: str = "free") -> dict[str, dict[str, float]]:
        """`{member: {task: accuracy}}` of one answer set (metrics.jsonl `probe` for "free")."""
        return {
            m: {t: sum(v) / len(v) for t, v in self.correct.get(answers, {}).get(m, {}).items() if v}
            for m in self.members
        }

    def style_summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """metrics.jsonl `probe_style`: `{member: {task: {"free", "trace", "bare", "trace_share"}}}` for the
        tasks scored with their style forced; empty when none was."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        acc = {a: self.accuracy(a) for a in self.correct}  # "free" and every forced style
        for m, by_task in self.style.items():
            for t, styles in by_task.items():
                row = {a: acc[a][m][t] for a in acc if t in acc[a][m]}
                row["trace_share"] = sum(s == "trace" for s in styles) / len(styles)
                out.setdefault(m, {})[t] = row
        return out

    def items_record(self, step: int) -> dict[str, Any]:
        """The probe's line of probe_items.jsonl (docs/run-folder.md; read by `Run.probe_items`)."""
        return {
            "step": step,
            "time": time.time(),
            "items": {
                t: {"index": list(range(len(ps))), "id": [p.id for p in ps]}
                for t, ps in self.problems.items()
            },
            "answers": self.correct,
            "style": self.style,
        }


def probe_members(
    engine,
    slots: Mapping[str, int],
    problems: Mapping[str, Sequence],
    sandbox,
    template: str = "compact",
    max_new_tokens: Mapping[str, int] | None = None,
    styles: Mapping[str, Mapping[str, str]] | None = None,
    phase: PhaseFn | None = None,
) -> ProbeScores:
    """Score each member (`{member_id: slot}`) greedy on `problems`, item by item.

    One `engine.generate` for every (member, problem) prompt; for each task of `styles` (`{task: {style:
    opening}}`, e.g. `ANSWER_STYLES["compact"]`) a second one for the forced style each free answer did not
    take (the free answer is the forced answer of the style it opened with); then one `tasks.score_many` of
    every problem with all answers to it. `phase(name)` is called as each part starts ("probe", "probe_style",
    "probe_score") and returns extra keyword arguments for that part's `engine.generate` (e.g. `progress=`).
    """
    from populora.engine import GenRequest
    from populora.tasks import get, score_many

    budget = dict(MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens)
    members = list(slots)
    out = ProbeScores(members, problems)
    flat = [(t, i, p) for t in problems for i, p in enumerate(problems[t])]
    if not flat or not members:
        return out
    styles = {t: dict(s) for t, s in (styles or {}).items() if problems.get(t)}
    tasks = {t: get(t) for t in problems}
    phase = phase or (lambda name: {})

    def request(member: str, task: str, p, opening: str = "") -> GenRequest:
        prompt = tasks[task].student_prompt(p, template=template) + opening
        return GenRequest(slot=slots[member], prompt=prompt, max_new_tokens=budget[task], temperature=0.0)

    keys = [(t, i, m) for t, i, _ in flat for m in members]
    free = engine.generate(
        [request(m, t, problems[t][i]) for t, i, m in keys], seed=PROBE_SEED, **phase("probe")
    )
    texts = out.texts
    texts.update({("free", *k): g.text for k, g in zip(keys, free, strict=True)})
    # Each free answer of a two-style task is its own style's forced answer; generate the other style only.
    todo: list[tuple] = []
    for t, i, m in keys:
        if t not in styles:
            continue
        taken = answer_style(texts["free", t, i, m], styles[t])
        out.style.setdefault(m, {}).setdefault(t, []).append(taken)
        for name in styles[t]:
            if name == taken:
                texts[name, t, i, m] = texts["free", t, i, m]
            else:
                todo.append((name, t, i, m))
    if todo:
        forced = engine.generate(
            [request(m, t, problems[t][i], styles[t][s]) for s, t, i, m in todo],
            seed=PROBE_SEED,
            **phase("probe_style"),
        )
        for (s, t, i, m), g in zip(todo, forced, strict=True):
            texts[s, t, i, m] = styles[t][s] + g.text  # the answer is the forced opening and what follows
    phase("probe_score")
    orders, items = [], []
    for t, i, p in flat:
        order = [(a, m) for a in ["free", *styles.get(t, {})] for m in members]
        answers = [tasks[t].parse_answer(texts[a, t, i, m], template=template) for a, m in order]
        orders.append((t, order))
        items.append((tasks[t], p, answers))
    # every problem's answers in one batch: one sandbox run_many per scoring round (tasks.score_many)
    for (t, order), scored in zip(orders, score_many(items, sandbox), strict=True):
        for (a, m), ok in zip(order, scored.solves, strict=True):
            out.correct.setdefault(a, {}).setdefault(m, {}).setdefault(t, []).append(int(bool(ok)))
    return out


def score_members(
    engine,
    slots: Mapping[str, int],
    problems: Mapping[str, Sequence],
    sandbox,
    template: str = "compact",
    max_new_tokens: Mapping[str, int] | None = None,
    lines: bool = False,
) -> dict[str, dict[str, float]]:
    """Greedy accuracy of each member (`{member_id: slot}`) per task type: `{member_id: {task: acc}}`.

    One `engine.generate` for every (member, problem) prompt, then one `tasks.score_many` of every problem with
    the answers of all members (the sandbox runs them all in parallel). `probe_members` has the per-item verdicts.
    `lines`: print the generation's progress (`line_progress`), for the experiments' probes.
    """

    def phase(name: str) -> Mapping[str, Any]:
        ok = lines and name in PART_NAMES and accepts_progress(engine.generate)
        return {"progress": line_progress(name)} if ok else {}

    return probe_members(engine, slots, problems, sandbox, template, max_new_tokens, phase=phase).accuracy()


def teacher_probe_prompts(
    tasks: Mapping[str, Any], n: int, references: int, template: str, sets: Mapping[str, list] | None = None
) -> list[tuple[str, str, str | None]]:
    """`n` fixed teacher prompts per task type of `tasks` (the run's trained types, in the order of TASKS):
    `(task, prompt, shown_program)`, the same in every run.

    code_i/code_o prompts show `references` probe problems of their own type, code_f prompts one code_f probe
    program, read from the END of each probe set (the student probe reads from the start), wrapping round when
    `n * references` exceeds the set. `sets`: `{task: [Problem]}` to read instead of the fixed sets."""
    out: list[tuple[str, str, str | None]] = []
    for name in (*(t for t in TASKS if t in tasks), *(t for t in tasks if t not in TASKS)):
        task = tasks[name]
        probe = sets[name] if sets is not None and name in sets else probe_set(name)
        for j in range(n):
            if name == "code_f":
                shown = probe[-1 - j % len(probe)].program
                out.append((name, task.teacher_prompt(shown, template=template), shown))
            else:
                refs = [probe[-1 - (j * references + r) % len(probe)] for r in range(references)]
                out.append((name, task.teacher_prompt(refs, template=template), None))
    return out


def score_teachers(
    trainer: Any,
    teachers: Sequence[str],
    prompts: Sequence[tuple[str, str, str | None]],
    phase: PhaseFn | None = None,
):
    """Valid-proposal rate of each teacher per task type on the fixed prompts: `{teacher_id: {task: rate}}`.

    One mixed-slot `engine.generate` (every teacher, every prompt) at `rl.teacher_temperature` from
    `VALID_PROBE_SEED`, then the trainer's own parsing and sandbox validation (no buffer or coverage change).
    `phase` as in `probe_members` (called with "probe_valid")."""
    from populora.train.records import ProposalTrace

    traces = [ProposalTrace(t, t, name, shown_program=shown) for name, _, shown in prompts for t in teachers]
    requests = [
        trainer.teacher_request(trainer.pop[t].slot, prompt) for _, prompt, _ in prompts for t in teachers
    ]
    if not requests:
        return {}
    extra = phase("probe_valid") if phase is not None else {}
    gens = trainer.engine.generate(requests, seed=VALID_PROBE_SEED, **extra)
    for trace, gen in zip(traces, gens, strict=True):
        trace.gen = gen
    trainer.check_proposals(traces, step=-1)
    out: dict[str, dict[str, float]] = {}
    names = list(dict.fromkeys(name for name, _, _ in prompts))
    for t in teachers:
        for name in names:
            mine = [x.valid for x in traces if x.teacher == t and x.task == name]
            if mine:
                out.setdefault(t, {})[name] = sum(mine) / len(mine)
    return out


def _family_types(cfg: Any) -> tuple[str, ...]:
    """Every task type of the run's families (`tasks.families`; AZR's three by default)."""
    from populora.tasks import registry

    return registry.task_types(getattr(cfg.tasks, "families", ["azr"]))


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
        styles: bool = True,
        types: Sequence[str] = TASKS,
        probe_set: str = "fixed",
        roles: str = "all",
        samples: int = 0,
        temperature: float = 1.0,
        flaws: int = 0,
        flaws_set: str = "atoms",
    ) -> None:
        self.every = every
        self.flaws, self.flaws_set = flaws, flaws_set  # the misconception probe: items a class (0 = off), set
        self._flaw_sets: tuple[dict, dict, dict] | None = None
        self.samples, self.temperature = samples, temperature  # the sampled probe (train/probe_sampled.py)
        if roles not in PROBE_ROLES:
            raise ValueError(f"probe roles {roles!r}: choose one of {', '.join(PROBE_ROLES)}")
        self.roles = roles  # "all" members, or the "solvers" only (diagnostics.probe_roles)
        self.probe_set = probe_set  # "fixed" or "graded" (pretrain/graded_probe.py: items with levels)
        self._levels: dict[str, list[int]] | None = None
        self.size = size
        self.template = template
        self.proposals = proposals  # fixed teacher prompts per task type; 0 = no `probe_valid`
        self.references = references
        # tasks answered with each style forced too (`probe_style`); none on templates with one style
        self.styles = dict(ANSWER_STYLES.get(template, {})) if styles else {}
        self._teacher_prompts: list | None = None
        # The tiny model's compact answers fit MAX_NEW_TOKENS; other templates get the training budget.
        self.types = tuple(types)  # the task types probed: every type of the run's families
        self.budget = (
            dict(MAX_NEW_TOKENS) if template == "compact" else dict.fromkeys(TASKS, student_max_new_tokens)
        )
        self.budget.update({t: student_max_new_tokens for t in self.types if t not in TASKS})
        if template == "compact" and probe_set == "graded":
            from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET

            self.budget.update(GRADED_BUDGET)  # level-5 answers are longer
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
            d.probe_styles,
            _family_types(cfg),
            getattr(d, "probe_set", "fixed"),
            getattr(d, "probe_roles", "all"),
            getattr(d, "probe_samples", 0),
            getattr(d, "probe_temperature", 1.0),
            getattr(d, "probe_flaws", 0),
            getattr(d, "probe_flaws_set", "atoms"),
        )

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def due(self, step: int) -> bool:
        return self.enabled and step % self.every == 0

    @property
    def problems(self) -> dict[str, list]:
        if self._problems is None:
            from populora.pretrain.graded_probe import probe_selection

            # the graded sets hold AZR's types; another family's types read its own fixed probe items
            azr = [t for t in self.types if t in TASKS]
            self._problems, self._levels = probe_selection(self.probe_set, self.size, azr)
            self._problems.update({t: probe_set(t)[: self.size] for t in self.types if t not in TASKS})
        return self._problems

    def answers(self, n_members: int) -> int:
        """How many greedy answers a probe of `n_members` members asks for at most (free and forced)."""
        per_member = sum(len(ps) * (1 + (t in self.styles)) for t, ps in self.problems.items())
        return n_members * per_member

    @staticmethod
    def _phase(trainer: Any) -> PhaseFn:
        """Show each part of the probe on the trainer's live line; its engine calls report their counts."""

        def phase(name: str) -> Mapping[str, Any]:
            if trainer.live is not None:
                trainer.live.show(name)
            extra = trainer._progress(trainer.engine.generate, name)
            if extra or name not in PART_NAMES or not accepts_progress(trainer.engine.generate):
                return extra
            # no live bar (a log): plain lines per share of the answers, so a long probe is never silent
            return {"progress": line_progress(name, trainer.quiet)}

        return phase

    def asked(self, trainer: Any) -> tuple[dict[str, int], dict[str, str], dict[str, int]]:
        """(`{member: slot}` of the members the probe reads (all, or the solvers: the students or the single
        agent), `{member: member it answers like}`, the slots actually asked): members with equal adapters
        answer alike, so one of them is asked (all four at step 0)."""
        members = trainer.pop.ordered()
        if self.roles == "solvers":
            members = [m for m in members if m.role in SOLVER_ROLES]
        slots = {m.id: m.slot for m in members}
        aliases = same_adapters(trainer.engine, slots) if hasattr(trainer.engine, "get_adapter") else {}
        return slots, aliases, {m: slot for m, slot in slots.items() if aliases.get(m, m) == m}

    def scores(self, trainer: Any, step: int | None = None) -> ProbeScores:
        """Every verdict of the members alive now (after this step's evolution)."""
        slots, aliases, asked = self.asked(trainer)
        if (
            step is not None and trainer.live is not None and trainer.live.bar is None
        ):  # a log: say what waits
            note(
                f"probe at step {step}: up to {self.answers(len(asked))} greedy answers "
                f"({len(asked)} of {len(slots)} members; equal adapters answer alike)",
                trainer.quiet,
            )
        scores = probe_members(
            trainer.engine,
            asked,
            self.problems,
            trainer.sandbox,
            self.template,
            self.budget,
            self.styles,
            self._phase(trainer),
        )
        return scores.copied({m: aliases.get(m, m) for m in slots})

    def sampled(self, trainer: Any) -> dict[str, dict[str, list[int]]] | None:
        """Solves of `samples` answers per item at `temperature` (`{member: {task: [count]}}`), the members
        the greedy probe asks; None when the sampled probe is off. Equal adapters share one member's counts
        (the same policy: one draw of the measure is as good as another)."""
        from populora.train.probe_sampled import sampled_solves

        if self.samples <= 0:
            return None
        slots, aliases, asked = self.asked(trainer)
        counts = sampled_solves(
            trainer.engine,
            asked,
            self.problems,
            trainer.sandbox,
            self.samples,
            self.temperature,
            self.budget,
            self.template,
            generate_kwargs=self._phase(trainer)("probe_sampled"),
        )
        return {m: counts[aliases.get(m, m)] for m in slots}

    def score_flaws(self, trainer: Any) -> tuple[dict, dict] | None:
        """The misconception probe (`diagnostics.probe_flaws`): `({member: {task: {class: {"right", "misconceived"}}}},
        the probe_items.jsonl `flaws` entry)`, the members the greedy probe asks; None when off."""
        if self.flaws <= 0:
            return None
        from populora.pretrain.flaw_probe_sets import flaw_probe_selection
        from populora.train.probe_flaws import flaw_readings

        if self._flaw_sets is None:
            self._flaw_sets = flaw_probe_selection(self.flaws, kind=self.flaws_set)
        problems, classes, wrong = self._flaw_sets
        slots, aliases, asked = self.asked(trainer)
        from populora.pretrain.graded_probe import MAX_NEW_TOKENS as GRADED_BUDGET

        scores = probe_members(
            trainer.engine,
            asked,
            problems,
            trainer.sandbox,
            self.template,
            {**self.budget, **{t: GRADED_BUDGET[t] for t in problems}},
            None,
            self._phase(trainer),
        ).copied({m: aliases.get(m, m) for m in slots})
        return flaw_readings(scores, classes, wrong)

    def score(self, trainer: Any) -> dict[str, dict[str, float]]:
        """`{member_id: {task: acc}}` for the members alive now (after this step's evolution)."""
        return self.scores(trainer).accuracy()

    def score_valid(self, trainer: Any) -> dict[str, dict[str, float]] | None:
        """`{teacher_id: {task: valid rate}}` on the fixed teacher prompts; None when that probe is off.

        The proposers are the teachers (every member in single mode, where one agent is both)."""
        if self.proposals <= 0:
            return None
        if self._teacher_prompts is None:
            sets = None
            if self.probe_set == "graded":
                from populora.pretrain.graded_probe import load_graded_probe

                sets = {t: [p for _, p in load_graded_probe(t)] for t in TASKS}
            self._teacher_prompts = teacher_probe_prompts(
                trainer.tasks, self.proposals, self.references, self.template, sets
            )
        proposers = trainer.pop.by_role("teacher") or trainer.pop.ordered()
        return score_teachers(trainer, [m.id for m in proposers], self._teacher_prompts, self._phase(trainer))

    def _measure(self, trainer: Any, step: int) -> dict:
        """The probe's keys for a metrics record (`probe`; `probe_style`, `probe_sampled` and `probe_valid` when on,
        and their
        seconds, `probe_s`); writes the probe's line of probe_items.jsonl first (one append)."""
        from populora.diagnostics.sinks import append_jsonl

        t0 = time.perf_counter()
        scores = self.scores(trainer, step)
        out: dict = {"probe": scores.accuracy()}
        items = scores.items_record(step)
        if self._levels is not None:  # graded probe: accuracy per level, and each item's level
            from populora.pretrain.graded_probe import level_accuracy

            out["probe_levels"] = level_accuracy(scores.correct.get("free", {}), self._levels)
            for t, lv in self._levels.items():
                items["items"][t]["level"] = lv
        if scores.style:
            out["probe_style"] = scores.style_summary()
        sampled = self.sampled(trainer)
        if sampled is not None:
            from populora.train.probe_sampled import pass_at_1

            out["probe_sampled"] = pass_at_1(sampled, self.samples)
            items.update(sampled=sampled, samples=self.samples, temperature=self.temperature)
        flaws = self.score_flaws(trainer)
        if flaws is not None:
            out["probe_flaws"], items["flaws"] = flaws
        valid = self.score_valid(trainer)
        if valid is not None:
            out["probe_valid"] = valid
        out["probe_s"] = round(time.perf_counter() - t0, 4)
        append_jsonl(trainer.run.path / ITEMS_FILE, items)
        if trainer.live is not None:
            trainer.live.end_phase()
            roles = {m.id: m.role for m in trainer.pop.ordered()}
            trainer.live.line(probe_line(step, trainer.cfg.train.steps, out, roles))
        return out

    # The two calls the trainer's loop makes ------------------------------------------------------------
    def at_start(self, trainer: Any, start: int) -> None:
        """Before the first update of a fresh run: log the step-0 probe (once, also across restarts)."""
        if start != 0 or not self.enabled:
            return
        if any(r.get("step") == 0 for r in trainer.run.read("metrics.jsonl")):
            return  # a run killed before its first checkpoint restarts at step 0 and keeps that record
        trainer.run.metric(
            {"step": 0, "time": time.time(), "mode": trainer.cfg.population.mode, **self._measure(trainer, 0)}
        )

    def after_step(self, trainer: Any, step: int, record: dict) -> None:
        """Add `probe`, `probe_style`, `probe_valid` and their seconds, `probe_s`, to the record of a step
        where it is due (and write its probe_items.jsonl line)."""
        if self.due(step):
            record.update(self._measure(trainer, step))


def probe_line(step: int, total: int, rec: Mapping[str, Any], roles: Mapping[str, str]) -> str:
    """The console line after a probe: each role's mean accuracy per task (code_o also with each style forced
    and the share of traced answers), the teachers' valid rate on the fixed prompts, and the seconds."""

    def mean(values: list[float]) -> str:
        return f"{sum(values) / len(values):.2f}" if values else "-"

    parts = []
    for role in ("student", "single", "teacher"):
        ids = [m for m in rec["probe"] if roles.get(m) == role]
        if not ids:
            continue
        cells = []
        for t in dict.fromkeys(t for m in ids for t in rec["probe"][m]):
            cell = f"{t} {mean([rec['probe'][m][t] for m in ids if t in rec['probe'][m]])}"
            styled = [rec.get("probe_style", {}).get(m, {}).get(t) for m in ids]
            if all(styled):
                cell += (
                    f" (trace {mean([s['trace'] for s in styled])}, bare {mean([s['bare'] for s in styled])}, "
                    f"traced {mean([s['trace_share'] for s in styled])})"
                )
            sampled = [rec.get("probe_sampled", {}).get(m, {}).get(t) for m in ids]
            if sampled and all(x is not None for x in sampled):
                cell += f" (sampled pass@1 {mean(sampled)})"
            cells.append(cell)
        parts.append(f"{role}s " + " ".join(cells))
    valid = rec.get("probe_valid") or {}
    if valid:
        rates = [r for v in valid.values() for r in v.values()]
        parts.append(f"valid proposals {mean(rates)}")
    return f"probe  {step:>4}/{total}  " + "  |  ".join(parts) + f"  |  {rec['probe_s']:.1f}s"


__all__ = [
    "ANSWER_STYLES",
    "ITEMS_FILE",
    "PROBE_SEED",
    "VALID_PROBE_SEED",
    "ProbeScores",
    "Prober",
    "adapter_key",
    "answer_style",
    "line_progress",
    "probe_line",
    "probe_members",
    "probe_subset",
    "same_adapters",
    "score_members",
    "score_teachers",
    "teacher_probe_prompts",
]
