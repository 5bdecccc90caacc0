"""The data the task family passes around: problems, proposals, answers, and the two failure values.

`Problem` is a frozen, hashable, JSON-round-trippable triplet set (program, inputs, outputs, message) with a
stable content-hash `id`; the proposer's member id and step travel with it but are not part of the id, so the
same problem proposed twice has one id. `FormatError` and `Invalid` are returned, not raised, by the parsers
and the validator; `InvalidProblem` is the one exception (from `task.problem_from`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from populora.names import TASKS

TASK_NAMES: tuple[str, ...] = TASKS  # the one spelling, in populora.names


def _no_other_families(name: str) -> bool:
    return False


# Says whether a name is a task type of an installed non-AZR family. `populora.tasks` (the package's
# __init__, run before any of its modules) sets it to `registry.is_task_type`; this module imports nothing of
# the package, so the registry can build on it without an import loop.
other_family_task = _no_other_families


def known_task(name: str) -> bool:
    """An AZR task type or a task type of an installed family (`populora.tasks.registry`)."""
    return name in TASK_NAMES or (isinstance(name, str) and other_family_task(name))


class InvalidProblem(ValueError):
    """A (program, inputs, message) triple that cannot become a Problem; `.reason` says why in a few words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class FormatError:
    """Model text that does not have the required shape. Falsy, so `if not parsed:` reads naturally."""

    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Answer:
    """A student's parsed answer: the text of the answer block (an argument list, a literal, or a program)."""

    text: str


@dataclass(frozen=True)
class Proposal:
    """A teacher's parsed proposal. For `code_f` the program is the one shown in the prompt (attach it with
    `parse_proposal(text, program=...)` or `dataclasses.replace`); `inputs` has 1 entry for code_i/code_o."""

    program: str
    inputs: tuple[str, ...]
    message: str = ""
    proposer: str | None = None
    step: int | None = None

    def with_origin(self, proposer: str | None, step: int | None) -> Proposal:
        return replace(self, proposer=proposer, step=step)


@dataclass(frozen=True)
class Invalid:
    """A proposal that failed validation, with a short reason such as `"forbidden import: os"`. Falsy."""

    reason: str
    proposal: Proposal | None = None

    def __bool__(self) -> bool:
        return False


def _content_id(
    task: str, program: str, inputs: tuple[str, ...], outputs: tuple[str, ...], message: str
) -> str:
    blob = json.dumps([task, program, list(inputs), list(outputs), message], ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Problem:
    """A validated task instance.

    - `program`: module source defining the entry function `f`.
    - `inputs`: call-argument texts (what goes inside `f(...)`); one for code_i/code_o, N for code_f.
    - `outputs`: `repr` of `f(input)` as computed in the sandbox, one per input (plain-data literals).
    - `message`: the teacher's hint for code_f ("" otherwise).
    - `proposer`, `step`: who proposed it and when (not part of `id`).
    - `id`: first 16 hex digits of sha256 over (task, program, inputs, outputs, message).
    For code_f the student sees the first `n_given` pairs and is scored on the rest (`hidden`).
    """

    task: str
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""
    proposer: str | None = None
    step: int | None = None
    id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not known_task(self.task):
            raise ValueError(
                f"unknown task {self.task!r}; expected one of {', '.join(TASK_NAMES)} or an installed family's type"
            )
        # Accept lists from callers but store tuples so the dataclass stays hashable.
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ValueError(
                f"a problem needs as many outputs as inputs (>= 1), got {len(self.inputs)} "
                f"inputs and {len(self.outputs)} outputs"
            )
        object.__setattr__(
            self, "id", _content_id(self.task, self.program, self.inputs, self.outputs, self.message)
        )

    # code_f: the visible and hidden halves. For code_i/code_o everything is "given" to the teacher side.
    @property
    def n_given(self) -> int:
        return len(self.inputs) // 2 if self.task == "code_f" else len(self.inputs)

    @property
    def given(self) -> list[tuple[str, str]]:
        return list(zip(self.inputs[: self.n_given], self.outputs[: self.n_given], strict=True))

    @property
    def hidden(self) -> list[tuple[str, str]]:
        return list(zip(self.inputs[self.n_given :], self.outputs[self.n_given :], strict=True))

    @property
    def input(self) -> str:
        return self.inputs[0]

    @property
    def output(self) -> str:
        return self.outputs[0]

    def with_origin(self, proposer: str | None, step: int | None) -> Problem:
        return replace(self, proposer=proposer, step=step)

    def retask(self, task: str) -> Problem:
        """The same triplet as a problem of another task type (code_i <-> code_o; new id)."""
        return replace(self, task=task)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["inputs"] = list(self.inputs)
        d["outputs"] = list(self.outputs)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Problem:
        p = cls(
            task=d["task"],
            program=d["program"],
            inputs=tuple(d["inputs"]),
            outputs=tuple(d["outputs"]),
            message=d.get("message", ""),
            proposer=d.get("proposer"),
            step=d.get("step"),
        )
        if "id" in d and d["id"] != p.id:
            raise ValueError(
                f"problem id mismatch: stored {d['id']!r}, content hashes to {p.id!r} (edited file?)"
            )
        return p

    @classmethod
    def from_json(cls, text: str) -> Problem:
        return cls.from_dict(json.loads(text))
