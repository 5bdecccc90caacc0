"""The pretraining corpus: generated programs rendered as teacher and student examples in the task formats.

An `Example` is a (prompt, completion) pair. Teacher examples show K reference triplets and then the
proposal a perfect teacher writes (code_i/code_o: a new program and input; code_f: N inputs and a
message for a given program); student examples show a problem and then the correct answer. Rendering goes
through `populora.tasks` (its compact templates, `teacher_prompt`, `student_prompt`, `render_answer`
and proposal renderer) so the formats match the parsers byte for byte. Plain program text with
`# f(args) == result` lines is mixed in as well: it teaches the language and its semantics cheaply.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from populora.pretrain.programs import (
    DEFAULT_LEVEL,
    DEFAULT_NAMES,
    INT_OPS,
    MAX_STATEMENTS,
    Triplet,
    int_op,
    sample_code_f,
    sample_triplet,
)
from populora.pretrain.trace import render_trace

# Mixture of example kinds (weights per drawn example).
MIX = {
    "student:code_o": 3.0,
    "student:code_i": 2.0,
    "student:code_f": 2.0,
    "teacher:code_o": 1.0,
    "teacher:code_i": 1.0,
    "teacher:code_f": 1.5,
    "program": 1.0,
}
# Kinds a `--mix` may add that the default mixture leaves out. `flaws:code_o` / `flaws:code_i` (graded levels
# and `flaws` only): student examples on programs that carry one misconception class (`flaws.FlawDrill`,
# balanced over the classes), answered as the misconceived reader would in `flaw_rate` of them; `atoms:code_o` /
# `atoms:code_i` the same on one-statement programs around a class's feature (`flaw_atoms.AtomDrill`, ~50x cheaper).
DRILL_KINDS = ("facts", "flaws:code_o", "flaws:code_i", "atoms:code_o", "atoms:code_i")


@dataclass(frozen=True)
class Example:
    kind: str  # "student:code_o", "teacher:code_f", "program", ...
    prompt: str
    completion: str


def parse_mix(text: str) -> dict[str, float]:
    """`"student:code_o=3,program=0.5"` -> {kind: weight}; kinds must be keys of MIX, weights >= 0."""
    out: dict[str, float] = {}
    for part in text.split(","):
        kind, sep, weight = part.strip().partition("=")
        if not sep or kind not in (*MIX, *DRILL_KINDS):
            raise ValueError(
                f"bad entry {part!r}: expected KIND=WEIGHT with KIND one of {sorted((*MIX, *DRILL_KINDS))}"
            )
        try:
            out[kind] = float(weight)
        except ValueError:
            raise ValueError(f"bad weight in {part!r}: not a number") from None
        if out[kind] < 0:
            raise ValueError(f"negative weight in {part!r}")
    if not any(out.values()):
        raise ValueError("all weights are zero")
    return out


def facts_text(rng: random.Random) -> str:
    """A drill of 8-16 arithmetic facts as a trace line ends, one per line (`7 + 5 = 12`, `13 // 4 = 3`): the
    one-digit facts the bundled model gets wrong by one or two inside its traces (`bench tiny-model --skills`),
    on the generator's small ints (a left operand up to 20 a third of the time)."""
    lines = []
    for _ in range(rng.randint(8, 16)):
        op = rng.choice(tuple(INT_OPS))
        a = rng.randint(0, 20) if rng.random() < 1 / 3 else rng.randint(0, 9)
        b = rng.randint(1 if op in ("//", "%") else 0, 9)
        lines.append(f"{a} {op} {b} = {int_op(op, a, b)}")
    return "\n".join(lines) + "\n"


def program_text(tr: Triplet, pairs: list[tuple[str, str]] | None = None) -> str:
    pairs = pairs or [(tr.input, tr.output)]
    return tr.program + "\n" + "".join(f"# f({i}) == {o}\n" for i, o in pairs)


def _graded_triplet(rng: random.Random, levels: tuple[int, ...], level: int | None = None) -> Triplet:
    from populora.pretrain.graded import sample_graded

    g = sample_graded(rng, level if level is not None else rng.choice(levels), split="train")
    return Triplet(g.code, g.pairs[0][0], g.pairs[0][1], g.message)


def _iter_graded(
    rng: random.Random,
    renderer,
    kinds,
    weights,
    levels,
    k_refs,
    n_inputs,
    trace: bool,
    student_levels=None,
    trace_names: bool = False,
    code_f_trace: bool = False,
    flaws: tuple[str, ...] = (),
    flaw_rate: float = 0.6,
) -> Iterator[Example]:
    """The graded generator's stream (`graded.sample_graded`, train split): each example draws a level from
    `levels` (student examples from `student_levels` when given); a teacher's references come from the same
    level as its proposal. With `trace`, every code_o student answer carries a trace (the reduction trace, else
    the state trace): one answer style per task. With `code_f_trace`, every code_f student answer starts with
    the trace of the gold program on the first pair the student is shown. With `flaws` (`flaws.py`), a code_o
    student example whose input a class's misreading changes is answered, trace and output, as the misconceived
    reader would, for each such class with probability `flaw_rate`; the `flaws:*` drills do the same on programs
    drawn to carry a class (code_i: the input a misconceived student writes), the `atoms:*` drills on atoms."""
    from populora.pretrain.graded import sample_graded

    drills = {}
    if flaws:
        from populora.pretrain.flaw_atoms import AtomDrill
        from populora.pretrain.flaws import FlawDrill

        drill_levels = tuple(student_levels or levels)
        drills = {
            f"flaws:{t}": FlawDrill(rng, t, drill_levels, flaws)
            for t in ("code_o", "code_i")
            if f"flaws:{t}" in kinds
        }
        drills |= {
            f"atoms:{t}": AtomDrill(rng, t, flaws) for t in ("code_o", "code_i") if f"atoms:{t}" in kinds
        }
    while True:
        kind = rng.choices(kinds, weights=weights)[0]
        level = rng.choice(student_levels if student_levels and kind.startswith("student") else levels)
        if kind == "facts":
            yield Example(kind, "", facts_text(rng))
            continue
        if kind == "program":
            yield Example(kind, "", program_text(_graded_triplet(rng, levels, level)))
            continue
        if kind.startswith(("flaws:", "atoms:")):
            if not flaws:
                raise ValueError(f"the mix kind {kind} needs misconception classes (flaws)")
            yield _flaw_example(rng, renderer, kind, drills[kind].next(), flaw_rate, trace_names)
            continue
        role, task = kind.split(":")
        if task == "code_f":
            g = sample_graded(rng, level, split="train", n_inputs=n_inputs)
            fn = renderer.teacher_f if role == "teacher" else renderer.student_f
            prompt, completion = fn(g.code, list(g.pairs), g.message)
            if code_f_trace and role == "student":
                # the working before the program: the program run on the first shown input, so in a
                # straight-line program each constant is written on a line whose value the prompt's first pair
                # fixes (measured: it did not raise accuracy, docs/tiny-model.md, sitting 7)
                shown = g.pairs[0][0]
                completion = render_trace(g.code, shown, general=True, names=trace_names) + completion
        else:
            tr = _graded_triplet(rng, levels, level)
            if role == "teacher":
                refs = [_graded_triplet(rng, levels, level) for _ in range(rng.randint(*k_refs))]
                prompt, completion = renderer.teacher_io(task, refs, tr)
            else:
                misread: tuple[str, ...] = ()
                if flaws and task == "code_o":
                    tr, misread = _misread_triplet(rng, tr, flaws, flaw_rate)
                prompt, completion = renderer.student_io(task, tr)
                if trace and task == "code_o":
                    trace_text = render_trace(
                        tr.program, tr.input, general=True, names=trace_names, flaws=misread
                    )
                    completion = trace_text + completion
        yield Example(kind, prompt, completion)


def _misread_triplet(
    rng: random.Random, tr: Triplet, flaws: tuple[str, ...], rate: float
) -> tuple[Triplet, tuple[str, ...]]:
    """A code_o triplet as the misconceived reader answers it: each class of `flaws` that changes its output
    is misread with probability `rate` (the classes drawn, in order); the output is then the misread one."""
    from populora.pretrain.flaws import changed_by, run_misread

    carried = [c for c in changed_by(tr.program, tr.input, tr.output) if c in flaws]
    chosen = tuple(c for c in carried if rng.random() < rate)
    if not chosen:
        return tr, ()
    wrong = run_misread(tr.program, tr.input, chosen)
    if wrong is None:
        return tr, ()
    return Triplet(tr.program, tr.input, wrong, tr.message), chosen


def _flaw_example(rng: random.Random, renderer, kind: str, item, rate: float, trace_names: bool) -> Example:
    """A drill item rendered as a student example: the misconceived answer with probability `rate`, else the
    right one. code_o answers carry their trace (misread or true); code_i answers are the input."""
    misread = rng.random() < rate
    if item.task == "code_o":
        tr = Triplet(item.program, item.shown, item.wrong if misread else item.right, item.message)
        prompt, completion = renderer.student_io("code_o", tr)
        flaws = (item.flaw,) if misread else ()
        trace_text = render_trace(item.program, item.shown, general=True, names=trace_names, flaws=flaws)
        return Example(kind, prompt, trace_text + completion)
    tr = Triplet(item.program, item.wrong if misread else item.right, item.shown, item.message)
    prompt, completion = renderer.student_io("code_i", tr)
    return Example(kind, prompt, completion)


def iter_examples(
    seed: int,
    renderer,
    k_refs: tuple[int, int] = (2, 6),
    n_inputs: int = 10,
    mix: dict[str, float] | None = None,
    names: str = DEFAULT_NAMES,
    max_statements: int = MAX_STATEMENTS,
    level: str = DEFAULT_LEVEL,
    trace: bool = False,
    trace_fraction: float = 1.0,
    student_level: str | None = None,
    trace_names: bool = False,
    code_f_trace: bool = False,
    flaws: tuple[str, ...] = (),
    flaw_rate: float = 0.6,
) -> Iterator[Example]:
    """An endless, seeded stream of examples. Same seed and renderer -> same stream. Programs come from
    the generator's "train" split only (never a held-out probe program). `trace`: code_o student answers
    start with the program's execution trace (`trace.render_trace`), the working a student then writes;
    with `trace_fraction` < 1 only that share of them does and the rest answer bare, so the model learns both
    styles and RL has a choice between them to learn (the fraction draws from the same stream, so 1.0 keeps
    the corpus of runs before the knob existed byte for byte). `level` "easy" / "full" is `programs.py`'s
    grammar; digits ("1-5", "1,2,2,3") draw from the graded generator (`graded.py`) at those levels, with
    every code_o answer traced when `trace` is on (`trace_fraction` must then be 1: one style per task).
    `student_level` (graded only): the levels student examples draw from instead (say, mostly the easy ones,
    where a small model's answers can be right, while teachers still see every level). `trace_names`: each
    reduction-trace line starts with the expression as written (`trace.reduction_steps`); everything else in the
    stream is the same example for example. `code_f_trace` (graded only): every code_f student answer starts
    with the trace of the gold program on the first shown input; everything else is the same example for
    example. `flaws` / `flaw_rate` (graded only): planted misconceptions (`_iter_graded`, `flaws.py`); with no
    classes the stream is the one before the option existed, example for example."""
    from populora.pretrain.graded import is_graded_level, parse_levels

    rng = random.Random(seed)
    mix = mix or MIX
    kinds, weights = list(mix), list(mix.values())
    if is_graded_level(level):
        if trace and trace_fraction < 1.0:
            raise ValueError("graded levels take one answer style per task: use trace_fraction 1.0")
        students = parse_levels(student_level) if student_level else None
        yield from _iter_graded(
            rng,
            renderer,
            kinds,
            weights,
            parse_levels(level),
            k_refs,
            n_inputs,
            trace,
            student_levels=students,
            trace_names=trace_names,
            code_f_trace=code_f_trace,
            flaws=tuple(flaws),
            flaw_rate=flaw_rate,
        )
        return
    if flaws or any(k.startswith(("flaws:", "atoms:")) for k in mix):
        raise ValueError("misconception classes (flaws) need graded levels (level '1-5', say)")
    if code_f_trace:
        raise ValueError("code_f_trace needs graded levels (level '1-5', say)")
    if student_level:
        raise ValueError("student_level needs graded levels (--level 1-5, ...), not easy / full")
    gen = dict(names=names, max_statements=max_statements, level=level)
    while True:
        kind = rng.choices(kinds, weights=weights)[0]
        if kind == "facts":
            yield Example(kind, "", facts_text(rng))
            continue
        if kind == "program":
            tr = sample_triplet(rng, **gen)
            yield Example(kind, "", program_text(tr))
            continue
        role, task = kind.split(":")
        if task == "code_f":
            prog, pairs = sample_code_f(rng, n_inputs, **gen)
            if role == "teacher":
                prompt, completion = renderer.teacher_f(prog.code, pairs, prog.message)
            else:
                prompt, completion = renderer.student_f(prog.code, pairs, prog.message)
        else:
            tr = sample_triplet(rng, **gen)
            if role == "teacher":
                refs = [sample_triplet(rng, **gen) for _ in range(rng.randint(*k_refs))]
                prompt, completion = renderer.teacher_io(task, refs, tr)
            else:
                prompt, completion = renderer.student_io(task, tr)
                if trace and task == "code_o" and (trace_fraction >= 1.0 or rng.random() < trace_fraction):
                    completion = render_trace(tr.program, tr.input, names=trace_names) + completion
        yield Example(kind, prompt, completion)


def build_corpus(seed: int, n: int, renderer, **kw) -> list[Example]:
    out: list[Example] = []
    for ex in iter_examples(seed, renderer, **kw):
        out.append(ex)
        if len(out) == n:
            return out
    return out
