"""The three AZR task types behind one interface (the contract: docs/architecture.md).

`CodeTask` holds what they share: prompt rendering, proposal/answer parsing (never raising), validation of
proposals through the sandbox (deterministic across two separate runs, plain-data outputs within the size
limit, any exception = invalid), and scoring. Subclasses only say which blocks carry what and how an answer
is checked:

- `code_i` (abduction): student writes an input; it must be a literal argument list, is re-rendered from its
  parsed values (model text never reaches the sandbox) and run with the gold program; right iff the result is
  type-strictly equal to the gold output.
- `code_o` (deduction): student writes the output; parsed as a literal in this process without evaluation and
  compared type-strictly; no sandbox needed.
- `code_f` (induction): student writes a program; it passes the capability policy and is run on every hidden
  input in the sandbox; right iff every result is a plain value type-strictly equal to the hidden output.

The halves of `CodeTask` live in modules of their own: `validation` (`ProposalValidation`: proposals to
problems), `scoring` (`AnswerScoring`, `score_many`: answers to verdicts) and `jobs` (the sandbox jobs both
run and how their outcomes are read). This module holds the task knobs (`TaskConfig`), prompt rendering,
proposal/answer parsing and the three task types; it re-exports the names of the other three.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from populora import pyparse
from populora.tasks.extract import FENCE, answer_region, clean_code, fenced_blocks, find_blocks
from populora.tasks.jobs import OVER_BUDGET as OVER_BUDGET
from populora.tasks.jobs import VALIDATION_DEADLINE as VALIDATION_DEADLINE
from populora.tasks.jobs import _cut as _cut
from populora.tasks.jobs import _plain_value as _plain_value
from populora.tasks.jobs import _run_scoring as _run_scoring
from populora.tasks.jobs import _run_until as _run_until
from populora.tasks.jobs import _status_reason as _status_reason
from populora.tasks.jobs import _tuple_call as _tuple_call
from populora.tasks.jobs import job_call as job_call
from populora.tasks.jobs import validation_cut as validation_cut
from populora.tasks.literals import (
    LiteralError,
    parse_call_args,
    parse_literal,
    render_call_args,
    strict_equal,
)
from populora.tasks.policy import DEFAULT_POLICY, CapabilityPolicy, parse_program
from populora.tasks.scoring import AnswerScoring as AnswerScoring
from populora.tasks.scoring import Scored as Scored
from populora.tasks.scoring import ScoringPlan as ScoringPlan
from populora.tasks.scoring import score_many as score_many
from populora.tasks.templates import TemplateSet, load_template
from populora.tasks.types import Answer, FormatError, Problem, Proposal
from populora.tasks.validation import ProposalValidation as ProposalValidation

if TYPE_CHECKING:  # the sandbox is only duck-typed: anything with run_many([(program, call)]) -> [Outcome]
    from populora.sandbox import Sandbox

MAX_TEXT_CHARS = 200_000  # longer completions are format errors before any scanning
# The banned packages the teacher prompt names, in reading order: a short subset of the policy's deny-list (which is
# what is enforced); names the configured policy allows are dropped before they are shown.
PROMPT_BANNED = (
    "os",
    "sys",
    "subprocess",
    "socket",
    "shutil",
    "threading",
    "multiprocessing",
    "random",
    "time",
    "datetime",
    "logging",
    "hashlib",
    "calendar",
    "importlib",
    "io",
    "pathlib",
    "pickle",
)
DEFAULT_THINKING = "Let me work through the code step by step."


@dataclass(frozen=True)
class TaskConfig:
    """Knobs shared by the task types (AZR defaults where AZR has one)."""

    n_inputs: int = 10  # code_f: inputs per proposal (AZR num_inputs)
    max_output_chars: int = 1000  # longer reprs make a proposal invalid (AZR truncated at 400: bug B2)
    max_message_chars: int = 2000
    max_answer_chars: int = 20_000  # longest answer block accepted
    policy: CapabilityPolicy = field(default=DEFAULT_POLICY)
    # Validation re-runs every input this many more times in jobs identical to pass 1 (and to scoring): a
    # program whose output carries one fair random bit survives them with probability 2**-repeats (issue 29).
    determinism_repeats: int = 5
    # Scoring one problem's answers stops after this many seconds; answers not finished by then score False
    # and are counted (`CodeTask.past_deadline`). None: no deadline.
    score_deadline_s: float | None = 30.0
    # Validating one proposal may use this many seconds of sandbox time (the sum of its jobs' run times):
    # projected from pass 1, each later job cut at its share; over it the proposal is invalid
    # ("validation took longer than ..."; `validation_cut`). None: no budget (issue 50).
    validate_deadline_s: float | None = 30.0

    def __post_init__(self) -> None:
        if not (isinstance(self.determinism_repeats, int) and 0 <= self.determinism_repeats <= 32):
            raise ValueError(
                f"TaskConfig(determinism_repeats=) must be an integer from 0 to 32, got {self.determinism_repeats!r}"
            )
        d = self.score_deadline_s
        if d is not None and not (isinstance(d, int | float) and not isinstance(d, bool) and 0 < d <= 86400):
            raise ValueError(
                f"TaskConfig(score_deadline_s=) must be None or a number of seconds in (0, 86400], got {d!r}"
            )
        d = self.validate_deadline_s
        if d is not None and not (isinstance(d, int | float) and not isinstance(d, bool) and 0 < d <= 86400):
            raise ValueError(
                f"TaskConfig(validate_deadline_s=) must be None or a number of seconds in (0, 86400], got {d!r}"
            )


class CodeTask(ProposalValidation, AnswerScoring):
    """Base of the three task types; use `populora.tasks.get(name)`."""

    name: str = ""
    answer_lang: str = ""  # the fenced block a student answers in

    def __init__(self, config: TaskConfig | None = None, **overrides: Any):
        cfg = config or TaskConfig()
        if overrides:
            unknown = sorted(set(overrides) - set(cfg.__dict__))
            if unknown:
                raise ValueError(
                    f"unknown task option(s) {', '.join(unknown)}; valid: {', '.join(cfg.__dict__)}"
                )
            cfg = TaskConfig(**{**cfg.__dict__, **overrides})
        self.config = cfg
        #: Answers that scored False because their problem's scoring deadline passed (a running total).
        self.past_deadline = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def policy(self) -> CapabilityPolicy:
        return self.config.policy

    def banned_text(self) -> str:
        """The banned modules as the prompts show them: the best-known names, then the allowed modules (the
        policy is an allow-list: issue 13, item 3), or without an allow-list a catch-all for the rest of the
        deny-list (its ~130 modules would cost hundreds of prompt tokens)."""
        allow = self.policy.allow_modules
        shown = [
            m
            for m in PROMPT_BANNED
            if m in self.policy.deny_modules or (allow is not None and m not in allow)
        ]
        if allow is not None:  # the policy is an allow-list: say what is allowed (the deny-list is a subset)
            tops = sorted({m.split(".")[0] for m in allow})
            return ", ".join(shown) + "; in fact only these may be imported: " + ", ".join(tops)
        extra = len(self.policy.deny_modules) - len(shown)
        return ", ".join(shown) + (
            f", and {extra} other I/O, process, network or introspection modules" if extra > 0 else ""
        )

    # ------------------------------------------------------------------ rendering
    def _wrap(self, ts: TemplateSet, inner: str, part: str) -> str:
        """The chat-wrapped prompt, ending with the template's response prefix for `part` if it has one (the
        first characters of the answer, e.g. "```python\ndef f(", written for the model: small models then
        keep the format). `parse_proposal` / `parse_answer` put the prefix back before parsing."""
        return ts.render("wrapper", prompt=inner) + ts.prefixes.get(part, "")

    def _prefixed(self, text: Any, template: str | TemplateSet | None, part: str) -> Any:
        if template is None or not isinstance(text, str):
            return text
        return load_template(template).prefixes.get(part, "") + text

    def _strip_prefix(self, ts: TemplateSet, part: str, body: str, completion: str) -> str:
        """What the model writes after a prompt that ends with the prefix: the body without it (no thinking
        text: the prefix starts the answer)."""
        prefix = ts.prefixes.get(part, "")
        if not prefix:
            return completion
        if not body.startswith(prefix):
            raise ValueError(
                f"template {ts.name}: the {part} prefix {prefix!r} does not start the answer {body[:40]!r}"
            )
        return body[len(prefix) :]

    def _completion(self, ts: TemplateSet, body: str, thinking: str | None) -> str:
        return ts.render("completion", body=body, thinking=DEFAULT_THINKING if thinking is None else thinking)

    def teacher_prompt(self, refs: Sequence[Problem], template: str | TemplateSet | None = None) -> str:
        """The teacher's prompt: K reference problems (code_i/code_o) or the one program to probe (code_f)."""
        raise NotImplementedError

    def student_prompt(self, problem: Problem, template: str | TemplateSet | None = None) -> str:
        raise NotImplementedError

    def proposal_body(self, program: str, inputs: Sequence[str], message: str = "") -> str:
        raise NotImplementedError

    def render_proposal(
        self,
        program: str,
        inputs: Sequence[str],
        message: str = "",
        template: str | TemplateSet | None = None,
        thinking: str | None = None,
    ) -> str:
        """What a perfect teacher writes after `teacher_prompt` for this (program, inputs, message).
        `parse_proposal` of the result gives back exactly these pieces (code_f: inputs and message)."""
        ts = load_template(template)
        body = self.proposal_body(program, inputs, message)
        return self._strip_prefix(ts, f"teacher_{self.name}", body, self._completion(ts, body, thinking))

    def render_answer(
        self, answer_text: str, template: str | TemplateSet | None = None, thinking: str | None = None
    ) -> str:
        """What a perfect student writes after `student_prompt` when its answer is `answer_text`."""
        ts = load_template(template)
        body = f"```{self.answer_lang}\n{answer_text.strip(chr(10))}\n```"
        return self._strip_prefix(ts, f"student_{self.name}", body, self._completion(ts, body, thinking))

    def gold_answer(self, problem: Problem) -> str:
        """An answer text that scores True (the teacher's input / output / program)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ parsing
    def _region(self, text: Any, template: str | TemplateSet | None) -> tuple[str | None, str | None]:
        if not isinstance(text, str):
            return None, "format: not text"
        if len(text) > MAX_TEXT_CHARS:
            return None, f"format: longer than {MAX_TEXT_CHARS} characters"
        strict = load_template(template).strict_think_answer if template is not None else False
        return answer_region(text, strict=strict)

    def parse_proposal(
        self, text: str, *, program: str | None = None, template: str | TemplateSet | None = None
    ) -> Proposal | FormatError:
        """Parse a teacher completion. Never raises. `template`: pass the set used for the prompt to get the
        strict R1 frame check of that set; None accepts text with or without `<answer>` tags."""
        try:
            return self._parse_proposal(
                self._prefixed(text, template, f"teacher_{self.name}"), program, template
            )
        except Exception as e:  # a parser bug must not crash a training step
            return FormatError(f"format: unparsable ({type(e).__name__})")

    def _parse_proposal(self, text: str, program: str | None, template: Any) -> Proposal | FormatError:
        raise NotImplementedError

    def parse_answer(self, text: str, template: str | TemplateSet | None = None) -> Answer | FormatError:
        """Parse a student completion: the last fenced block (`` ```<lang> ``) of the answer region. Never raises.

        Fallbacks, as AZR's: code_f also takes the last bare ``` / ```py block; code_i/code_o
        take the whole inside of an explicit `<answer>...</answer>` that holds no fenced block at all."""
        try:
            text = self._prefixed(text, template, f"student_{self.name}")
            region, why = self._region(text, template)
            if region is None:
                return FormatError(why or "format")
            blocks = find_blocks(region, self.answer_lang)
            if not blocks:
                blocks = self._fallback_blocks(region, "<answer>" in text)
            if not blocks:
                return FormatError(f"format: no ```{self.answer_lang} block")
            body = blocks[-1]
            if len(body) > self.config.max_answer_chars:
                return FormatError("format: answer too long")
            return self._check_answer(body)
        except Exception as e:
            return FormatError(f"format: unparsable ({type(e).__name__})")

    def _check_answer(self, body: str) -> Answer | FormatError:
        raise NotImplementedError

    def _fallback_blocks(self, region: str, tagged: bool) -> list[str]:
        if self.answer_lang == "python":
            return [b.content for b in fenced_blocks(region) if b.lang in ("", "py", "python3")]
        if tagged and FENCE not in region and region.strip():
            return [region]
        return []


def _defines_f(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body)


class CodeIO(CodeTask):
    """code_i / code_o: the teacher writes a program and one input; the sandbox computes the output."""

    def teacher_prompt(self, refs: Sequence[Problem], template: str | TemplateSet | None = None) -> str:
        ts = load_template(template)
        sep = "\n\n" if ts.strict_think_answer else "\n"
        references = sep.join(
            ts.render("reference", k=k, program=r.program, input=r.inputs[0], output=r.outputs[0])
            for k, r in enumerate(refs)
        )
        inner = ts.render(
            f"teacher_{self.name}", references=references, banned=self.banned_text(), n=len(refs)
        )
        return self._wrap(ts, inner, f"teacher_{self.name}")

    def proposal_body(self, program: str, inputs: Sequence[str], message: str = "") -> str:
        if isinstance(inputs, str):
            inputs = [inputs]
        return f"```python\n{program.strip(chr(10))}\n```\n```input\n{inputs[0].strip()}\n```"

    def _parse_proposal(self, text: str, program: str | None, template: Any) -> Proposal | FormatError:
        region, why = self._region(text, template)
        if region is None:
            return FormatError(why or "format")
        progs = find_blocks(region, "python")
        if not progs:
            return FormatError("format: no ```python block")
        inputs = find_blocks(region, "input")
        if not inputs:
            return FormatError("format: no ```input block")
        prog = clean_code(progs[0])
        inp = inputs[0].strip()
        if not prog:
            return FormatError("format: empty ```python block")
        if not inp:
            return FormatError("format: empty ```input block")
        return Proposal(program=prog, inputs=(inp,))

    def _prepare(self, program: str, inputs: Sequence[str], message: str, exact_n: bool) -> str | None:
        if len(inputs) != 1:
            return f"{self.name} takes exactly one input, got {len(inputs)}"
        return self._static_check(program, inputs)


class CodeI(CodeIO):
    name = "code_i"
    answer_lang = "input"

    def student_prompt(self, problem: Problem, template: str | TemplateSet | None = None) -> str:
        ts = load_template(template)
        part = "student_code_i"
        return self._wrap(ts, ts.render(part, program=problem.program, output=problem.outputs[0]), part)

    def gold_answer(self, problem: Problem) -> str:
        return problem.inputs[0]

    def _check_answer(self, body: str) -> Answer | FormatError:
        text = body.strip()
        try:
            args, kwargs = parse_call_args(text)
            render_call_args(args, kwargs)  # rendering too: a 5000-digit hex int parses, but no repr
        except LiteralError as e:
            return FormatError(f"format: input is not a literal argument list ({e})")
        if not args and not kwargs:  # only a comment: no arguments, the same format error as an empty block
            return FormatError("format: input is not a literal argument list (empty argument list)")
        return Answer(text)

    def _plan(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> ScoringPlan:
        try:
            gold = parse_literal(problem.outputs[0])
        except LiteralError:  # a hand-made problem with a non-literal gold output can never be matched
            return [False] * len(answers), 0
        calls: list[str | None] = []
        for a in map(self._coerce, answers):
            if not isinstance(a, Answer):
                calls.append(None)
                continue
            try:
                # The sandbox gets the re-rendered parsed values, never the model's text, in exactly the call
                # text validation used for the same arguments (`job_call`).
                calls.append(job_call(a.text))
            except Exception:  # scoring never raises on model output: an unscorable answer is wrong
                calls.append(None)
        unique = sorted({c for c in calls if c is not None})
        if not unique:
            return [False] * len(calls), 0
        outs = yield [(problem.program, c) for c in unique]  # one round: each distinct call once
        outcomes = dict(zip(unique, outs, strict=True))
        verdict = {}
        for c, o in outcomes.items():
            v, why = _plain_value(o, 10**9)
            verdict[c] = why is None and strict_equal(v, gold)
        cut = sum(1 for c in calls if c is not None and _cut(outcomes[c]))
        return [c is not None and verdict[c] for c in calls], cut


class CodeO(CodeIO):
    name = "code_o"
    answer_lang = "output"

    def student_prompt(self, problem: Problem, template: str | TemplateSet | None = None) -> str:
        ts = load_template(template)
        part = "student_code_o"
        return self._wrap(ts, ts.render(part, program=problem.program, input=problem.inputs[0]), part)

    def gold_answer(self, problem: Problem) -> str:
        return problem.outputs[0]

    def _check_answer(self, body: str) -> Answer | FormatError:
        text = body.strip()
        try:
            parse_literal(text)
        except LiteralError as e:
            return FormatError(f"format: output is not a literal ({e})")
        return Answer(text)

    def score_detailed(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None = None,
        *,
        until: float | None = None,
    ) -> Scored:
        return Scored(self._compare(problem, answers))  # no sandbox job, so no deadline to meet

    def score(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None = None,
        *,
        until: float | None = None,
    ) -> list[bool]:
        return self._compare(problem, answers)

    def _plan(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> ScoringPlan:
        yield from ()  # no round: code_o runs no sandbox job
        return self._compare(problem, answers), 0

    def _compare(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> list[bool]:
        """code_o needs no sandbox: the answer literal is compared with the gold output here."""
        try:
            gold = parse_literal(problem.outputs[0])
        except LiteralError:
            return [False] * len(answers)
        out = []
        for a in map(self._coerce, answers):
            if not isinstance(a, Answer):
                out.append(False)
                continue
            try:
                out.append(strict_equal(parse_literal(a.text), gold))
            except Exception:  # scoring never raises on model output: an unscorable answer is wrong
                out.append(False)
        return out


class CodeF(CodeTask):
    """code_f: the teacher writes N inputs and a message for a program from the buffers; the student sees the
    first half of the pairs and the message and writes `f`; right iff every hidden pair matches."""

    name = "code_f"
    answer_lang = "python"

    def teacher_prompt(
        self, refs: Sequence[Problem] | Problem | str, template: str | TemplateSet | None = None
    ) -> str:
        """`refs`: the program to write inputs for, as a Problem, a one-element list of one, or source text."""
        ts = load_template(template)
        program = _program_of(refs)
        return self._wrap(
            ts,
            ts.render("teacher_code_f", program=program, n=self.config.n_inputs, banned=self.banned_text()),
            "teacher_code_f",
        )

    def proposal_body(self, program: str, inputs: Sequence[str], message: str = "") -> str:
        parts = [f"```input\n{s.strip()}\n```" for s in inputs]
        parts.append(f"```message\n{message.strip()}\n```")
        return "\n".join(parts)

    def _parse_proposal(self, text: str, program: str | None, template: Any) -> Proposal | FormatError:
        region, why = self._region(text, template)
        if region is None:
            return FormatError(why or "format")
        n = self.config.n_inputs
        inputs = [s.strip() for s in find_blocks(region, "input")]
        if len(inputs) < n:
            return FormatError(f"format: {len(inputs)} ```input blocks, need {n}")
        msgs = find_blocks(region, "message")
        if not msgs or not msgs[-1].strip():
            return FormatError("format: no ```message block")
        return Proposal(program=(program or ""), inputs=tuple(inputs[-n:]), message=msgs[-1].strip())

    def _prepare(self, program: str, inputs: Sequence[str], message: str, exact_n: bool) -> str | None:
        n = self.config.n_inputs
        if exact_n and len(inputs) != n:
            return f"code_f needs {n} inputs, got {len(inputs)}"
        if len(inputs) < 2:
            return f"code_f needs at least 2 inputs, got {len(inputs)}"
        if not isinstance(message, str) or not message.strip():
            return "empty message"
        if len(message) > self.config.max_message_chars:
            return "message too long"
        if program and (program.strip() in message or "def f(" in message):
            return "message contains the code"
        return self._static_check(program, inputs)

    def student_prompt(self, problem: Problem, template: str | TemplateSet | None = None) -> str:
        ts = load_template(template)
        sep = "\n\n" if ts.strict_think_answer else "\n"
        pairs = sep.join(ts.render("pair", k=k, input=i, output=o) for k, (i, o) in enumerate(problem.given))
        return self._wrap(
            ts,
            ts.render("student_code_f", pairs=pairs, message=problem.message, banned=self.banned_text()),
            "student_code_f",
        )

    def gold_answer(self, problem: Problem) -> str:
        return problem.program

    def _check_answer(self, body: str) -> Answer | FormatError:
        code = clean_code(body)
        if not code:
            return FormatError("format: empty ```python block")
        try:
            tree = pyparse.parse(code)
        except Exception as e:
            return FormatError(f"format: program does not parse ({type(e).__name__})")
        if not _defines_f(tree):
            return FormatError("format: program defines no top-level f")
        return Answer(code)

    def _plan(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> ScoringPlan:
        hidden = problem.hidden
        try:
            gold = [parse_literal(o) for _, o in hidden]
            calls = [job_call(inp) for inp, _ in hidden]
        except LiteralError:
            return [False] * len(answers), 0
        programs: list[str | None] = []
        for a in map(self._coerce, answers):
            try:
                ok = isinstance(a, Answer) and parse_program(a.text, self.policy)[1] is None
            except Exception:  # scoring never raises on model output: an unscorable answer is wrong
                ok = False
            programs.append(a.text if ok else None)
        unique = sorted({p for p in programs if p is not None})
        if not unique:
            return [False] * len(programs), 0
        # One round per hidden pair, only for programs still right: a wrong or looping candidate usually costs
        # one job instead of len(hidden). The calls are the ones validation ran (`job_call`).
        alive = list(unique)
        cut: set[str] = set()
        for call, want in zip(calls, gold, strict=True):
            if not alive:
                break
            outcomes = yield [(p, call) for p in alive]
            cut.update(p for p, o in zip(alive, outcomes, strict=True) if _cut(o))
            # Compare plain values parsed here: an object whose __eq__ always says True has a non-literal
            # repr (or plain=False) and fails, whatever it claims inside the sandbox.
            alive = [
                p
                for p, o in zip(alive, outcomes, strict=True)
                if (v := _plain_value(o, 10**9))[1] is None and strict_equal(v[0], want)
            ]
        verdict = {p: p in alive for p in unique}
        n_cut = sum(1 for p in programs if p in cut)
        return [p is not None and verdict[p] for p in programs], n_cut


def _program_of(refs: Any) -> str:
    if isinstance(refs, str):
        return refs
    if isinstance(refs, Problem):
        return refs.program
    if isinstance(refs, Sequence) and refs:
        r = refs[0]
        return r if isinstance(r, str) else r.program
    raise ValueError("code_f teacher_prompt needs the program to probe (a Problem or its source)")
