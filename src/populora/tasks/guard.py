"""The sandbox a plugin task family is handed: the run's sandbox behind the capability policy.

`GuardedSandbox(sandbox)` has the sandbox's `run_many` / `run` / `limits`, and before any job goes out it
checks the job's program and its call expression together against `DEFAULT_POLICY` (`populora.tasks.policy`):
the call must be one expression, and the module `program + "result = (call)"` must pass the policy, so an escape
cannot hide in the call text (`__import__('os')`, `f.__globals__`). A refused job never reaches a worker; it
comes back as an `error` outcome with error_type "PolicyViolation" and the policy's reason. Limits a family
passes are clamped field by field to the run's (`sandbox.timeout_s`, `sandbox.memory_mb`, ...): a family can
tighten them, never loosen them. Every job that does run, runs in the run's sandbox with its isolation.

The policy is the module's default one, not the family's: a plugin cannot hand in a weaker policy. The built-in
AZR family does not go through this wrapper (its task classes check every program with the same policy
themselves, and its tests hold them to it), so its behaviour and speed are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from populora import pyparse
from populora.sandbox.contract import Limits, Outcome
from populora.tasks.policy import DEFAULT_POLICY, parse_program

_CACHE_MAX = 4096  # verdicts kept per guard (validation re-runs the same jobs; scoring repeats programs)
POLICY_VIOLATION = "PolicyViolation"


def job_reason(program: str, call: str) -> str | None:
    """Why the job `(program, call)` may not run under `DEFAULT_POLICY`, or None when it may."""
    if not isinstance(program, str) or not isinstance(call, str):
        return "a job is a (program, call) pair of strings"
    try:
        pyparse.parse(call, mode="eval")
    except Exception as e:  # SyntaxError, ValueError (null bytes), RecursionError
        return f"call is not one expression ({type(e).__name__})"
    _, reason = parse_program(f"{program}\n\nresult = ({call})\n", DEFAULT_POLICY)
    return reason


def clamp_limits(asked: Limits | None, base: Limits) -> Limits:
    """`asked` with every field at most the run's (`base`); None gives `base`. `cpu_s` stays the run's."""
    if asked is None:
        return base
    if not isinstance(asked, Limits):
        raise TypeError(f"run_many(limits=) takes a Limits, got {type(asked).__name__}")
    tighter = {
        f.name: min(getattr(asked, f.name), getattr(base, f.name))
        for f in dataclasses.fields(Limits)
        if f.name != "cpu_s"
    }
    return dataclasses.replace(base, **tighter)


class GuardedSandbox:
    """The run's sandbox as a plugin family sees it (see the module docstring)."""

    __slots__ = ("__sandbox", "__verdicts")

    def __init__(self, sandbox: Any) -> None:
        self.__sandbox = sandbox
        self.__verdicts: dict[tuple[str, str], str | None] = {}

    @property
    def limits(self) -> Limits:
        return getattr(self.__sandbox, "limits", None) or Limits()

    def _reason(self, job: Any) -> str | None:
        if not (isinstance(job, tuple | list) and len(job) == 2):
            raise TypeError(f"run_many() takes (program: str, call: str) pairs, got {job!r:.80}")
        key = (job[0], job[1])
        if key not in self.__verdicts:
            if len(self.__verdicts) >= _CACHE_MAX:
                self.__verdicts.clear()
            self.__verdicts[key] = job_reason(*key)
        return self.__verdicts[key]

    def run_many(
        self,
        jobs: Sequence[tuple[str, str]],
        limits: Limits | None = None,
        *,
        deadline_s: float | None = None,
        variant: int | Sequence[int] = 0,
    ) -> list[Outcome]:
        reasons = [self._reason(j) for j in jobs]
        allowed = [tuple(j) for j, r in zip(jobs, reasons, strict=True) if r is None]
        ran = iter(
            self.__sandbox.run_many(
                allowed, limits=clamp_limits(limits, self.limits), deadline_s=deadline_s, variant=variant
            )
            if allowed
            else []
        )
        return [
            next(ran) if r is None else Outcome("error", error_type=POLICY_VIOLATION, error_message=r)
            for r in reasons
        ]

    def run(self, program: str, call: str, limits: Limits | None = None) -> Outcome:
        return self.run_many([(program, call)], limits=limits)[0]

    def __repr__(self) -> str:
        return "GuardedSandbox(<the run's sandbox behind DEFAULT_POLICY>)"


__all__ = ["POLICY_VIOLATION", "GuardedSandbox", "clamp_limits", "job_reason"]
