"""The `lists` family, shipped with populora: list expressions whose values the sandbox computes.

One task type, `lists`. The teacher writes a list expression in an ```expression block: list literals of
small integers (`[3, 1]`, at most 6 elements, each 0..99), `+` between two lists, `*` between a list and an
integer 0..4 (either side), and parentheses; at most 80 characters, at least one operator, and a value of
at most `MAX_ITEMS` elements (checked on the parse, before anything runs: nested repeats would otherwise
build huge lists). `check_proposal` parses it with `ast` and re-renders it. The problem's program is
`def f():\n    return <expression>\n`; validation runs it in the sandbox (behind the capability policy).
The student sees the expression and answers the list in an ```output block; it is right iff that list equals
the value the sandbox computed (type-strict: a tuple is not a list). Validation refuses a value that answer
cannot give back (`check_answer` of its repr must equal it: a tuple, say, from a proposal made by hand), so
no valid problem is unsolvable (issue 50).

Why it ships: the bundled model was pretrained on AZR's programs only, so more training on AZR's tasks adds
little, while a task it never saw leaves a LoRA room to specialise (`populora experiment retention
--specialists gold --tasks lists,arith --set rl.lr=1e-2 --specialist-steps 50`, docs/learning.md). Unlike `arith` it asks for no arithmetic: the
answer copies and repeats the literals' numbers, a skill of its own.

Seeds and probe items come from one generator (`random_list_expression`), which builds an expression and its
value together; the probe set is 64 items from a fixed stream (`PROBE_SEED`), the seeds come from the run's
seed on another stream and never repeat a probe expression.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from typing import Any

from populora.tasks.computed import ExpressionTask, GeneratedFamily
from populora.tasks.literals import LiteralError, parse_literal, strict_equal
from populora.tasks.types import FormatError, Invalid, Problem, Proposal

MAX_CHARS = 80
MAX_LITERAL_ITEMS = 6
MAX_ITEM = 99
MAX_REPEAT = 4
MAX_ITEMS = 16  # elements of the value
GENERATED_ITEMS = 8  # the generator's values are shorter: a small model's copying loses count on long ones
PROBE_SEED = "lists-probe-v1"
PROBE_SIZE = 64


class _Refused(Exception):
    """Why a proposal's parse is not a list expression of this family."""


def _int(node: ast.AST, top: int) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= top:
        return node.value
    raise _Refused(f"only integers 0..{top} here")


def _length(node: ast.AST) -> int:
    """The number of elements of the list `node` evaluates to, computed on the parse (nothing runs)."""
    if isinstance(node, ast.List):
        if not 1 <= len(node.elts) <= MAX_LITERAL_ITEMS:
            raise _Refused(f"a list literal holds 1..{MAX_LITERAL_ITEMS} integers")
        for e in node.elts:
            _int(e, MAX_ITEM)
        return len(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        n = _length(node.left) + _length(node.right)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        if isinstance(node.left, ast.Constant):  # 3 * [1]
            n = _int(node.left, MAX_REPEAT) * _length(node.right)
        else:  # [1] * 3
            n = _length(node.left) * _int(node.right, MAX_REPEAT)
    else:
        raise _Refused(f"{type(node).__name__} not allowed (lists, +, * by 0..{MAX_REPEAT}, parentheses)")
    if n > MAX_ITEMS:
        raise _Refused(f"the value would have {n} elements (at most {MAX_ITEMS})")
    return n


class ListsTask(ExpressionTask):
    name = "lists"
    max_chars = MAX_CHARS
    teacher_intro = (
        f"Write one list expression (lists of integers 0..{MAX_ITEM}, + between lists, * by 0..{MAX_REPEAT}, "
        f"parentheses; a value of at most {MAX_ITEMS} elements), at most {MAX_CHARS} characters, in an "
        "```expression block. A student will compute its value."
    )
    student_intro = "Compute the value of this expression. Answer with the list in an ```output block."

    def check_proposal(self, text: str) -> str | FormatError:
        tree = self.parse_expression(text)
        if isinstance(tree, FormatError):
            return tree
        if not isinstance(tree.body, ast.BinOp):
            return FormatError("expression: needs at least one operator")
        try:
            _length(tree.body)
        except _Refused as e:
            return FormatError(f"expression: {e}")
        except RecursionError:
            return FormatError("expression: nested too deeply")
        return ast.unparse(tree.body)

    def check_answer(self, text: str) -> Any:
        try:
            value = parse_literal(text)
        except LiteralError as e:
            return FormatError(f"answer: {e}")
        if type(value) is not list:
            return FormatError("answer: not a list")
        return value

    def validate(self, proposals: Sequence[Proposal], sandbox: Any) -> list[Problem | Invalid]:
        """The sandbox's validation (`ComputedAnswerTask.validate`), then the value must be an answer a student
        can write: `check_answer` of its repr gives it back."""
        results = super().validate(proposals, sandbox)
        return [self._answerable(p, r) for p, r in zip(proposals, results, strict=True)]

    def _answerable(self, proposal: Proposal, result: Problem | Invalid) -> Problem | Invalid:
        if not isinstance(result, Problem):
            return result
        try:
            answer = self.check_answer(result.output)
            ok = not isinstance(answer, FormatError) and strict_equal(answer, parse_literal(result.output))
        except LiteralError:
            answer, ok = None, False
        if ok:
            return result
        why = answer.reason.removeprefix("answer: ") if isinstance(answer, FormatError) else "unreadable"
        return Invalid(f"the value cannot be written as an answer ({why})", proposal)


def random_list_expression(rng: random.Random, depth: int = 2) -> tuple[str, list[int]]:
    """A list expression and its value, built together (no evaluation); at most `GENERATED_ITEMS` elements."""
    if depth == 0 or rng.random() < 0.3:
        v = [rng.randint(0, 9) for _ in range(rng.randint(1, 3))]
        return f"[{', '.join(map(str, v))}]", v
    ls, lv = random_list_expression(rng, depth - 1)
    if rng.random() < 0.5:
        rs, rv = random_list_expression(rng, depth - 1)
        if len(lv) + len(rv) <= GENERATED_ITEMS:
            return f"({ls} + {rs})", lv + rv
    top = min(3, GENERATED_ITEMS // max(1, len(lv)))
    k = 0 if rng.random() < 0.1 or top < 1 else rng.randint(1, top)  # * 0 (the empty list) now and then
    return (f"({ls} * {k})", lv * k) if rng.random() < 0.5 else (f"({k} * {ls})", lv * k)


class ListsFamily(GeneratedFamily):
    name = "lists"
    task_types = ("lists",)
    description = "list expressions (concatenate, repeat); the sandbox computes each value"
    task_class = ListsTask
    probe_stream = PROBE_SEED
    probe_size = PROBE_SIZE

    def draw(self, rng: random.Random) -> tuple[str, list[int]]:
        return random_list_expression(rng, depth=rng.choice([1, 2]))


def probe_set() -> tuple[Problem, ...]:
    """The family's fixed probe items."""
    return tuple(ListsFamily().probe_items("lists"))


__all__ = ["ListsFamily", "ListsTask", "probe_set", "random_list_expression"]
