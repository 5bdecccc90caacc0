"""A benchmark problem (`Item`) and the error a benchmark file raises (`DataError`).

Their own module so that every loader (`data.py`, `lcb.py`) can use them without importing another loader.
"""

from __future__ import annotations

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
