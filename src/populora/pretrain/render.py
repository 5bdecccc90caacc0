"""Renderers turning generated programs into (prompt, completion) pairs in the task formats.

`get_renderer()` returns `TasksRenderer` (the tasks package's own compact templates and renderers) when
`populora.tasks` is importable, else `PlainRenderer`, a stand-in used only while bootstrapping.
"""

from __future__ import annotations

from populora.pretrain.programs import Triplet


class PlainRenderer:
    """A minimal compact format, used only when `populora.tasks` is not available."""

    name = "plain"

    @staticmethod
    def _ref(tr: Triplet) -> str:
        return f"```python\n{tr.program}\n```\ninput: {tr.input}\noutput: {tr.output}\n"

    def teacher_io(self, task: str, refs: list[Triplet], new: Triplet) -> tuple[str, str]:
        head = f"# {task} teacher: write a new program f and one input.\n"
        prompt = head + "".join(self._ref(r) for r in refs) + "# new\n"
        return prompt, f"```python\n{new.program}\n```\n```input\n{new.input}\n```"

    def teacher_f(self, program: str, pairs: list[tuple[str, str]], message: str) -> tuple[str, str]:
        prompt = f"# code_f teacher: write {len(pairs)} inputs and a message.\n```python\n{program}\n```\n"
        inputs = "".join(f"```input\n{i}\n```\n" for i, _ in pairs)
        return prompt, inputs + f"```message\n{message}\n```"

    def student_io(self, task: str, tr: Triplet) -> tuple[str, str]:
        if task == "code_o":
            return (
                f"# code_o: give the output.\n```python\n{tr.program}\n```\ninput: {tr.input}\n",
                f"```output\n{tr.output}\n```",
            )
        return (
            f"# code_i: give an input.\n```python\n{tr.program}\n```\noutput: {tr.output}\n",
            f"```input\n{tr.input}\n```",
        )

    def student_f(self, program: str, pairs: list[tuple[str, str]], message: str) -> tuple[str, str]:
        shown = pairs[: len(pairs) // 2]
        body = "".join(f"input: {i}\noutput: {o}\n" for i, o in shown)
        return (f"# code_f: write f.\n{body}message: {message}\n", f"```python\n{program}\n```")


def get_renderer():
    try:
        from populora.pretrain.tasks_render import TasksRenderer
    except ImportError:
        return PlainRenderer()
    return TasksRenderer()
