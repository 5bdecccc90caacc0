"""An example populora task family, installed as a plugin: the teacher writes a word, the student reverses it.

The whole family is this file. `ReverseTask` says what the blocks hold (a ```word from the teacher, a
```output from the student), how a proposal is checked and re-rendered (lowercase letters only), and which
program computes the answer in the sandbox (`def f(): return 'word'[::-1]`); `ComputedAnswerTask` does the
parsing, the validation in the sandbox (behind populora's capability policy) and the scoring.
`ReverseFamily` adds the fixed probe items and the seed problems. pyproject.toml registers it under the
`populora.tasks` entry-point group.
"""

from __future__ import annotations

import random
import re
from typing import Any

from populora.tasks import Problem, Proposal
from populora.tasks.computed import ComputedAnswerTask
from populora.tasks.family import TaskFamily
from populora.tasks.types import FormatError

WORD = re.compile(r"[a-z]{2,16}")


class ReverseTask(ComputedAnswerTask):
    name = "reverse"
    proposal_lang = "word"
    answer_lang = "output"
    teacher_intro = (
        "Write one lowercase word (2 to 16 letters) in a ```word block. A student will reverse it."
    )
    student_intro = "Write this word backwards in an ```output block."

    def check_proposal(self, text: str) -> str | FormatError:
        return text if WORD.fullmatch(text) else FormatError("word: 2 to 16 lowercase letters")

    def program_for(self, canonical: str) -> str:
        return f"def f():\n    return {canonical!r}[::-1]\n"

    def canonical_of(self, problem: Problem) -> str:
        return problem.program.split("return ", 1)[1].split("[::-1]")[0].strip("'")

    def check_answer(self, text: str) -> Any:
        return text if WORD.fullmatch(text) else FormatError("answer: 2 to 16 lowercase letters")


def _words(stream: str, n: int, avoid: frozenset[str] = frozenset()) -> list[str]:
    rng = random.Random(stream)
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))
        if w not in avoid and w not in out:
            out.append(w)
    return out


PROBE_WORDS = tuple(_words("reverse-probe", 16))


class ReverseFamily(TaskFamily):
    name = "reverse"
    task_types = ("reverse",)
    description = "example plugin: reverse a lowercase word"

    def task(self, task_type: str, **config: Any) -> ReverseTask:
        return ReverseTask()

    def probe_items(self, task_type: str) -> list[Problem]:
        t = ReverseTask()
        return [Problem("reverse", t.program_for(w), ("",), (repr(w[::-1]),)) for w in PROBE_WORDS]

    def seed_problems(self, task_type: str, n: int, sandbox: Any, seed: int) -> list[Problem]:
        t = ReverseTask()
        words = _words(f"reverse-seed-{seed}", n, frozenset(PROBE_WORDS))
        checked = t.validate([Proposal(w, ("",), "", "seed", 0) for w in words], sandbox)
        return [p for p in checked if isinstance(p, Problem)]
