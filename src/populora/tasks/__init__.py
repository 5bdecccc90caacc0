"""The task families: the AZR one (code_i abduction, code_o deduction, code_f induction: problems, prompt
templates, parsing, validation through the sandbox, hack-proof scoring, rewards, buffers), the shipped `arith`
family, and the `TaskFamily` interface and registry that plugins use (family.py, registry.py, guard.py).

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
    populora.tasks.get("arith")                      # a task type of another installed family (registry.py)
    populora.tasks.score_many([(task, problem, answers), ...], sandbox) -> list[Scored]  # one run_many a round

Depends on `populora.sandbox` only at call time (a duck-typed object with `run_many`); imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

from populora.tasks import registry as _registry
from populora.tasks import types as _types
from populora.tasks.base import CodeF, CodeI, CodeO, CodeTask, Scored, TaskConfig, score_many
from populora.tasks.policy import DEFAULT_POLICY, CapabilityPolicy
from populora.tasks.templates import TEMPLATE_NAMES, TemplateSet, load_template
from populora.tasks.types import TASK_NAMES, Answer, FormatError, Invalid, InvalidProblem, Problem, Proposal

_types.other_family_task = _registry.is_task_type  # Problem and the buffers accept every installed type
_CLASSES: dict[str, type[CodeTask]] = {"code_i": CodeI, "code_o": CodeO, "code_f": CodeF}
_DEFAULT: dict[str, CodeTask] = {}


def get(name: str, **config: Any) -> Any:
    """The task object for `name` ("code_i" | "code_o" | "code_f", or a task type of an installed family:
    `populora.tasks.registry`). Keyword arguments override `TaskConfig` fields (`n_inputs`,
    `max_output_chars`, `policy`, ...) for AZR, are passed to the family otherwise, and give a new object;
    without them the shared default instance is returned. A plugin family's task comes wrapped in
    `registry.GuardedTask` (its sandbox calls go through the capability policy)."""
    if name not in _CLASSES:
        from populora.tasks import registry

        if not registry.is_task_type(name):
            raise ValueError(f"unknown task {name!r}; choose one of {', '.join(_known())}")
        if config:
            return registry.make_task(name, **config)
        if name not in _DEFAULT:
            _DEFAULT[name] = registry.make_task(name)
        return _DEFAULT[name]
    if config:
        return _CLASSES[name](**config)
    if name not in _DEFAULT:
        _DEFAULT[name] = _CLASSES[name]()
    return _DEFAULT[name]


def _known() -> list[str]:
    from populora.tasks import registry

    return [t for i in registry.installed().values() if i.ok for t in i.task_types]


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
