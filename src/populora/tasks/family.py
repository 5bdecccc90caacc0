"""The `TaskFamily` interface: what a family of task types must provide so the trainer can play it.

A *family* groups task types that share a verifier (the AZR family: code_i, code_o, code_f; the shipped
`arith` family: arith). Families are found through the `populora.tasks` entry-point group
(`populora.tasks.registry`); the config picks them by name (`tasks.families`). docs/task-plugins.md walks
through writing one.

What a family gives the trainer, per task type (`family.task(task_type)` returns a `FamilyTask`):

- `teacher_prompt(refs, template=None) -> str`: the proposer's prompt, given reference problems of the type
  sampled from the run's buffer (the family chooses how many it shows; an empty list is allowed);
- `parse_proposal(text, program=None, template=None) -> Proposal | FormatError`: never raises;
- `validate(proposals, sandbox) -> list[Problem | Invalid]`: turns parsed proposals into problems whose
  answers the SANDBOX computed (every program runs there; see "Security" below);
- `student_prompt(problem, template=None) -> str`;
- `parse_answer(text, template=None) -> Answer | FormatError`: never raises, whatever the text;
- `score(problem, answers, sandbox) -> list[bool]`: one verdict per answer (a FormatError scores False);
- `render_proposal(...)` / `render_answer(answer_text)`: what a perfect teacher / student writes (tests, seeds).

and for the family as a whole:

- `features(program) -> dict | None`: the complexity features of a valid proposal (the four keys of
  `populora.diagnostics.features.FEATURES`: they feed metrics.jsonl `complexity` and the coverage archive);
  None (the default) has the trainer measure the program as Python source;
- `probe_items(task_type) -> list[Problem]`: a fixed, held-out probe set (the same in every run), scored
  greedy at every probe (`diagnostics.probe_every`, metrics.jsonl `probe`);
- `seed_problems(task_type, n, sandbox, seed) -> list[Problem]`: problems that fill the buffer before step 1
  (at least one, so the first teacher prompt has a reference).

Problems are `populora.tasks.Problem`: `program` (a module defining `f`), `inputs` (call-argument texts),
`outputs` (`repr` of each result, computed in the sandbox), `message`. A family may give them its own meaning
(arith: `f()` returns the expression's value) but must keep that shape so buffers, checkpoints and
problems.jsonl carry them unchanged.

**Security.** Every family except the built-in AZR one (whose task classes apply the capability policy to every
program before it runs, and whose tests hold them to it) is handed a `GuardedSandbox` (`populora.tasks.guard`),
never the run's sandbox: each job's program AND call expression pass `populora.tasks.policy.DEFAULT_POLICY`
first, and the job limits are the run's (a family may only tighten them). So model-written text reaches the
sandbox only through the same policy and the same isolation as AZR's. A plugin is still Python code you
install: like any package it runs in your process with your rights; the guarantee is about the programs the
models write, not about the plugin's own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from populora.tasks.types import Answer, FormatError, Invalid, Problem, Proposal

if TYPE_CHECKING:
    from populora.tasks.guard import GuardedSandbox


class FamilyTask:
    """One task type of a family: the per-type half of the interface (see the module docstring).

    Subclass it and implement the methods that raise `NotImplementedError`. `name` is the task type (the key
    of `tasks.types`, of the buffers and of metrics.jsonl's per-task rates). `past_deadline` counts answers
    cut by a scoring deadline (0 if the family has none)."""

    name: str = ""
    past_deadline: int = 0

    def teacher_prompt(self, refs: Sequence[Problem], template: Any = None) -> str:
        raise NotImplementedError

    def parse_proposal(
        self, text: Any, program: str | None = None, template: Any = None
    ) -> Proposal | FormatError:
        raise NotImplementedError

    def validate(self, proposals: Sequence[Proposal], sandbox: GuardedSandbox) -> list[Problem | Invalid]:
        raise NotImplementedError

    def student_prompt(self, problem: Problem, template: Any = None) -> str:
        raise NotImplementedError

    def parse_answer(self, text: Any, template: Any = None) -> Answer | FormatError:
        raise NotImplementedError

    def score(
        self, problem: Problem, answers: Sequence[Answer | FormatError | str], sandbox: GuardedSandbox
    ) -> list[bool]:
        raise NotImplementedError

    def render_proposal(
        self, program: str, inputs: Sequence[str], message: str = "", template: Any = None
    ) -> str:
        raise NotImplementedError

    def render_answer(self, answer_text: str, template: Any = None) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class TaskFamily:
    """A family of task types (see the module docstring for the whole contract).

    Class attributes: `name` (what `tasks.families` lists), `task_types` (its task type names, unique across
    installed families), `description` (one line for `populora tasks list`)."""

    name: str = ""
    task_types: tuple[str, ...] = ()
    description: str = ""

    def task(self, task_type: str, **config: Any) -> FamilyTask:
        """The task object of one of `task_types`; `config` carries run settings a family may use
        (`score_deadline_s`), and a family ignores the keys it does not know."""
        raise NotImplementedError

    def features(self, program: str) -> dict[str, float] | None:
        """Complexity features of a valid proposal's program. The default, None, has the trainer measure it
        as Python source (`populora.diagnostics.features.program_features`, the paper's four features)."""
        return None

    def probe_items(self, task_type: str) -> list[Problem]:
        raise NotImplementedError

    def seed_problems(self, task_type: str, n: int, sandbox: GuardedSandbox, seed: int) -> list[Problem]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<TaskFamily {self.name}: {', '.join(self.task_types)}>"


__all__ = ["FamilyTask", "TaskFamily"]
