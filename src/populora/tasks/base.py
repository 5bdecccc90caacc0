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
"""

from __future__ import annotations

import ast
import os
import re
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from populora import pyparse
from populora.tasks.extract import FENCE, answer_region, clean_code, fenced_blocks, find_blocks
from populora.tasks.literals import (
    LiteralError,
    parse_call_args,
    parse_literal,
    render_call_args,
    strict_equal,
)
from populora.tasks.policy import DEFAULT_POLICY, CapabilityPolicy, parse_program
from populora.tasks.templates import TemplateSet, load_template
from populora.tasks.types import Answer, FormatError, Invalid, InvalidProblem, Problem, Proposal

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


# The reasons of proposals that validation's deadlines made invalid (issue 50): the step's (`validate(until=)`)
# and a proposal's own budget (`validate_deadline_s`). The trainer counts them (metrics.jsonl
# `validate_past_deadline`); model text cannot start a reason with them (the sandbox's reasons begin "input").
VALIDATION_DEADLINE = "validation deadline passed"
OVER_BUDGET = ("validation took longer than", "validation would take longer than")


def validation_cut(reason: Any) -> bool:
    """Whether an invalid proposal's `reason` says a validation deadline or budget cut it."""
    return isinstance(reason, str) and reason.startswith((VALIDATION_DEADLINE, *OVER_BUDGET))


def job_call(args_text: str) -> str:
    """The call text a job evaluates for the argument list `args_text`: `f(...)` of the re-rendered parsed
    values. Validation and scoring both build their calls here, so a program cannot tell them apart by its
    call text (issue 29: a newline only in validation's calls let a teacher program set its solve rate).
    Raises `LiteralError` if `args_text` is not a literal argument list."""
    return f"f({render_call_args(*parse_call_args(args_text))})"


# An exception's class name comes from the job, so the teacher chooses it; a reason quotes it only when it looks
# like a class name (a short dotted identifier), so free text never reaches the invalid reasons a run logs.
_ERROR_TYPE_SHAPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}(\.[A-Za-z_][A-Za-z0-9_]{0,39}){0,3}")


def _error_type_shown(et: Any) -> str | None:
    """`et` if it is a plausible exception class name (at most 40 characters a part), else None."""
    if isinstance(et, str) and len(et) <= 80 and _ERROR_TYPE_SHAPE.fullmatch(et):
        return et
    return None


def _status_reason(o: Any) -> str:
    status = getattr(o, "status", "crashed")
    et = _error_type_shown(getattr(o, "error_type", None))
    if status == "error":
        return f"raised {et or 'an exception'}"
    if status == "output_limit":
        return "output too long"
    return f"{status}{f' ({et})' if et and status not in ('timeout', 'memory') else ''}"


def _plain_value(o: Any, max_chars: int) -> tuple[Any, str | None]:
    """`(value, None)` if the outcome is a finished call with a plain-data value, else `(None, reason)`."""
    if getattr(o, "status", None) != "ok" or getattr(o, "value_repr", None) is None:
        return None, _status_reason(o)
    r = o.value_repr
    if len(r) > max_chars:
        return None, "output too long"
    if getattr(o, "plain", True) is False:
        return None, "output is not plain data"
    try:
        return parse_literal(r), None
    except LiteralError:
        return None, "output is not plain data"


class CodeTask:
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

    # ------------------------------------------------------------------ validation
    def _static_check(self, program: str, inputs: Sequence[str]) -> str | None:
        """Everything about a proposal that needs no execution; the reason it fails, or None."""
        _, why = parse_program(program, self.policy, require_params=True)
        if why:
            return why
        for k, inp in enumerate(inputs):
            if not isinstance(inp, str):
                return f"input {k}: not text"
            try:
                args, kwargs = parse_call_args(inp)
                render_call_args(args, kwargs)  # what `job_call` sends must exist (issue 50: a huge int)
            except LiteralError as e:
                return f"input {k}: {e}"
            if not args and not kwargs:
                return f"input {k}: no arguments"
        return None

    def _prepare(self, program: str, inputs: Sequence[str], message: str, exact_n: bool) -> str | None:
        return self._static_check(program, inputs)

    def validate(
        self, proposals: Sequence[Proposal], sandbox: Sandbox, *, until: float | None = None
    ) -> list[Problem | Invalid]:
        """Turn proposals into Problems (or Invalid with a reason), running every input in separate sandbox
        jobs (pass 1, then the determinism passes); each pass of the batch goes out in one `run_many`.

        Deadlines (issue 50): `until` (a `time.monotonic()` value: the trainer's deadline for a step's
        validation) bounds every `run_many`; a proposal with a job cut by it is invalid with reason
        `VALIDATION_DEADLINE`. A proposal whose sandbox time would pass `validate_deadline_s` is invalid
        with "validation would take longer than ..." (pass 1's run time times `validation_runs()`) or, if a
        later job passes its share of the budget, "validation took longer than ..."."""
        return self._validate(proposals, sandbox, exact_n=True, until=until)

    def _validate(
        self, proposals: Sequence[Proposal], sandbox: Sandbox, exact_n: bool, until: float | None = None
    ) -> list[Problem | Invalid]:
        # Pass 1 runs every input in its own job (the outputs), with the call text and limits scoring uses
        # (`job_call`, the sandbox's default limits). The determinism check then runs:
        # - `determinism_repeats` more passes of jobs identical to pass 1 (for code_f, whose program was
        #   validated before and is not the teacher's, one job per pass evaluating all inputs), which catch
        #   randomness: a fair random bit survives them with probability 2**-repeats, and a program cannot
        #   tell them from pass 1 or from scoring;
        # - `shifted_runs()` rounds per proposal, each one job evaluating all inputs as a tuple in a process of
        #   its own (round r on the sandbox's variant pool r: its own hash seed, ASLR and heap layout) with a
        #   random amount of heap in use before the call, which catches output that depends on the process
        #   (id(), set order of objects, str hash order) or on earlier calls (`_run_combined`).
        results: list[Problem | Invalid | None] = [None] * len(proposals)
        prepared: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []  # (index, inputs, their calls)
        for i, p in enumerate(proposals):
            if not isinstance(p, Proposal):
                results[i] = Invalid(getattr(p, "reason", "not a proposal"), None)
                continue
            try:  # model-written text: whatever it holds, the proposal is invalid, the phase goes on
                inputs = tuple(s.strip() if isinstance(s, str) else s for s in p.inputs)
                why = self._prepare(p.program, inputs, p.message, exact_n)
                calls = () if why else tuple(job_call(inp) for inp in inputs)
            except Exception as e:  # noqa: BLE001 - issue 50: a LiteralError here once stopped the step
                why = f"unreadable proposal ({type(e).__name__})"
            if why:
                results[i] = Invalid(why, p)
            else:
                prepared.append((i, inputs, calls))
        singles = [(proposals[i].program, c) for i, _, calls in prepared for c in calls]
        first = _run_until(sandbox, singles, until) if singles else []
        survivors: list[tuple[int, tuple[str, ...], tuple[str, ...], list]] = []
        pos = 0
        for i, inputs, calls in prepared:
            outs = first[pos : pos + len(inputs)]
            pos += len(inputs)
            if any(_cut(o) for o in outs):  # the step's deadline, before any verdict on the outputs
                results[i] = Invalid(VALIDATION_DEADLINE, proposals[i])
                continue
            for k, o in enumerate(outs):
                _, why = _plain_value(o, self.config.max_output_chars)
                if why:
                    results[i] = Invalid(f"input {k}: {why}", proposals[i])
                    break
            else:
                why = self._projected_over(outs)
                if why:
                    results[i] = Invalid(why, proposals[i])
                else:
                    survivors.append((i, inputs, calls, outs))
        survivors = self._repeat_passes(proposals, sandbox, survivors, results, until)
        if survivors:
            wide = max(len(calls) for _, _, calls, _ in survivors)
            again = self._run_combined(
                sandbox, [(proposals[i].program, calls) for i, _, calls, _ in survivors], until
            )
            for (i, inputs, _, outs), runs in zip(survivors, again, strict=True):
                p = proposals[i]
                why = self._later_cut(sandbox, runs, wide) or self._rounds_differ(outs, runs)
                if why:
                    results[i] = Invalid(why, p)
                    continue
                results[i] = Problem(
                    task=self.name,
                    program=p.program,
                    inputs=inputs,
                    outputs=tuple(o1.value_repr for o1 in outs),
                    message=p.message.strip(),
                    proposer=p.proposer,
                    step=p.step,
                )
        return results  # type: ignore[return-value]

    def _repeat_passes(
        self,
        proposals: Sequence[Proposal],
        sandbox: Sandbox,
        survivors: list,
        results: list,
        until: float | None = None,
    ) -> list:
        """Re-run the survivors of pass 1 `determinism_repeats` times; mark the ones whose output changes
        (or whose re-runs a deadline cut) invalid and return the rest. All repeats of all survivors go out
        in one `run_many`, bounded by `until`, each job by its share of `validate_deadline_s`."""
        reps = self.config.determinism_repeats
        if not survivors or reps == 0:
            return survivors
        if self.name == "code_f":  # one job per pass (cheap: a code_f program comes from the buffers)
            jobs = [
                (proposals[i].program, _tuple_call(calls))
                for i, _, calls, _ in survivors
                for _ in range(reps)
            ]
            wide = max(len(c) for _, _, c, _ in survivors)
        else:
            jobs = [
                (proposals[i].program, c) for i, _, calls, _ in survivors for _ in range(reps) for c in calls
            ]
            wide = 1
        outs = list(self._run_wide(sandbox, jobs, wide, until=until))
        kept, pos = [], 0
        for item in survivors:
            i, _, calls, first = item
            n = reps if self.name == "code_f" else reps * len(calls)
            mine, pos = outs[pos : pos + n], pos + n
            cut = self._later_cut(sandbox, mine, wide)
            if cut:
                results[i] = Invalid(cut, proposals[i])
                continue
            want = [parse_literal(o.value_repr) for o in first]
            for j, o in enumerate(mine):
                v, why = _plain_value(o, 10**9)
                # code_f: a tuple of every input's value; otherwise one value, for input j % len(calls)
                got, ref = (v, want) if self.name == "code_f" else ((v,), [want[j % len(calls)]])
                if why or not isinstance(got, tuple) or len(got) != len(ref):
                    why = why or "different results when re-run"
                    results[i] = Invalid(f"nondeterministic ({why})", proposals[i])
                    break
                if not all(strict_equal(a, b) for a, b in zip(ref, got, strict=True)):
                    results[i] = Invalid("nondeterministic (different results when re-run)", proposals[i])
                    break
            else:
                kept.append(item)
        return kept

    def _run_wide(
        self, sandbox: Sandbox, jobs: list[tuple[str, str]], n: int, *, until: float | None = None, **kw: Any
    ) -> list[Any]:
        """`run_many` with limits scaled for jobs that each make `n` calls, each job's wall time cut at its
        share of the proposal's budget (`budget_share`), the whole call bounded by `until`."""
        lim = getattr(sandbox, "limits", None)
        if lim is None or (n == 1 and not self._clamped(lim, 1)):
            return _run_until(sandbox, jobs, until, **kw)
        from dataclasses import replace

        share = self.budget_share()
        wider = replace(
            lim,
            timeout_s=lim.timeout_s * n if share is None else min(lim.timeout_s * n, share),
            cpu_s=(lim.cpu_s * n if getattr(lim, "cpu_s", None) else None),
            max_output_chars=(
                lim.max_output_chars
                if n == 1
                else max(lim.max_output_chars, n * (self.config.max_output_chars + 2) + 2)
            ),
        )
        return _run_until(sandbox, jobs, until, limits=wider, **kw)

    # ------------------------------------------------------------------ validation deadlines (issue 50)
    def validation_runs(self) -> int:
        """How many times validation runs each input in all: pass 1, the repeats, the determinism rounds.
        Every later job runs each of its inputs once, so each is one pass 1's worth of work."""
        return 1 + self.config.determinism_repeats + self.shifted_runs()

    def budget_share(self) -> float | None:
        """The wall time a job after pass 1 may take: `validate_deadline_s` over `validation_runs()` (None:
        no budget). A program as slow in every run as in pass 1 fits, since pass 1 fit its share."""
        d = self.config.validate_deadline_s
        return None if d is None else d / self.validation_runs()

    def _clamped(self, lim: Any, n: int) -> bool:
        """Whether `budget_share` is shorter than the timeout a job of `n` calls would have without it."""
        share = self.budget_share()
        return share is not None and share < lim.timeout_s * n

    def _projected_over(self, first: list) -> str | None:
        """Why a proposal whose pass 1 took `first` (its outcomes) is over its budget, or None: pass 1's sandbox
        time, times `validation_runs()`, passes `validate_deadline_s`. Nothing more of it runs then."""
        d = self.config.validate_deadline_s
        if d is None:
            return None
        took = sum(float(getattr(o, "elapsed_s", 0.0) or 0.0) for o in first)
        runs = self.validation_runs()
        if took * runs <= d:
            return None
        return f"{OVER_BUDGET[1]} {d:g} s (pass 1 took {took:.2f} s; each input runs {runs} times)"

    def _later_cut(self, sandbox: Sandbox, outs: list, n: int) -> str | None:
        """Why a proposal's jobs after pass 1 (`outs`, jobs of `n` calls) end its validation on a deadline:
        one was cut by the step's (`VALIDATION_DEADLINE`) or timed out at its budget share; else None."""
        if any(_cut(o) for o in outs):
            return VALIDATION_DEADLINE
        lim = getattr(sandbox, "limits", None)
        timed_out = any(getattr(o, "status", None) == "timeout" for o in outs)
        if not (timed_out and lim is not None and self._clamped(lim, n)):
            return None
        d, share = self.config.validate_deadline_s, self.budget_share()
        return f"{OVER_BUDGET[0]} {d:g} s (a re-run passed its {share:.2g} s share)"

    def _run_combined(
        self, sandbox: Sandbox, items: list[tuple[str, tuple[str, ...]]], until: float | None = None
    ) -> list[list[Any]]:
        """The determinism rounds: per program, `shifted_runs()` jobs, round r on the sandbox's variant pool r
        (r = 1..R), each evaluating all of the program's inputs as a tuple after taking a random amount of
        heap. Returns per program its R outcomes (each value: a list of one tuple). Limits are scaled to the
        number of calls."""
        # One process per round (issue 50): output that depends on the process -- the order of a set of
        # strings under its hash seed, an address bit taken when the module ran -- is one draw per process,
        # so rounds sharing a process were one trial (`list({a, b})` passed in about half of all sandboxes).
        # Each variant pool is its own processes, with its own random hash seed, ASLR and heap shift, so a
        # fair process-level bit survives R rounds with probability 2**-R. Before the call the job also fills
        # 0-1023 more small objects of several sizes (kept alive), so the objects the call makes land
        # elsewhere in every round: an address taken during the call is a fresh draw per round as well. The
        # filler uses no names the program could rebind.
        rounds = self.shifted_runs()
        jobs = []
        for prog, calls in items:
            for _ in range(rounds):
                m = int.from_bytes(os.urandom(2), "big") % 1024
                filler = f"[(x * 0.5, [x], (x,), (x, x)) for x in b'\\x01' * {m}]"
                jobs.append((prog, f"[{filler}, {_tuple_call(calls)}][1::2]"))
        kw = {}
        if getattr(sandbox, "supports_variants", False):
            kw["variant"] = [r + 1 for _ in items for r in range(rounds)]
        outs = self._run_wide(sandbox, jobs, max(len(calls) for _, calls in items), until=until, **kw)
        return [outs[k : k + rounds] for k in range(0, len(outs), rounds)]

    def _rounds_differ(self, first: list, runs: list) -> str | None:
        """Why one proposal's determinism rounds (`runs`, from `_run_combined`) disagree with its pass 1
        (`first`, one outcome per input), or None when every round gave type-strictly equal values."""
        want = [parse_literal(o.value_repr) for o in first]
        for o in runs:
            v, why = _plain_value(o, 10**9)
            if why or not (
                isinstance(v, list) and len(v) == 1 and isinstance(v[0], tuple) and len(v[0]) == len(want)
            ):
                return f"nondeterministic ({why or 'different results when re-run'})"
            bad = [k for k in range(len(want)) if not strict_equal(want[k], v[0][k])]
            if bad:
                return f"input {bad[0]}: nondeterministic"
        return None

    def shifted_runs(self) -> int:
        """How many determinism rounds run, each in its own variant pool of the sandbox (at least 1; at most
        32, as `determinism_repeats` and the sandbox's `MAX_VARIANTS`)."""
        return max(1, self.config.determinism_repeats)

    def problem_from(
        self,
        sandbox: Sandbox,
        program: str,
        inputs: Sequence[str],
        message: str = "",
        proposer: str | None = None,
        step: int | None = None,
    ) -> Problem:
        """Validate raw pieces into a Problem (outputs computed in the sandbox); raises `InvalidProblem`.
        code_f accepts any number >= 2 of inputs here (seed files have 6 or 10)."""
        if isinstance(inputs, str):
            raise InvalidProblem("inputs must be a list of argument texts, not one string")
        prop = Proposal(program=program, inputs=tuple(inputs), message=message, proposer=proposer, step=step)
        (res,) = self._validate([prop], sandbox, exact_n=False)
        if isinstance(res, Invalid):
            raise InvalidProblem(res.reason)
        return res

    # ------------------------------------------------------------------ scoring
    def _coerce(self, a: Any) -> Answer | FormatError:
        if isinstance(a, (Answer, FormatError)):
            return a
        if isinstance(a, str):
            return self._check_answer_safe(a)
        return FormatError("format: not an answer")

    def _check_answer_safe(self, body: str) -> Answer | FormatError:
        try:
            return self._check_answer(body)
        except Exception as e:
            return FormatError(f"format: unparsable ({type(e).__name__})")

    def score(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None,
        *,
        until: float | None = None,
    ) -> list[bool]:
        """One bool per answer: True iff the answer is right. FormatErrors score False. A plain `str` is taken
        as the answer block's text. All sandbox jobs of a round go out in one `run_many`, within the
        `score_deadline_s` of the call and before `until` (a `time.monotonic()` value: the trainer's deadline
        for a whole step's scoring); answers unfinished by then score False (see `score_detailed`).
        `score_many` scores many problems (of any task types) at once, with identical verdicts."""
        return self.score_detailed(problem, answers, sandbox, until=until).solves

    def score_detailed(
        self,
        problem: Problem,
        answers: Sequence[Answer | FormatError | str],
        sandbox: Sandbox | None,
        *,
        until: float | None = None,
    ) -> Scored:
        """`score` with the count of answers that scored False because the deadline passed (also added to
        `self.past_deadline`, the running total the trainer can log). `score_many` with one problem."""
        return score_many([(self, problem, answers)], sandbox, until=until)[0]

    def _plan(self, problem: Problem, answers: Sequence[Answer | FormatError | str]) -> ScoringPlan:
        """How this task scores `answers` to `problem`, as a generator: it yields each round's sandbox jobs
        (deduplicated within the problem), is sent their outcomes in the same order, and returns
        `(solves, past_deadline)`. It never touches the sandbox itself, so `score_many` can put the rounds of
        every problem of a batch into one `run_many`."""
        raise NotImplementedError

    def _deadline(self, start: float, n: int, until: float | None = None) -> float | None:
        """The end of this task's scoring in a batch of `n` problems with jobs begun at `start`: `n *
        score_deadline_s` after it, or `until` if that comes first (both `time.monotonic()` values)."""
        d = self.config.score_deadline_s
        end = None if d is None else start + n * d
        if until is not None:
            end = until if end is None else min(end, until)
        return end


# A task's scoring of one problem (`CodeTask._plan`): yields job lists, is sent outcome lists, returns
# (solves, past_deadline).
ScoringPlan = Generator[list[tuple[str, str]], list[Any], tuple[list[bool], int]]


def score_many(
    items: Sequence[tuple[CodeTask, Problem, Sequence[Answer | FormatError | str]]],
    sandbox: Sandbox | None,
    *,
    until: float | None = None,
) -> list[Scored]:
    """Score many `(task, problem, answers)` at once; one `Scored` per item, in order, each exactly what
    `task.score_detailed(problem, answers, sandbox)` gives when no deadline passes.

    Round r's jobs of every problem still scoring go out in ONE `sandbox.run_many` (code_i and code_f's first
    round together; code_f's later rounds, one per hidden pair, only for candidates still right; code_o runs
    nothing), so the sandbox's workers are busy with the whole batch instead of one problem at a time. Jobs
    are deduplicated within a problem, as per-problem scoring does, not across problems.

    Deadlines: with n items that run sandbox jobs (code_o items and items with no scorable answer run none),
    every item's scoring ends at `start + n * task.config.score_deadline_s` (start: this call's start), or at
    `until` (a `time.monotonic()` value) if earlier: the batch shares the budget that scoring its problems one
    after another had (for one problem, exactly `score_deadline_s`), but one slow problem can now use what
    fast ones leave. A round's `run_many` is bounded by that end (items whose tasks have different ends go out
    in one `run_many` per distinct end): jobs still running then are killed, jobs not started never start, and
    a round begun after the end runs nothing. Each answer whose job was cut scores False and is counted in its
    item's `past_deadline` and in its task's running `past_deadline`."""
    start = time.monotonic()
    results: list[Scored | None] = [None] * len(items)
    live: dict[int, tuple[ScoringPlan, list[tuple[str, str]], float | None]] = {}

    def advance(k: int, plan: ScoringPlan, sent: list[Any] | None, end: float | None) -> None:
        task = items[k][0]
        try:
            jobs = plan.send(sent)  # type: ignore[arg-type]  # None starts a fresh generator
        except StopIteration as stop:
            solves, cut = stop.value
            task.past_deadline += cut
            results[k] = Scored(solves, cut)
            live.pop(k, None)
            return
        if sandbox is None:
            raise ValueError(f"{task.name} scoring runs programs in the sandbox: pass a Sandbox")
        live[k] = (plan, jobs, end)

    for k, (task, problem, answers) in enumerate(items):
        if not isinstance(task, CodeTask):  # a plugin family's task scores itself (registry.GuardedTask)
            results[k] = Scored([bool(x) for x in task.score(problem, answers, sandbox)])
            continue
        advance(k, task._plan(problem, answers), None, None)
    # The deadline budget is `score_deadline_s` per problem that runs jobs, as one problem after another had.
    n = len(live)
    live.update(
        {k: (plan, jobs, items[k][0]._deadline(start, n, until)) for k, (plan, jobs, _) in live.items()}
    )
    while live:
        by_end: dict[float | None, list[int]] = {}
        for k, (_, _, end) in live.items():
            by_end.setdefault(end, []).append(k)
        for end, ks in by_end.items():
            jobs = [j for k in ks for j in live[k][1]]
            outs = _run_scoring(sandbox, jobs, end)
            i = 0
            for k in ks:
                plan, mine, _ = live[k]
                advance(k, plan, outs[i : i + len(mine)], end)
                i += len(mine)
    return results  # type: ignore[return-value]  # every item has finished


def _run_until(sandbox: Any, jobs: list[tuple[str, str]], until: float | None, **kw: Any) -> list[Any]:
    """`sandbox.run_many(jobs, **kw)` bounded by `until` (a `time.monotonic()` value; None: unbounded): jobs
    cut by it come back as timeouts with error_type "Deadline"; with it already passed nothing runs."""
    if until is None:
        return list(sandbox.run_many(jobs, **kw))
    left = until - time.monotonic()
    if left <= 0:
        return [_DEADLINE] * len(jobs)
    return list(sandbox.run_many(jobs, deadline_s=left, **kw))


def _run_scoring(sandbox: Any, jobs: list[tuple[str, str]], end: float | None) -> list[Any]:
    """`run_many` for scoring: the sandbox's default limits (as validation's pass 1), bounded by the
    deadline `end` (a `time.monotonic()` value). Jobs cut by the deadline come back as timeouts with
    error_type "Deadline"; with the deadline already passed nothing runs."""
    if end is None:
        return list(sandbox.run_many(jobs))
    left = end - time.monotonic()
    if left <= 0:
        return [_DEADLINE] * len(jobs)
    return list(sandbox.run_many(jobs, deadline_s=left))


@dataclass(frozen=True)
class Scored:
    """What `score_detailed` returns: one bool per answer, and how many answers scored False only because
    the problem's scoring deadline passed before their job finished."""

    solves: list[bool]
    past_deadline: int = 0


@dataclass(frozen=True)
class _Cut:
    """The outcome of a job never started because the scoring deadline had passed."""

    status: str = "timeout"
    value_repr: None = None
    error_type: str = "Deadline"


_DEADLINE = _Cut()


def _cut(o: Any) -> bool:
    return getattr(o, "status", None) == "timeout" and getattr(o, "error_type", None) == "Deadline"


def _tuple_call(calls: Sequence[str]) -> str:
    """Several `job_call`s evaluated in one job, as a tuple."""
    return "(" + "".join(f"{c}, " for c in calls) + ")"


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
