"""`ComputedAnswerTask`: a ready-made `FamilyTask` for "the teacher writes X, the sandbox computes the answer,
the student writes the answer" task types (the shipped `arith` family and examples/task-plugin use it).

A subclass says only what is specific to its problems:

- `proposal_lang` / `answer_lang`: the fence languages of the teacher's and the student's block;
- `check_proposal(text) -> str | FormatError`: the canonical form of the teacher's block (re-rendered from a
  parse, so model text never reaches the sandbox verbatim) or why it is malformed;
- `program_for(canonical) -> str`: a module defining `f()` whose value is the answer (it runs in the sandbox);
- `canonical_of(problem) -> str`: the canonical proposal back from a problem (shown to students, used as refs);
- `teacher_intro` / `student_intro`: the lines above the blocks;
- `check_answer(text) -> value | FormatError`: the student's block parsed to a plain value.

Validation runs `f()` in the sandbox the family was handed (a `GuardedSandbox`) twice, in two jobs, and keeps
the proposal only if both runs give the same plain value whose repr fits `max_output_chars`. Scoring compares
the parsed answer with that value type-strictly, in this process, with no evaluation of model text.

Nothing a model writes raises out of these methods (issue 50): a subclass's check that raises makes a format
error, a proposal that cannot be turned into a program an `Invalid`, an answer that cannot be read a False.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from populora import pyparse
from populora.tasks.extract import find_blocks, lone_surrogate
from populora.tasks.family import FamilyTask, TaskFamily
from populora.tasks.literals import LiteralError, parse_literal, strict_equal
from populora.tasks.types import Answer, FormatError, Invalid, InvalidProblem, Problem, Proposal

MAX_TEXT_CHARS = 200_000  # longer completions are format errors before any scanning
CALL = "f()"


class ComputedAnswerTask(FamilyTask):
    """See the module docstring. `references` is how many buffer problems the teacher prompt shows."""

    proposal_lang = "proposal"
    answer_lang = "output"
    teacher_intro = ""
    student_intro = ""
    references = 3
    max_output_chars = 200

    def __init__(self, name: str | None = None, **config: Any) -> None:
        if name is not None:
            self.name = name
        self.past_deadline = 0

    # ---- what a subclass provides
    def check_proposal(self, text: str) -> str | FormatError:
        raise NotImplementedError

    def program_for(self, canonical: str) -> str:
        raise NotImplementedError

    def canonical_of(self, problem: Problem) -> str:
        raise NotImplementedError

    def gold_answer(self, problem: Problem) -> str:
        """An answer text that scores True: the value the sandbox computed at validation, as the literal it
        stored (what `score` compares against). Gold-trained specialists read it."""
        return problem.output

    def check_answer(self, text: str) -> Any:
        """The student's block as a plain value; the default reads one Python literal (never evaluated)."""
        try:
            return parse_literal(text)
        except LiteralError as e:
            return FormatError(f"answer: {e}")

    # ---- prompts
    def _block(self, lang: str, body: str) -> str:
        return f"```{lang}\n{body}\n```"

    def teacher_prompt(self, refs: Sequence[Problem], template: Any = None) -> str:
        shown = "\n".join(
            self._block(self.proposal_lang, self.canonical_of(p)) for p in refs[: self.references]
        )
        examples = f"Examples:\n{shown}\n" if shown else ""
        return f"## Task: {self.name}\n{self.teacher_intro}\n{examples}Yours:\n"

    def render_proposal(
        self, program: str, inputs: Sequence[str] = (), message: str = "", template: Any = None
    ) -> str:
        """What a perfect teacher writes: `program` here is the proposal's text (the block's content)."""
        return self._block(self.proposal_lang, program) + "\n"

    def student_prompt(self, problem: Problem, template: Any = None) -> str:
        return (
            f"## Task: {self.name}\n{self.student_intro}\n"
            f"{self._block(self.proposal_lang, self.canonical_of(problem))}\nAnswer:\n"
        )

    def render_answer(self, answer_text: str, template: Any = None) -> str:
        return self._block(self.answer_lang, answer_text.strip("\n")) + "\n"

    # ---- parsing (never raises)
    def _last_block(self, text: Any, lang: str) -> str | FormatError:
        if not isinstance(text, str):
            return FormatError("format: not text")
        if len(text) > MAX_TEXT_CHARS:
            return FormatError("format: text too long")
        if lone_surrogate(text):
            return FormatError("format: not valid Unicode (a lone surrogate)")
        blocks = find_blocks(text, lang)
        if not blocks:
            return FormatError(f"format: no ```{lang} block")
        return blocks[-1].strip()

    def parse_proposal(
        self, text: Any, program: str | None = None, template: Any = None
    ) -> Proposal | FormatError:
        body = self._last_block(text, self.proposal_lang)
        if isinstance(body, FormatError):
            return body
        try:
            canonical = self.check_proposal(body)
        except Exception as e:  # noqa: BLE001 - a subclass's check must not crash the trainer
            return FormatError(f"format: unparsable ({type(e).__name__})")
        if isinstance(canonical, FormatError):
            return canonical
        return Proposal(program=canonical, inputs=("",))

    def parse_answer(self, text: Any, template: Any = None) -> Answer | FormatError:
        body = self._last_block(text, self.answer_lang)
        if isinstance(body, FormatError):
            return body
        try:
            value = self.check_answer(body)
        except Exception as e:  # noqa: BLE001
            return FormatError(f"format: unparsable ({type(e).__name__})")
        return value if isinstance(value, FormatError) else Answer(body)

    # ---- validation in the sandbox
    def validate(self, proposals: Sequence[Proposal], sandbox: Any) -> list[Problem | Invalid]:
        results: list[Problem | Invalid | None] = [None] * len(proposals)
        programs: dict[int, str] = {}
        for i, p in enumerate(proposals):
            if not isinstance(p, Proposal) or not isinstance(p.program, str):
                results[i] = Invalid(getattr(p, "reason", "not a proposal"), None)
                continue
            try:
                programs[i] = self.program_for(p.program)
            except Exception as e:  # noqa: BLE001 - a subclass's rendering must not stop the phase
                results[i] = Invalid(f"unreadable proposal ({type(e).__name__})", p)
        # two separate jobs per proposal: a value that differs between runs is not a problem
        jobs = [(prog, CALL) for prog in programs.values() for _ in range(2)]
        outs = list(sandbox.run_many(jobs)) if jobs else []
        for k, (i, prog) in enumerate(programs.items()):
            p = proposals[i]
            a, b = outs[2 * k], outs[2 * k + 1]
            results[i] = self._verdict(p, prog, a, b)
        return results  # type: ignore[return-value]  # every proposal has its verdict

    def _verdict(self, p: Proposal, program: str, a: Any, b: Any) -> Problem | Invalid:
        """A proposal's problem from its two runs `a` and `b`, or why it is none."""
        if not a.ok:
            return Invalid(f"{a.status}: {a.error_type or ''}".rstrip(": "), p)
        if not (b.ok and a.value_repr == b.value_repr):
            return Invalid("nondeterministic", p)
        if not a.plain:
            return Invalid("output is not a plain value", p)
        if len(a.value_repr) > self.max_output_chars:
            return Invalid("output too long", p)
        return Problem(self.name, program, ("",), (a.value_repr,), "", proposer=p.proposer, step=p.step)

    def problem_from(
        self,
        sandbox: Any,
        program: str,
        inputs: Sequence[str] = ("",),
        message: str = "",
        proposer=None,
        step=None,
    ) -> Problem:
        """The problem of one proposal text (`program`: the block's content); raises InvalidProblem."""
        canonical = self.check_proposal(program)
        if isinstance(canonical, FormatError):
            raise InvalidProblem(canonical.reason)
        res = self.validate([Proposal(canonical, ("",), proposer=proposer, step=step)], sandbox)[0]
        if isinstance(res, Invalid):
            raise InvalidProblem(res.reason)
        return res

    # ---- scoring (in this process: the gold value was computed in the sandbox at validation)
    def score(
        self, problem: Problem, answers: Sequence[Answer | FormatError | str], sandbox: Any = None
    ) -> list[bool]:
        try:
            gold = parse_literal(problem.output)
        except LiteralError:  # a hand-made problem whose value is no literal: nothing can match it
            return [False] * len(answers)
        out = []
        for a in answers:
            text = a if isinstance(a, str) else getattr(a, "text", None)
            if not isinstance(text, str):  # a FormatError
                out.append(False)
                continue
            try:
                value = self.check_answer(text)
            except Exception:  # noqa: BLE001 - scoring never raises on model output: an unreadable answer is wrong
                value = FormatError("format: unparsable")
            out.append(not isinstance(value, FormatError) and strict_equal(value, gold))
        return out


class ExpressionTask(ComputedAnswerTask):
    """A `ComputedAnswerTask` whose proposal is one Python expression (```expression block) and whose program
    returns it (`arith`, `lists`): the subclass checks the parse (`parse_expression` gives it) and renders the
    canonical form with `ast.unparse`."""

    proposal_lang = "expression"
    max_chars = 80

    def parse_expression(self, text: str) -> ast.Expression | FormatError:
        """The parse of `text`, or why it is none: its length (3..max_chars) or its syntax."""
        if not 3 <= len(text) <= self.max_chars:
            return FormatError(f"expression: length must be 3..{self.max_chars}")
        try:
            return pyparse.parse(text, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return FormatError("expression: does not parse")

    def program_for(self, canonical: str) -> str:
        return f"def f():\n    return {canonical}\n"

    def canonical_of(self, problem: Problem) -> str:
        return problem.program.split("return ", 1)[1].strip()


def generated_items(
    task: ComputedAnswerTask,
    draw: Callable[[random.Random], tuple[str, Any]],
    stream: str,
    n: int,
    avoid: frozenset[str] = frozenset(),
) -> list[Problem]:
    """`n` distinct problems from `draw(rng)` (a proposal text and its value, built together: nothing is
    evaluated here) on the random stream `stream`, skipping texts `task` refuses and canonical forms in
    `avoid`; fewer if 50 draws per problem do not find them."""
    rng = random.Random(stream)
    out: list[Problem] = []
    seen = set(avoid)
    for _ in range(n * 50):
        if len(out) == n:
            break
        text, value = draw(rng)
        canonical = task.check_proposal(text)
        if isinstance(canonical, FormatError) or canonical in seen:
            continue
        seen.add(canonical)
        out.append(Problem(task.name, task.program_for(canonical), ("",), (repr(value),), "", "seed", 0))
    return out


class GeneratedFamily(TaskFamily):
    """A one-type family of a `ComputedAnswerTask` whose probe items and seed problems come from one generator
    (the shipped `arith` and `lists`): a subclass sets `task_class`, `probe_stream` and `draw(rng)`. The
    probe set is `probe_size` items from the fixed stream; seeds come from the run's seed on another stream and
    never repeat a probe item, and are validated in the sandbox like any proposal."""

    task_class: type[ComputedAnswerTask] = ComputedAnswerTask
    probe_stream = ""
    probe_size = 64

    def draw(self, rng: random.Random) -> tuple[str, Any]:
        raise NotImplementedError

    def task(self, task_type: str, **config: Any) -> ComputedAnswerTask:
        return self.task_class()

    def probe_items(self, task_type: str) -> list[Problem]:
        return list(_probe_of(type(self)))

    def seed_problems(self, task_type: str, n: int, sandbox: Any, seed: int) -> list[Problem]:
        """`n` generated problems (none of them a probe item), validated in `sandbox`."""
        task = self.task_class()
        avoid = frozenset(task.canonical_of(p) for p in self.probe_items(task_type))
        made = generated_items(task, self.draw, f"{self.name}-seed-{seed}", n, avoid)
        checked = task.validate([Proposal(task.canonical_of(p), ("",), "", "seed", 0) for p in made], sandbox)
        return [p for p in checked if isinstance(p, Problem)]


@cache
def _probe_of(family: type[GeneratedFamily]) -> tuple[Problem, ...]:
    """A generated family's probe items, made once per process (every probe and seed call reads them)."""
    f = family()
    return tuple(generated_items(f.task_class(), f.draw, f.probe_stream, f.probe_size))


__all__ = ["CALL", "ComputedAnswerTask", "ExpressionTask", "GeneratedFamily", "generated_items"]
