"""The AZR task family (code_i abduction, code_o deduction, code_f induction): problems, prompt templates,
parsing, validation through the sandbox, hack-proof scoring, rewards, buffers.

Public API (the contract the trainer uses; docs/architecture.md)::

    task = populora.tasks.get("code_o")              # "code_i" | "code_o" | "code_f"; task.name
    task.teacher_prompt(refs, template="azr")        # or "compact" (the tiny model) or a folder
    task.render_proposal(program, inputs, message="", template=...)   # what a perfect teacher writes
    task.parse_proposal(text, program=None, template=None) -> Proposal | FormatError
    task.validate(proposals, sandbox) -> list[Problem | Invalid]
    task.problem_from(sandbox, program=..., inputs=[...], message="") -> Problem  # raises InvalidProblem
    task.student_prompt(problem, template=...)
    task.parse_answer(text, template=None) -> Answer | FormatError               # never raises
    task.render_answer(answer_text, template=...)                               # what a perfect student writes
    task.score(problem, answers, sandbox) -> list[bool]
    populora.tasks.score_many([(task, problem, answers), ...], sandbox) -> list[Scored]  # one run_many a round

Depends on `populora.sandbox` only at call time (a duck-typed object with `run_many`); imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

from populora.tasks.base import CodeF, CodeI, CodeO, CodeTask, Scored, TaskConfig, score_many
from populora.tasks.policy import DEFAULT_POLICY, CapabilityPolicy
from populora.tasks.templates import TEMPLATE_NAMES, TemplateSet, load_template
from populora.tasks.types import TASK_NAMES, Answer, FormatError, Invalid, InvalidProblem, Problem, Proposal

_CLASSES: dict[str, type[CodeTask]] = {"code_i": CodeI, "code_o": CodeO, "code_f": CodeF}
_DEFAULT: dict[str, CodeTask] = {}


def get(name: str, **config: Any) -> CodeTask:
    """The task object for `name` ("code_i" | "code_o" | "code_f"). Keyword arguments override `TaskConfig`
    fields (`n_inputs`, `max_output_chars`, `policy`, ...) and give a new object; without them the shared
    default instance is returned."""
    if name not in _CLASSES:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(TASK_NAMES)}")
    if config:
        return _CLASSES[name](**config)
    if name not in _DEFAULT:
        _DEFAULT[name] = _CLASSES[name]()
    return _DEFAULT[name]


__all__ = [
    "TASK_NAMES",
    "TEMPLATE_NAMES",
    "Answer",
    "CapabilityPolicy",
    "CodeTask",
    "DEFAULT_POLICY",
    "FormatError",
    "Invalid",
    "InvalidProblem",
    "Problem",
    "Proposal",
    "Scored",
    "TaskConfig",
    "TemplateSet",
    "get",
    "load_template",
    "score_many",
]
