"""The evaluation's plain records: a benchmark problem (`Item`), the error a benchmark file raises
(`DataError`), and a graded candidate (`CodeResult`) with its limits (`CodeLimits`).

Their own module so that every loader and grader can use them without importing another loader or grader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class DataError(Exception):
    """A benchmark file is missing or malformed; the message names the file and the fix."""


@dataclass(frozen=True)
class Item:
    """One benchmark problem.

    ``question`` is what the model is asked (the task prompt); ``gold`` is the reference answer (math) or the
    canonical program (code, may be empty for LiveCodeBench). ``meta`` holds grader inputs (entry point, tests).
    """

    benchmark: str
    id: str
    kind: str  # "code" | "math" | "lcb"
    question: str
    gold: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class CodeResult:
    """How one candidate fared. ``passed`` is the pass@1 bit (EvalPlus: base AND plus tests pass)."""

    passed: bool
    status: str  # "pass" | "fail" | "timeout" | "error" | "gt_error" | sandbox status
    detail: str = ""
    base_passed: bool | None = None


@dataclass(frozen=True)
class CodeLimits:
    min_time_limit: float = 10.0
    gt_time_limit_factor: float = 8.0
    task_timeout: float = 60.0  # EVALPLUS_TIMEOUT_PER_TASK
    lcb_timeout_s: float = 6.0  # lcb_runner's default per-test timeout
    memory_mb: int = 4096  # EvalPlus's EVALPLUS_MAX_MEMORY_BYTES default (4 GiB)
    plus: bool = True  # run the plus tests (False: base tests only, "HumanEval" rather than "HumanEval+")
    gt_cache: bool = True  # keep expected outputs on disk ($XDG_CACHE_HOME/populora/evalplus-gt)

    def __post_init__(self) -> None:
        # A zero, negative or NaN limit made every input time out at once: every correct answer failed, silently
        # (issue 50). The CLI says the same about its flags (`limit_error`).
        for name in ("min_time_limit", "gt_time_limit_factor", "task_timeout", "lcb_timeout_s"):
            why = limit_error(getattr(self, name))
            if why:
                raise ValueError(f"CodeLimits({name}=) {why}")


def limit_error(value: Any) -> str | None:
    """Why `value` is no time limit or factor (it must be a finite number above 0), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, got {value!r}"
    if not math.isfinite(value) or value <= 0:
        return f"must be a finite number above 0, got {value!r}"
    return None
