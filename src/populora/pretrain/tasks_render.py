"""Render corpus examples through `populora.tasks` itself (compact templates), so formats match exactly."""

from __future__ import annotations

from populora.pretrain.programs import Triplet
from populora.tasks import Problem, get

TEMPLATE = "compact"


class TasksRenderer:
    """Prompts from `task.teacher_prompt` / `task.student_prompt`; completions from `task.render_proposal` /
    `task.render_answer(task.gold_answer(problem))`: exactly what a perfect teacher or student writes."""

    name = "tasks:compact"

    def __init__(self, template: str = TEMPLATE):
        self.template = template

    def teacher_io(self, task: str, refs: list[Triplet], new: Triplet) -> tuple[str, str]:
        t = get(task)
        problems = [
            Problem(task=task, program=r.program, inputs=(r.input,), outputs=(r.output,)) for r in refs
        ]
        return (
            t.teacher_prompt(problems, template=self.template),
            t.render_proposal(new.program, [new.input], template=self.template),
        )

    def teacher_f(self, program: str, pairs: list[tuple[str, str]], message: str) -> tuple[str, str]:
        t = (
            get("code_f", n_inputs=len(pairs))
            if len(pairs) != get("code_f").config.n_inputs
            else get("code_f")
        )
        return (
            t.teacher_prompt(program, template=self.template),
            t.render_proposal(program, [i for i, _ in pairs], message, template=self.template),
        )

    def problem_io(self, task: str, tr: Triplet) -> Problem:
        return Problem(task=task, program=tr.program, inputs=(tr.input,), outputs=(tr.output,))

    def problem_f(self, program: str, pairs: list[tuple[str, str]], message: str) -> Problem:
        return Problem(
            task="code_f",
            program=program,
            inputs=tuple(i for i, _ in pairs),
            outputs=tuple(o for _, o in pairs),
            message=message,
        )

    def student_io(self, task: str, tr: Triplet) -> tuple[str, str]:
        t = get(task)
        p = self.problem_io(task, tr)
        return t.student_prompt(p, template=self.template), t.render_answer(
            t.gold_answer(p), template=self.template
        )

    def student_f(self, program: str, pairs: list[tuple[str, str]], message: str) -> tuple[str, str]:
        t = get("code_f")
        p = self.problem_f(program, pairs, message)
        return t.student_prompt(p, template=self.template), t.render_answer(
            t.gold_answer(p), template=self.template
        )
