"""Which task families are installed, and the task objects of their task types.

Families are discovered through the `populora.tasks` entry-point group (`importlib.metadata`): a package
declares

    [project.entry-points."populora.tasks"]
    myfamily = "my_package.module:MyFamily"

where `MyFamily` is a `populora.tasks.family.TaskFamily` subclass (or instance) whose `name` is the entry
point's name. populora declares its own three (`azr`, `arith`, `lists`) the same way in pyproject.toml; they are also
always present when the installed metadata predates them (a source checkout), so a run never loses them.

A family that fails to load, that names itself differently from its entry point, that takes a name already
taken, or that claims a task type another family has, is listed as *broken* with the reason (`populora tasks
list` shows it) and cannot be selected; the other families still work.

Every task object of a family other than the built-in AZR one is wrapped in `GuardedTask`: its `validate`,
`score` and `problem_from` are handed a `GuardedSandbox` (`populora.tasks.guard`), never the run's sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from populora.names import TASKS
from populora.tasks.family import TaskFamily

GROUP = "populora.tasks"
BUILTIN: dict[str, str] = {
    "azr": "populora.tasks.azr:AzrFamily",
    "arith": "populora.tasks.arith:ArithFamily",
    "lists": "populora.tasks.lists:ListsFamily",
}
DEFAULT_FAMILIES: tuple[str, ...] = ("azr",)


class FamilyError(ValueError):
    """An unknown or broken family, or a task type no selected family has; the message says what to do."""


@dataclass(frozen=True)
class Installed:
    """One installed family: its entry-point name, where it comes from, and the loaded family (None: broken)."""

    name: str
    value: str  # "module:attr"
    source: str  # the distribution that declares it ("populora" for the built-ins)
    family: TaskFamily | None = None
    error: str = ""
    task_types: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.family is not None


_INSTALLED: dict[str, Installed] | None = None


def _load(name: str, value: str, source: str, loader: Any) -> Installed:
    try:
        obj = loader()
        family = obj() if isinstance(obj, type) else obj
    except Exception as e:  # noqa: BLE001 - one broken plugin must not take the others down
        return Installed(name, value, source, error=f"cannot load {value} ({type(e).__name__}: {e})")
    if not isinstance(family, TaskFamily):
        return Installed(name, value, source, error=f"{value} is not a populora.tasks.family.TaskFamily")
    if family.name != name:
        return Installed(
            name, value, source, error=f"{value} calls itself {family.name!r}, entry point {name!r}"
        )
    types = tuple(family.task_types)
    if not types or not all(isinstance(t, str) and t.isidentifier() for t in types):
        return Installed(name, value, source, error=f"{value}: task_types must be non-empty identifiers")
    return Installed(name, value, source, family, task_types=types)


def _entry_points() -> Iterable[tuple[str, str, str, Any]]:
    seen = set()
    for ep in entry_points(group=GROUP):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        dist = getattr(ep, "dist", None)
        yield ep.name, ep.value, (dist.name if dist is not None else "?"), ep.load


def _builtin_loader(value: str) -> Any:
    def load() -> Any:
        import importlib

        module, attr = value.split(":")
        return getattr(importlib.import_module(module), attr)

    return load


def installed(refresh: bool = False) -> dict[str, Installed]:
    """Every installed family by name (built-ins first, then plugins by name), loaded once and cached."""
    global _INSTALLED
    if _INSTALLED is not None and not refresh:
        return _INSTALLED
    found: dict[str, Installed] = {n: _load(n, v, "populora", _builtin_loader(v)) for n, v in BUILTIN.items()}
    owner = {t: n for n, i in found.items() for t in i.task_types}
    for name, value, source, loader in sorted(_entry_points()):
        if name in BUILTIN:
            if value != BUILTIN[name]:  # a plugin cannot replace a built-in family
                found[f"{name}@{source}"] = Installed(
                    name, value, source, error=f"the name {name!r} is populora's built-in family"
                )
            continue
        inst = _load(name, value, source, loader)
        clash = [t for t in inst.task_types if t in owner]
        if clash:
            inst = Installed(
                name, value, source, error=f"task type {clash[0]!r} belongs to family {owner[clash[0]]!r}"
            )
        owner.update({t: name for t in inst.task_types})
        found[name] = inst
    _INSTALLED = found
    return found


def names() -> list[str]:
    """The names of the families that loaded."""
    return [n for n, i in installed().items() if i.ok]


def get_family(name: str) -> TaskFamily:
    """The installed family `name`; a `FamilyError` naming the installed ones otherwise."""
    inst = installed().get(name)
    if inst is None:
        raise FamilyError(
            f"unknown task family {name!r}; installed: {', '.join(names())} (see `populora tasks list`)"
        )
    if not inst.ok:
        raise FamilyError(f"task family {name!r} is installed but broken: {inst.error}")
    return inst.family  # type: ignore[return-value]


def task_types(families: Sequence[str] = DEFAULT_FAMILIES) -> tuple[str, ...]:
    """The task types of the given families, in family order."""
    return tuple(t for f in families for t in get_family(f).task_types)


def buffer_types(families: Sequence[str] = DEFAULT_FAMILIES) -> tuple[str, ...]:
    """The task types a run keeps a buffer for: AZR's three always (a checkpoint's buffers keep their layout),
    then the types of the other selected families."""
    return (*TASKS, *(t for t in task_types(families) if t not in TASKS))


def family_of(task_type: str) -> TaskFamily:
    """The installed family that owns `task_type`."""
    if task_type in TASKS:
        return get_family("azr")
    for inst in installed().values():
        if inst.ok and task_type in inst.task_types:
            return inst.family  # type: ignore[return-value]
    known = [t for i in installed().values() if i.ok for t in i.task_types]
    raise FamilyError(f"unknown task type {task_type!r}; installed task types: {', '.join(known)}")


def is_task_type(name: str) -> bool:
    if name in TASKS:
        return True
    return any(i.ok and name in i.task_types for i in installed().values())


def guarded(sandbox: Any) -> Any:
    """`sandbox` behind the capability policy (None stays None; a guarded one is not wrapped twice)."""
    from populora.tasks.guard import GuardedSandbox

    return sandbox if sandbox is None or isinstance(sandbox, GuardedSandbox) else GuardedSandbox(sandbox)


class GuardedTask:
    """A plugin family's task object whose sandbox calls all go through `GuardedSandbox`."""

    def __init__(self, task: Any) -> None:
        self._task = task
        if not getattr(task, "name", ""):
            raise FamilyError(f"{task!r} has no task type name")

    @property
    def name(self) -> str:
        return self._task.name

    @property
    def past_deadline(self) -> int:
        return int(getattr(self._task, "past_deadline", 0) or 0)

    @past_deadline.setter
    def past_deadline(self, value: int) -> None:
        self._task.past_deadline = value

    def validate(self, proposals: Sequence[Any], sandbox: Any) -> list[Any]:
        return list(self._task.validate(proposals, guarded(sandbox)))

    def score(
        self, problem: Any, answers: Sequence[Any], sandbox: Any = None, *, until: float | None = None
    ) -> list[bool]:
        return [bool(x) for x in self._task.score(problem, answers, guarded(sandbox))]

    def problem_from(self, sandbox: Any, *args: Any, **kwargs: Any) -> Any:
        return self._task.problem_from(guarded(sandbox), *args, **kwargs)

    def __getattr__(self, attr: str) -> Any:  # prompts, parsing, rendering: no sandbox involved
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._task, attr)

    def __repr__(self) -> str:
        return f"GuardedTask({self._task!r})"


def make_task(task_type: str, **config: Any) -> Any:
    """The task object of a non-AZR task type, wrapped in `GuardedTask`."""
    family = family_of(task_type)
    return GuardedTask(family.task(task_type, **config))


def features(task_type: str, program: str) -> dict[str, float] | None:
    """The family's complexity features of a valid proposal's program; None: measure it as Python source
    (the trainer then uses `populora.diagnostics.features.program_features`, as for AZR)."""
    try:
        return family_of(task_type).features(program)
    except Exception:  # noqa: BLE001 - a family's feature code must not stop a run
        return None


def probe_items(task_type: str) -> list[Any]:
    return list(family_of(task_type).probe_items(task_type))


def seed_problems(task_type: str, n: int, sandbox: Any, seed: int) -> list[Any]:
    """A plugin family's seed problems, made with the guarded sandbox."""
    return list(family_of(task_type).seed_problems(task_type, n, guarded(sandbox), seed))


__all__ = [
    "BUILTIN",
    "buffer_types",
    "DEFAULT_FAMILIES",
    "GROUP",
    "FamilyError",
    "GuardedTask",
    "Installed",
    "family_of",
    "features",
    "get_family",
    "guarded",
    "installed",
    "is_task_type",
    "make_task",
    "names",
    "probe_items",
    "seed_problems",
    "task_types",
]
