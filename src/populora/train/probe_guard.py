"""Keeping the probe out of training: a proposal whose program is a probe program is dropped (issue 28 §4).

The probe (train/probe.py) is only a held-out measure while no member trains on its programs. The teachers
write programs from the same small grammar as the probe sets, so they can hit one: exactly, with other
constants (`total = 2 * 3` for the probe's `total = 2 * 8`) or with its variables renamed (`t = 2 * 8`), which
for a student is the same exercise. The guard compares a proposal's program with every program of the shipped
probe sets (all task types, all items, not only the probed subset) by `probe_key`: both are parsed with `ast`,
every literal number and string becomes one placeholder, and every name the program binds (parameters, locals,
loop and comprehension variables, the function's and its helpers' names, ...) becomes its index in order of first
appearance (issue 50: with names kept, all 120 renamed probe programs tried passed). Operators, structure, the
builtins and attributes a program uses are kept; formatting and comments never matter. A match makes the trace a
*probe collision* (`ProposalTrace.probe_collision`): the trainer treats it as out of the game (no reward, no
training row, no buffer entry, no rating, no student rollouts) and counts it per task type in metrics.jsonl
(`probe_collisions`). The synthetic seed problems pass the same guard before they enter the buffers.

The key is built without recursion, so a program of any depth (`return x + x + ...` with 3,000 terms raised
RecursionError out of `ast.dump`, issue 50) gets an answer: a program `ast` cannot parse (too deep, a NUL
byte) collides with nothing, and validation refuses it on its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from populora import pyparse
from populora.tasks.masking import MASK, program_key  # noqa: F401 - re-exported
from populora.tasks.policy import bound_names

# Fields that hold a name a program may bind; `keyword.arg` only where the callee is the program's own.
_NAME_FIELDS = {
    ast.Name: ("id",),
    ast.arg: ("arg",),
    ast.FunctionDef: ("name",),
    ast.AsyncFunctionDef: ("name",),
    ast.ClassDef: ("name",),
    ast.alias: ("asname",),
    ast.ExceptHandler: ("name",),
    ast.Global: ("names",),
    ast.Nonlocal: ("names",),
    ast.MatchAs: ("name",),
    ast.MatchStar: ("name",),
    ast.MatchMapping: ("rest",),
}
_OPEN, _CLOSE = "(", ")"


def _masked_constant(node: ast.AST) -> bool:
    """A literal number or string (a signed number counts as one literal); True/False/None/... are structure."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = getattr(node.operand, "value", None) if isinstance(node.operand, ast.Constant) else None
        return isinstance(v, int | float | complex) and not isinstance(v, bool)
    if isinstance(node, ast.Constant):
        v = node.value
        return not (isinstance(v, bool) or v is None or v is Ellipsis)
    return False


def probe_key(program: str) -> str | None:
    """`program` up to its constants and the names it binds (see the module docstring), or None when `ast`
    cannot parse it. Iterative: never raises RecursionError, whatever the depth."""
    if not isinstance(program, str):
        return None
    try:
        tree = pyparse.parse(program)
        bound = bound_names(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte
        return None
    own_calls = {
        id(k)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in bound
        for k in n.keywords
    }
    index: dict[str, int] = {}

    def name(v: object) -> str:
        if isinstance(v, str) and v in bound:
            return f"#{index.setdefault(v, len(index))}"
        return repr(v)

    out: list[str] = []
    stack: list[object] = [tree]  # AST nodes, lists of them, and finished tokens (str) in reverse order
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if isinstance(item, list):
            stack.append("]")
            stack.extend(reversed(item))
            out.append("[")
            continue
        if not isinstance(item, ast.AST):
            out.append(repr(item))
            continue
        if _masked_constant(item):
            out.append(MASK)
            continue
        renamed = _NAME_FIELDS.get(type(item), ())
        if isinstance(item, ast.keyword) and id(item) in own_calls:
            renamed = ("arg",)
        out.append(_OPEN + type(item).__name__)
        parts: list[object] = []
        for field in item._fields:
            value = getattr(item, field, None)
            if field in renamed:
                parts.append(
                    "[" + ",".join(name(v) for v in value) + "]" if isinstance(value, list) else name(value)
                )
            elif isinstance(value, ast.AST | list):
                parts.append(value)
            else:
                parts.append(repr(value))
        parts.append(_CLOSE)
        stack.extend(reversed(parts))
    return " ".join(out)


class ProbeGuard:
    """The keys (`probe_key`) of a set of probe programs; `collides(program)` says whether a program is one."""

    def __init__(self, programs: Iterable[str]) -> None:
        self.keys = {k for k in (probe_key(p) for p in programs) if k is not None}

    @classmethod
    def from_probe_sets(cls, probe_set: str = "fixed") -> ProbeGuard:
        """The guard over every problem of the shipped probe sets the run probes with, all task types:
        `fixed` (pretrain/probe.py) or `graded` (pretrain/graded_probe.py, `diagnostics.probe_set`)."""
        if probe_set == "graded":
            from populora.pretrain.graded import TASKS
            from populora.pretrain.graded_probe import load_graded_probe

            return cls(p.program for t in TASKS for _, p in load_graded_probe(t))
        from populora.pretrain.probe import load_probes

        return cls(p.program for problems in load_probes().values() for p in problems)

    def collides(self, program: str | None) -> bool:
        """Whether `program` is a probe program up to constants and bound names. Never raises: a program that
        does not parse (too deep, not Python) collides with nothing."""
        if not program:
            return False
        key = probe_key(program)
        return key is not None and key in self.keys


__all__ = ["MASK", "ProbeGuard", "probe_key", "program_key"]
