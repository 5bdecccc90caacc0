"""The sandbox jobs the code tasks run and how their outcomes are read (`populora.tasks.base`): the call text
every job evaluates (`job_call`, shared by validation and scoring so a program cannot tell them apart), the
reasons an outcome gives an invalid proposal (`_status_reason`, `_plain_value`), `run_many` bounded by a
deadline (`_run_until`, `_run_scoring`) and the outcome of a job the deadline cut (`_DEADLINE`, `_cut`), and
the reasons of proposals that validation's deadlines made invalid (`VALIDATION_DEADLINE`, `validation_cut`).

`populora.tasks.base` re-exports every name, so `from populora.tasks.base import job_call` keeps working.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from populora.tasks.literals import LiteralError, parse_call_args, parse_literal, render_call_args

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
