"""Validation of proposals (`CodeTask.validate`, `problem_from`), a base class of `populora.tasks.base.CodeTask`.

A proposal becomes a `Problem` only if it passes the static checks (the capability policy, literal inputs), its
inputs run in the sandbox to plain-data outputs within the size limit (pass 1, with the call text and limits
scoring uses), and its outputs stay the same in `determinism_repeats` identical re-runs and in
`shifted_runs()` rounds on the sandbox's variant pools (each its own process, hash seed and heap layout);
any exception makes it invalid. Deadlines (issue 50): the step's (`until`) and the proposal's own budget
(`validate_deadline_s`, shared out over `validation_runs()`).

`ProposalValidation` reads from the task only `name`, `config` (a `TaskConfig`) and `policy`; subclasses
override `_prepare` to add their own checks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from populora.tasks.jobs import (
    OVER_BUDGET,
    VALIDATION_DEADLINE,
    _cut,
    _plain_value,
    _run_until,
    _tuple_call,
    job_call,
)
from populora.tasks.literals import (
    LiteralError,
    parse_call_args,
    parse_literal,
    render_call_args,
    strict_equal,
)
from populora.tasks.policy import parse_program
from populora.tasks.types import Invalid, InvalidProblem, Problem, Proposal

if TYPE_CHECKING:  # the sandbox is only duck-typed: anything with run_many([(program, call)]) -> [Outcome]
    from populora.sandbox import Sandbox


class ProposalValidation:
    """The validation half of `CodeTask`: proposals to Problems through the sandbox."""

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
